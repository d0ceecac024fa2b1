"""The classic-ML pipeline fusions (optimizer/ml_fusion.py): affine steps folded into the linear model that reads
them, and the L1 Normalizer after softmax probabilities dropped. Each fused session is checked against the same
model without optimizations, against a float64 reference of the formula, and against onnxruntime; the cases the
fusions must leave alone are run too."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import ort_core as ort

from .conftest import make_model

ML = "ai.onnx.ml"
F, K = 5, 3
rng = np.random.default_rng(11)
COEF = rng.standard_normal((K, F))
INTERCEPTS = rng.standard_normal(K)
SCALER_OFF, SCALER_SCALE = rng.standard_normal(F), rng.uniform(0.5, 2.0, F)
PCA = rng.standard_normal((F, F))


def _model(steps, head, inputs_dtype=TensorProto.FLOAT, inits=(), shape=(None, F), outputs=None):
    inputs = [helper.make_tensor_value_info("x", inputs_dtype, list(shape))]
    outputs = outputs or [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in head[-1].output]
    return make_model([*steps, *head], inputs, outputs, inits, extra_opsets=[helper.make_opsetid(ML, 1)])


def _classifier(x="s3", post="SOFTMAX", intercepts=INTERCEPTS, coef=COEF, z="probs"):
    return helper.make_node("LinearClassifier", [x], ["label", z], domain=ML, classlabels_ints=list(range(K)),
                            coefficients=[float(v) for v in coef.reshape(-1)],
                            intercepts=[float(v) for v in intercepts], post_transform=post, multi_class=1)


def _chain():
    """Scaler -> Sub [F] -> MatMul [F, F] -> Mul [1, F] -> Add (scalar) -> Div [F]: every kind of step."""
    inits = [numpy_helper.from_array(rng.standard_normal(F).astype(np.float32), "mean"),
             numpy_helper.from_array(PCA.astype(np.float32), "pca"),
             numpy_helper.from_array(rng.uniform(0.5, 2, (1, F)).astype(np.float32), "mul"),
             numpy_helper.from_array(np.array(0.25, np.float32), "add"),
             numpy_helper.from_array(rng.uniform(1, 3, F).astype(np.float32), "div")]
    steps = [helper.make_node("Scaler", ["x"], ["s0"], domain=ML, offset=[float(v) for v in SCALER_OFF],
                              scale=[float(v) for v in SCALER_SCALE]),
             helper.make_node("Sub", ["s0", "mean"], ["s1"]),
             helper.make_node("MatMul", ["s1", "pca"], ["s2"]),
             helper.make_node("Mul", ["mul", "s2"], ["s2b"]),
             helper.make_node("Add", ["s2b", "add"], ["s2c"]),
             helper.make_node("Div", ["s2c", "div"], ["s3"])]
    return steps, inits


def _reference(inits, x):
    c = {i.name: numpy_helper.to_array(i).astype(np.float64) for i in inits}
    v = (x.astype(np.float64) - SCALER_OFF.astype(np.float32)) * SCALER_SCALE.astype(np.float32)
    v = ((((v - c["mean"]) @ c["pca"]) * c["mul"]) + c["add"]) / c["div"]
    return v @ COEF.astype(np.float32).astype(np.float64).T + INTERCEPTS.astype(np.float32)


def _sessions(model):
    off = ort.SessionOptions()
    off.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), off), ort.InferenceSession(model.SerializeToString())


def _ops(sess):
    return [op for a in sess.get_provider_graph_assignment_info() for op in a.op_types]


def test_affine_chain_and_normalizer_become_one_classifier():
    steps, inits = _chain()
    norm = helper.make_node("Normalizer", ["probs"], ["y"], domain=ML, norm="L1")
    model = _model(steps, [_classifier(), norm], inits=inits,
                   outputs=[helper.make_tensor_value_info("label", TensorProto.INT64, None),
                            helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    plain, fused = _sessions(model)
    assert _ops(fused) == ["AffineLinearClassifier"]
    assert len(_ops(plain)) == 8
    for n in (1, 7):
        x = rng.standard_normal((n, F)).astype(np.float32)
        (l0, p0), (l1, p1) = plain.run(None, {"x": x}), fused.run(None, {"x": x})
        np.testing.assert_array_equal(l1, l0)
        np.testing.assert_allclose(p1, p0, rtol=1e-5, atol=1e-7)
        scores = _reference(inits, x)
        e = np.exp(scores - scores.max(axis=1, keepdims=True))
        np.testing.assert_allclose(p1, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-7)
        np.testing.assert_array_equal(l1, scores.argmax(axis=1))
    onnxruntime = pytest.importorskip("onnxruntime")
    theirs = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = rng.standard_normal((4, F)).astype(np.float32)
    for a, b in zip(fused.run(None, {"x": x}), theirs.run(None, {"x": x})):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_regressor_with_a_reversed_sub_and_a_1d_input():
    inits = [numpy_helper.from_array(rng.standard_normal(F).astype(np.float32), "k")]
    steps = [helper.make_node("Sub", ["k", "x"], ["s3"])]  # k - x
    reg = helper.make_node("LinearRegressor", ["s3"], ["y"], domain=ML, targets=K,
                           coefficients=[float(v) for v in COEF.reshape(-1)],
                           intercepts=[float(v) for v in INTERCEPTS], post_transform="NONE")
    model = _model(steps, [reg], inits=inits, shape=(F,))
    plain, fused = _sessions(model)
    assert _ops(fused) == ["AffineLinearRegressor"]
    x = rng.standard_normal(F).astype(np.float32)
    want = (numpy_helper.to_array(inits[0]).astype(np.float64) - x) @ COEF.astype(np.float32).T.astype(np.float64) \
        + INTERCEPTS.astype(np.float32)
    got = fused.run(None, {"x": x})[0]
    assert got.shape == plain.run(None, {"x": x})[0].shape == (1, K)
    np.testing.assert_allclose(got[0], want, rtol=1e-6)


def test_a_large_offset_does_not_cancel_in_the_fused_scores():
    """StandardScaler of a feature around 1e4 with a small spread: the fused x M + d would lose the result to
    float32 cancellation; it is computed in float64."""
    off, scale = np.full(F, 1.0e4), np.full(F, 100.0)
    steps = [helper.make_node("Scaler", ["x"], ["s3"], domain=ML, offset=[float(v) for v in off],
                              scale=[float(v) for v in scale])]
    model = _model(steps, [_classifier(post="NONE")])
    plain, fused = _sessions(model)
    assert _ops(fused) == ["AffineLinearClassifier"]
    x = (1.0e4 + rng.standard_normal((6, F)) * 0.01).astype(np.float32)
    want = ((x.astype(np.float64) - off) * scale) @ COEF.astype(np.float32).T.astype(np.float64) + \
        INTERCEPTS.astype(np.float32)
    got = fused.run(None, {"x": x})[1]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, plain.run(None, {"x": x})[1], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("case", ["read_twice", "graph_output", "int_input", "row_constant", "binary_softmax",
                                  "l2_normalizer", "non_constant_operand"])
def test_what_is_left_alone_still_computes_the_same(case):
    inits = [numpy_helper.from_array(rng.standard_normal(F).astype(np.float32), "k")]
    dtype, outputs, extra = TensorProto.FLOAT, None, []
    steps = [helper.make_node("Add", ["x", "k"], ["s3"])]
    head = [_classifier()]
    inputs_extra = []
    if case == "read_twice":
        extra = [helper.make_node("Relu", ["s3"], ["r"])]
        outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("probs", "r")]
    elif case == "graph_output":
        outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("probs", "s3")]
    elif case == "int_input":
        dtype = TensorProto.INT64
        inits = [numpy_helper.from_array(np.arange(F, dtype=np.int64), "k")]
    elif case == "row_constant":  # [2, F] broadcasts the batch: not a step over the last axis
        inits = [numpy_helper.from_array(rng.standard_normal((2, F)).astype(np.float32), "k")]
    elif case == "binary_softmax":  # one score column: Z = [1 - s, s] is no softmax
        head = [_classifier(intercepts=INTERCEPTS[:1], coef=COEF[:1]),
                helper.make_node("Normalizer", ["probs"], ["y"], domain=ML, norm="L1")]
        head[0] = helper.make_node("LinearClassifier", ["s3"], ["label", "probs"], domain=ML,
                                   classlabels_ints=[0, 1], coefficients=[float(v) for v in COEF[0]],
                                   intercepts=[float(INTERCEPTS[0])], post_transform="SOFTMAX")
    elif case == "l2_normalizer":
        head.append(helper.make_node("Normalizer", ["probs"], ["y"], domain=ML, norm="L2"))
    elif case == "non_constant_operand":
        steps = [helper.make_node("Add", ["x", "v"], ["s3"])]
        inputs_extra = [helper.make_tensor_value_info("v", TensorProto.FLOAT, [1, F])]
    model = _model(steps, head + extra, inputs_dtype=dtype, inits=inits, outputs=outputs)
    model.graph.input.extend(inputs_extra)
    plain, fused = _sessions(model)
    x = rng.standard_normal((2, F)) * 3
    feeds = {"x": x.astype(np.int64 if case == "int_input" else np.float32)}
    if inputs_extra:
        feeds["v"] = rng.standard_normal((1, F)).astype(np.float32)
    ops = _ops(fused)
    if case in ("binary_softmax", "l2_normalizer"):  # the Add before is folded; the Normalizer is not dropped
        assert ops == ["AffineLinearClassifier", "Normalizer"]
    else:
        assert "AffineLinearClassifier" not in ops and "Add" in ops
    for a, b in zip(plain.run(None, feeds), fused.run(None, feeds)):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-7)


def test_a_wrong_feature_count_is_refused_naming_the_node():
    steps, inits = _chain()
    model = _model(steps, [_classifier()], inits=inits, shape=(None, None))
    _, fused = _sessions(model)
    assert _ops(fused) == ["AffineLinearClassifier"]
    with pytest.raises(ort.OrtError, match="features"):
        fused.run(None, {"x": np.ones((2, F + 1), np.float32)})
