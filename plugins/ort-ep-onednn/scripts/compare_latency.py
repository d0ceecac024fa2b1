"""Median latency of ort-core with DnnlExecutionProvider against onnxruntime's CPU provider.

Alternates the two runtimes with 0.3 s sleeps and checks their outputs agree. Usage (from any
folder): python plugins/ort-ep-onednn/scripts/compare_latency.py resnet50 squeezenet bert ...
(light-model names, or bench/models.py builders); env THREADS=n (num_threads / intra_op_num_threads),
PREC=fp32|bf16, RUNS=n. A measuring aid, not a test: nothing here asserts timings.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
import warnings

import numpy as np
import onnxruntime as rt

import ort_core as ort

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "bench"))
import models as bench_models  # noqa: E402  (bench/models.py: the bench's model builders)


def model_path(name: str) -> str:
    """A light-model name, an .onnx path, "demo" or a bench/models.py builder -> a file (the bench's rule)."""
    return bench_models.resolve(name, tempfile.gettempdir())


def open_pair(name: str, options: dict) -> tuple[ort.InferenceSession, rt.InferenceSession, dict[str, np.ndarray]]:
    """ort-core with DnnlExecutionProvider(``options``) and onnxruntime's CPU provider on one model, and
    the bench's seeded feed (bench/models.py feeds); env THREADS=n sets num_threads /
    intra_op_num_threads."""
    threads = int(os.environ.get("THREADS", 0))
    options = dict(options)
    so = rt.SessionOptions()
    if threads:
        options["num_threads"] = threads
        so.intra_op_num_threads = threads
    path = model_path(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dnnl = ort.InferenceSession(path, providers=[("DnnlExecutionProvider", options)])
    ref = rt.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    feed = bench_models.feeds(dnnl.get_inputs())  # the bench's inputs (seeded; an attention mask for "mask")
    return dnnl, ref, feed


def main(names: list[str]) -> None:
    runs = int(os.environ.get("RUNS", 15))
    for name in names:
        dnnl, ref, feed = open_pair(name, {"precision": os.environ.get("PREC", "fp32")})
        got, want = dnnl.run(None, feed), ref.run(None, feed)
        diff = max(float(np.abs(a - b).max()) for a, b in zip(got, want))
        for _ in range(3):
            dnnl.run(None, feed)
            ref.run(None, feed)
        td, tr = [], []
        for _ in range(runs):
            t = time.perf_counter()
            dnnl.run(None, feed)
            td.append(time.perf_counter() - t)
            time.sleep(0.3)
            t = time.perf_counter()
            ref.run(None, feed)
            tr.append(time.perf_counter() - t)
            time.sleep(0.3)
        md, mr = statistics.median(td) * 1e3, statistics.median(tr) * 1e3
        print(f"{name:14s} oneDNN {md:8.2f} ms  onnxruntime {mr:8.2f} ms  ratio {md / mr:5.2f}  max diff {diff:.1e}")


if __name__ == "__main__":
    main(sys.argv[1:] or ["resnet50", "squeezenet", "inception_v1", "densenet121"])
