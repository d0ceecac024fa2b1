"""Batch inference on Ray Data: rows/s of a CNN on a local cluster against one single-threaded process, for
ort-core and for onnxruntime through the same adapter (``ort_core.integrations.ray``), and the adapter against
a hand-written ``map_batches`` class around a plain session, so the adapter's own cost is visible.

Every figure is end to end (sessions created, every row run, outputs back in the object store); the cluster
is started once before. The model is the bench's seeded ResNet-18 with a free batch dimension, at --size.

Usage: python bench/bench_ray.py [--rows N] [--size S] [--cpus N] [--batch-size B] [--repeats R]
[--markdown PATH] (default: a "Batch inference on Ray Data" section in bench/results.md, kept there when
bench_latency.py rewrites the rest of the file).
"""

from __future__ import annotations

import argparse
import importlib
import os
import platform
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import measure  # noqa: E402
from models import resnet18_seeded  # noqa: E402

SECTION = "ray"


def cnn(size: int) -> bytes:
    """ResNet-18 (seeded) with input [N, 3, size, size] and output [N, 1000]."""
    model = resnet18_seeded()
    for value in (model.graph.input[0], model.graph.output[0]):
        dims = value.type.tensor_type.shape.dim
        dims[0].dim_param = "N"
    for d in model.graph.input[0].type.tensor_type.shape.dim[2:]:
        d.dim_value = size
    model.graph.ClearField("value_info")
    return model.SerializeToString()


def one_process(runtime: str, model: bytes, x: np.ndarray, batch: int) -> float:
    """Seconds for one process on one thread: session created, every batch run."""
    rt = importlib.import_module(runtime)
    t0 = time.perf_counter()
    options = rt.SessionOptions()
    options.intra_op_num_threads = 1
    sess = rt.InferenceSession(model, sess_options=options, providers=["CPUExecutionProvider"])
    for k in range(0, len(x), batch):
        sess.run(None, {"input": x[k:k + batch]})
    return time.perf_counter() - t0


class HandWritten:
    """What a user writes without the adapter: a session per actor, one column in, one column out."""

    def __init__(self, model_ref, runtime: str):
        import ray

        model = ray.get(model_ref[0])  # the bytes put once in the object store
        rt = importlib.import_module(runtime)
        options = rt.SessionOptions()
        options.intra_op_num_threads = 1
        self.session = rt.InferenceSession(model, sess_options=options, providers=["CPUExecutionProvider"])

    def __call__(self, batch):
        return {"logits": self.session.run(None, {"input": batch["input"]})[0]}


def on_ray(ray, runtime: str, model: bytes, x: np.ndarray, batch: int, actors: int, adapter: bool) -> float:
    from ort_core.integrations import ray as ort_ray

    ds = ray.data.from_numpy(x).rename_columns({"data": "input"})
    ds = ds.repartition(actors * 4).materialize()  # blocks in the object store before the clock starts
    t0 = time.perf_counter()
    if adapter:
        out = ort_ray.map_batches(ds, model, runtime=runtime, providers=["CPUExecutionProvider"],
                                  batch_size=batch, concurrency=actors)
    else:
        out = ds.map_batches(HandWritten, fn_constructor_args=([ray.put(model)], runtime), batch_size=batch,
                             batch_format="numpy", compute=ray.data.ActorPoolStrategy(size=actors), num_cpus=1)
    rows = out.materialize().count()
    seconds = time.perf_counter() - t0
    assert rows == len(x), (rows, len(x))
    return seconds


CASES = ("one process", "adapter", "hand-written")


def _case(ray, name: str, runtime: str, model: bytes, x: np.ndarray, args) -> float:
    if name == "one process":
        return one_process(runtime, model, x, args.batch_size)
    return on_ray(ray, runtime, model, x, args.batch_size, args.cpus, name == "adapter")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=512, help="rows of the longer run (the shorter has half)")
    ap.add_argument("--size", type=int, default=128, help="image height and width")
    ap.add_argument("--cpus", type=int, default=2, help="CPUs of the local cluster, one actor each")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3, help="runs per figure; the median is reported")
    ap.add_argument("--markdown", default=os.path.join(HERE, "results.md"))
    args = ap.parse_args()
    import ray

    t_start = time.perf_counter()
    model = cnn(args.size)
    half = max(1, args.rows // 2)
    x = np.random.default_rng(0).standard_normal((2 * half, 3, args.size, args.size)).astype(np.float32)
    ray.init(num_cpus=args.cpus, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    figures: dict[tuple[str, str], tuple[float, float]] = {}
    try:
        for runtime in ("ort_core", "onnxruntime"):
            for name in CASES:
                steady, whole = [], []
                for _ in range(args.repeats):
                    t1, t2 = (_case(ray, name, runtime, model, x[:rows], args) for rows in (half, 2 * half))
                    steady.append(half / max(t2 - t1, 1e-9))
                    whole.append(2 * half / t2)
                    print(f"{runtime:12s} {name:13s} steady {steady[-1]:7.1f} rows/s, end to end {whole[-1]:7.1f}",
                          flush=True)
                figures[(runtime, name)] = (statistics.median(steady), statistics.median(whole))
    finally:
        ray.shutdown()
    measure.publish_section(_markdown(figures, args), args.markdown, SECTION, time.perf_counter() - t_start)
    return 0


def _markdown(figures: dict[tuple[str, str], tuple[float, float]], args) -> str:
    lines = ["## Batch inference on Ray Data", "",
             f"`python bench/bench_ray.py` (`nox -s bench -- --ray`): the seeded ResNet-18 at {args.size}x{args.size} "
             f"in batches of {args.batch_size}; a local cluster of {args.cpus} CPUs with one actor (one session "
             f"thread) per CPU, against one process on one thread. Each run is end to end (sessions created, every "
             f"row run); steady rows/s = the rows a run of {args.rows} has over one of {args.rows // 2}, divided by "
             f"the time it takes longer (start-up cancels out); median of {args.repeats}. {platform.machine()}, "
             f"{os.cpu_count()} CPUs, Python {platform.python_version()}.", "",
             "| runtime | one process, 1 thread | adapter on Ray | hand-written map_batches | adapter / one process "
             "| adapter cost vs hand-written |", "|---|---|---|---|---|---|"]
    for runtime in ("ort_core", "onnxruntime"):
        (one, one_e), (ada, ada_e), (hand, hand_e) = (figures[(runtime, k)] for k in CASES)
        lines.append(f"| {runtime.replace('_', '-')} | {one:.1f} ({one_e:.1f}) | {ada:.1f} ({ada_e:.1f}) | "
                     f"{hand:.1f} ({hand_e:.1f}) | {ada / one:.2f}x {'✓' if ada / one >= 1.7 else '✗'} "
                     f"({ada_e / one_e:.2f}x) | {100 * (hand / ada - 1):+.1f}% {'✓' if hand / ada - 1 < 0.10 else '✗'} "
                     f"({100 * (hand_e / ada_e - 1):+.1f}%) |")
    lines += ["", "Steady rows/s, end to end in brackets (actor start-up and session creation included). Targets "
              "(issue): the adapter at least 1.7x one single-threaded process; the adapter's cost under 10% "
              "against the hand-written loop (its time over the loop's, minus one)."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
