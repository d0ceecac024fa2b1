"""precision=bf16 against fp32 on the oneDNN provider: median latencies, speed-up and the error.

Usage (from any folder): python plugins/ort-ep-onednn/scripts/compare_bf16.py resnet18_seeded bert ...
(light-model names or bench/models.py builders, as compare_latency.py); env RUNS=n. Error: relative error
of the output element largest in magnitude and max |bf16 - fp32| / max |fp32| over the first output.
A measuring aid, not a test. The light models' weights are constants, so their errors say little.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
import warnings

import numpy as np

import ort_core as ort

sys.path.insert(0, os.path.dirname(__file__))
from compare_latency import bench_models, model_path  # noqa: E402


def main(names: list[str]) -> None:
    runs = int(os.environ.get("RUNS", 15))
    for name in names:
        path = model_path(name)
        sess = {}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for prec in ("fp32", "bf16"):
                sess[prec] = ort.InferenceSession(path, providers=[("DnnlExecutionProvider", {"precision": prec})])
        feed = bench_models.feeds(sess["fp32"].get_inputs())
        y32, ybf = sess["fp32"].run(None, feed)[0], sess["bf16"].run(None, feed)[0]
        k = int(np.argmax(np.abs(y32)))
        top = float(y32.reshape(-1)[k])
        rel_top = abs(float(ybf.reshape(-1)[k]) - top) / abs(top)
        rel_max = float(np.abs(ybf - y32).max() / np.abs(y32).max())
        times = {p: [] for p in sess}
        for _ in range(runs):
            for p, s in sess.items():
                t = time.perf_counter()
                s.run(None, feed)
                times[p].append(time.perf_counter() - t)
        m = {p: statistics.median(v) * 1e3 for p, v in times.items()}
        print(f"{name:16s} fp32 {m['fp32']:7.2f} ms  bf16 {m['bf16']:7.2f} ms  speed-up {m['fp32'] / m['bf16']:4.2f}  "
              f"largest-output rel err {rel_top:.1e}  max err / max {rel_max:.1e}")


if __name__ == "__main__":
    main(sys.argv[1:] or ["resnet18_seeded", "resnet50", "squeezenet", "inception_v1", "densenet121", "bert", "gpt2"])
