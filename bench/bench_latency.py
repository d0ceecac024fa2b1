"""ort-core vs onnxruntime on the same models, inputs and machine, in one process: latency, session
creation, peak memory, output differences, and ort-core's latency over its BLAS floor.

Per model it prints and writes (``--markdown``, default bench/results.md) the median and p90 latency
of each runtime and their ratio, session-creation time, peak memory (fresh subprocesses), the largest
output difference, ort-core's BLAS floor (see measure.py) with its top ops by time, per-node dispatch
for the Add chain, and each target met or missed. Extra ort-core providers (OpenVINO FP32/BF16, oneDNN
fp32/bf16), when installed and available, get rows as ratios to both CPU providers.

Usage: python bench/bench_latency.py [MODEL ...] [--runs N] [--budget S] [--quick] [--no-openvino]
[--no-onednn] [--no-creation] [--no-memory] [--no-floor] [--markdown PATH] [--quant]. MODEL: a path, a light
model of the onnx wheel ('resnet50', 'vgg19', ...), 'demo', or a built one: 'resnet18_seeded', 'bert',
'gpt2', 'lstm', 'adds1000' (models.py); default: all of these, conv models first. ``--quant``: the int8
comparison of bench_quant.py instead (its own models and options).
"""

from __future__ import annotations

# isort: off
import ort_core  # before numpy: ort-core picks numpy's BLAS kernels as it would for a user (ort_core.blas)
# isort: on
import argparse
import gc
import os
import sys
import tempfile
import time
import warnings

import measure
import models
import numpy as np
import onnx
import report

# (label, provider, options, the --no-... flag that leaves it out)
EXTRA_PROVIDERS = [
    ("OpenVINO FP32", "OpenVINOExecutionProvider", {"precision": "FP32"}, "openvino"),
    ("OpenVINO BF16", "OpenVINOExecutionProvider", {"precision": "BF16"}, "openvino"),
    ("oneDNN fp32", "DnnlExecutionProvider", {"precision": "fp32"}, "onednn"),
    ("oneDNN bf16", "DnnlExecutionProvider", {"precision": "bf16"}, "onednn"),
]
HERE = os.path.dirname(os.path.abspath(__file__))


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="*", default=models.DEFAULT)
    ap.add_argument("--runs", type=int, default=None, help="timed runs per runtime for fast models (default 30)")
    ap.add_argument("--budget", type=float, default=None,
                    help="seconds of timed runs per model: slow models get fewer runs (default 12, 0: always N)")
    ap.add_argument("--quick", action="store_true", help="fewer runs everywhere (a rough look, not for the README)")
    ap.add_argument("--no-openvino", action="store_true", help="leave the OpenVINO provider out")
    ap.add_argument("--no-onednn", action="store_true", help="leave the oneDNN provider out")
    ap.add_argument("--no-creation", action="store_true", help="skip session-creation times")
    ap.add_argument("--no-memory", action="store_true", help="skip peak memory (subprocesses)")
    ap.add_argument("--no-floor", action="store_true", help="skip the profile and the BLAS floor")
    ap.add_argument("--markdown", default=os.path.join(HERE, "results.md"), help="where the Markdown goes")
    ap.add_argument("--quant", action="store_true", help="int8 side by side instead (bench_quant.py)")
    args = ap.parse_args()
    args.runs = args.runs or (10 if args.quick else 30)
    args.budget = args.budget if args.budget is not None else (4.0 if args.quick else 12.0)
    args.repeats = 1 if args.quick else 3  # session creations, memory runs and profiled runs
    return args


def kind_of(model: str) -> str:
    if model in models.CONV:
        return "conv"
    if model in models.TRANSFORMERS:
        return "transformer"
    return "chain" if model.startswith("adds") else "other"


def max_diff(ours: list, theirs: list) -> tuple[float, float]:
    """Largest |difference| over all outputs (inf where shapes differ), and the largest |value| of the
    reference outputs."""
    diff = max((float(np.max(np.abs(a.astype(np.float64) - b))) if a.size else 0.0
                if np.shape(a) == np.shape(b) else float("inf") for a, b in zip(ours, theirs)), default=0.0)
    ref = max((float(np.max(np.abs(b))) if b.size else 0.0 for b in theirs), default=0.0)
    return diff, ref


def quiet_session(path: str, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ort_core.OrtWarning)  # the provider assignment summary
        return ort_core.InferenceSession(path, **kwargs)


def bench_model(model: str, path: str, ort, args, tmp: str) -> tuple[dict, dict]:
    """The model's result row, and the feeds it was timed on."""
    name = _name(model)
    r = {"name": name, "kind": kind_of(model),
         "nodes_file": len(onnx.load(path, load_external_data=False).graph.node)}
    floor = None
    if not args.no_floor:
        profile = measure.profile_ort_core(path, models.feeds, args.repeats, tmp)
        r["steps"] = len(profile["steps"])
        r["top_ops"] = measure.top_ops(profile["steps"])
        floor = measure.floor_fn(profile["steps"])
        gc.collect()
    feeds = latency(r, path, ort, args, floor)
    del floor
    gc.collect()  # the timed sessions are gone: their memory must not weigh on what follows
    if not args.no_creation:
        factories = [lambda: ort_core.InferenceSession(path)]
        if ort is not None:
            factories.append(lambda: ort.InferenceSession(path, providers=[measure.CPU]))
        created = measure.creation_ms(factories, args.repeats)
        r["creation_core"], r["creation_ort"] = created[0], (created[1] if ort is not None else None)
    if not args.no_memory:
        npz = os.path.join(tmp, "feeds.npz")
        np.savez(npz, **feeds)
        r["memory_core"] = measure.peak_memory_mb("ort-core", path, npz, args.repeats)
        if ort is not None:
            r["memory_ort"] = measure.peak_memory_mb("onnxruntime", path, npz, args.repeats)
    return r, feeds


def latency(r: dict, path: str, ort, args, floor) -> dict:
    """Time ort-core, onnxruntime and the BLAS floor (when a function) in alternating rounds; fills
    ``r`` and returns the feeds."""
    ours = ort_core.InferenceSession(path)
    feeds = models.feeds(ours.get_inputs())
    sessions = [ours]
    out_core = ours.run(None, feeds)
    if ort is not None:
        theirs = ort.InferenceSession(path, providers=[measure.CPU])
        sessions.append(theirs)
        r["diff"], r["ref"] = max_diff(out_core, theirs.run(None, feeds))
    fns = [lambda s=s: s.run(None, feeds) for s in sessions]
    if floor is not None:
        fns.append(floor)
    r["runs"], times = _rounds(fns, args)
    if floor is not None:
        r["floor_ms"] = measure.summary(times.pop())[0]
    r["core_ms"], r["core_p90"] = measure.summary(times[0])
    if ort is not None:
        r["ort_ms"], r["ort_p90"] = measure.summary(times[1])
    return feeds


def extra_latency(name: str, path: str, feeds: dict, ort, extras: list, args) -> list[dict]:
    """The second pass: onnxruntime and ort-core's other providers in alternating rounds on the first
    pass's ``feeds``, one row per provider. Run after every CPU measurement, so that the thread pools
    these providers start (OpenMP, TBB) never share the cores with the CPU providers' timings."""
    sessions, labels, out_ort = [], [], None
    if ort is not None:
        theirs = ort.InferenceSession(path, providers=[measure.CPU])
        sessions.append(theirs)
        out_ort = theirs.run(None, feeds)
    for label, provider, options, _ in extras:
        try:
            sessions.append(quiet_session(path, providers=[(provider, options)]))
            labels.append(label)
        except ort_core.OrtError as e:
            print(f"  {label}: no session ({e})")
    if not labels:
        return []
    fns = [lambda s=s: s.run(None, feeds) for s in sessions]
    times = _rounds(fns, args)[1]
    ort_ms = measure.summary(times[0])[0] if ort is not None else None
    rows = []
    for label, sess, t in zip(labels, sessions[len(sessions) - len(labels):], times[len(times) - len(labels):]):
        ms, p90 = measure.summary(t)
        diff = max_diff(sess.run(None, feeds), out_ort)[0] if out_ort is not None else None
        rows.append({"model": name, "label": label, "ms": ms, "p90": p90, "diff": diff, "ort_ms": ort_ms})
    return rows


def _rounds(fns: list, args) -> tuple[int, list[np.ndarray]]:
    """The number of timed runs that fits the budget, and each function's times over them (ms)."""
    runs, block = measure.plan_runs(fns, args.runs, args.budget, min_runs=3 if args.quick else 5)
    return runs, measure.timed(fns, runs, block=block)


def progress(r: dict) -> str:
    text = f"{r['name']}: ort-core {r['core_ms']:.2f} ms"
    if r.get("ort_ms"):
        text += f", onnxruntime {r['ort_ms']:.2f} ms ({r['core_ms'] / r['ort_ms']:.2f}x)"
    if r.get("floor_ms"):
        text += f", BLAS floor {r['floor_ms']:.2f} ms"
    return text + f" [{r['runs']} runs]"


def _name(model: str) -> str:
    return os.path.basename(model).removesuffix(".onnx") if os.path.exists(model) else model


def _failure(e: Exception) -> str:
    first = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {first}"


def _load() -> float | None:
    """The 1-minute load average: above the core count, other processes competed for the cores."""
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else None


def main() -> None:
    if "--quant" in sys.argv[1:]:  # quantized models instead: bench_quant.py takes the other arguments
        import bench_quant

        return bench_quant.main(sys.argv[1:])
    args = parse_args()
    try:
        import onnxruntime as ort
    except ImportError:
        ort = None
        print("onnxruntime is not installed: ort-core alone, no ratios")
    available = ort_core.get_available_providers()
    skipped = {"openvino": args.no_openvino, "onednn": args.no_onednn}
    extras = [e for e in EXTRA_PROVIDERS if not skipped[e[3]] and e[1] in available]
    meta = {"core": ort_core.__version__, "ort": ort.__version__ if ort else None, "cores": os.cpu_count(),
            "machine": measure.machine()}
    print(f"ort-core {meta['core']} vs onnxruntime {meta['ort']}, {meta['machine']}")
    if extras:
        from ort_core.plugins.manager import get_registry

        for provider in dict.fromkeys(e[1] for e in extras):
            print(f"{provider}: {get_registry().providers[provider].info.description}")
    t_start, load_start = time.perf_counter(), _load()
    results, extra_rows, failed, done = [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.models:
            path = models.resolve(model, tmp)
            try:
                r, feeds = bench_model(model, path, ort, args, tmp)
            except Exception as e:  # one broken model must not cost the whole run
                failed.append((model, _failure(e)))
                print(f"{model}: failed: {failed[-1][1]}", flush=True)
                continue
            results.append(r)
            done.append((model, path, r["name"], feeds))
            print(progress(r), flush=True)
        for model, path, name, feeds in done if extras else ():
            try:
                extra_rows += extra_latency(name, path, feeds, ort, extras, args)
            except Exception as e:  # noqa: BLE001 - reported in the table, the run goes on
                failed.append((f"{model} (other providers)", _failure(e)))
            print(f"{name}: other providers timed", flush=True)
    meta["load"] = (load_start, _load())
    text = report.markdown(results, extra_rows, meta, failed)
    measure.publish(text, args.markdown, time.perf_counter() - t_start)


if __name__ == "__main__":
    main()
