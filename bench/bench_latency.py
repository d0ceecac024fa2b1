"""Latency of ort-core vs onnxruntime on the same models, inputs and machine, in one run.

Prints the median (and p90) latency of each runtime and the ratio ort-core / onnxruntime; when
the OpenVINO provider is installed and available, also its latency at FP32 (default) and BF16
precision, as ratios to onnxruntime's and ort-core's CPU providers, with the largest difference
from onnxruntime's outputs.
Usage: python bench/bench_latency.py [MODEL ...] [--runs N] [--no-openvino]  (MODEL: a path, a
light-model name such as 'resnet50', 'demo' or 'resnet18_seeded'); defaults to the conv models
light ResNet-50, SqueezeNet, Inception v1, DenseNet-121, a seeded-weights ResNet-18 and the demo CNN.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import warnings

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import ort_core
from ort_core.cli import demo_model_path, random_input

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
CONV_MODELS = ["resnet50", "squeezenet", "inception_v1", "densenet121", "resnet18_seeded"]
OPENVINO = "OpenVINOExecutionProvider"


def resnet18_seeded(seed: int = 0) -> onnx.ModelProto:
    """A ResNet-18 (Conv-BatchNorm-Relu, residual Adds, 224x224 input) with seeded random weights.

    The light models' weights are constants (every channel alike), which hides numeric
    differences; He-initialised weights and random BatchNorm statistics do not.
    """
    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    count = [0]

    def name(prefix: str) -> str:
        count[0] += 1
        return f"{prefix}{count[0]}"

    def const(prefix: str, value: np.ndarray) -> str:
        n = name(prefix)
        inits.append(numpy_helper.from_array(value.astype(np.float32), n))
        return n

    def conv_bn(x: str, cin: int, cout: int, k: int, stride: int, relu: bool = True) -> str:
        w = const("w", rng.standard_normal((cout, cin, k, k)) * np.sqrt(2.0 / (cin * k * k)))
        c = name("conv")
        nodes.append(helper.make_node("Conv", [x, w], [c], kernel_shape=[k, k], strides=[stride, stride],
                                      pads=[k // 2] * 4))
        bn = [const("g", rng.uniform(0.5, 1.0, cout)), const("b", rng.normal(0, 0.1, cout)),
              const("m", rng.normal(0, 0.1, cout)), const("v", rng.uniform(0.5, 1.5, cout))]
        y = name("bn")
        nodes.append(helper.make_node("BatchNormalization", [c, *bn], [y], epsilon=1e-5))
        if relu:
            r = name("relu")
            nodes.append(helper.make_node("Relu", [y], [r]))
            return r
        return y

    def block(x: str, cin: int, cout: int, stride: int) -> str:
        y = conv_bn(conv_bn(x, cin, cout, 3, stride), cout, cout, 3, 1, relu=False)
        skip = x if stride == 1 and cin == cout else conv_bn(x, cin, cout, 1, stride, relu=False)
        s, r = name("add"), name("relu")
        nodes.extend([helper.make_node("Add", [y, skip], [s]), helper.make_node("Relu", [s], [r])])
        return r

    x = conv_bn("input", 3, 64, 7, 2)
    p = name("pool")
    nodes.append(helper.make_node("MaxPool", [x], [p], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]))
    x, cin = p, 64
    for cout, stride in [(64, 1), (128, 2), (256, 2), (512, 2)]:
        x = block(block(x, cin, cout, stride), cout, cout, 1)
        cin = cout
    g, f = name("gap"), name("flat")
    nodes.extend([helper.make_node("GlobalAveragePool", [x], [g]), helper.make_node("Flatten", [g], [f])])
    w = const("fc_w", rng.standard_normal((1000, 512)) * np.sqrt(1.0 / 512))
    b = const("fc_b", rng.normal(0, 0.01, 1000))
    nodes.append(helper.make_node("Gemm", [f, w, b], ["logits"], transB=1))
    graph = helper.make_graph(nodes, "resnet18_seeded",
                              [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 224, 224])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 1000])],
                              initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="ort-core bench")
    model.ir_version = 8
    return model


def resolve(model: str, tmp: str) -> str:
    if model == "demo":
        return demo_model_path()
    if model == "resnet18_seeded":
        path = os.path.join(tmp, "resnet18_seeded.onnx")
        if not os.path.exists(path):
            onnx.save(resnet18_seeded(), path)
        return path
    if os.path.exists(model):
        return model
    path = os.path.join(LIGHT, f"light_{model}.onnx")
    if not os.path.exists(path):
        raise SystemExit(f"unknown model '{model}': not a file and not a light model in {LIGHT}")
    return path


def timed(fns: list, runs: int, warmup: int = 3, block: int = 10, settle: float = 0.3) -> list[np.ndarray]:
    """Milliseconds per call of each function, measured in rounds: each round gives every
    function, after a pause, two untimed calls and then ``block`` timed ones. Rounds spread the
    machine's ups and downs over all runtimes alike; the pause lets the previous runtime's
    threads stop spinning (BLAS and inference thread pools busy-wait a while after a call), which
    would otherwise be timed against the next runtime's work."""
    for fn in fns:
        for _ in range(warmup):
            fn()
    t = [[] for _ in fns]
    while len(t[0]) < runs:
        for k, fn in enumerate(fns):
            time.sleep(settle)
            fn()
            fn()
            for _ in range(min(block, runs - len(t[k]))):
                t0 = time.perf_counter()
                fn()
                t[k].append(time.perf_counter() - t0)
    return [np.array(x) * 1e3 for x in t]


def max_diff(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a.astype(np.float64) - b))) if a.size else 0.0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="*", default=[*CONV_MODELS, "demo"])
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--no-openvino", action="store_true", help="leave the OpenVINO provider out")
    args = ap.parse_args()
    import onnxruntime

    with_ov = not args.no_openvino and OPENVINO in ort_core.get_available_providers()
    print(f"ort-core {ort_core.__version__} vs onnxruntime {onnxruntime.__version__}, {os.cpu_count()} cores")
    if with_ov:
        from ort_core.plugins.manager import get_registry

        print(f"{OPENVINO}: {get_registry().providers[OPENVINO].info.description}")
    print(f"{'model':<28}{'ort-core ms':>14}{'onnxruntime ms':>16}{'ratio':>8}  (median; p90 in brackets)")
    ov_rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.models:
            path = resolve(model, tmp)
            ours = ort_core.InferenceSession(path)
            theirs = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
            rng = np.random.default_rng(0)
            feeds = {a.name: random_input(a, rng) for a in ours.get_inputs()}
            a = ours.run(None, feeds)[0]
            b = theirs.run(None, feeds)[0]
            fns = [lambda s=ours, f=feeds: s.run(None, f), lambda s=theirs, f=feeds: s.run(None, f)]
            ov = {}
            if with_ov:
                for precision in ("FP32", "BF16"):
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore", ort_core.OrtWarning)  # the assignment summary
                        ov[precision] = ort_core.InferenceSession(
                            path, providers=[(OPENVINO, {"precision": precision})])
                    fns.append(lambda s=ov[precision], f=feeds: s.run(None, f))
            times = timed(fns, args.runs)
            t_ours, t_theirs = times[0], times[1]
            m1, m2 = np.median(t_ours), np.median(t_theirs)
            name = os.path.basename(path).removesuffix(".onnx")
            print(f"{name:<28}{m1:>9.2f} [{np.percentile(t_ours, 90):.1f}]{m2:>11.2f} "
                  f"[{np.percentile(t_theirs, 90):.1f}]{m1 / m2:>7.2f}x  max|diff| {max_diff(a, b):.2e}")
            if with_ov:
                row = {"name": name, "conv": model in CONV_MODELS, "core": m1, "ort": m2,
                       "ref": float(np.max(np.abs(b)))}
                for k, (precision, sess) in enumerate(ov.items()):
                    t = times[2 + k]
                    row[precision] = (float(np.median(t)), float(np.percentile(t, 90)),
                                      max_diff(sess.run(None, feeds)[0], b))
                ov_rows.append(row)
    if ov_rows:
        report_openvino(ov_rows)


def report_openvino(rows: list[dict]) -> None:
    print(f"\n{OPENVINO} (median ms [p90]; x: its latency / onnxruntime CPU and / ort-core CPU; "
          "max|diff| vs onnxruntime, relative to the largest output in brackets)")
    print(f"{'model':<24}{'FP32 ms':>16}{'/ort':>7}{'/core':>7}{'max|diff|':>20}"
          f"{'BF16 ms':>16}{'/ort':>7}{'speed-up':>9}{'max|diff|':>20}")
    for r in rows:
        f32, bf16 = r["FP32"], r["BF16"]
        print(f"{r['name']:<24}{f32[0]:>9.2f} [{f32[1]:>5.1f}]{f32[0] / r['ort']:>6.2f}x{f32[0] / r['core']:>6.2f}x"
              f"{f32[2]:>10.1e} [{f32[2] / max(r['ref'], 1e-30):.0e}]"
              f"{bf16[0]:>9.2f} [{bf16[1]:>5.1f}]{bf16[0] / r['ort']:>6.2f}x{f32[0] / bf16[0]:>8.2f}x"
              f"{bf16[2]:>10.1e} [{bf16[2] / max(r['ref'], 1e-30):.0e}]")
    conv = [r for r in rows if r["conv"]] or rows
    med = {k: float(np.median([r["FP32"][0] / r[k] for r in conv])) for k in ("ort", "core")}
    speedup = float(np.median([r["FP32"][0] / r["BF16"][0] for r in conv]))
    print(f"median over {len(conv)} conv model(s): FP32 {med['ort']:.2f}x onnxruntime CPU, {med['core']:.2f}x "
          f"ort-core CPU (below 1: faster); BF16 {speedup:.2f}x faster than FP32")


if __name__ == "__main__":
    main()
