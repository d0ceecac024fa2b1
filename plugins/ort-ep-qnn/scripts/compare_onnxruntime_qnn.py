"""QNNExecutionProvider of ort-core side by side with onnxruntime-qnn's QNN provider (the yardstick), both on
Qualcomm's HTP backend (the simulator on x86-64), on the same models and inputs.

For each model: how many of its nodes each runtime places on QNN (the model's node count minus the nodes it
leaves to its CPU provider, counted in the EPContext model each one saves: every node not inside an EPContext
node runs on the CPU), and each one's largest error against ort-core's CPU provider, relative to the largest
output value. Each runtime runs in a process of its own (onnxruntime's libffi and the plugin's cffi callbacks
do not share a process). Prints a Markdown table; ``--markdown PATH`` also writes it as its own section of that
file (bench/results.md).

    python plugins/ort-ep-qnn/scripts/compare_onnxruntime_qnn.py [--markdown bench/results.md]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")

OURS = r"""
import json, os, sys, warnings
import numpy as np, onnx
import ort_core as ort
warnings.simplefilter("ignore")
folder, options, provider = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
feeds = dict(np.load(os.path.join(folder, "feeds.npz")))
so = ort.SessionOptions()
if provider == "qnn":
    so.add_session_config_entry("ep.context_enable", "1")
    so.add_session_config_entry("ep.context_embed_mode", "1")
    so.add_session_config_entry("ep.context_file_path", os.path.join(folder, "ours_ctx.onnx"))
    providers = [("QNNExecutionProvider", options), "CPUExecutionProvider"]
else:
    providers = ["CPUExecutionProvider"]
sess = ort.InferenceSession(os.path.join(folder, "model.onnx"), so, providers=providers)
np.save(os.path.join(folder, f"y_{provider}.npy"), sess.run(None, feeds)[0])
print(json.dumps({}))
"""

THEIRS = r"""
import json, os, sys
import numpy as np, onnxruntime, onnxruntime_qnn
folder, options = sys.argv[1], json.loads(sys.argv[2])
feeds = dict(np.load(os.path.join(folder, "feeds.npz")))
onnxruntime.register_execution_provider_library("QNN", onnxruntime_qnn.get_library_path())
so = onnxruntime.SessionOptions()
so.log_severity_level = 3
so.add_session_config_entry("ep.context_enable", "1")
so.add_session_config_entry("ep.context_embed_mode", "1")
so.add_session_config_entry("ep.context_file_path", os.path.join(folder, "ort_ctx.onnx"))
devices = [d for d in onnxruntime.get_ep_devices() if d.ep_name == "QNN"]
so.add_provider_for_devices(devices, {"backend_path": onnxruntime_qnn.get_qnn_htp_path(), **options})
sess = onnxruntime.InferenceSession(os.path.join(folder, "model.onnx"), so)
np.save(os.path.join(folder, "y_ort.npy"), sess.run(None, feeds)[0])
print(json.dumps({"version": onnxruntime_qnn.__version__ if hasattr(onnxruntime_qnn, "__version__") else ""}))
"""


def _run(code: str, *args: str) -> dict:
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=1800)
    if done.returncode:
        return {"error": done.stderr.strip().splitlines()[-1][:300] if done.stderr.strip() else "failed"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def _left_on_cpu(path: str) -> list[str]:
    model = onnx.load(path, load_external_data=False)
    return [n.op_type for n in model.graph.node if n.op_type != "EPContext"]


# ------------------------------------------------------------------------------------------------ models
def residual_net(channels: int = 16, blocks: int = 2, size: int = 32, seed: int = 0) -> onnx.ModelProto:
    """A small ResNet-style classifier: a strided stem, ``blocks`` residual blocks (Conv-Relu-Conv + skip,
    Relu), global average pooling, a linear head."""
    r = np.random.default_rng(seed)
    inits, nodes = [], []

    def w(name, shape, scale):
        inits.append(numpy_helper.from_array((r.standard_normal(shape) * scale).astype(np.float32), name))
        return name

    nodes.append(helper.make_node("Conv", ["x", w("w0", (channels, 3, 3, 3), 0.3), w("b0", (channels,), 0.1)],
                                  ["c0"], pads=[1, 1, 1, 1], strides=[2, 2]))
    nodes.append(helper.make_node("Relu", ["c0"], ["h0"]))
    h = "h0"
    for k in range(blocks):
        s = 0.6 / np.sqrt(9 * channels)
        wa, ba = w(f"wa{k}", (channels, channels, 3, 3), s), w(f"ba{k}", (channels,), 0.1)
        wb, bb = w(f"wb{k}", (channels, channels, 3, 3), s), w(f"bb{k}", (channels,), 0.1)
        nodes += [helper.make_node("Conv", [h, wa, ba], [f"ca{k}"], pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", [f"ca{k}"], [f"ar{k}"]),
                  helper.make_node("Conv", [f"ar{k}", wb, bb], [f"cb{k}"], pads=[1, 1, 1, 1]),
                  helper.make_node("Add", [f"cb{k}", h], [f"s{k}"]),
                  helper.make_node("Relu", [f"s{k}"], [f"h{k + 1}"])]
        h = f"h{k + 1}"
    nodes += [helper.make_node("GlobalAveragePool", [h], ["g"]), helper.make_node("Flatten", ["g"], ["f"]),
              helper.make_node("Gemm", ["f", w("fc", (10, channels), 0.3), w("fcb", (10,), 0.1)], ["y"], transB=1)]
    graph = helper.make_graph(nodes, "residual", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                [1, 3, size, size])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def mobilenet_like(width: int = 16, blocks: int = 4, size: int = 64, seed: int = 0) -> onnx.ModelProto:
    """A small MobileNet-style classifier with seeded weights: a strided 3x3 stem, ``blocks`` depthwise-separable
    blocks (depthwise 3x3 + BatchNormalization + Relu, pointwise 1x1 + BatchNormalization + Relu; every other
    one strided), global average pooling, a linear head and Softmax."""
    r = np.random.default_rng(seed)
    inits, nodes = [], []

    def t(name, array):
        inits.append(numpy_helper.from_array(np.asarray(array, np.float32), name))
        return name

    def bn(x, c, name):
        args = [t(f"{name}_s", r.uniform(0.5, 1.5, c)), t(f"{name}_b", r.normal(0, 0.1, c)),
                t(f"{name}_m", r.normal(0, 0.1, c)), t(f"{name}_v", r.uniform(0.5, 1.5, c))]
        nodes.append(helper.make_node("BatchNormalization", [x, *args], [f"{name}_y"], epsilon=1e-5))
        nodes.append(helper.make_node("Relu", [f"{name}_y"], [f"{name}_r"]))
        return f"{name}_r"

    nodes.append(helper.make_node("Conv", ["x", t("stem_w", r.normal(0, 0.3, (width, 3, 3, 3)))], ["stem"],
                                  pads=[1, 1, 1, 1], strides=[2, 2]))
    h, c = bn("stem", width, "stem_bn"), width
    for k in range(blocks):
        stride = 2 if k % 2 else 1
        nodes.append(helper.make_node("Conv", [h, t(f"dw{k}_w", r.normal(0, 0.3, (c, 1, 3, 3)))], [f"dw{k}"],
                                      pads=[1, 1, 1, 1], strides=[stride, stride], group=c))
        h = bn(f"dw{k}", c, f"dw{k}_bn")
        out = c * 2 if stride == 2 else c
        nodes.append(helper.make_node("Conv", [h, t(f"pw{k}_w", r.normal(0, 1.0 / np.sqrt(c), (out, c, 1, 1)))],
                                      [f"pw{k}"]))
        h, c = bn(f"pw{k}", out, f"pw{k}_bn"), out
    nodes += [helper.make_node("GlobalAveragePool", [h], ["g"]), helper.make_node("Flatten", ["g"], ["f"]),
              helper.make_node("Gemm", ["f", t("fc", r.normal(0, 0.5, (10, c))), t("fcb", r.normal(0, 0.1, 10))],
                               ["logits"], transB=1),
              helper.make_node("Softmax", ["logits"], ["y"], axis=1)]
    graph = helper.make_graph(nodes, "mobilenet_like", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                      [1, 3, size, size])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def quantized(model: onnx.ModelProto, shape: tuple[int, ...]) -> onnx.ModelProto:
    """``model`` quantized by ort_core.quantization.quantize_static: QDQ, uint8 activations, int8 per-channel
    weights, calibrated on 16 seeded normal inputs."""
    from ort_core.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.feeds = iter([{"x": np.random.default_rng(100 + k).standard_normal(shape).astype(np.float32)}
                               for k in range(16)])

        def get_next(self):
            return next(self.feeds, None)

    with tempfile.TemporaryDirectory() as folder:
        return quantize_static(model, os.path.join(folder, "q.onnx"), Reader(), quant_format=QuantFormat.QDQ,
                               per_channel=True, activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)


def encoder() -> tuple[onnx.ModelProto, dict]:
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import models as bench_models

    model = bench_models.bert(layers=1, hidden=32, heads=2, ffn=64, seq=8)
    mask = np.zeros((1, 1, 1, 8), np.float32)
    mask[..., -1:] = -10000.0
    return model, {"x": np.random.default_rng(0).standard_normal((1, 8, 32)).astype(np.float32), "mask": mask}


def cases() -> list[tuple[str, onnx.ModelProto, dict, dict, dict]]:
    """(label, model, feeds, ort-core QNN options, onnxruntime-qnn options)."""
    squeezenet = onnx.load(os.path.join(LIGHT, "light_squeezenet.onnx"))
    image = {"data_0": np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)}
    residual = residual_net()
    x = {"x": np.random.default_rng(1).standard_normal((1, 3, 32, 32)).astype(np.float32)}
    bert, bert_feeds = encoder()
    mobile = mobilenet_like()
    x64 = {"x": np.random.default_rng(2).standard_normal((1, 3, 64, 64)).astype(np.float32)}
    fp32 = {"enable_htp_fp16_precision": "0"}
    fp16 = {"soc_model": "57", "enable_htp_fp16_precision": "1"}
    return [("SqueezeNet 1.0 (onnx light model; its output is constant), fp32", squeezenet, image, {}, fp32),
            ("SqueezeNet 1.0 (light), fp16 (soc_model 57)", squeezenet, image, fp16, fp16),
            ("MobileNet-style, 4 depthwise-separable blocks, 64x64, fp32", mobile, x64, {}, fp32),
            ("MobileNet-style, fp16 (soc_model 57)", mobile, x64, fp16, fp16),
            ("MobileNet-style, QDQ uint8/int8 per-channel", quantized(mobile, (1, 3, 64, 64)), x64, {}, {}),
            ("ResNet-style, 2 blocks, QDQ uint8/int8 per-channel", quantized(residual, (1, 3, 32, 32)), x, {}, {}),
            ("ResNet-style, 2 blocks, fp32", residual, x, {}, fp32),
            ("BERT encoder, 1 layer, hidden 32, seq 8, fp32", bert, bert_feeds, {}, fp32),
            ("BERT encoder, 1 layer, hidden 32, seq 8, fp16 (soc_model 57)", bert, bert_feeds, fp16, fp16)]


def _result(result: dict, folder: str, output: str, context: str, total: int) -> tuple[str, np.ndarray | None]:
    """The table cell of one runtime's placement, and its output (None when it failed)."""
    if "error" in result:
        return f"failed: {result['error']}", None
    left = _left_on_cpu(os.path.join(folder, context))
    where = f" (CPU: {len(left)}: {', '.join(sorted(set(left)))})" if left else ""
    return f"{total - len(left)}{where}", np.load(os.path.join(folder, output)).astype(np.float64)


def compare(label: str, model: onnx.ModelProto, feeds: dict, ours_options: dict, ort_options: dict) -> str:
    """One table row."""
    with tempfile.TemporaryDirectory() as folder:
        onnx.save(model, os.path.join(folder, "model.onnx"))
        np.savez(os.path.join(folder, "feeds.npz"), **feeds)
        total = len(model.graph.node)
        cpu = _run(OURS, folder, "{}", "cpu")
        if "error" in cpu:
            raise SystemExit(f"{label}: the CPU provider failed: {cpu['error']}")
        ours_cell, ours_y = _result(_run(OURS, folder, json.dumps(ours_options), "qnn"), folder, "y_qnn.npy",
                                    "ours_ctx.onnx", total)
        ort_cell, ort_y = _result(_run(THEIRS, folder, json.dumps(ort_options)), folder, "y_ort.npy",
                                  "ort_ctx.onnx", total)
        want = np.load(os.path.join(folder, "y_cpu.npy")).astype(np.float64)
    scale = max(float(np.max(np.abs(want))), 1e-12)

    def err(y: np.ndarray | None, ref: np.ndarray | None) -> str:
        return "-" if y is None or ref is None else f"{np.max(np.abs(y - ref)) / scale:.1e}"

    return (f"| {label} | {total} | {ours_cell} | {ort_cell} | {scale:.3g} | {err(ours_y, want)} | {err(ort_y, want)} "
            f"| {err(ours_y, ort_y)} |")


SECTION = "qnn-comparison"  # its section of bench/results.md (--markdown)


def main(argv: list[str]) -> None:
    markdown = argv[argv.index("--markdown") + 1] if "--markdown" in argv else None
    lines = ["## QNN: ort-core's provider and onnxruntime-qnn on the HTP simulator", "",
             "Both on onnxruntime-qnn 2.7.0's `libQnnHtp.so` (QNN SDK 2.51), same models and inputs; nodes each "
             "places on QNN, and errors against ort-core's CPU provider (`python plugins/ort-ep-qnn/scripts/"
             "compare_onnxruntime_qnn.py --markdown bench/results.md`; how it counts: "
             "[plugins/ort-ep-qnn/docs/comparison.md](../plugins/ort-ep-qnn/docs/comparison.md)).", "",
             "| model | nodes | ort-core QNN: on QNN | onnxruntime-qnn: on QNN | largest CPU output "
             "| ort-core QNN vs CPU | onnxruntime-qnn vs CPU | ort-core vs onnxruntime-qnn |",
             "|---|---|---|---|---|---|---|---|"]
    print("\n".join(lines[4:]), flush=True)
    for case in cases():
        lines.append(compare(*case))
        print(lines[-1], flush=True)
    lines += ["", "Errors: largest absolute difference divided by the largest absolute CPU output."]
    print(lines[-1])
    if markdown:
        sys.path.insert(0, os.path.join(ROOT, "bench"))
        import measure

        measure.publish_section("\n".join(lines) + "\n", markdown, SECTION)


if __name__ == "__main__":
    main(sys.argv[1:])
