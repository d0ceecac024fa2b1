"""Session creation time of QNNExecutionProvider with and without a saved context (EPContext model).

For each model, in fresh processes (so nothing is remembered in memory): compile with an empty probe cache,
compile again with the probe verdicts on disk, save the context model (``ep.context_enable=1``), and load the
context model; then the outputs of the compiled and the loaded session are compared. Prints a Markdown table.

    python plugins/ort-ep-qnn/scripts/epcontext_timing.py [MODEL.onnx ...]   (default: the onnx wheel's light
    SqueezeNet and Inception v1)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

CHILD = r"""
import json, os, sys, time, warnings
import numpy as np
import ort_core as ort
from ort_ep_qnn import plugin
warnings.simplefilter("ignore")
spent = {"capability": 0.0, "compile": 0.0}
def timed(key, method):
    def wrapper(*a, **k):
        t = time.perf_counter()
        try:
            return method(*a, **k)
        finally:
            spent[key] += time.perf_counter() - t
    return wrapper
plugin.QNNProvider.get_capability = timed("capability", plugin.QNNProvider.get_capability)
plugin.QNNProvider.compile = timed("compile", plugin.QNNProvider.compile)
path, mode, folder = sys.argv[1], sys.argv[2], sys.argv[3]
so = ort.SessionOptions()
if mode == "save":
    so.add_session_config_entry("ep.context_enable", "1")
    so.add_session_config_entry("ep.context_file_path", os.path.join(folder, "model_ctx.onnx"))
source = os.path.join(folder, "model_ctx.onnx") if mode == "load" else path
options = {"cache_dir": os.path.join(folder, "probes")}
t0 = time.perf_counter()
sess = ort.InferenceSession(source, so, providers=[("QNNExecutionProvider", options), "CPUExecutionProvider"])
created = time.perf_counter() - t0
inp = sess.get_inputs()[0]
x = np.random.default_rng(0).standard_normal([d if isinstance(d, int) else 1 for d in inp.shape]).astype(np.float32)
y = sess.run(None, {inp.name: x})[0]
np.save(os.path.join(folder, f"y_{mode}.npy"), y)
on_qnn = sum(len(a.op_types) for a in sess.get_provider_graph_assignment_info() if a.provider == "QNNExecutionProvider")
print(json.dumps({"created_s": created, "on_qnn": on_qnn, **spent}))
"""


def run(path: str, mode: str, folder: str) -> dict:
    done = subprocess.run([sys.executable, "-c", CHILD, path, mode, folder], capture_output=True, text=True,
                          timeout=1200)
    if done.returncode:
        raise SystemExit(f"{mode} {path} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(paths: list[str]) -> None:
    if not paths:
        import onnx

        light = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
        paths = [os.path.join(light, f"light_{m}.onnx") for m in ("squeezenet", "inception_v1")]
    import numpy as np

    print("Session creation in seconds; in brackets the QNN provider's own part (get_capability + compile: probes, "
          "graph building and finalizing, or deserializing).\n")
    print("| model | nodes on QNN | compile, no probe cache | compile, probes cached | save context "
          "| load context | loaded vs compiled |")
    print("|---|---|---|---|---|---|---|")
    for path in paths:
        with tempfile.TemporaryDirectory() as folder:
            cold = run(path, "compile", folder)
            warm = run(path, "compile", folder)
            save = run(path, "save", folder)
            load = run(path, "load", folder)
            outputs = [np.load(os.path.join(folder, f"y_{mode}.npy")) for mode in ("save", "load")]
            same = np.array_equal(*outputs)
        cells = " | ".join(f"{r['created_s']:.2f} ({r['capability'] + r['compile']:.3f})"
                           for r in (cold, warm, save, load))
        print(f"| {os.path.basename(path)} | {cold['on_qnn']} | {cells} | {'identical' if same else 'DIFFERENT'} |")


if __name__ == "__main__":
    main(sys.argv[1:])
