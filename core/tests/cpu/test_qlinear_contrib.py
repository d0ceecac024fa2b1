"""com.microsoft QLinearAdd, QLinearMul, QLinearSigmoid, QLinearLeakyRelu, QLinearConcat and QLinearSoftmax
against onnxruntime's own kernels. Scales are chosen so that many values land exactly on .5 steps: the
rounding (half to even, before or after the zero point) is what these tests pin down."""

from __future__ import annotations

import numpy as np
import pytest

from ort_core.errors import KernelError

from .kernel_harness import run_onnxruntime, run_ours

MS = "com.microsoft"
RNG = np.random.default_rng(11)
QTYPES = [np.uint8, np.int8]


def qrand(shape, dtype):
    info = np.iinfo(dtype)
    return RNG.integers(info.min, info.max + 1, shape).astype(dtype)


def scale(v):
    return np.array(v, dtype=np.float32)


def zp(v, dtype):
    return np.array(v, dtype=dtype)


def ours(op, inputs, attrs=None):
    return run_ours(op, inputs, attrs, opset=1, domain=MS)[0]


def check_q(op, inputs, attrs=None, max_off_by_one=0, ref_inputs=None):
    """Our output equals onnxruntime's in dtype and shape, and in value except for at most
    ``max_off_by_one`` elements that may differ by one step (table ties). ``ref_inputs``: what
    onnxruntime gets instead, where it refuses an omitted optional input that we take as 0."""
    y = ours(op, inputs, attrs)
    ref = run_onnxruntime(op, inputs if ref_inputs is None else ref_inputs, attrs)[0]
    assert y.dtype == ref.dtype and y.shape == ref.shape, (y.dtype, y.shape, ref.dtype, ref.shape)
    diff = np.abs(y.astype(np.int16) - ref.astype(np.int16))
    assert diff.max(initial=0) <= 1, f"largest difference {diff.max()}"
    assert np.count_nonzero(diff) <= max_off_by_one, f"{np.count_nonzero(diff)} elements differ by one"
    return y


# ---------------------------------------------------------------------------------------------
# QLinearAdd / QLinearMul
# ---------------------------------------------------------------------------------------------

SHAPES = [((2, 3, 20), (2, 3, 20)), ((2, 1, 20), (3, 1)), ((4, 20), ()), ((), (5,)), ((1, 9), (7, 1))]


@pytest.mark.parametrize("dtype", QTYPES)
@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
@pytest.mark.parametrize("shapes", SHAPES, ids=str)
def test_binary(op, dtype, shapes):
    a, b = qrand(shapes[0], dtype), qrand(shapes[1], dtype)
    sa, sb = scale(0.05), scale(0.1)
    sc = scale(0.1) if op == "QLinearAdd" else scale(0.05 * 0.1 * 64)
    y = check_q(op, [a, sa, zp(3, dtype), b, sb, zp(-7 if dtype == np.int8 else 7, dtype), sc, zp(5, dtype)])
    assert y.shape == np.broadcast_shapes(shapes[0], shapes[1])


@pytest.mark.parametrize("dtype", QTYPES)
@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
def test_binary_odd_scales_and_omitted_zero_points(op, dtype):
    a, b = qrand((3, 40), dtype), qrand((40,), dtype)
    z = zp(0, dtype)
    check_q(op, [a, scale(0.037), z, b, scale(0.011), zp(3, dtype), scale(0.029)])  # no C_zero_point
    # onnxruntime's type inference refuses an omitted A or B zero point, which the schema makes optional,
    # and 1-element vectors, which its kernel takes
    check_q(op, [a, scale([0.5]), None, b, scale(0.25), zp([1], dtype), scale(1.0), None],
            ref_inputs=[a, scale(0.5), z, b, scale(0.25), zp(1, dtype), scale(1.0)])


def test_add_rounds_after_the_zero_point():
    # 0.5 * 3 = 1.5 plus zero point 1 is 2.5, which rounds to 2 (half to even after adding the
    # zero point); rounding first would give 2 + 1 = 3
    args = [zp([3], np.uint8), scale(0.5), zp(0, np.uint8), zp([0], np.uint8), scale(1.0), zp(0, np.uint8),
            scale(1.0), zp(1, np.uint8)]
    assert ours("QLinearAdd", args).tolist() == [2]
    check_q("QLinearAdd", args)


def test_mul_saturates():
    a = np.array([127, -128, 100, 0], np.int8)
    z = zp(0, np.int8)
    y = check_q("QLinearMul", [a, scale(1.0), z, a, scale(1.0), z, scale(1.0), z])
    assert y.tolist() == [127, 127, 127, 0]


def test_binary_errors():
    a, s = qrand((2, 3), np.uint8), scale(0.1)
    with pytest.raises(KernelError, match="test_QLinearAdd.*do not broadcast"):
        ours("QLinearAdd", [a, s, None, qrand((4,), np.uint8), s, None, s])
    with pytest.raises(KernelError, match="A is uint8 but B is int8"):
        ours("QLinearAdd", [a, s, None, qrand((3,), np.int8), s, None, s])
    with pytest.raises(KernelError, match="'B' must be uint8 or int8"):
        ours("QLinearMul", [a, s, None, a.astype(np.float32), s, None, s])
    with pytest.raises(KernelError, match="'B_zero_point' has type int8"):
        ours("QLinearMul", [a, s, None, a, s, zp(0, np.int8), s])
    with pytest.raises(KernelError, match="'A_scale' must be a scalar or a 1-element vector"):
        ours("QLinearMul", [a, scale([0.1, 0.2]), None, a, s, None, s])
    with pytest.raises(KernelError, match="'C_scale' must be float32"):
        ours("QLinearAdd", [a, s, None, a, s, None, np.array(0.1)])
    with pytest.raises(KernelError, match="'C_scale' is required"):
        ours("QLinearAdd", [a, s, None, a, s])


# ---------------------------------------------------------------------------------------------
# QLinearSigmoid / QLinearLeakyRelu: every code through the table
# ---------------------------------------------------------------------------------------------

PARAMS = [(0.1, 0.05, 3, 7), (0.05, 1 / 256, 11, 0), (0.5, 0.2, 0, 1), (0.5, 1.0, 1, 2), (0.037, 0.0041, 100, 17)]


@pytest.mark.parametrize("dtype", QTYPES)
@pytest.mark.parametrize("xs,ys,xz,yz", PARAMS)
def test_sigmoid(dtype, xs, ys, xz, yz):
    x = np.arange(256).astype(np.uint8).view(dtype).reshape(4, 8, 8)
    # MLAS's logistic is an approximation: a tie could round one step apart (none seen so far)
    check_q("QLinearSigmoid", [x, scale(xs), zp(xz, dtype), scale(ys), zp(yz, dtype)], max_off_by_one=1)


@pytest.mark.parametrize("dtype", QTYPES)
@pytest.mark.parametrize("xs,ys,xz,yz", PARAMS)
@pytest.mark.parametrize("alpha", [None, 0.3, -1.5])
def test_leaky_relu(dtype, xs, ys, xz, yz, alpha):
    x = np.arange(256).astype(np.uint8).view(dtype).reshape(16, 16)
    attrs = {} if alpha is None else {"alpha": alpha}
    check_q("QLinearLeakyRelu", [x, scale(xs), zp(xz, dtype), scale(ys), zp(yz, dtype)], attrs)


@pytest.mark.parametrize("op", ["QLinearSigmoid", "QLinearLeakyRelu"])
def test_unary_omitted_zero_points_and_values(op):
    x = qrand((3, 5), np.int8)
    check_q(op, [x, scale(0.05), None, scale(1 / 256), None])
    check_q(op, [x, scale([0.05]), None, scale([1 / 128]), zp([-128], np.int8)])
    # onnxruntime crashes where Y_zero_point is left off the end of the inputs: we take it as 0
    check_q(op, [x, scale(0.05), zp(4, np.int8), scale(1 / 256)], ref_inputs=[x, scale(0.05), zp(4, np.int8),
                                                                               scale(1 / 256), None])
    # sigmoid(0) = 0.5 -> 0.5 / 0.2 = 2.5 rounds to 2, plus the zero point 1: 3
    y = ours(op, [np.array([4], np.uint8), scale(0.5), zp(4, np.uint8), scale(0.2), zp(1, np.uint8)])
    assert y.tolist() == [3 if op == "QLinearSigmoid" else 1]


def test_leaky_relu_values():
    x = np.array([10, 0, -10, -128], np.int8)
    y = ours("QLinearLeakyRelu", [x, scale(1.0), None, scale(1.0)], {"alpha": 0.25})
    assert y.tolist() == [10, 0, -2, -32]  # -2.5 rounds to -2


def test_unary_errors():
    x = qrand((4,), np.uint8)
    with pytest.raises(KernelError, match="test_QLinearSigmoid.*'X' must be uint8 or int8"):
        ours("QLinearSigmoid", [x.astype(np.int16), scale(0.1), None, scale(0.1)])
    with pytest.raises(KernelError, match="'Y_zero_point' has type int8"):
        ours("QLinearLeakyRelu", [x, scale(0.1), None, scale(0.1), zp(0, np.int8)])
    with pytest.raises(KernelError, match="'X_zero_point' must be a scalar"):
        ours("QLinearLeakyRelu", [x, scale(0.1), zp([1, 2], np.uint8), scale(0.1)])
    with pytest.raises(KernelError, match="'Y_scale' is required"):
        ours("QLinearSigmoid", [x, scale(0.1)])


# ---------------------------------------------------------------------------------------------
# QLinearConcat
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", QTYPES)
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concat(dtype, axis):
    shapes = [(2, 3, 4), (2, 3, 4), (2, 3, 4)]
    shapes = [s[:axis % 3] + (n,) + s[axis % 3 + 1:] for s, n in zip(shapes, (1, 3, 2))]
    xs = [qrand(s, dtype) for s in shapes]
    y_s, y_z = scale(0.1), zp(5, dtype)
    # the first input shares the output's quantization (copied), the others are requantized (one
    # with ties: 0.05 / 0.1 steps)
    inputs = [y_s, y_z, xs[0], scale(0.1), zp(5, dtype), xs[1], scale(0.05), zp(2, dtype),
              xs[2], scale([0.37]), zp([-3 if dtype == np.int8 else 3], dtype)]
    y = check_q("QLinearConcat", inputs, {"axis": axis})
    np.testing.assert_array_equal(np.take(y, range(shapes[0][axis]), axis=axis), xs[0])


def test_concat_single_input_and_values():
    x = np.array([[0, 1], [2, 3]], np.uint8)
    y = check_q("QLinearConcat", [scale(0.5), zp(3, np.uint8), x, scale(1.0), zp(3, np.uint8)], {"axis": 0})
    assert y.tolist() == [[0, 0], [1, 3]]  # (x - 3) / 0.5 + 3, saturated at 0
    same = ours("QLinearConcat", [scale(0.5), zp(3, np.uint8), x, scale(0.5), zp(3, np.uint8)], {"axis": 1})
    np.testing.assert_array_equal(same, x)
    assert not np.shares_memory(same, x)  # copied codes, never the input itself


def test_concat_errors():
    a, b = qrand((2, 3), np.uint8), qrand((3, 3), np.uint8)
    s, z = scale(0.1), zp(0, np.uint8)
    with pytest.raises(KernelError, match="test_QLinearConcat.*required attribute 'axis'"):
        ours("QLinearConcat", [s, z, a, s, z], {})
    with pytest.raises(KernelError, match="triples; got 4 inputs"):
        ours("QLinearConcat", [s, z, a, s], {"axis": 0})
    with pytest.raises(KernelError, match=r"input 1 of shape \(3, 3\) does not concatenate"):
        ours("QLinearConcat", [s, z, a, s, z, b, s, z], {"axis": 1})
    with pytest.raises(KernelError, match="input 1 is int8"):
        ours("QLinearConcat", [s, z, a, s, z, b.astype(np.int8), s, zp(0, np.int8)], {"axis": 0})
    with pytest.raises(KernelError, match="'zero point of input 1' is required"):
        ours("QLinearConcat", [s, z, a, s, z, b, s, None], {"axis": 0})
    with pytest.raises(KernelError, match="axis 2 is out of range"):
        ours("QLinearConcat", [s, z, a, s, z], {"axis": 2})


# ---------------------------------------------------------------------------------------------
# QLinearSoftmax
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", QTYPES)
@pytest.mark.parametrize("opset", [12, 13])
@pytest.mark.parametrize("axis", [None, 0, 1, -2])
def test_softmax_axes(dtype, opset, axis):
    x = qrand((3, 4, 5, 6), dtype)
    attrs = {"opset": opset} if axis is None else {"opset": opset, "axis": axis}
    y_z = zp(-128 if dtype == np.int8 else 0, dtype)
    check_q("QLinearSoftmax", [x, scale(0.08), zp(3, dtype), scale(1 / 256), y_z], attrs)


@pytest.mark.parametrize("dtype", QTYPES)
@pytest.mark.parametrize("y_scale", [1 / 256, 1 / 255, 0.003, 0.01, 1 / 128])
def test_softmax_scales(dtype, y_scale):
    x = qrand((8, 33), dtype)
    check_q("QLinearSoftmax", [x, scale(0.05), None, scale(y_scale), zp(7, dtype)], {"opset": 13})
    one = x[:, :1]  # one-element rows; y_zero_point omitted (onnxruntime's checker wants it, its kernel takes 0)
    check_q("QLinearSoftmax", [one, scale(0.2), None, scale(y_scale), None], {"opset": 13},
            ref_inputs=[one, scale(0.2), None, scale(y_scale), zp(0, dtype)])


def test_softmax_output_grid_is_one_over_floor_of_one_over_y_scale():
    # two equal codes: 0.5 each, times floor(1 / 0.003) = 333, is 166.5 -> 166 (not 0.5 / 0.003 = 167)
    x = np.array([[9, 9]], np.uint8)
    y = check_q("QLinearSoftmax", [x, scale(0.1), None, scale(0.003), zp(0, np.uint8)], {"opset": 13})
    assert y.tolist() == [[166, 166]]
    y = check_q("QLinearSoftmax", [x.astype(np.int8), scale(0.1), None, scale(1 / 256), zp(-128, np.int8)],
                {"opset": 13})
    assert y.tolist() == [[0, 0]]


def test_softmax_errors():
    x = qrand((2, 3), np.uint8)
    s = scale(0.1)
    with pytest.raises(KernelError, match="test_QLinearSoftmax.*required attribute 'opset'"):
        ours("QLinearSoftmax", [x, s, None, s, zp(0, np.uint8)], {})
    with pytest.raises(KernelError, match="axis 2 is out of range"):
        ours("QLinearSoftmax", [x, s, None, s, zp(0, np.uint8)], {"opset": 13, "axis": 2})
    with pytest.raises(KernelError, match="'y_scale' is required"):
        ours("QLinearSoftmax", [x, s], {"opset": 13})
    with pytest.raises(KernelError, match="'x_zero_point' has type int8"):
        ours("QLinearSoftmax", [x, s, zp(0, np.int8), s], {"opset": 13})
    with pytest.raises(KernelError, match="'X' must be uint8 or int8"):
        ours("QLinearSoftmax", [x.astype(np.float32), s, None, s], {"opset": 13})
