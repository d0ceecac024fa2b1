"""Dynamically quantized models on oneDNN: DynamicQuantizeLinear -> MatMulInteger / ConvInteger -> Cast ->
Mul (scale) -> Add (bias) chains lowered as one int8 step with a float32 result, integer sums that oneDNN
could round declined by the rules (also when shapes are known only at run time), and the erf GELU chain
arriving as com.microsoft's Gelu (declared in the provider's preferences), each against onnxruntime and
the CPU provider.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from ort_ep_onednn import library as L

if L.unavailable_reason():
    pytest.skip(f"oneDNN unavailable: {L.unavailable_reason()}", allow_module_level=True)
if not L.library().has_vnni:
    pytest.skip("int8 is declined on CPUs without VNNI", allow_module_level=True)

import ort_core as ort  # noqa: E402

ox = pytest.importorskip("onnxruntime")

NAME, CPU = "DnnlExecutionProvider", "CPUExecutionProvider"
U8, I32, F = TensorProto.UINT8, TensorProto.INT32, TensorProto.FLOAT


def _model(nodes, inputs, outputs, inits, opset=13):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model.SerializeToString()


def _session(model, providers):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ort.OrtWarning)
        return ort.InferenceSession(model, providers=providers)


def _on_cpu(sess) -> int:
    return sum(len(a.node_names) for a in sess.get_provider_graph_assignment_info() if a.provider == CPU)


def _fused(programs) -> dict:
    out: dict = {}
    for p in programs:
        for k, v in p.fused.items():
            out[k] = out.get(k, 0) + v
    return out


def _chain(op, w, scale, bias, bias_shape, x_info, zp_w=None):
    """DynamicQuantizeLinear(x) -> op(xq, w, x_zp[, w_zp]) -> Cast -> Mul(x_scale * w_scale) -> Add(bias)."""
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(scale, "ws"),
             numpy_helper.from_array(bias.reshape(bias_shape), "b")]
    ins = ["xq", "w", "xz"]
    if zp_w is not None:
        inits.append(numpy_helper.from_array(zp_w, "wz"))
        ins.append("wz")
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
             helper.make_node(op, ins, ["acc"]),
             helper.make_node("Cast", ["acc"], ["accf"], to=F),
             helper.make_node("Mul", ["xs", "ws"], ["s"]),
             helper.make_node("Mul", ["accf", "s"], ["scaled"]),
             helper.make_node("Add", ["scaled", "b"], ["y"])]
    return _model(nodes, [x_info], [helper.make_tensor_value_info("y", F, None)], inits)


@pytest.mark.parametrize("per_column", [False, True])
def test_dynamic_matmul_chain_is_one_float_step(programs, per_column):
    """K = 1024 with int8 weights: an int32 result could pass 2**24 (oneDNN would round it), but the sum is
    only read as float32, so the chain is one int8 matmul whose float32 result rounds as the Cast does."""
    rng = np.random.default_rng(3)
    K, N = 1024, 48
    w = rng.integers(-127, 128, (K, N), dtype=np.int8)
    scale = (rng.random(N if per_column else ()) * 0.01 + 0.001).astype(np.float32)
    bias = rng.standard_normal(N).astype(np.float32)
    model = _chain("MatMulInteger", w, scale, bias, (N,),
                   helper.make_tensor_value_info("x", F, ["batch", "seq", K]), zp_w=np.zeros(N if per_column else (),
                                                                                             np.int8))
    x = (rng.standard_normal((2, 5, K)) * 3).astype(np.float32)
    sess = _session(model, [NAME, CPU])
    got = sess.run(None, {"x": x})[0]
    assert _on_cpu(sess) == 0
    assert _fused(programs).get("MatMulInteger to float32") == 1
    theirs = ox.InferenceSession(model, providers=[CPU]).run(None, {"x": x})[0]
    cpu = _session(model, [CPU]).run(None, {"x": x})[0]
    top = float(np.abs(theirs).max())
    assert top > 1.0
    np.testing.assert_allclose(got, theirs, rtol=1e-5, atol=1e-6 * top)
    np.testing.assert_allclose(cpu, theirs, rtol=1e-5, atol=1e-6 * top)


def test_dynamic_convinteger_chain_is_one_float_step(programs):
    """ConvInteger with DynamicQuantizeLinear's run-time zero point, then Cast, scale and a per-channel bias."""
    rng = np.random.default_rng(5)
    C, M = 64, 16
    w = rng.integers(-127, 128, (M, C, 3, 3), dtype=np.int8)
    bias = rng.standard_normal(M).astype(np.float32)
    model = _chain("ConvInteger", w, np.float32(0.004), bias, (M, 1, 1),
                   helper.make_tensor_value_info("x", F, ["n", C, "h", "w"]), zp_w=np.int8(0))
    x = rng.standard_normal((1, C, 9, 11)).astype(np.float32)
    sess = _session(model, [NAME, CPU])
    got = sess.run(None, {"x": x})[0]
    assert _on_cpu(sess) == 0
    assert _fused(programs).get("ConvInteger to float32") == 1
    theirs = ox.InferenceSession(model, providers=[CPU]).run(None, {"x": x})[0]
    top = float(np.abs(theirs).max())
    np.testing.assert_allclose(got, theirs, rtol=1e-5, atol=1e-6 * top)


def test_large_integer_sums_are_declined_before_shapes_are_known():
    """An int32 result (no Cast reads it) that could pass 2**24 is declined by the rules, so a model whose
    shapes are known only at run time runs (on the CPU provider) instead of failing in oneDNN's lowering."""
    rng = np.random.default_rng(9)
    b = rng.choice(np.array([-127, 127], np.int8), (2048, 8))
    node = helper.make_node("MatMulInteger", ["a", "b"], ["y"])
    model = _model([node], [helper.make_tensor_value_info("a", U8, ["n", 2048])],
                   [helper.make_tensor_value_info("y", I32, None)], [numpy_helper.from_array(b, "b")])
    sess = _session(model, [NAME, CPU])
    assert _on_cpu(sess) == 1
    assert "2**24" in sess.explain()
    a = rng.integers(0, 256, (3, 2048), dtype=np.uint8)
    got = sess.run(None, {"a": a})[0]
    np.testing.assert_array_equal(got, a.astype(np.int64) @ b.astype(np.int64))


def test_erf_gelu_chain_arrives_as_one_gelu_node():
    """MatMul + bias, then 0.5 x (1 + erf(x / sqrt 2)): Erf alone has no oneDNN primitive, so the provider
    asks for com.microsoft's Gelu; the bias Add stays a standard node (it declares no BiasGelu)."""
    rng = np.random.default_rng(2)
    w = rng.standard_normal((32, 64)).astype(np.float32) * 0.3
    b = rng.standard_normal(64).astype(np.float32)
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b"),
             numpy_helper.from_array(np.float32(np.sqrt(2.0)), "r2"), numpy_helper.from_array(np.float32(1), "one"),
             numpy_helper.from_array(np.float32(0.5), "half")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["h"]),
             helper.make_node("Div", ["h", "r2"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["e1"]), helper.make_node("Mul", ["h", "e1"], ["p"]),
             helper.make_node("Mul", ["p", "half"], ["y"])]
    model = _model(nodes, [helper.make_tensor_value_info("x", F, ["n", 32])],
                   [helper.make_tensor_value_info("y", F, None)], inits)
    x = rng.standard_normal((4, 32)).astype(np.float32)
    sess = _session(model, [NAME, CPU])
    got = sess.run(None, {"x": x})[0]
    placed = sum(len(a.node_names) for a in sess.get_provider_graph_assignment_info() if a.provider == NAME)
    assert _on_cpu(sess) == 0 and placed == 3  # MatMul, the bias Add and the Gelu
    theirs = ox.InferenceSession(model, providers=[CPU]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, theirs, rtol=1e-5, atol=1e-5)
    unfused = ort.SessionOptions()
    unfused.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ort.OrtWarning)
        basic = ort.InferenceSession(model, unfused, providers=[NAME, CPU])
    assert _on_cpu(basic) == 1  # without the fusion, Erf stays on the CPU provider
    np.testing.assert_allclose(basic.run(None, {"x": x})[0], theirs, rtol=1e-5, atol=1e-5)


def test_weights_beyond_int8_after_their_zero_point_are_declined_before_shapes_are_known():
    """uint8 ConvInteger weights whose zero point leaves them outside int8 once subtracted (oneDNN's weights are
    s8 without a zero point): declined by the rules, so the model runs (on the CPU provider) instead of failing
    at its first run in oneDNN's lowering; found on ddddocr's dynamically quantized recognizer."""
    rng = np.random.default_rng(8)
    C, M = 8, 4
    w = rng.integers(0, 256, (M, C, 3, 3), dtype=np.uint8)
    model = _chain("ConvInteger", w, np.float32(0.004), rng.standard_normal(M).astype(np.float32), (M, 1, 1),
                   helper.make_tensor_value_info("x", F, ["n", C, "h", "w"]), zp_w=np.uint8(10))
    sess = _session(model, [NAME, CPU])
    assert "int8 range" in sess.explain()
    x = rng.standard_normal((1, C, 7, 7)).astype(np.float32)
    got = sess.run(None, {"x": x})[0]
    theirs = ox.InferenceSession(model, providers=[CPU]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, theirs, rtol=1e-5, atol=1e-5 * float(np.abs(theirs).max()))
