"""Swish, SwiGLU and Shrink kernels against onnx's reference evaluator and numpy formulas."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from ort_core.errors import KernelError

from .kernel_harness import check, run_ours, run_reference

X = np.array([-30.0, -4.0, -1.0, -0.25, 0.0, 0.5, 2.0, 30.0], np.float32)


def sigmoid(x):
    return 1 / (1 + np.exp(-x.astype(np.float64)))


@pytest.mark.parametrize("alpha", [None, 1.0, 0.5, 2.5])
def test_swish_matches_formula_and_reference(alpha):
    attrs = {} if alpha is None else {"alpha": alpha}
    (y,) = check("Swish", [X], attrs, opset=24)
    a = 1.0 if alpha is None else alpha
    np.testing.assert_allclose(y, X * sigmoid(a * X), rtol=1e-6, atol=1e-30)
    assert np.all(np.isfinite(y))  # no overflow in the tails


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float64])
def test_swish_other_float_types(dtype):
    x = (np.linspace(-6, 6, 49)).astype(dtype)
    ours = run_ours("Swish", [x], {"alpha": 1.5}, opset=24)[0]
    ref = run_reference("Swish", [x], {"alpha": 1.5}, opset=24)[0]
    assert ours.dtype == np.dtype(dtype) and ours.shape == x.shape
    rtol = 1e-12 if dtype == np.float64 else 1e-3
    np.testing.assert_allclose(ours.astype(np.float64), ref.astype(np.float64), rtol=rtol)


def test_swish_scalar_input():
    (y,) = run_ours("Swish", [np.array(2.0, np.float32)], opset=24)
    assert y.shape == () and np.isclose(y, 2 * sigmoid(np.float32(2.0)))


@pytest.mark.parametrize("alpha", [None, 1.702])
def test_swiglu(alpha):
    a = np.random.default_rng(0).standard_normal((3, 4, 5)).astype(np.float32)
    b = np.random.default_rng(1).standard_normal((3, 4, 5)).astype(np.float32)
    attrs = {} if alpha is None else {"alpha": alpha}
    (y,) = check("SwiGLU", [a, b], attrs, opset=28)
    al = 1.0 if alpha is None else alpha
    np.testing.assert_allclose(y, a * sigmoid(al * a) * b, rtol=1e-5, atol=1e-7)


def test_swiglu_float16():
    a = np.linspace(-5, 5, 40).reshape(4, 10).astype(np.float16)
    b = np.linspace(2, -3, 40).reshape(4, 10).astype(np.float16)
    check("SwiGLU", [a, b], {}, opset=28, rtol=1e-3)


def test_swiglu_rejects_broadcasting_and_mixed_types():
    a = np.ones((2, 3), np.float32)
    with pytest.raises(KernelError, match="same shape and type"):
        run_ours("SwiGLU", [a, np.ones((1, 3), np.float32)], opset=28)
    with pytest.raises(KernelError, match="same shape and type"):
        run_ours("SwiGLU", [a, np.ones((2, 3), np.float64)], opset=28)


def test_swish_rejects_integers():
    with pytest.raises(KernelError, match="float"):
        run_ours("Swish", [np.arange(3)], opset=24)


@pytest.mark.parametrize("attrs", [{}, {"lambd": 1.5}, {"lambd": 1.5, "bias": 1.5}, {"lambd": 0.0, "bias": -1.0}])
def test_shrink_float(attrs):
    x = np.arange(-4, 5, 0.5, dtype=np.float32)
    (y,) = check("Shrink", [x], attrs, opset=9)
    lam, bias = attrs.get("lambd", 0.5), attrs.get("bias", 0.0)
    np.testing.assert_array_equal(y, np.where(x < -lam, x + bias, np.where(x > lam, x - bias, 0)))


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int32, np.int64, np.float16, np.float64])
def test_shrink_other_types(dtype):
    x = np.array([0, 1, 2, 3, 5, 100], dtype=dtype)
    if np.dtype(dtype).kind == "i":
        x = np.concatenate([-x, x])
    check("Shrink", [x], {"lambd": 1.5, "bias": 1.5}, opset=9)


def test_shrink_rejects_strings():
    with pytest.raises(KernelError, match="numeric"):
        run_ours("Shrink", [np.array(["a"], dtype=object)], opset=9)
