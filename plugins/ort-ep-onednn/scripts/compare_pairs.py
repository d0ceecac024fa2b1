"""Back-to-back latency of ort-core with DnnlExecutionProvider against onnxruntime's CPU provider,
in one process: 2 warm-up calls each, then ROUNDS (6) alternating rounds of RUNS (20) runs per
runtime; prints medians over all runs and the ratio, and checks the outputs agree within 1e-4.

Usage (from any folder): python plugins/ort-ep-onednn/scripts/compare_pairs.py squeezenet densenet121 ...
(light-model names, .onnx paths or bench/models.py builders, as compare_latency.py); env THREADS=n.
A measuring aid, not a test.
"""

from __future__ import annotations

import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from compare_latency import open_pair  # noqa: E402  (the same sessions and feed as compare_latency.py)


def main(names: list[str]) -> None:
    rounds, runs = int(os.environ.get("ROUNDS", 6)), int(os.environ.get("RUNS", 20))
    for name in names:
        dnnl, ref, feed = open_pair(name, {})
        for _ in range(2):
            got, want = dnnl.run(None, feed), ref.run(None, feed)
        diff = max(float(np.abs(a - b).max()) for a, b in zip(got, want))
        td: list[float] = []
        tr: list[float] = []
        for _ in range(rounds):
            for sess, acc in ((dnnl, td), (ref, tr)):
                for _ in range(runs):
                    t = time.perf_counter()
                    sess.run(None, feed)
                    acc.append(time.perf_counter() - t)
        md, mr = statistics.median(td) * 1e3, statistics.median(tr) * 1e3
        ok = "ok" if diff <= 1e-4 else "MISMATCH"
        print(f"{name:14s} oneDNN {md:8.2f} ms  onnxruntime {mr:8.2f} ms  ratio {md / mr:5.3f}  "
              f"max diff {diff:.1e} {ok}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or ["squeezenet", "densenet121", "inception_v2", "resnet50"])
