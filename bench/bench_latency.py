"""Latency of ort-core vs onnxruntime on the same models, inputs and machine, in one run.

Prints the median (and p90) latency of each runtime and the ratio ort-core / onnxruntime.
Usage: python bench/bench_latency.py [MODEL ...] [--runs N]  (MODEL: a path or a light-model name
such as 'resnet50'); defaults to light ResNet-50 and the bundled demo CNN.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import onnx

import ort_core
from ort_core.cli import demo_model_path, random_input

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")


def resolve(model: str) -> str:
    if os.path.exists(model):
        return model
    path = os.path.join(LIGHT, f"light_{model}.onnx")
    if not os.path.exists(path):
        raise SystemExit(f"unknown model '{model}': not a file and not a light model in {LIGHT}")
    return path


def timed(fn, runs: int, warmup: int = 3) -> np.ndarray:
    for _ in range(warmup):
        fn()
    t = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        t.append(time.perf_counter() - t0)
    return np.array(t) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="*", default=["resnet50", "demo"])
    ap.add_argument("--runs", type=int, default=30)
    args = ap.parse_args()
    import onnxruntime

    print(f"ort-core {ort_core.__version__} vs onnxruntime {onnxruntime.__version__}, {os.cpu_count()} cores")
    print(f"{'model':<28}{'ort-core ms':>14}{'onnxruntime ms':>16}{'ratio':>8}  (median; p90 in brackets)")
    for model in args.models:
        path = demo_model_path() if model == "demo" else resolve(model)
        ours = ort_core.InferenceSession(path)
        theirs = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
        rng = np.random.default_rng(0)
        feeds = {a.name: random_input(a, rng) for a in ours.get_inputs()}
        a = ours.run(None, feeds)[0]
        b = theirs.run(None, feeds)[0]
        err = float(np.max(np.abs(a.astype(np.float64) - b))) if a.size else 0.0
        t_ours = timed(lambda s=ours, f=feeds: s.run(None, f), args.runs)
        t_theirs = timed(lambda s=theirs, f=feeds: s.run(None, f), args.runs)
        m1, m2 = np.median(t_ours), np.median(t_theirs)
        name = os.path.basename(path).removesuffix(".onnx")
        print(f"{name:<28}{m1:>9.2f} [{np.percentile(t_ours, 90):.1f}]{m2:>11.2f} [{np.percentile(t_theirs, 90):.1f}]"
              f"{m1 / m2:>7.2f}x  max|diff| {err:.2e}")


if __name__ == "__main__":
    main()
