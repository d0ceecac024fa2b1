"""MatMulInteger, QLinearMatMul, ConvInteger and QLinearConv against onnx's reference evaluator and
exact int64 numpy formulas (the reference mishandles per-row zero points)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from ort_core.errors import KernelError

from .kernel_harness import check, run_ours


def ints(rng, shape, dtype):
    info = np.iinfo(dtype)
    return rng.integers(info.min, int(info.max) + 1, shape).astype(dtype)


# ---------------------------------------------------------------------------------------------
# MatMulInteger
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("ta,tb", [(np.uint8, np.uint8), (np.int8, np.int8), (np.uint8, np.int8)])
@pytest.mark.parametrize("sa,sb", [((4, 3), (3, 5)), ((2, 4, 3), (3, 5)), ((2, 1, 4, 3), (3, 3, 2)),
                                   ((3,), (3, 5)), ((4, 3), (3,))])
def test_matmul_integer_scalar_zero_points(ta, tb, sa, sb):
    rng = np.random.default_rng(0)
    a, b = ints(rng, sa, ta), ints(rng, sb, tb)
    check("MatMulInteger", [a, b, ints(rng, (), ta), ints(rng, (), tb)], opset=10)
    check("MatMulInteger", [a, b], opset=10)


def test_matmul_integer_per_row_and_column():
    rng = np.random.default_rng(1)
    a, b = ints(rng, (4, 6), np.uint8), ints(rng, (6, 3), np.int8)
    azp, bzp = ints(rng, (4,), np.uint8), ints(rng, (3,), np.int8)
    (y,) = run_ours("MatMulInteger", [a, b, azp, bzp], opset=10)
    expected = (a.astype(np.int64) - azp[:, None]) @ (b.astype(np.int64) - bzp)
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, expected)


def test_matmul_integer_long_dot_is_exact_and_wraps():
    # 40000 * 255**2 > 2**31: float64 accumulation is exact, the int32 result wraps as in C
    k = 40000
    a = np.full((1, k), 255, np.uint8)
    b = np.full((k, 1), 255, np.uint8)
    (y,) = run_ours("MatMulInteger", [a, b], opset=10)
    assert y.dtype == np.int32
    assert int(y[0, 0]) == (k * 255 * 255 + 2**31) % 2**32 - 2**31
    rng = np.random.default_rng(2)
    a, b = ints(rng, (3, 1000), np.int8), ints(rng, (1000, 4), np.uint8)
    (y,) = run_ours("MatMulInteger", [a, b, np.int8(-3), np.uint8(7)], opset=10)
    np.testing.assert_array_equal(y, (a.astype(np.int64) + 3) @ (b.astype(np.int64) - 7))


def test_matmul_integer_errors():
    a = np.zeros((2, 3), np.uint8)
    with pytest.raises(KernelError, match="int8 or uint8"):
        run_ours("MatMulInteger", [a.astype(np.float32), a.T], opset=10)
    with pytest.raises(KernelError, match="do not match"):
        run_ours("MatMulInteger", [a, a], opset=10)
    with pytest.raises(KernelError, match="zero point 'a_zero_point'"):
        run_ours("MatMulInteger", [a, a.T, np.int8(0)], opset=10)


# ---------------------------------------------------------------------------------------------
# QLinearMatMul
# ---------------------------------------------------------------------------------------------

def _qmm_inputs(rng, ta, tb, ty, sa, sb, fdt=np.float32):
    return [ints(rng, sa, ta), np.array(rng.uniform(0.01, 0.05), fdt), ints(rng, (), ta),
            ints(rng, sb, tb), np.array(rng.uniform(0.01, 0.05), fdt), ints(rng, (), tb),
            np.array(rng.uniform(0.5, 2.0), fdt), ints(rng, (), ty)]


@pytest.mark.parametrize("types", [(np.uint8, np.uint8, np.uint8), (np.int8, np.int8, np.int8),
                                   (np.uint8, np.int8, np.int8)], ids=str)
@pytest.mark.parametrize("opset", [10, 21])
def test_qlinear_matmul(types, opset):
    rng = np.random.default_rng(3)
    for sa, sb in [((4, 6), (6, 3)), ((2, 4, 6), (2, 6, 3))]:
        check("QLinearMatMul", _qmm_inputs(rng, *types, sa, sb), opset=opset)


def test_qlinear_matmul_float16_scales():
    rng = np.random.default_rng(4)
    check("QLinearMatMul", _qmm_inputs(rng, np.uint8, np.uint8, np.uint8, (3, 5), (5, 2), np.float16), opset=21)


def test_qlinear_matmul_per_row_and_column_scales():
    rng = np.random.default_rng(5)
    a, b = ints(rng, (4, 6), np.uint8), ints(rng, (6, 3), np.uint8)
    a_s, a_z = rng.uniform(0.01, 0.05, 4).astype(np.float32), ints(rng, (4,), np.uint8)
    b_s, b_z = rng.uniform(0.01, 0.05, 3).astype(np.float32), ints(rng, (3,), np.uint8)
    y_s, y_z = np.float32(0.3), np.uint8(128)
    (y,) = run_ours("QLinearMatMul", [a, a_s, a_z, b, b_s, b_z, y_s, y_z], opset=21)
    real = ((a.astype(np.float64) - a_z[:, None]) * a_s[:, None]) @ ((b.astype(np.float64) - b_z) * b_s)
    expected = np.clip(np.rint(real / y_s) + 128, 0, 255)
    np.testing.assert_array_equal(y, expected.astype(np.uint8))


def test_qlinear_matmul_float8():
    f8 = ml_dtypes.float8_e4m3fn
    a = np.array([[1, 2], [3, -4]], np.float32).astype(f8)
    b = np.array([[0.5, 1], [2, 448]], np.float32).astype(f8)
    zero = np.zeros((), f8)
    (y,) = run_ours("QLinearMatMul", [a, np.float32(1), zero, b, np.float32(1), zero, np.float32(2), zero],
                    opset=21)
    assert y.dtype == f8
    # [[4.5, 897], [-6.5, -1789]] / 2, saturated to +-448 (897/2 -> 448.5 rounds to 448)
    assert y.astype(np.float32).tolist() == [[2.25, 448], [-3.25, -448]]


def test_qlinear_matmul_saturates_and_rounds_half_even():
    a = np.array([[1, 3, 5, 200]], np.uint8).reshape(4, 1)
    b = np.array([[1]], np.uint8)
    one, zero = np.float32(1), np.uint8(0)
    (y,) = run_ours("QLinearMatMul", [a, one, zero, b, one, zero, np.float32(2), np.uint8(100)], opset=21)
    assert y.ravel().tolist() == [100, 102, 102, 200]  # 0.5 -> 0, 1.5 -> 2, 2.5 -> 2, 100


# ---------------------------------------------------------------------------------------------
# ConvInteger / QLinearConv
# ---------------------------------------------------------------------------------------------

GEOMETRIES = [dict(), dict(pads=[1, 1, 1, 1]), dict(strides=[2, 2], pads=[1, 0, 1, 0]),
              dict(dilations=[2, 1]), dict(auto_pad="SAME_UPPER", strides=[2, 2])]


@pytest.mark.parametrize("geom", GEOMETRIES, ids=str)
@pytest.mark.parametrize("tx,tw", [(np.uint8, np.uint8), (np.int8, np.int8), (np.uint8, np.int8)])
def test_conv_integer(geom, tx, tw):
    rng = np.random.default_rng(6)
    x, w = ints(rng, (2, 3, 7, 6), tx), ints(rng, (4, 3, 3, 3), tw)
    check("ConvInteger", [x, w, ints(rng, (), tx), ints(rng, (), tw)], geom, opset=10)


def test_conv_integer_grouped_per_channel_zero_point_wide():
    rng = np.random.default_rng(7)
    x, w = ints(rng, (1, 64, 6, 6), np.uint8), ints(rng, (8, 32, 3, 3), np.uint8)  # K = 288: float64 path
    xzp, wzp = np.uint8(120), ints(rng, (8,), np.uint8)
    (y,) = run_ours("ConvInteger", [x, w, xzp, wzp], dict(group=2, pads=[1, 1, 1, 1]), opset=10)
    xs = np.pad(x.astype(np.int64) - 120, ((0, 0), (0, 0), (1, 1), (1, 1)))
    ws = w.astype(np.int64) - wzp.reshape(8, 1, 1, 1)
    expected = np.zeros((1, 8, 6, 6), np.int64)
    for m in range(8):
        g = m // 4
        for i in range(6):
            for j in range(6):
                expected[0, m, i, j] = np.sum(xs[0, g * 32:(g + 1) * 32, i:i + 3, j:j + 3] * ws[m])
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, expected)


def test_conv_integer_1d():
    rng = np.random.default_rng(8)
    check("ConvInteger", [ints(rng, (2, 3, 9), np.int8), ints(rng, (2, 3, 2), np.int8)], dict(strides=[2]),
          opset=10)


@pytest.mark.parametrize("geom", GEOMETRIES, ids=str)
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_qlinear_conv(geom, dtype):
    rng = np.random.default_rng(9)
    x, w = ints(rng, (1, 3, 6, 7), dtype), ints(rng, (5, 3, 2, 2), dtype)
    inputs = [x, np.float32(0.02), ints(rng, (), dtype), w, np.float32(0.03), ints(rng, (), dtype),
              np.float32(0.25), ints(rng, (), dtype)]
    check("QLinearConv", inputs, geom, opset=10)
    bias = rng.integers(-2000, 2000, 5).astype(np.int32)
    check("QLinearConv", inputs + [bias], geom, opset=10)


def test_qlinear_conv_per_channel_scales():
    rng = np.random.default_rng(10)
    x, w = ints(rng, (2, 4, 5, 5), np.uint8), ints(rng, (6, 2, 3, 3), np.int8)
    w_scale = rng.uniform(0.01, 0.05, 6).astype(np.float32)
    inputs = [x, np.float32(0.02), np.uint8(128), w, w_scale, np.zeros(6, np.int8), np.float32(0.2),
              np.uint8(100), rng.integers(-500, 500, 6).astype(np.int32)]
    check("QLinearConv", inputs, dict(group=2, pads=[1, 1, 1, 1]), opset=10)


def test_qlinear_conv_errors():
    x, w = np.zeros((1, 2, 4, 4), np.uint8), np.zeros((3, 2, 2, 2), np.uint8)
    base = [x, np.float32(1), np.uint8(0), w, np.float32(1), np.uint8(0), np.float32(1), np.uint8(0)]
    bad_scale = list(base)
    bad_scale[4] = np.ones(2, np.float32)
    with pytest.raises(KernelError, match="one value per output channel"):
        run_ours("QLinearConv", bad_scale, opset=10)
    with pytest.raises(KernelError, match="bias must be int32"):
        run_ours("QLinearConv", base + [np.zeros(3, np.float32)], opset=10)
    bad_y = list(base)
    bad_y[6] = np.ones(3, np.float32)
    with pytest.raises(KernelError, match="'y_scale' must be a scalar"):
        run_ours("QLinearConv", bad_y, opset=10)
    a = np.zeros((2, 2), np.uint8)
    with pytest.raises(KernelError, match="'y_zero_point' must be a scalar"):
        run_ours("QLinearMatMul", [a, np.float32(1), np.uint8(0), a, np.float32(1), np.uint8(0), np.float32(1),
                                   np.zeros(2, np.uint8)], opset=21)
    with pytest.raises(KernelError, match="x_zero_point must be a scalar"):
        run_ours("ConvInteger", [x, w, np.zeros(2, np.uint8)], opset=10)
