"""Latency under load: how much ort-core's and onnxruntime's latency rises when another process keeps the CPUs
busy, side by side in one run.

Per model and condition (idle; one busy process; as many busy processes as this process may use CPUs), both
runtimes at their default threads, the median and p90 latency, timed as the latency bench times
(``measure.timed``: alternating rounds with a pause before each). The busy processes are plain Python loops
(``python -c "while True: pass"``), started before the condition's rounds and killed after them. The rise is a
runtime's median under load over its median idle; the target (issue "CPU provider ... session start as fast as
onnxruntime") is ort-core's rise at most onnxruntime's. Written as the "contention" section of bench/results.md.

  python bench/bench_contention.py [MODEL ...] [--runs N] [--budget S] [--markdown PATH]
"""

from __future__ import annotations

# isort: off
import ort_core  # before numpy: ort-core picks numpy's BLAS kernels as it would for a user (ort_core.blas)
# isort: on
import argparse
import os
import subprocess
import sys
import tempfile
import time
import warnings
from contextlib import contextmanager

import measure
import models

SECTION = "contention"
HERE = os.path.dirname(os.path.abspath(__file__))


@contextmanager
def busy(count: int):
    """``count`` processes spinning on the CPU while the block runs."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        time.sleep(0.5)  # let them get going
        yield
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


def sessions(path: str):
    import onnxruntime

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours = ort_core.InferenceSession(path, providers=["CPUExecutionProvider"])
    so = onnxruntime.SessionOptions()
    so.log_severity_level = 3
    return ours, onnxruntime.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def measure_model(name: str, folder: str, args) -> list[dict]:
    path = models.resolve(name, folder)
    ours, theirs = sessions(path)
    feeds = models.feeds(ours.get_inputs(), seed=0)
    fns = [lambda: ours.run(None, feeds), lambda: theirs.run(None, feeds)]
    runs, block = measure.plan_runs(fns, args.runs, args.budget)
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    rows = []
    for label, count in (("idle", 0), ("1 busy process", 1), (f"{cpus} busy processes", cpus)):
        if count == 1 and cpus == 1:
            continue
        with busy(count):
            t_ours, t_theirs = measure.timed(fns, runs, block=block)
        rows.append({"condition": label, "ours": measure.summary(t_ours), "theirs": measure.summary(t_theirs)})
        print(f"  {name}, {label}: ort-core {rows[-1]['ours'][0]:.1f} ms, onnxruntime {rows[-1]['theirs'][0]:.1f} ms",
              flush=True)
    return rows


def markdown(results: dict, cpus: int) -> str:
    lines = ["## Latency with busy processes beside it", "",
             f"`python bench/bench_contention.py` ({cpus} CPUs; both runtimes at their default threads; busy "
             "processes are Python loops). Rise: median under load over median idle; target: ort-core's rise at "
             "most onnxruntime's.", "",
             "| model | condition | ort-core median / p90 ms | onnxruntime median / p90 ms | ort-core rise | "
             "onnxruntime rise | target |", "|---|---|---|---|---|---|---|"]
    for name, rows in results.items():
        idle = rows[0]
        for r in rows:
            rise_ours = r["ours"][0] / idle["ours"][0]
            rise_theirs = r["theirs"][0] / idle["theirs"][0]
            met = "" if r is idle else ("met" if rise_ours <= rise_theirs else "missed")
            lines.append(f"| {name} | {r['condition']} | {r['ours'][0]:.1f} / {r['ours'][1]:.1f} | "
                         f"{r['theirs'][0]:.1f} / {r['theirs'][1]:.1f} | {rise_ours:.2f}x | {rise_theirs:.2f}x | "
                         f"{met} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("models", nargs="*", default=["resnet50"])
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--budget", type=float, default=15.0, help="seconds of timed runs per condition")
    ap.add_argument("--markdown", default=os.path.join(HERE, "results.md"))
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    results = {}
    with tempfile.TemporaryDirectory() as folder:
        for name in args.models:
            print(f"{name} ...", flush=True)
            results[name] = measure_model(name, folder, args)
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    measure.publish_section(markdown(results, cpus), args.markdown, SECTION, time.perf_counter() - t0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
