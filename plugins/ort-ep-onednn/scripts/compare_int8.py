"""int8 against float32 on the oneDNN provider, and against onnxruntime's int8: median latencies.

Usage (from any folder): python plugins/ort-ep-onednn/scripts/compare_int8.py [SIZE ...]
Quantizes bench/models.py's seeded ResNet-18 at each input size (default 224) with ort_core.quantization
(quant_pre_process first, which folds BatchNormalization into the convolutions as onnxruntime's recipe does;
env PREPROCESS=0 quantizes the raw model, whose BatchNormalizations stay float between Q/DQ pairs; then static,
QDQ per-channel and QOperator per-tensor; 8 random calibration images), then times, alternating in
rounds: the float model on oneDNN, each quantized model on oneDNN, the float and QDQ models on onnxruntime's
CPU provider, and ort-core's CPU provider on the QDQ model. Env RUNS=n (default 21), THREADS=n (default 2).
Prints medians and the spread (min-max of the rounds' times) so the noise of shared cores shows.
A measuring aid, not a test.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
import warnings

import numpy as np
import onnx
import onnx.numpy_helper

import ort_core as ort
from ort_core import quantization as Q

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path.insert(0, ROOT)
from bench.models import resnet18_seeded  # noqa: E402


class Reader(Q.CalibrationDataReader):
    def __init__(self, data):
        self.it = iter(data)

    def get_next(self):
        return next(self.it, None)


def model_at(size: int) -> onnx.ModelProto:
    model = resnet18_seeded()
    dims = model.graph.input[0].type.tensor_type.shape.dim
    dims[2].dim_value = dims[3].dim_value = size
    for out in model.graph.output:
        out.type.tensor_type.ClearField("shape")
    return model


def output_step(path: str) -> float:
    """The scale of the DequantizeLinear that makes the model's output (one quantization step of it)."""
    model = onnx.load(path)
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
    producer = {o: n for n in model.graph.node for o in n.output}
    node = producer[model.graph.output[0].name]
    return float(inits[node.input[1]].reshape(-1)[0]) if node.op_type == "DequantizeLinear" else float("nan")


def main(sizes: list[int]) -> None:
    import onnxruntime as ox

    runs = int(os.environ.get("RUNS", 21))
    threads = int(os.environ.get("THREADS", 2))
    folder = tempfile.mkdtemp()
    for size in sizes:
        model = model_at(size)
        name = model.graph.input[0].name
        rng = np.random.default_rng(0)
        src = os.path.join(folder, f"r18-{size}.onnx")
        onnx.save(model, src)
        if os.environ.get("PREPROCESS", "1") != "0":
            pre = os.path.join(folder, f"r18-{size}-pre.onnx")
            Q.quant_pre_process(src, pre)
            src = pre
        calib = [{name: rng.standard_normal((1, 3, size, size)).astype(np.float32)} for _ in range(8)]
        paths = {"float": src}
        for fmt, pc in (("QDQ", True), ("QOperator", False)):
            paths[fmt] = os.path.join(folder, f"r18-{size}-{fmt}.onnx")
            Q.quantize_static(src, paths[fmt], Reader(list(calib)), quant_format=Q.QuantFormat[fmt], per_channel=pc)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        oxo = ox.SessionOptions()
        oxo.intra_op_num_threads = threads
        sessions = {}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for key in ("float", "QDQ", "QOperator"):
                sessions[f"oneDNN {key}"] = ort.InferenceSession(paths[key], opts, providers=["DnnlExecutionProvider"])
            sessions["ort-core CPU QDQ"] = ort.InferenceSession(paths["QDQ"], opts, providers=["CPUExecutionProvider"])
        for key in ("float", "QDQ", "QOperator"):
            sessions[f"onnxruntime {key}"] = ox.InferenceSession(paths[key], oxo, providers=["CPUExecutionProvider"])
        feed = {name: rng.standard_normal((1, 3, size, size)).astype(np.float32)}
        outs = {k: s.run(None, feed)[0] for k, s in sessions.items()}
        times = {k: [] for k in sessions}
        for _ in range(runs):
            for k, s in sessions.items():
                t = time.perf_counter()
                s.run(None, feed)
                times[k].append(time.perf_counter() - t)
        med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
        steps = {key: output_step(paths[key]) for key in ("QDQ", "QOperator")}
        print(f"seeded ResNet-18 {size}x{size}, {threads} threads, medians of {runs} alternating rounds "
              f"(output quantization step: QDQ {steps['QDQ']:.3g}, QOperator {steps['QOperator']:.3g}):")
        for k in sessions:
            lo, hi = min(times[k]) * 1e3, max(times[k]) * 1e3
            agree = int(np.argmax(outs[k]) == np.argmax(outs["onnxruntime float"]))
            d = float(np.abs(outs[k] - outs["onnxruntime " + ("QDQ" if "QDQ" in k else k.split()[-1])]).max()) \
                if "float" not in k else 0.0
            print(f"  {k:24s} {med[k]:8.2f} ms  (min {lo:7.2f}, max {hi:7.2f})  argmax as float: {agree}  "
                  f"max |diff| vs onnxruntime same model {d:.3g}")
        print(f"  oneDNN int8 (QDQ) vs oneDNN float32: {med['oneDNN float'] / med['oneDNN QDQ']:.2f}x faster; "
              f"vs onnxruntime int8 (QDQ): ratio {med['oneDNN QDQ'] / med['onnxruntime QDQ']:.2f}")


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [224])
