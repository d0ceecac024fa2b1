"""Gelu on the CPU provider: the standard op (opset 20, both approximations) and the fused
``com.microsoft::Gelu``/``FastGelu`` share one computation, exact to float64's formula at ordinary values
and finite up to the largest floats (halving before the product with x keeps (1 + erf) x from
overflowing there)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from onnx import TensorProto, helper

import ort_core as ort

from .conftest import make_model

BIG = np.finfo(np.float32).max
X = np.array([-BIG, -3e38, -1e30, -20.0, -3.0, -1.0, -1e-3, 0.0, 1e-3, 0.5, 1.0, 3.0, 20.0, 1e30, 3e38, BIG],
             np.float32)


def _reference(x: np.ndarray, approximate: str) -> np.ndarray:
    x64 = x.astype(np.float64)
    if approximate == "tanh":
        inner = np.sqrt(2.0 / math.pi) * (x64 + 0.044715 * x64 ** 3)  # no overflow in float64
        y = 0.5 * x64 * (1.0 + np.tanh(inner))
    else:
        y = 0.5 * x64 * (1.0 + np.vectorize(math.erf)(x64 / math.sqrt(2.0)))
    return y.astype(np.float32)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_standard_gelu_is_finite_up_to_the_largest_floats(approximate):
    node = helper.make_node("Gelu", ["x"], ["y"], approximate=approximate)
    vi = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [len(X)]) for n in "xy"]
    sess = ort.InferenceSession(make_model([node], [vi[0]], [vi[1]], opset=20).SerializeToString())
    (y,) = sess.run(None, {"x": X})
    want = _reference(X, approximate)
    assert np.isfinite(y).all(), y
    np.testing.assert_allclose(y, want, rtol=2e-6, atol=1e-7)
    assert y[-1] == BIG and y[0] == 0.0  # gelu(x) -> x for large x, -> 0 for large -x


@pytest.mark.parametrize("op,approximate", [("Gelu", "none"), ("FastGelu", "tanh")])
def test_fused_gelus_are_finite_up_to_the_largest_floats(op, approximate):
    """com.microsoft::Gelu / FastGelu (what the fusions emit), run as nodes of a model."""
    node = helper.make_node(op, ["x"], ["y"], domain="com.microsoft")
    vi = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [len(X)]) for n in "xy"]
    model = make_model([node], [vi[0]], [vi[1]], opset=20, extra_opsets=[helper.make_opsetid("com.microsoft", 1)])
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    (y,) = ort.InferenceSession(model.SerializeToString(), so).run(None, {"x": X})
    assert np.isfinite(y).all(), y
    np.testing.assert_allclose(y, _reference(X, approximate), rtol=2e-6, atol=1e-7)
