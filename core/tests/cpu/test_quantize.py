"""QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear against onnx's reference evaluator and
hand-computed values (rounding ties, saturation, NaN, blocked scales)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from ort_core.errors import KernelError

from .kernel_harness import check, run_ours

F8 = [ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e4m3fnuz, ml_dtypes.float8_e5m2, ml_dtypes.float8_e5m2fnuz]
INTS = [np.uint8, np.int8, np.uint16, np.int16, ml_dtypes.uint4, ml_dtypes.int4, ml_dtypes.uint2, ml_dtypes.int2]


def q(x, scale, zp=None, opset=25, **attrs):
    return run_ours("QuantizeLinear", [x, scale, zp], attrs, opset=opset)[0]


def dq(x, scale, zp=None, opset=25, **attrs):
    return run_ours("DequantizeLinear", [x, scale, zp], attrs, opset=opset)[0]


# ---------------------------------------------------------------------------------------------
# QuantizeLinear
# ---------------------------------------------------------------------------------------------

def test_quantize_rounds_half_to_even_and_saturates():
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 300, -300], dtype=np.float32)
    y = q(x, np.float32(1), np.uint8(10))
    assert y.dtype == np.uint8
    assert y.tolist() == [10, 12, 12, 10, 8, 8, 255, 0]
    y = q(x, np.float32(1), np.int8(0))
    assert y.tolist() == [0, 2, 2, 0, -2, -2, 127, -128]


def test_quantize_default_type_is_uint8():
    y = q(np.array([-1.0, 3.0, 1000.0], np.float32), np.float32(0.5))
    assert y.dtype == np.uint8 and y.tolist() == [0, 6, 255]


def test_quantize_nan_goes_to_lowest():
    y = q(np.array([np.nan, 1.0], np.float32), np.float32(1), np.int8(3))
    assert y.tolist() == [-128, 4]


@pytest.mark.parametrize("dtype", INTS, ids=lambda t: np.dtype(t).name)
def test_quantize_integer_types(dtype):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((3, 5)) * 40).astype(np.float32)
    zp = np.array(1, dtype=dtype)
    check("QuantizeLinear", [x, np.float32(0.7), zp], opset=25)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_quantize_per_axis(axis):
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((3, 4, 5)) * 50).astype(np.float32)
    n = x.shape[axis]
    scale = rng.uniform(0.5, 2, n).astype(np.float32)
    zp = rng.integers(0, 255, n).astype(np.uint8)
    check("QuantizeLinear", [x, scale, zp], dict(axis=axis), opset=21)


@pytest.mark.parametrize("shape,axis,block", [((4, 6), 1, 2), ((4, 7), 1, 3), ((6, 2, 3), 0, 4), ((5,), 0, 2)])
def test_quantize_blocked(shape, axis, block):
    rng = np.random.default_rng(2)
    x = (rng.standard_normal(shape) * 20).astype(np.float32)
    sshape = list(shape)
    sshape[axis] = -(-shape[axis] // block)
    scale = rng.uniform(0.5, 2, sshape).astype(np.float32)
    zp = rng.integers(-10, 10, sshape).astype(np.int8)
    check("QuantizeLinear", [x, scale, zp], dict(axis=axis, block_size=block), opset=21)
    check("QuantizeLinear", [x, scale], dict(axis=axis, block_size=block, output_dtype=3), opset=21)


def test_quantize_blocked_uneven_values():
    x = np.arange(5, dtype=np.float32).reshape(1, 5) * 2
    scale = np.array([[1.0, 2.0]], np.float32)  # blocks [0, 1, 2] and [3, 4]
    assert q(x, scale, block_size=3, axis=1).tolist() == [[0, 2, 4, 3, 4]]


@pytest.mark.parametrize("dtype", F8, ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("saturate", [0, 1])
def test_quantize_float8(dtype, saturate):
    x = np.array([0, 1.3, -2.7, 1e6, -1e6, 300, np.inf, -np.inf, 1e-3], dtype=np.float32)
    zp = np.zeros((), dtype=dtype)
    y = q(x, np.float32(0.5), zp, opset=21, saturate=saturate)
    assert y.dtype == dtype
    expected = (x / np.float32(0.5))
    if saturate:
        m = float(ml_dtypes.finfo(dtype).max)
        expected = np.clip(expected, -m, m)
    np.testing.assert_array_equal(y.astype(np.float32), expected.astype(dtype).astype(np.float32))
    if saturate:
        assert float(y[3]) == float(ml_dtypes.finfo(dtype).max)
        check("QuantizeLinear", [x[:6], np.float32(0.5), zp], dict(saturate=saturate), opset=21)


def test_quantize_float4_saturates():
    x = np.array([0.0, 1.2, 2.6, -100.0, 7.0], np.float32)
    zp = np.zeros(1, ml_dtypes.float4_e2m1fn)
    y = q(x, np.float32(1), zp)
    assert y.dtype == ml_dtypes.float4_e2m1fn
    assert y.astype(np.float32).tolist() == [0.0, 1.0, 3.0, -6.0, 6.0]


def test_quantize_output_dtype_attribute():
    x = np.array([1.0, -9.0, 20.0], np.float32)
    y = q(x, np.float32(1), output_dtype=22, opset=21)  # INT4
    assert y.dtype == ml_dtypes.int4 and y.astype(int).tolist() == [1, -8, 7]


def test_quantize_float16_and_bfloat16_inputs():
    rng = np.random.default_rng(3)
    x = (rng.standard_normal(20) * 30).astype(np.float16)
    check("QuantizeLinear", [x, np.float16(0.3), np.int8(2)], opset=21)
    xb = x.astype(ml_dtypes.bfloat16)
    check("QuantizeLinear", [xb, np.array(0.25, ml_dtypes.bfloat16), np.uint8(100)], opset=21)


def test_quantize_int32_input():
    x = np.array([100, -100, 2**30, 7], np.int32)
    check("QuantizeLinear", [x, np.float32(4), np.int8(0)], opset=21)
    assert q(x, np.float32(4), np.int16(0)).tolist() == [25, -25, 32767, 2]


def test_quantize_precision_attribute():
    # 2049 / 1 is exact in float32 but rounds to 2048 in float16 precision
    x = np.array([2049.0], np.float32)
    assert q(x, np.float32(1), np.uint16(0), opset=25).tolist() == [2049]
    assert q(x, np.float32(1), np.uint16(0), opset=25, precision=10).tolist() == [2048]  # FLOAT16


def test_quantize_opset10_and_13():
    x = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    check("QuantizeLinear", [x, np.float32(0.5), np.uint8(1)], opset=10)
    check("QuantizeLinear", [x, np.array([1.0, 2.0], np.float32), np.array([0, 3], np.int8)], dict(axis=0),
          opset=13)


def test_quantize_errors():
    x = np.ones((2, 3), np.float32)
    with pytest.raises(KernelError, match="per-axis scale has 2 values"):
        q(x, np.ones(2, np.float32), np.zeros(2, np.uint8), axis=1)
    with pytest.raises(KernelError, match="blocked scale shape"):
        q(x, np.ones((2, 1), np.float32), block_size=2, axis=1)
    with pytest.raises(KernelError, match="output_dtype"):
        q(x, np.float32(1), np.uint8(0), output_dtype=3, opset=21)
    with pytest.raises(KernelError, match="scalar scale only"):
        q(x, np.ones(3, np.float32), np.zeros(3, np.uint8), opset=10)
    with pytest.raises(KernelError, match="zero point shape"):
        q(x, np.ones(3, np.float32), np.zeros(2, np.uint8))
    with pytest.raises(KernelError, match="out of range"):
        q(x, np.ones(3, np.float32), axis=2)
    with pytest.raises(KernelError, match="not a quantized type"):
        q(x, np.float32(1), np.zeros((), np.int32))


# ---------------------------------------------------------------------------------------------
# DequantizeLinear
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", INTS, ids=lambda t: np.dtype(t).name)
def test_dequantize_integer_types(dtype):
    info = ml_dtypes.iinfo(dtype)
    x = np.array([info.min, 0, 1, info.max], dtype=dtype)
    y = dq(x, np.float32(0.5), np.array(1, dtype))
    assert y.dtype == np.float32
    assert y.tolist() == [(v - 1) * 0.5 for v in (int(info.min), 0, 1, int(info.max))]


def test_dequantize_per_axis_and_blocked():
    rng = np.random.default_rng(4)
    x = rng.integers(0, 255, (2, 3, 4)).astype(np.uint8)
    s, z = rng.uniform(0.1, 2, 3).astype(np.float32), rng.integers(0, 255, 3).astype(np.uint8)
    check("DequantizeLinear", [x, s, z], dict(axis=1), opset=21)
    sb = rng.uniform(0.1, 2, (2, 3, 2)).astype(np.float32)
    zb = rng.integers(0, 255, (2, 3, 2)).astype(np.uint8)
    check("DequantizeLinear", [x, sb, zb], dict(axis=2, block_size=2), opset=21)
    sb = rng.uniform(0.1, 2, (2, 3, 2)).astype(np.float32)
    check("DequantizeLinear", [x, sb], dict(axis=-1, block_size=3), opset=21)


def test_dequantize_int4_blocked_values():
    x = np.array([[-8, 7, 1, 2, 3]], ml_dtypes.int4)
    s = np.array([[2.0, 0.5]], np.float32)
    z = np.array([[1, -1]], ml_dtypes.int4)
    assert dq(x, s, z, axis=1, block_size=3).tolist() == [[-18, 12, 0, 1.5, 2]]


@pytest.mark.parametrize("dtype", F8, ids=lambda t: np.dtype(t).name)
def test_dequantize_float8(dtype):
    x = np.array([0, 1.5, -2, 96], np.float32).astype(dtype)
    check("DequantizeLinear", [x, np.float32(2)], opset=21)
    y = dq(x, np.float16(2))
    assert y.dtype == np.float16 and y.tolist() == [0, 3, -4, 192]


def test_dequantize_scale_types_and_output_dtype():
    x = np.array([0, 100, 255], np.uint8)
    check("DequantizeLinear", [x, np.float16(0.1), np.uint8(128)], opset=21)
    y = dq(x, np.array(0.5, ml_dtypes.bfloat16), np.uint8(128))
    assert y.dtype == ml_dtypes.bfloat16 and y.astype(np.float32).tolist() == [-64, -14, 63.5]
    y = dq(x, np.float32(0.5), np.uint8(128), opset=23, output_dtype=10)  # FLOAT16
    assert y.dtype == np.float16 and y.tolist() == [-64, -14, 63.5]
    e8 = np.array(4.0, ml_dtypes.float8_e8m0fnu)
    y = dq(x, e8, np.uint8(0), opset=24, output_dtype=1)
    assert y.dtype == np.float32 and y.tolist() == [0, 400, 1020]


def test_dequantize_int32_is_exact():
    x = np.array([2**31 - 1, -(2**31), 3], np.int32)
    y = dq(x, np.float32(1))
    np.testing.assert_array_equal(y, np.array([2**31 - 1, -(2**31), 3], np.float64).astype(np.float32))


def test_dequantize_errors():
    x = np.zeros(4, np.uint8)
    with pytest.raises(KernelError, match="zero point type"):
        dq(x, np.float32(1), np.int8(0))
    with pytest.raises(KernelError, match="set output_dtype"):
        dq(x, np.array(1.0, ml_dtypes.float8_e8m0fnu), opset=24)
    with pytest.raises(KernelError, match="not a floating-point type"):
        dq(x, np.float32(1), opset=23, output_dtype=6)


# ---------------------------------------------------------------------------------------------
# DynamicQuantizeLinear
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("data", [
    np.array([0, 2, -3, -2.5, 1.34, 0.5], np.float32),
    np.array([-1.0, -2.1, -1.3, -2.5, -3.34, -4.0], np.float32),
    np.array([1, 2.1, 1.3, 2.5, 3.34, 4.0, 1.5, 2.6, 3.9, 4.0, 3.0, 2.345], np.float32).reshape(3, 4),
    np.zeros(5, np.float32),
    np.random.default_rng(5).standard_normal((4, 7)).astype(np.float32),
], ids=["mixed", "negative", "positive", "zeros", "random"])
def test_dynamic_quantize(data):
    y, scale, zp = check("DynamicQuantizeLinear", [data], opset=11, n_outputs=3)
    assert y.dtype == np.uint8 and scale.dtype == np.float32 and zp.dtype == np.uint8
    assert scale.shape == () and zp.shape == ()


def test_dynamic_quantize_rejects_non_float32():
    with pytest.raises(KernelError, match="float32"):
        run_ours("DynamicQuantizeLinear", [np.zeros(3, np.float64)], opset=11, n_outputs=3)


def test_quantize_float8e8m0_scale():
    x = np.array([[3.0, 8.0], [5.0, 9.0]], np.float32)
    scale = np.array([2.0, 4.0], ml_dtypes.float8_e8m0fnu)
    assert q(x, scale, np.zeros(2, np.int8), axis=0, opset=24).tolist() == [[2, 4], [1, 2]]
