"""Activation kernels against onnx's reference evaluator, incl. the Softmax-family opset change."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ort_core.errors import KernelError

from .kernel_harness import check, run_ours


def rand(rng, *shape, dtype=np.float32, scale=3.0):
    return (rng.standard_normal(shape) * scale).astype(dtype)


UNARY = [
    ("Relu", {}, [1, 6, 13, 14]),
    ("LeakyRelu", {}, [1, 6, 16]),
    ("LeakyRelu", dict(alpha=0.2), [6, 16]),
    ("LeakyRelu", dict(alpha=-1.5), [16]),
    ("Sigmoid", {}, [1, 6, 13]),
    ("HardSigmoid", {}, [6, 22]),
    ("HardSigmoid", dict(alpha=0.3, beta=0.4), [6, 22]),
    ("HardSwish", {}, [14, 22]),
    ("Tanh", {}, [6, 13]),
    ("Elu", {}, [6, 22]),
    ("Elu", dict(alpha=0.5), [6, 22]),
    ("Selu", {}, [6, 22]),
    ("Selu", dict(alpha=1.5, gamma=2.0), [6, 22]),
    ("Celu", {}, [12]),
    ("Celu", dict(alpha=2.0), [12]),
    ("Softplus", {}, [1, 22]),
    ("Softsign", {}, [1, 22]),
    ("ThresholdedRelu", {}, [10, 22]),
    ("ThresholdedRelu", dict(alpha=0.5), [10, 22]),
    ("Mish", {}, [18, 22]),
    ("Gelu", {}, [20]),
    ("Gelu", dict(approximate="tanh"), [20]),
]


@pytest.mark.parametrize("op,attrs,opsets", UNARY, ids=lambda v: str(v))
@pytest.mark.parametrize("shape", [(2, 3, 4), (7,), (1,)], ids=str)
def test_unary_float32(op, attrs, opsets, shape):
    rng = np.random.default_rng(0)
    x = rand(rng, *shape)
    for opset in opsets:
        (y,) = check(op, [x], attrs, opset=opset, rtol=1e-5, atol=1e-6)
        if shape == (1,):  # 0-d inputs give 0-d arrays (numpy ufuncs would give scalars)
            (y0,) = run_ours(op, [x.reshape(())], attrs, opset=opset)
            assert isinstance(y0, np.ndarray) and y0.shape == () and y0.dtype == x.dtype
            assert y0 == y[0]


@pytest.mark.parametrize("op,attrs,opsets", UNARY, ids=lambda v: str(v))
def test_unary_float64(op, attrs, opsets):
    # attributes and the reference's constants are float32 values, so agreement is ~1e-7 relative
    # (the reference's Erf even runs in float32, hence Gelu's absolute tolerance)
    x = rand(np.random.default_rng(1), 3, 5, dtype=np.float64)
    (y,) = check(op, [x], attrs, opset=opsets[-1], rtol=1e-7, atol=1e-7 if op == "Gelu" else 1e-9)
    assert y.dtype == np.float64


@pytest.mark.parametrize("op,attrs,opsets", UNARY, ids=lambda v: str(v))
def test_unary_inputs_untouched_and_float16(op, attrs, opsets):
    x = rand(np.random.default_rng(2), 4, 6, dtype=np.float16, scale=2.0)
    x0 = x.copy()
    (y,) = run_ours(op, [x], attrs, opset=opsets[-1])
    np.testing.assert_array_equal(x, x0)
    assert y.dtype == np.float16 and y.shape == x.shape
    (y32,) = run_ours(op, [x.astype(np.float32)], attrs, opset=opsets[-1])
    np.testing.assert_allclose(y.astype(np.float32), y32, rtol=1e-2, atol=1e-2)


def test_extreme_values():
    x = np.array([-1e4, -100.0, -30.0, -0.0, 0.0, 30.0, 100.0, 1e4], dtype=np.float32)
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        (s,) = run_ours("Sigmoid", [x], {})
        (sp,) = run_ours("Softplus", [x], {})
    # sigmoid = 0.5 + 0.5 tanh(x / 2): absolute (not relative) accuracy in the far tails
    np.testing.assert_allclose(s, [0, 3.7200760e-44, 9.357623e-14, 0.5, 0.5, 1, 1, 1], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(sp, [0, 3.7200760e-44, 9.357623e-14, math.log(2), math.log(2), 30, 100, 1e4],
                               rtol=1e-6, atol=1e-44)
    (g,) = run_ours("Gelu", [x], {}, opset=20)
    expected = [0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x.astype(np.float64)]
    np.testing.assert_allclose(g, expected, rtol=1e-6, atol=1e-6)
    (m,) = run_ours("Mish", [x], {}, opset=18)
    assert np.isfinite(m).all() and m[-1] == 1e4


def test_relu_integers():
    x = np.array([[-3, 0, 5]], dtype=np.int32)
    (y,) = check("Relu", [x], {}, opset=14)
    np.testing.assert_array_equal(y, [[0, 0, 5]])


# ---------------------------------------------------------------------------------------------
# PRelu
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("slope_shape", [(1,), (5,), (4, 5), (3, 1, 1), (2, 3, 4, 5), ()], ids=str)
@pytest.mark.parametrize("opset", [7, 9, 16])
def test_prelu_broadcast(slope_shape, opset):
    rng = np.random.default_rng(10)
    x, slope = rand(rng, 2, 3, 4, 5), rand(rng, *slope_shape, scale=0.5)
    check("PRelu", [x, slope], {}, opset=opset)


@pytest.mark.parametrize("opset", [1, 6])
def test_prelu_old_per_channel_slope(opset):
    rng = np.random.default_rng(11)
    x, slope = rand(rng, 2, 3, 4, 5), rand(rng, 3, scale=0.5)
    (y,) = run_ours("PRelu", [x, slope], {}, opset=opset)
    expected = np.where(x < 0, x * slope.reshape(3, 1, 1), x)
    np.testing.assert_allclose(y, expected, rtol=1e-6)


def test_prelu_errors():
    rng = np.random.default_rng(12)
    with pytest.raises(KernelError, match="slope"):
        run_ours("PRelu", [rand(rng, 2, 3), rand(rng, 4)], {}, opset=16)
    with pytest.raises(KernelError, match="slope"):
        run_ours("PRelu", [rand(rng, 3), rand(rng, 2, 3)], {}, opset=16)


# ---------------------------------------------------------------------------------------------
# Softmax / LogSoftmax / Hardmax
# ---------------------------------------------------------------------------------------------

SOFTMAX_OPS = ["Softmax", "LogSoftmax", "Hardmax"]


def softmax_2d_expected(op, x, axis):
    """Opset < 13 definition: flatten to (prod(shape[:axis]), -1), normalize rows, reshape back."""
    x2 = x.astype(np.float64).reshape(int(np.prod(x.shape[:axis])), -1)
    if op == "Hardmax":
        y = np.zeros_like(x2)
        y[np.arange(len(x2)), x2.argmax(axis=1)] = 1
    else:
        z = x2 - x2.max(axis=1, keepdims=True)
        y = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
        if op == "LogSoftmax":
            y = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    return y.reshape(x.shape).astype(x.dtype)


@pytest.mark.parametrize("op", SOFTMAX_OPS)
@pytest.mark.parametrize("axis", [None, 0, 1, 2, -1, -3])
def test_softmax_family_13(op, axis):
    x = rand(np.random.default_rng(20), 2, 3, 4)
    attrs = {} if axis is None else dict(axis=axis)
    check(op, [x], attrs, opset=13, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", SOFTMAX_OPS)
@pytest.mark.parametrize("opset,axis", [(1, None), (1, 0), (1, 1), (1, 2)]
                         + [(11, a) for a in (None, 0, 1, 2, -1, -2)])  # negative axes since 11
def test_softmax_family_coerced_2d(op, opset, axis):
    # the reference evaluator applies the opset-13 rule everywhere, so compare with the definition;
    # on the last axis both rules agree and the reference applies
    x = rand(np.random.default_rng(20), 2, 3, 4)
    attrs = {} if axis is None else dict(axis=axis)
    (y,) = run_ours(op, [x], attrs, opset=opset)
    ax = 1 if axis is None else axis % 3
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, softmax_2d_expected(op, x, ax), rtol=1e-5, atol=1e-6)
    if ax == 2:
        check(op, [x], attrs, opset=opset, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("opset", [11, 13])
def test_large_softmax_runs_by_row_blocks(opset, monkeypatch):
    """From _SOFTMAX_BLOCK elements on, the last-axis softmax runs block by block (here 8 rows a block),
    each block shifted by its own maximum; a row far below the rest of its block takes the per-row shift,
    and the other rows of that block stay right."""
    from ort_core.providers.cpu.ops import activation

    monkeypatch.setattr(activation, "_SOFTMAX_BLOCK", 8 * 50)
    x = rand(np.random.default_rng(21), 4, 30, 50) * 3
    x[1, 9] -= 5000.0  # exp(x - block maximum) of this row is 0 everywhere
    (y,) = run_ours("Softmax", [x], {"axis": -1 if opset >= 13 else 2}, opset=opset)
    np.testing.assert_allclose(y, softmax_2d_expected("Softmax", x, 2), rtol=1e-5, atol=1e-7)
    assert y.shape == x.shape and y.dtype == np.float32


@pytest.mark.parametrize("op", SOFTMAX_OPS)
def test_softmax_family_semantics_change_at_13(op):
    # opset 11 flattens to 2-D at axis 1 (default); opset 13 works per axis (default -1)
    x = rand(np.random.default_rng(21), 2, 3, 4)
    (y11,) = run_ours(op, [x], {}, opset=11)
    (y13,) = check(op, [x], {}, opset=13)
    np.testing.assert_allclose(y11, softmax_2d_expected(op, x, 1), rtol=1e-5, atol=1e-6)
    assert y11.shape == y13.shape == x.shape
    assert not np.allclose(y11, y13)
    if op == "Softmax":
        np.testing.assert_allclose(y11.reshape(2, -1).sum(axis=1), 1, rtol=1e-5)
        np.testing.assert_allclose(y13.sum(axis=-1), 1, rtol=1e-5)
    if op == "Hardmax":
        assert y11.reshape(2, -1).sum(axis=1).tolist() == [1, 1]
        assert (y13.sum(axis=-1) == 1).all()


def test_softmax_stability_and_ties():
    x = np.array([[1000.0, 1000.0, -1000.0], [-1e30, 0.0, 1e30]], dtype=np.float32)
    (s,) = run_ours("Softmax", [x], {}, opset=13)
    np.testing.assert_allclose(s, [[0.5, 0.5, 0.0], [0.0, 0.0, 1.0]], atol=1e-7)
    (ls,) = run_ours("LogSoftmax", [x], {}, opset=13)
    np.testing.assert_allclose(ls[0, :2], [-math.log(2)] * 2, rtol=1e-6)
    (h,) = run_ours("Hardmax", [np.array([[3.0, 7.0, 7.0, 1.0]], np.float32)], {}, opset=13)
    np.testing.assert_array_equal(h, [[0, 1, 0, 0]])  # first maximum wins


@pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning:onnx")  # the reference's log(0)
@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_softmax_rows_far_below_global_max(op, dtype):
    # rows whose values sit far below the global maximum (masked attention, fully masked rows,
    # -inf entries) must come out as exactly as with a per-row shift
    x = np.array([[0.0, 1.0, 2.0, 3.0],
                  [-1000.0, -999.0, -998.0, -990.0],
                  [-10000.0, -10000.0, -10000.0, -10000.0],
                  [5.0, -np.inf, 4.0, -np.inf],
                  [-80.0, -75.0, -78.0, -90.0]], dtype=dtype)
    (y,) = check(op, [x], {}, opset=13, rtol=1e-6, atol=1e-7)
    assert np.isfinite(y[:, [0, 2]]).all()
    x = np.random.default_rng(23).standard_normal((6, 50)).astype(dtype)
    x[::2] -= 300.0  # every other row far below the global maximum
    check(op, [x], {}, opset=13, rtol=1e-5, atol=1e-7)
    # along axis 0 the large gap is within each column: LogSoftmax stays finite where the
    # reference (log of Softmax) underflows to -inf, so compare with the float64 definition
    (y,) = run_ours(op, [x], dict(axis=0), opset=13)
    x64 = x.astype(np.float64)
    lse = x64.max(axis=0) + np.log(np.exp(x64 - x64.max(axis=0)).sum(axis=0))
    expected = x64 - lse if op == "LogSoftmax" else np.exp(x64 - lse)
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-30)


@pytest.mark.parametrize("op", SOFTMAX_OPS)
def test_softmax_family_float64_and_1d(op):
    rng = np.random.default_rng(22)
    check(op, [rand(rng, 3, 5, dtype=np.float64)], dict(axis=0), opset=13, rtol=1e-12, atol=1e-12)
    check(op, [rand(rng, 6)], {}, opset=13)
    check(op, [rand(rng, 6)], dict(axis=0), opset=11)  # 1-D: both rules coincide


@pytest.mark.parametrize("op", SOFTMAX_OPS)
def test_softmax_family_errors(op):
    with pytest.raises(KernelError, match="axis"):
        run_ours(op, [np.zeros((2, 3), np.float32)], dict(axis=2), opset=13)
    with pytest.raises(KernelError, match="axis"):
        run_ours(op, [np.zeros((2, 3), np.float32)], dict(axis=-3), opset=11)


def test_gelu_bad_approximate():
    with pytest.raises(KernelError, match="approximate"):
        run_ours("Gelu", [np.zeros(3, np.float32)], dict(approximate="fast"), opset=20)


def test_celu_zero_alpha():
    with pytest.raises(KernelError, match="alpha"):
        run_ours("Celu", [np.zeros(3, np.float32)], dict(alpha=0.0), opset=12)
