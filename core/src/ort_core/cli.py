"""The ``ort-core`` command: run a model, explain its placement, list providers, run the bundled demo, run a
model over a dataset on Ray Data (``batch``, in ``integrations.batch_command``).

A thin shell over the Python API; it holds no runtime logic of its own (inputs: ``cli_inputs``). Output to a
pipe closed early (``| head``) ends the command quietly.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from importlib import resources

import numpy as np

from . import InferenceSession, NotImplementedOp, OrtError, __version__
from .blas import blas_info
from .cli_inputs import parse_shapes, random_input, read_inputs
from .integrations import batch_command
from .placement_svg import placement_svg
from .plugins.manager import get_registry

__all__ = ["demo_input", "demo_model_path", "main", "random_input", "summarize"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ort-core", description="ort-core ONNX inference runtime")
    parser.add_argument("--version", action="version", version=f"ort-core {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p_run = sub.add_parser("run", help="run a model on given or random inputs")
    p_run.add_argument("model", help="path to an .onnx file")
    p_run.add_argument("--input", "-i", action="append", default=[], metavar="NAME=FILE.npy",
                       help="feed an input from NAME=FILE.npy, NAME=FILE.npz or FILE.npz (arrays named after inputs); "
                            "converted to the declared type with a warning; repeatable; others get random data")
    p_run.add_argument("--shape", "-s", action="append", default=[], metavar="NAME=D0,D1,...",
                       help="shape of the random data for an input with free dimensions (such as "
                            "image=1,3,224,224); free dimensions not given are 1")
    p_run.add_argument("--providers", "-p", default="CPUExecutionProvider",
                       help="comma-separated providers in priority order (default: CPU)")
    p_run.add_argument("--repeat", "-r", type=int, default=1, help="runs to time (median is printed)")
    p_run.add_argument("--seed", type=int, default=0, help="seed for random inputs")

    p_explain = sub.add_parser("explain", help="show which provider runs which nodes, and why")
    p_explain.add_argument("model", help="path to an .onnx file")
    p_explain.add_argument("--providers", "-p", default="CPUExecutionProvider",
                           help="comma-separated providers in priority order")
    p_explain.add_argument("--svg", metavar="FILE", help="also draw the placement as an SVG picture into FILE")

    sub.add_parser("providers", help="list installed providers, availability and reason")
    p_demo = sub.add_parser("demo", help="run the small model bundled with ort-core")
    p_demo.add_argument("--repeat", "-r", type=int, default=50)
    p_demo.add_argument("--providers", "-p", default="CPUExecutionProvider",
                        help="comma-separated providers in priority order (default: CPU)")
    batch_command.add_parser(sub)

    args = parser.parse_args(argv)
    try:
        code = _command(args)
        sys.stdout.flush()  # a pipe's buffer is written here, not at exit, so a closed pipe is caught below
        return code
    except BrokenPipeError:  # the reader went away (`| head`): stop quietly, as other commands do
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the flush at exit does not fail again
        return 0


def _command(args) -> int:
    try:
        if args.command == "run":
            return _run(args)
        if args.command == "providers":
            return _providers()
        if args.command == "explain":
            return _explain(args)
        if args.command == "batch":
            return batch_command.run(args)
        return _demo(args)
    except BrokenPipeError:
        raise
    except (OrtError, OSError, ValueError) as e:
        sys.stdout.flush()
        print(f"ort-core: error: {e}", file=sys.stderr)
        return 1


def _providers_of(args) -> list[str]:
    return [p.strip() for p in args.providers.split(",") if p.strip()]


def _run(args) -> int:
    sess = InferenceSession(args.model, providers=_providers_of(args))
    declared = {a.name: a for a in sess.get_inputs() + sess.get_overridable_initializers()}
    shapes = parse_shapes(args.shape, declared)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        feeds = read_inputs(args.input, declared)
    for w in caught:
        print(f"warning: {w.message}", file=sys.stderr)
    given = [n for n in shapes if n in feeds]
    if given:
        raise ValueError(f"--shape {given[0]}: that input is read from a file (its shape is the file's)")
    rng = np.random.default_rng(args.seed)
    for arg in sess.get_inputs():
        if arg.name not in feeds:
            feeds[arg.name] = random_input(arg, rng, shapes.get(arg.name))
            print(f"input  {arg.name}: random {arg.type} {list(feeds[arg.name].shape)}")
        else:
            print(f"input  {arg.name}: {feeds[arg.name].dtype} {list(feeds[arg.name].shape)} from file")
    for arg in sess.get_overridable_initializers():
        if arg.name in feeds:
            print(f"input  {arg.name}: {feeds[arg.name].dtype} {list(feeds[arg.name].shape)} from file "
                  "(overrides the initializer)")
    outputs, median_ms = _timed(sess, feeds, max(1, args.repeat))
    for arg, out in zip(sess.get_outputs(), outputs):
        print(f"output {arg.name}: {summarize(out)}")
    print(f"providers: {', '.join(sess.get_providers())}; median latency {median_ms:.2f} ms "
          f"over {max(1, args.repeat)} run(s)")
    return 0


def _explain(args) -> int:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            sess = InferenceSession(args.model, providers=_providers_of(args))
        except NotImplementedOp as e:  # the answer to "what runs where": these nodes run nowhere
            print(f"model: {args.model}\nunsupported: {e}")
            return 1
        finally:
            for w in caught:
                if "provider assignment" not in str(w.message):
                    print(f"warning: {w.message}")
    print(sess.explain())
    if args.svg:
        with open(args.svg, "w", encoding="utf-8") as f:
            f.write(placement_svg(sess))
        print(f"placement drawn: {args.svg}")
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
    sess = InferenceSession(path, providers=_providers_of(args))
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


def summarize(a) -> str:
    a = np.asarray(a)
    head = f"{a.dtype} {list(a.shape)}"
    if a.size == 0 or a.dtype.kind not in "fiub":
        return head
    f = a.astype(np.float64)
    return f"{head} min {f.min():.4g} max {f.max():.4g} mean {f.mean():.4g}"


if __name__ == "__main__":
    sys.exit(main())
