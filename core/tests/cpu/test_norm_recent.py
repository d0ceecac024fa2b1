"""RMSNormalization, LpNormalization and MeanVarianceNormalization kernels against onnx's
reference evaluator and numpy formulas."""

from __future__ import annotations

import numpy as np
import pytest

from ort_core.errors import KernelError

from .kernel_harness import check, run_ours

RNG = np.random.default_rng(7)
X = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)


@pytest.mark.parametrize("axis", [0, 1, 2, 3, -1, -2, -4])
def test_rms_normalization_axes(axis):
    ax = axis % 4
    scale = RNG.standard_normal(X.shape[ax:]).astype(np.float32)
    (y,) = check("RMSNormalization", [X, scale], {"axis": axis}, opset=23)
    red = tuple(range(ax, 4))
    x64 = X.astype(np.float64)
    np.testing.assert_allclose(y, x64 / np.sqrt(np.mean(x64 ** 2, axis=red, keepdims=True) + 1e-5) * scale,
                               rtol=1e-5, atol=1e-6)


def test_rms_normalization_epsilon_and_broadcast_scale():
    scale = np.array([2.0], np.float32)
    (y,) = check("RMSNormalization", [X * 1e-3, scale], {"epsilon": 0.1}, opset=23)
    x = X.astype(np.float64) * 1e-3
    np.testing.assert_allclose(y, 2 * x / np.sqrt(np.mean(x ** 2, -1, keepdims=True) + 0.1), rtol=1e-5)


def test_rms_normalization_float16_and_double():
    x16 = X.astype(np.float16)
    check("RMSNormalization", [x16, np.ones(5, np.float16)], {}, opset=23, rtol=1e-3)
    check("RMSNormalization", [X.astype(np.float64), np.ones(5, np.float64) * 3], {}, opset=23)


def test_rms_normalization_errors():
    with pytest.raises(KernelError, match="axis"):
        run_ours("RMSNormalization", [X, np.ones(5, np.float32)], {"axis": 4}, opset=23)
    with pytest.raises(KernelError, match="stash_type"):
        run_ours("RMSNormalization", [X, np.ones(5, np.float32)], {"stash_type": 7}, opset=23)
    with pytest.raises(KernelError, match="scale of shape"):
        run_ours("RMSNormalization", [X, np.ones(4, np.float32)], {}, opset=23)
    with pytest.raises(KernelError, match="widen"):
        run_ours("RMSNormalization", [X, np.ones((2, 1, 1, 1, 5), np.float32)], {}, opset=23)


@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_lp_normalization(p, axis):
    x = np.array([[[1.0, 2.0, 2.0], [3.0, 4.0, 0.0]], [[0.0, 5.0, 5.0], [-6.0, 8.0, 0.0]]], np.float32)
    norm = np.sum(np.abs(x), axis=axis, keepdims=True) if p == 1 else np.sqrt(np.sum(x ** 2, axis=axis, keepdims=True))
    with np.errstate(invalid="ignore"):
        expected = np.where(norm == 0, 0, x / norm)
    (y,) = run_ours("LpNormalization", [x], {"p": p, "axis": axis}, opset=22)
    np.testing.assert_allclose(y, expected, rtol=1e-6)
    assert np.all(np.isfinite(y))


def test_lp_normalization_default_and_opset1():
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    check("LpNormalization", [x], {}, opset=22)
    (y,) = run_ours("LpNormalization", [x.astype(np.float16)], {}, opset=1)
    assert y.dtype == np.float16
    np.testing.assert_allclose(np.linalg.norm(y.astype(np.float32), axis=-1), 1, rtol=2e-3)


def test_lp_normalization_rejects_p3():
    with pytest.raises(KernelError, match="p must be 1 or 2"):
        run_ours("LpNormalization", [X], {"p": 3}, opset=22)


@pytest.mark.parametrize("axes", [None, [0, 2, 3], [1], [-1, -2]])
def test_mean_variance_normalization(axes):
    attrs = {} if axes is None else {"axes": axes}
    (y,) = run_ours("MeanVarianceNormalization", [X], attrs, opset=13)
    red = tuple(sorted(a % 4 for a in (axes or [0, 2, 3])))
    x = X.astype(np.float64)
    mean = x.mean(red, keepdims=True)
    expected = (x - mean) / (np.sqrt((x ** 2).mean(red, keepdims=True) - mean ** 2) + 1e-9)
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(y.astype(np.float64).mean(red), 0, atol=1e-5)


def test_mean_variance_normalization_float16_opset9():
    (y,) = run_ours("MeanVarianceNormalization", [X.astype(np.float16)], {"axes": [3]}, opset=9)
    assert y.dtype == np.float16
    np.testing.assert_allclose(y.astype(np.float32).std(-1), 1, rtol=1e-2)


def test_mean_variance_normalization_bad_axis():
    with pytest.raises(KernelError, match="axis"):
        run_ours("MeanVarianceNormalization", [X[0, 0]], {}, opset=13)
