"""QDQ fusion on the CPU provider: each DequantizeLinear -> op -> QuantizeLinear pattern (and the dynamic
quantization chains) becomes its integer op, and computes what the unfused graph computes on ort-core (level
basic: no fusion) and what onnxruntime computes, to the bit or within one output step."""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import ort_core
from ort_core.ir.load import load_model
from ort_core.ir.save import model_to_proto
from ort_core.optimizer.cpu_fusion import fuse_nodes
from ort_core.optimizer.qdq_fusion import recover_int8

onnxruntime = pytest.importorskip("onnxruntime")

F, U8, I8, I32 = TensorProto.FLOAT, TensorProto.UINT8, TensorProto.INT8, TensorProto.INT32
RNG = np.random.default_rng(7)


class Q:
    """Builds a QDQ model: float input x quantized (uint8), the pattern, the output quantized and
    dequantized, so every output is a multiple of the output scale ``ys``."""

    def __init__(self, shape, xs=0.05, xz=120, ys=0.08, yz=128, out_type=U8):
        self.nodes, self.inits, self.shape = [], {}, shape
        self.ys, self.yz = ys, yz
        self.const("xs", np.float32(xs)), self.const("xz", np.uint8(xz))
        self.const("ys", np.float32(ys)), self.const("yz", np.array(yz, np.uint8 if out_type == U8 else np.int8))
        self.node("QuantizeLinear", ["x", "xs", "xz"], ["xq"])
        self.node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"])

    def const(self, name, value):
        self.inits[name] = np.asarray(value)
        return name

    def node(self, op, inputs, outputs, domain="", **attrs):
        self.nodes.append(helper.make_node(op, inputs, outputs, domain=domain or None, **attrs))
        return outputs[0]

    def weight(self, name, w, axis):
        """DequantizeLinear of a symmetric per-channel int8 weight."""
        peak = np.abs(w).max(axis=tuple(i for i in range(w.ndim) if i != axis))
        scale = (peak / 127).astype(np.float32)
        shape = [1] * w.ndim
        shape[axis] = -1
        q = np.clip(np.rint(w / scale.reshape(shape)), -127, 127).astype(np.int8)
        self.const(name + "_q", q), self.const(name + "_s", scale)
        self.const(name + "_z", np.zeros_like(scale, np.int8))
        return self.node("DequantizeLinear", [name + "_q", name + "_s", name + "_z"], [name], axis=axis), scale

    def bias(self, name, b, scale):
        q = np.rint(b / scale).astype(np.int32)
        self.const(name + "_q", q), self.const(name + "_s", scale.astype(np.float32))
        self.const(name + "_z", np.zeros(q.shape, np.int32))
        return self.node("DequantizeLinear", [name + "_q", name + "_s", name + "_z"], [name], axis=0)

    def out(self, y, quantize=True):
        if quantize:
            self.node("QuantizeLinear", [y, "ys", "yz"], ["yq"])
            y = self.node("DequantizeLinear", ["yq", "ys", "yz"], ["y"])
        else:
            self.node("Identity", [y], ["y"])
        graph = helper.make_graph(self.nodes, "g", [helper.make_tensor_value_info("x", F, self.shape)],
                                  [helper.make_tensor_value_info("y", F, None)],
                                  [numpy_helper.from_array(v, k) for k, v in self.inits.items()])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                        helper.make_opsetid("com.microsoft", 1)])
        model.ir_version = 8
        return model


def _session(model, level, tmp_path=None):
    so = ort_core.SessionOptions()
    so.graph_optimization_level = level
    if tmp_path is not None:
        so.optimized_model_filepath = str(tmp_path / "opt.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ort_core.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def check(model, tmp_path, fused_ops, step, feed=None, exact_share=0.99):
    """The fused graph holds ``fused_ops`` (and no Dequantize/QuantizeLinear but the model's first Q and
    last DQ); its output matches the unfused graph's and onnxruntime's within one ``step``, and equals the
    unfused one on at least ``exact_share`` of the elements."""
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    x = feed if feed is not None else (RNG.standard_normal(shape) * 2).astype(np.float32)
    fused = _session(model, ort_core.GraphOptimizationLevel.ORT_ENABLE_ALL, tmp_path)
    ops = [n.op_type for n in onnx.load(str(tmp_path / "opt.onnx")).graph.node]
    for op in fused_ops:
        assert op in ops, ops
    y = fused.run(None, {"x": x})[0]
    plain = _session(model, ort_core.GraphOptimizationLevel.ORT_ENABLE_BASIC).run(None, {"x": x})[0]
    so = onnxruntime.SessionOptions()
    so.log_severity_level = 3
    theirs = onnxruntime.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]
    assert y.shape == plain.shape == theirs.shape
    assert np.abs(y - plain).max() <= step * 1.0001
    assert np.abs(y - theirs).max() <= step * 1.0001
    assert np.mean(y == plain) >= exact_share
    return ops, y, plain


def test_conv_bias_relu_becomes_qlinearconv(tmp_path):
    b = Q([1, 8, 12, 12], yz=0)
    w, ws = b.weight("w", (RNG.standard_normal((16, 8, 3, 3)) * 0.2).astype(np.float32), 0)
    bias = b.bias("b", (RNG.standard_normal(16) * 0.3).astype(np.float32), np.float32(0.05) * ws)
    c = b.node("Conv", ["xd", w, bias], ["c"], pads=[1, 1, 1, 1])
    model = b.out(b.node("Relu", [c], ["r"]))
    ops, y, _ = check(model, tmp_path, ["QLinearConv"], b.ys)
    assert "Conv" not in ops and "Relu" not in ops and y.min() == 0.0 and y.max() > 1.0


def test_conv_strided_grouped_and_long_k(tmp_path):
    """Stride 2, two groups; and a 1x1 conv whose K needs more than one exact float32 block."""
    b = Q([1, 8, 10, 10])
    w, _ = b.weight("w", RNG.standard_normal((6, 4, 3, 3)).astype(np.float32), 0)
    model = b.out(b.node("Conv", ["xd", w], ["c"], strides=[2, 2], group=2, pads=[1, 1, 1, 1]))
    check(model, tmp_path, ["QLinearConv"], b.ys)
    b = Q([1, 1024, 3, 3], xz=0, ys=2.0)
    w, _ = b.weight("w", RNG.uniform(-1, 1, (4, 1024, 1, 1)).astype(np.float32), 0)
    model = b.out(b.node("Conv", ["xd", w], ["c"]))
    x = np.abs(RNG.standard_normal((1, 1024, 3, 3))).astype(np.float32) * 6
    check(model, tmp_path, ["QLinearConv"], b.ys, feed=x)


def test_qlinearconv_exact_blocks_against_integers():
    """The prepared kernel's accumulator is the exact integer even where one float32 GEMM would round:
    K = 2048 uint8 x int8 products near the extremes (sum of magnitudes ~ 6.6e7 > 2**24)."""
    from ort_core.providers.cpu.ops.qexact import k_blocks

    w = np.full((2048, 1), 127.0, np.float32)
    assert len(k_blocks(w, 255)) == 4
    x = RNG.integers(250, 256, (1, 2048, 1, 1)).astype(np.uint8)
    wq = RNG.choice(np.array([-127, 127], np.int8), (3, 2048, 1, 1))
    node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["y"])
    inits = {"xs": np.float32(1), "xz": np.uint8(0), "w": wq, "ws": np.float32(1), "wz": np.int8(0),
             "ys": np.float32(2 ** 12), "yz": np.uint8(0)}
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", U8, [1, 2048, 1, 1])],
                              [helper.make_tensor_value_info("y", U8, None)],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    y = _session(model, ort_core.GraphOptimizationLevel.ORT_ENABLE_ALL).run(None, {"x": x})[0]
    exact = (x.reshape(1, -1).astype(np.int64) @ wq.reshape(3, -1).T.astype(np.int64)).reshape(-1)
    want = np.clip(np.rint(exact.astype(np.float32) / np.float32(2 ** 12)), 0, 255)
    assert np.array_equal(y.reshape(-1), want.astype(np.uint8))


def test_matmul_becomes_qlinearmatmul_and_float_readers_matmulintegertofloat(tmp_path):
    b = Q([4, 64])
    w, _ = b.weight("w", (RNG.standard_normal((64, 32)) * 0.1).astype(np.float32), 1)
    check(b.out(b.node("MatMul", ["xd", w], ["m"])), tmp_path, ["QLinearMatMul"], b.ys)
    b = Q([4, 64])
    w, ws = b.weight("w", (RNG.standard_normal((64, 32)) * 0.1).astype(np.float32), 1)
    model = b.out(b.node("MatMul", ["xd", w], ["m"]), quantize=False)
    # a float output: within one step of the accumulator's grid (x_scale * w_scale)
    ops, y, plain = check(model, tmp_path, ["MatMulIntegerToFloat"], float(0.05 * ws.max()), exact_share=0.0)
    assert np.abs(y - plain).max() < 1e-5 * np.abs(plain).max()


def test_gemm_becomes_qgemm(tmp_path):
    for quantize in (True, False):
        b = Q([2, 48])
        w, ws = b.weight("w", (RNG.standard_normal((10, 48)) * 0.2).astype(np.float32), 0)
        bias = b.const("c", (RNG.standard_normal(10) * 0.2).astype(np.float32))
        model = b.out(b.node("Gemm", ["xd", w, bias], ["g"], transB=1), quantize=quantize)
        step = b.ys if quantize else float(0.05 * ws.max())
        check(model, tmp_path, ["QGemm"], step, exact_share=0.9 if quantize else 0.0)


@pytest.mark.parametrize("op", ["Add", "Mul"])
def test_binary_becomes_qlinear(tmp_path, op):
    b = Q([1, 4, 6, 6])
    b.const("s2", np.float32(0.03)), b.const("z2", np.uint8(100))
    b.node("QuantizeLinear", ["x", "s2", "z2"], ["x2q"])
    b.node("DequantizeLinear", ["x2q", "s2", "z2"], ["x2d"])
    model = b.out(b.node(op, ["xd", "x2d"], ["s"]))
    check(model, tmp_path, [f"QLinear{op}"], b.ys, exact_share=0.95)


@pytest.mark.parametrize("op,fused,attrs", [
    ("GlobalAveragePool", "QLinearGlobalAveragePool", {}),
    ("AveragePool", "QLinearAveragePool", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
    ("Sigmoid", "QLinearSigmoid", {}),
    ("LeakyRelu", "QLinearLeakyRelu", {"alpha": 0.1}),
    ("Softmax", "QLinearSoftmax", {"axis": -1}),
])
def test_unary_becomes_qlinear(tmp_path, op, fused, attrs):
    prob = op in ("Sigmoid", "Softmax")
    b = Q([1, 4, 6, 6], ys=1 / 255 if prob else 0.05, yz=0 if prob else 128)
    model = b.out(b.node(op, ["xd"], ["u"], **attrs))
    # QLinearSoftmax is onnxruntime's fixed-shift scheme: equal to onnxruntime, a step off the float one at times
    check(model, tmp_path, [fused], b.ys, exact_share=0.75 if op == "Softmax" else 0.9)


def test_maxpool_and_layout_ops_run_on_codes(tmp_path):
    b = Q([1, 4, 8, 8], ys=0.05, yz=120)
    p = b.node("MaxPool", ["xd"], ["p"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    b.node("QuantizeLinear", [p, "xs", "xz"], ["pq"])
    b.node("DequantizeLinear", ["pq", "xs", "xz"], ["pd"])
    f = b.node("Flatten", ["pd"], ["f"])
    b.node("QuantizeLinear", [f, "xs", "xz"], ["fq"])
    d = b.node("DequantizeLinear", ["fq", "xs", "xz"], ["fd"])
    ops, y, plain = check(b.out(d), tmp_path, ["MaxPool", "Flatten"], 0.05)
    assert np.array_equal(y, plain)
    assert ops == ["QuantizeLinear", "MaxPool", "Flatten", "DequantizeLinear", "QuantizeLinear", "DequantizeLinear"]


def test_concat_becomes_qlinearconcat(tmp_path):
    b = Q([1, 4, 3, 3])
    b.const("s2", np.float32(0.02)), b.const("z2", np.uint8(10))
    b.node("QuantizeLinear", ["x", "s2", "z2"], ["x2q"])
    b.node("DequantizeLinear", ["x2q", "s2", "z2"], ["x2d"])
    check(b.out(b.node("Concat", ["xd", "x2d"], ["c"], axis=1)), tmp_path, ["QLinearConcat"], b.ys)


def _dynamic(readers: int, bias: bool):
    """onnxruntime's quantize_dynamic chain: DynamicQuantizeLinear feeding ``readers`` MatMulIntegers."""
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xsc", "xzp"])]
    inits, outs = {}, []
    for k in range(readers):
        w = (RNG.standard_normal((768, 64)) * 0.05).astype(np.float32)
        s = np.float32(np.abs(w).max() / 127)
        inits.update({f"w{k}": np.clip(np.rint(w / s), -127, 127).astype(np.int8), f"s{k}": s, f"z{k}": np.int8(0),
                      f"b{k}": (RNG.standard_normal(64) * 0.1).astype(np.float32)})
        nodes += [helper.make_node("MatMulInteger", ["xq", f"w{k}", "xzp", f"z{k}"], [f"i{k}"]),
                  helper.make_node("Cast", [f"i{k}"], [f"c{k}"], to=F),
                  helper.make_node("Mul", ["xsc", f"s{k}"], [f"m{k}"]),
                  helper.make_node("Mul", [f"c{k}", f"m{k}"], [f"y{k}" if not bias else f"p{k}"])]
        if bias:
            nodes.append(helper.make_node("Add", [f"p{k}", f"b{k}"], [f"y{k}"]))
        outs.append(f"y{k}")
    nodes.append(helper.make_node("Sum", outs, ["y"]) if readers > 1 else helper.make_node("Identity", outs, ["y"]))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [16, 768])],
                              [helper.make_tensor_value_info("y", F, None)],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("readers,bias,fused", [(1, True, "DynamicQuantizeMatMul"), (1, False, "DynamicQuantizeMatMul"),
                                                (3, True, "MatMulIntegerToFloat")])
def test_dynamic_chains_fuse_bit_exactly(tmp_path, readers, bias, fused):
    model = _dynamic(readers, bias)
    x = (RNG.standard_normal((16, 768)) * 3).astype(np.float32)
    ops, y, plain = check(model, tmp_path, [fused], 1e-5, feed=x, exact_share=1.0)
    assert "MatMulInteger" not in ops and "Cast" not in ops
    assert np.array_equal(y, plain)


def test_weights_kept_as_dequantize_nodes_fuse_too():
    """Where DequantizeLinear of the weights stays a node (a provider asked to keep QDQ groups), the pass
    takes the integers as they are and folds the DequantizeLinear left over into float constants."""
    b = Q([1, 3, 6, 6])
    w, ws = b.weight("w", RNG.standard_normal((4, 3, 3, 3)).astype(np.float32), 0)
    bias = b.bias("b", (RNG.standard_normal(4) * 0.3).astype(np.float32), np.float32(0.05) * ws)
    c = b.node("Conv", ["xd", w, bias], ["c"])
    b.node("QuantizeLinear", [c, "ys", "yz"], ["cq"])
    b.node("DequantizeLinear", ["cq", "ys", "yz"], ["cd"])
    k, _ = b.weight("k", RNG.standard_normal((1, 4, 1, 1)).astype(np.float32), 1)
    model = b.out(b.node("Add", ["cd", k], ["a"]), quantize=False)
    ir = load_model(model)
    assert fuse_nodes(ir, {n.id for n in ir.graph.nodes}) >= 1
    ops = [n.op_type for n in ir.graph.nodes]
    assert ops == ["QuantizeLinear", "QLinearConv", "DequantizeLinear", "Add", "Identity"]
    add = next(n for n in ir.graph.nodes if n.op_type == "Add")
    assert ir.graph.initializers[add.inputs[1]].dtype == np.float32  # the weight's DequantizeLinear, folded
    conv = next(n for n in ir.graph.nodes if n.op_type == "QLinearConv")
    assert ir.graph.initializers[conv.inputs[3]].dtype == np.int8
    x = RNG.standard_normal((1, 3, 6, 6)).astype(np.float32)
    basic = ort_core.GraphOptimizationLevel.ORT_ENABLE_BASIC
    fused = _session(model_to_proto(ir), basic).run(None, {"x": x})[0]
    plain = _session(model, basic).run(None, {"x": x})[0]
    assert np.abs(fused - plain).max() <= b.ys * 1.0001 and np.mean(fused == plain) > 0.95 and fused.std() > 0.1


def test_recover_int8_gives_back_every_bit():
    w = RNG.standard_normal((6, 5, 3)).astype(np.float32)
    scale = (np.abs(w).max(axis=(1, 2)) / 127).astype(np.float32)
    q = np.clip(np.rint(w / scale[:, None, None]), -127, 127).astype(np.int8)
    folded = q.astype(np.float32) * scale[:, None, None]
    codes, s = recover_int8(folded, 0)
    assert np.array_equal(codes.astype(np.float32) * s[:, None, None], folded)
    assert recover_int8(w, 0) is None  # a float weight that was never quantized stays float
    zero = np.zeros((2, 3), np.float32)
    assert np.array_equal(recover_int8(zero, 1)[0], np.zeros((2, 3), np.int8))


def test_other_providers_see_standard_ops():
    """The fusion runs only over the nodes it is given (one provider's): nodes outside stay as they are."""
    b = Q([1, 3, 6, 6])
    w, _ = b.weight("w", RNG.standard_normal((4, 3, 3, 3)).astype(np.float32), 0)
    model = b.out(b.node("Conv", ["xd", w], ["c"]))
    ir = load_model(model)
    conv = next(n for n in ir.graph.nodes if n.op_type == "Conv")
    fuse_nodes(ir, {n.id for n in ir.graph.nodes if n is not conv})  # may fold the weight's DequantizeLinear
    ops = [n.op_type for n in ir.graph.nodes]
    assert ops.count("Conv") == 1 and not any(op.startswith("QLinear") for op in ops)


@pytest.mark.parametrize("name", ["block", "cnn", "mlp"])
@pytest.mark.parametrize("quantizer", ["onnxruntime", "ort_core"])
def test_quantized_models_fuse_and_match_onnxruntime(tmp_path, name, quantizer):
    """Whole small models quantized static QDQ per channel (uint8 activations, int8 weights) by either
    quantizer: every Conv/MatMul/Gemm is fused, and ort-core's int8 output is within one output step of
    onnxruntime's on the same file, and mostly equal to it."""
    import ort_core.quantization

    from . import models
    from .helpers import ListReader, output_step

    tool = ort_core.quantization if quantizer == "ort_core" else pytest.importorskip("onnxruntime.quantization")
    src, dst = tmp_path / "f.onnx", tmp_path / "q.onnx"
    onnx.save(getattr(models, name)(), src)
    tool.quantize_static(str(src), str(dst), ListReader(models.calibration(name)), quant_format=tool.QuantFormat.QDQ,
                         per_channel=True, activation_type=tool.QuantType.QUInt8, weight_type=tool.QuantType.QInt8)
    feed = models.eval_data(name)
    so = ort_core.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "opt.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours = ort_core.InferenceSession(str(dst), so, providers=["CPUExecutionProvider"]).run(None, feed)[0]
    ops = {n.op_type for n in onnx.load(str(tmp_path / "opt.onnx")).graph.node}
    assert not ops & {"Conv", "MatMul", "Gemm"}, ops
    opts = onnxruntime.SessionOptions()
    opts.log_severity_level = 3
    theirs = onnxruntime.InferenceSession(str(dst), opts, providers=["CPUExecutionProvider"]).run(None, feed)[0]
    step = output_step(dst)
    assert step is not None and np.abs(ours - theirs).max() <= step * 1.0001
    assert np.mean(ours == theirs) >= 0.97 and np.abs(ours).max() > 10 * step
