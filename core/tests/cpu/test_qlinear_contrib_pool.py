"""com.microsoft QLinearAveragePool and QLinearGlobalAveragePool against onnxruntime's own kernels."""

from __future__ import annotations

import numpy as np
import pytest

from ort_core.errors import KernelError

from .kernel_harness import run_onnxruntime, run_ours

MS = "com.microsoft"
RNG = np.random.default_rng(5)
QTYPES = [np.uint8, np.int8]
# (x_scale, y_scale): exact halves, a plain ratio and odd values
SCALES = [(0.5, 1.0), (0.05, 0.2), (0.037, 0.011)]


def qrand(shape, dtype):
    info = np.iinfo(dtype)
    return RNG.integers(info.min, info.max + 1, shape).astype(dtype)


def f32(v):
    return np.array(v, dtype=np.float32)


def ours(op, inputs, attrs=None):
    return run_ours(op, inputs, attrs, opset=1, domain=MS)[0]


def check_q(op, inputs, attrs=None, ref_inputs=None):
    """Our output equals onnxruntime's exactly, in dtype, shape and value."""
    y = ours(op, inputs, attrs)
    ref = run_onnxruntime(op, inputs if ref_inputs is None else ref_inputs, attrs)[0]
    assert y.dtype == ref.dtype and y.shape == ref.shape, (y.dtype, y.shape, ref.dtype, ref.shape)
    np.testing.assert_array_equal(y, ref)
    return y


def params(dtype, scales):
    return f32(scales[0]), np.array(RNG.integers(0, 60), dtype), f32(scales[1]), np.array(RNG.integers(0, 60), dtype)


# ---------------------------------------------------------------------------------------------
# QLinearAveragePool
# ---------------------------------------------------------------------------------------------

POOLS = [
    ((2, 3, 9), {"kernel_shape": [3]}),
    ((2, 3, 9), {"kernel_shape": [3], "strides": [2], "pads": [1, 2], "count_include_pad": 1}),
    ((2, 3, 8, 7), {"kernel_shape": [3, 2], "strides": [2, 2], "pads": [1, 0, 1, 1], "ceil_mode": 1}),
    # ceil_mode windows running past the padding: count_include_pad divides by the whole kernel
    ((2, 3, 8, 7), {"kernel_shape": [3, 2], "strides": [2, 2], "pads": [1, 0, 1, 1], "ceil_mode": 1,
                    "count_include_pad": 1}),
    ((2, 3, 8, 7), {"kernel_shape": [3, 3], "strides": [3, 3], "ceil_mode": 1, "count_include_pad": 1}),
    ((2, 3, 8, 7), {"kernel_shape": [3, 3], "auto_pad": "SAME_UPPER", "strides": [2, 2], "count_include_pad": 1}),
    ((2, 3, 8, 7), {"kernel_shape": [3, 3], "auto_pad": "SAME_LOWER", "strides": [2, 2]}),
    ((2, 3, 8, 7), {"kernel_shape": [2, 3], "auto_pad": "VALID", "strides": [2, 1]}),
    ((1, 2, 5, 6, 4), {"kernel_shape": [2, 3, 2], "strides": [1, 2, 2], "pads": [1, 1, 0, 0, 1, 1]}),
    # a kernel covering the whole image: onnxruntime switches to the global pool's integer path
    ((4, 16, 3, 5), {"kernel_shape": [3, 5]}),
    ((4, 16, 3, 5), {"kernel_shape": [3, 5], "pads": [0, 1, 0, 0], "count_include_pad": 1}),
]


@pytest.mark.parametrize("dtype", QTYPES)
@pytest.mark.parametrize("scales", SCALES, ids=str)
@pytest.mark.parametrize("shape,attrs", POOLS, ids=lambda v: str(v) if isinstance(v, tuple) else "")
def test_average_pool(dtype, scales, shape, attrs):
    xs, xz, ys, yz = params(dtype, scales)
    check_q("QLinearAveragePool", [qrand(shape, dtype), xs, xz, ys, yz], attrs)


@pytest.mark.parametrize("dtype", QTYPES)
@pytest.mark.parametrize("attrs", [{"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
                                   {"kernel_shape": [2, 2], "ceil_mode": 1, "strides": [2, 2]},
                                   {"kernel_shape": [8, 7]}], ids=str)
def test_average_pool_channels_last(dtype, attrs):
    xs, xz, ys, yz = params(dtype, (0.05, 0.2))
    x = qrand((2, 8, 7, 3), dtype)
    y = check_q("QLinearAveragePool", [x, xs, xz, ys, yz], {**attrs, "channels_last": 1})
    # the same pool on the NCHW layout, moved back
    nchw = ours("QLinearAveragePool", [np.ascontiguousarray(x.transpose(0, 3, 1, 2)), xs, xz, ys, yz], attrs)
    np.testing.assert_array_equal(y, nchw.transpose(0, 2, 3, 1))


def test_average_pool_omitted_zero_points_and_values():
    x = np.array([[[1, 2, 4, 9]]], np.uint8)
    # onnxruntime's type inference wants x_zero_point although the schema makes it optional: we take 0
    y = check_q("QLinearAveragePool", [x, f32(1.0), None, f32(1.0)], {"kernel_shape": [2]},
                ref_inputs=[x, f32(1.0), np.array(0, np.uint8), f32(1.0)])
    assert y.tolist() == [[[2, 3, 6]]]  # 1.5 -> 2, 3 -> 3, 6.5 -> 6: half to even
    # y_zero_point 1 is added before rounding: 2.5, 4, 7.5 -> 2, 4, 8
    y = check_q("QLinearAveragePool", [x, f32(1.0), np.array(0, np.uint8), f32(1.0), np.array(1, np.uint8)],
                {"kernel_shape": [2]})
    assert y.tolist() == [[[2, 4, 8]]]


def test_average_pool_errors():
    x, s, z = qrand((1, 2, 5, 5), np.uint8), f32(0.1), np.array(0, np.uint8)
    with pytest.raises(KernelError, match="test_QLinearAveragePool.*'kernel_shape' is missing"):
        ours("QLinearAveragePool", [x, s, z, s, z], {})
    with pytest.raises(KernelError, match="test_QLinearAveragePool.*does not match kernel_shape"):
        ours("QLinearAveragePool", [x, s, z, s, z], {"kernel_shape": [2]})
    with pytest.raises(KernelError, match="rank >= 3"):
        ours("QLinearAveragePool", [x[0, 0], s, z, s, z], {"kernel_shape": [2]})
    with pytest.raises(KernelError, match="no 'dilations' attribute"):
        ours("QLinearAveragePool", [x, s, z, s, z], {"kernel_shape": [2, 2], "dilations": [2, 2]})
    with pytest.raises(KernelError, match="unsupported auto_pad 'SAME'"):
        ours("QLinearAveragePool", [x, s, z, s, z], {"kernel_shape": [2, 2], "auto_pad": "SAME"})
    with pytest.raises(KernelError, match="channels_last must be 0 or 1"):
        ours("QLinearAveragePool", [x, s, z, s, z], {"kernel_shape": [2, 2], "channels_last": 2})
    with pytest.raises(KernelError, match="'x_zero_point' has type int8"):
        ours("QLinearAveragePool", [x, s, np.array(0, np.int8), s, z], {"kernel_shape": [2, 2]})
    with pytest.raises(KernelError, match="'y_scale' must be a scalar"):
        ours("QLinearAveragePool", [x, s, z, f32([0.1, 0.2]), z], {"kernel_shape": [2, 2]})


# ---------------------------------------------------------------------------------------------
# QLinearGlobalAveragePool
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", QTYPES)
@pytest.mark.parametrize("scales", SCALES + [(0.1, 0.1)], ids=str)
@pytest.mark.parametrize("shape,channels_last", [((2, 3, 5, 4), 0), ((2, 5, 4, 3), 1), ((2, 1, 7), 0),
                                                 ((2, 7, 1), 1), ((1, 2, 3, 4, 5), 0), ((3, 17, 9), 1)], ids=str)
def test_global_average_pool(dtype, scales, shape, channels_last):
    xs, xz, ys, yz = params(dtype, scales)
    y = check_q("QLinearGlobalAveragePool", [qrand(shape, dtype), xs, xz, ys, yz], {"channels_last": channels_last})
    spatial = range(1, len(shape) - 1) if channels_last else range(2, len(shape))
    assert y.shape == tuple(1 if i in spatial else n for i, n in enumerate(shape))


def test_global_average_pool_values():
    x = np.array([[[[0, 1], [2, 4]]], [[[10, 10], [10, 11]]]], np.uint8)  # (2, 1, 2, 2)
    # (7 - 4 * 1) / 4 = 0.75 -> 1; (41 - 4) / 4 = 9.25 -> 9; then y_zero_point 2
    y = check_q("QLinearGlobalAveragePool", [x, f32(1.0), np.array(1, np.uint8), f32(1.0), np.array(2, np.uint8)])
    assert y.ravel().tolist() == [3, 11]


def test_global_average_pool_errors():
    x, s, z = qrand((1, 2, 3, 3), np.int8), f32(0.1), np.array(0, np.int8)
    with pytest.raises(KernelError, match="test_QLinearGlobalAveragePool.*'y_zero_point' is required"):
        ours("QLinearGlobalAveragePool", [x, s, z, s, None])
    with pytest.raises(KernelError, match="rank >= 3"):
        ours("QLinearGlobalAveragePool", [x[0, 0], s, z, s, z])
    with pytest.raises(KernelError, match="'X' must be uint8 or int8"):
        ours("QLinearGlobalAveragePool", [x.astype(np.int32), s, z, s, z])
    with pytest.raises(KernelError, match="'x_scale' must be float32"):
        ours("QLinearGlobalAveragePool", [x, np.array(0.1), z, s, z])
    with pytest.raises(KernelError, match="empty image"):
        ours("QLinearGlobalAveragePool", [x[:, :, :0], s, z, s, z])
