"""The ``ort-core`` command: run a model, list providers, run the bundled demo.

A thin shell over the Python API; it holds no runtime logic of its own.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from importlib import resources

import numpy as np

from . import InferenceSession, OrtError, __version__
from .blas import blas_info
from .ir.types import np_dtype
from .plugins.manager import get_registry


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ort-core", description="ort-core ONNX inference runtime")
    parser.add_argument("--version", action="version", version=f"ort-core {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p_run = sub.add_parser("run", help="run a model on given or random inputs")
    p_run.add_argument("model", help="path to an .onnx file")
    p_run.add_argument("--input", "-i", action="append", default=[], metavar="NAME=FILE.npy",
                       help="feed an input from a .npy file (repeatable); others get random data")
    p_run.add_argument("--providers", "-p", default="CPUExecutionProvider",
                       help="comma-separated providers in priority order (default: CPU)")
    p_run.add_argument("--repeat", "-r", type=int, default=1, help="runs to time (median is printed)")
    p_run.add_argument("--seed", type=int, default=0, help="seed for random inputs")

    p_explain = sub.add_parser("explain", help="show which provider runs which nodes, and why")
    p_explain.add_argument("model", help="path to an .onnx file")
    p_explain.add_argument("--providers", "-p", default="CPUExecutionProvider",
                           help="comma-separated providers in priority order")

    sub.add_parser("providers", help="list installed providers, availability and reason")
    p_demo = sub.add_parser("demo", help="run the small model bundled with ort-core")
    p_demo.add_argument("--repeat", "-r", type=int, default=50)

    args = parser.parse_args(argv)
    try:
        if args.command == "run":
            return _run(args)
        if args.command == "providers":
            return _providers()
        if args.command == "explain":
            return _explain(args)
        return _demo(args)
    except (OrtError, OSError, ValueError) as e:
        print(f"ort-core: error: {e}", file=sys.stderr)
        return 1


def _run(args) -> int:
    providers = [p.strip() for p in args.providers.split(",") if p.strip()]
    sess = InferenceSession(args.model, providers=providers)
    feeds = {}
    for item in args.input:
        name, sep, path = item.partition("=")
        if not sep:
            raise ValueError(f"--input expects NAME=FILE.npy, got '{item}'")
        feeds[name] = np.load(path, allow_pickle=False)
    rng = np.random.default_rng(args.seed)
    for arg in sess.get_inputs():
        if arg.name not in feeds:
            feeds[arg.name] = random_input(arg, rng)
            print(f"input  {arg.name}: random {arg.type} {list(feeds[arg.name].shape)}")
        else:
            print(f"input  {arg.name}: {feeds[arg.name].dtype} {list(feeds[arg.name].shape)} from file")
    outputs, median_ms = _timed(sess, feeds, max(1, args.repeat))
    for arg, out in zip(sess.get_outputs(), outputs):
        print(f"output {arg.name}: {summarize(out)}")
    print(f"providers: {', '.join(sess.get_providers())}; median latency {median_ms:.2f} ms "
          f"over {max(1, args.repeat)} run(s)")
    return 0


def _explain(args) -> int:
    import warnings

    providers = [p.strip() for p in args.providers.split(",") if p.strip()]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sess = InferenceSession(args.model, providers=providers)
    for w in caught:
        if "provider assignment" not in str(w.message):
            print(f"warning: {w.message}")
    print(sess.explain())
    return 0


def _providers() -> int:
    reg = get_registry()
    width = max(len(n) for n in reg.providers)
    for name, r in sorted(reg.providers.items(), key=lambda kv: kv[0] == "CPUExecutionProvider"):
        state = "available" if r.info.available else f"unavailable: {r.info.reason}"
        devices = ",".join(str(d) for d in r.info.devices)
        print(f"{name:<{width}}  {state}  [devices {devices}; from {r.distribution}]")
    for name, why in reg.skipped.items():
        print(f"(plugin '{name}' skipped: {why})")
    blas = blas_info()
    print(f"CPUExecutionProvider's matrix products: numpy's BLAS, {blas['core'] or 'not OpenBLAS'} kernels"
          + (f"; {blas['advice']}" if blas["advice"] else ""))
    return 0


def demo_model_path() -> str:
    return str(resources.files("ort_core") / "data" / "demo_cnn.onnx")


def demo_input() -> np.ndarray:
    """A 28x28 image of a ring (deterministic), batch of one."""
    yy, xx = np.mgrid[0:28, 0:28].astype(np.float32)
    r = np.hypot(yy - 13.5, xx - 13.5)
    return (np.abs(r - 8.0) < 2.0).astype(np.float32)[None, None]


def _demo(args) -> int:
    path = demo_model_path()
    t0 = time.perf_counter()
    sess = InferenceSession(path)
    load_ms = (time.perf_counter() - t0) * 1e3
    x = demo_input()
    (probs,), median_ms = _timed(sess, {sess.get_inputs()[0].name: x}, max(1, args.repeat))
    top = np.argsort(probs[0])[::-1][:3]
    print(f"ort-core {__version__} demo: {os.path.basename(path)} (small CNN, seeded weights)")
    print(f"input  image: ring pattern {list(x.shape)} float32")
    print(f"output probs: {summarize(probs)}")
    print("top-3 classes: " + ", ".join(f"{i} ({probs[0, i]:.3f})" for i in top))
    print(f"session created in {load_ms:.1f} ms; median latency {median_ms:.3f} ms over {max(1, args.repeat)} runs "
          f"on {', '.join(sess.get_providers())}")
    return 0


def _timed(sess, feeds, repeat: int):
    times, outputs = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        outputs = sess.run(None, feeds)
        times.append(time.perf_counter() - t0)
    return outputs, float(np.median(times)) * 1e3


def random_input(arg, rng: np.random.Generator) -> np.ndarray:
    """Random data for a NodeArg: symbolic or unknown dims become 1."""
    t = arg.value_type
    if t.kind != "tensor":
        raise ValueError(f"cannot make random data for input '{arg.name}' of type {arg.type}; "
                         f"pass it with --input {arg.name}=FILE.npy")
    shape = tuple(d if isinstance(d, int) else 1 for d in (t.shape or ()))
    dtype = np_dtype(t.elem_type)
    if dtype.kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    if dtype.kind in "iu":
        return rng.integers(0, 10, shape).astype(dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, shape).astype(bool)
    raise ValueError(f"cannot make random data for input '{arg.name}' of type {arg.type}; "
                     f"pass it with --input {arg.name}=FILE.npy")


def summarize(a) -> str:
    a = np.asarray(a)
    head = f"{a.dtype} {list(a.shape)}"
    if a.size == 0 or a.dtype.kind not in "fiub":
        return head
    f = a.astype(np.float64)
    return f"{head} min {f.min():.4g} max {f.max():.4g} mean {f.mean():.4g}"


if __name__ == "__main__":
    sys.exit(main())
