"""Element-wise kernels (unary, binary, variadic, Clip, Where, Cast) against onnx's reference."""

from __future__ import annotations

import math

import numpy as np
import pytest
from onnx import TensorProto

from ort_core.errors import KernelError
from ort_core.providers.cpu.ops.elementwise import erf

from .kernel_harness import check, run_ours

rng = np.random.default_rng(0)


def f32(*shape, lo=-2.0, hi=2.0):
    return rng.uniform(lo, hi, shape).astype(np.float32)


# ---------------------------------------------------------------------------------- unary

UNARY_FLOAT = {
    "Abs": (-3, 3), "Neg": (-3, 3), "Exp": (-3, 3), "Log": (0.1, 5), "Sqrt": (0, 5),
    "Reciprocal": (0.5, 3), "Floor": (-3, 3), "Ceil": (-3, 3), "Round": (-3, 3),
    "Sign": (-3, 3), "Sin": (-3, 3), "Cos": (-3, 3), "Tan": (-1, 1), "Asin": (-0.9, 0.9),
    "Acos": (-0.9, 0.9), "Atan": (-3, 3), "Sinh": (-3, 3), "Cosh": (-3, 3), "Asinh": (-3, 3),
    "Acosh": (1.1, 4), "Atanh": (-0.9, 0.9), "Erf": (-3, 3),
}


@pytest.mark.parametrize("op", sorted(UNARY_FLOAT))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_unary_float(op, dtype):
    lo, hi = UNARY_FLOAT[op]
    x = rng.uniform(lo, hi, (3, 4)).astype(dtype)
    check(op, [x], opset=13 if op not in ("Round",) else 11)
    check(op, [x], opset=22 if op not in ("Abs", "Neg", "Exp", "Log", "Sqrt", "Reciprocal",
                                          "Floor", "Ceil", "Sign", "Erf") else 13)


def test_unary_float16_keeps_dtype():
    x = f32(5).astype(np.float16)
    for op in ("Abs", "Exp", "Sqrt", "Erf"):
        (y,) = run_ours(op, [np.abs(x)], opset=13)
        assert y.dtype == np.float16


@pytest.mark.parametrize("op", ["Abs", "Neg", "Sign"])
@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64])
def test_unary_int(op, dtype):
    x = rng.integers(-50, 50, (4, 3)).astype(dtype)
    check(op, [x], opset=13)


def test_round_half_to_even():
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.3, -4.7], np.float32)
    (y,) = check("Round", [x], opset=11)
    np.testing.assert_array_equal(y, [0, 2, 2, -0, -2, -2, 2, -5])


def test_opset1_unary_ignores_consumed_inputs():
    x = f32(3)
    (y,) = run_ours("Abs", [x], {"consumed_inputs": [0]}, opset=1)
    np.testing.assert_array_equal(y, np.abs(x))


def test_erf_is_ulp_accurate():
    for dtype, limit in ((np.float32, 4), (np.float64, 3)):
        x = np.concatenate([np.linspace(-7, 7, 20001), [0.0, 1e-30, -1e-8, 1e-3]]).astype(dtype)
        ref = np.array([math.erf(float(v)) for v in x])
        got = erf(x)
        assert got.dtype == dtype
        ulp = np.spacing(np.abs(ref).astype(dtype)).astype(np.float64)
        assert np.max(np.abs(got.astype(np.float64) - ref) / ulp) <= limit
    special = np.array([np.inf, -np.inf, np.nan, 1e30, -1e30], np.float32)
    np.testing.assert_array_equal(erf(special), [1, -1, np.nan, 1, -1])
    np.testing.assert_array_equal(erf(special.astype(np.float64)), [1, -1, np.nan, 1, -1])


def test_erf_integers():
    x = np.array([-5, -1, 0, 1, 3, 5], np.int32)
    check("Erf", [x], opset=13)


def test_isnan_isinf():
    x = np.array([1.0, np.nan, np.inf, -np.inf, 0.0, -2.0], np.float32)
    (y,) = check("IsNaN", [x], opset=20)
    np.testing.assert_array_equal(y, [False, True, False, False, False, False])
    for neg in (0, 1):
        for pos in (0, 1):
            (y,) = check("IsInf", [x], {"detect_negative": neg, "detect_positive": pos}, opset=20)
            assert y.sum() == neg + pos


def test_not_and_bitwise_not():
    b = rng.random((3, 4)) > 0.5
    (y,) = check("Not", [b], opset=1)
    np.testing.assert_array_equal(y, ~b)
    for dtype in (np.int8, np.uint16, np.int32, np.uint64):
        check("BitwiseNot", [rng.integers(0, 100, (5,)).astype(dtype)], opset=18)


# ---------------------------------------------------------------------------------- binary

ARITH = ["Add", "Sub", "Mul", "Div"]


@pytest.mark.parametrize("op", ARITH)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("shapes", [((3, 4), (3, 4)), ((2, 3, 4), (4,)), ((3, 1), (1, 5)),
                                    ((), (2, 2)), ((2, 1, 3), (4, 1))])
def test_arith_float_broadcast(op, dtype, shapes):
    a = f32(*shapes[0]).astype(dtype)
    b = f32(*shapes[1], lo=0.5, hi=2.0).astype(dtype)
    check(op, [a, b], opset=14, rtol=1e-3 if dtype == np.float16 else 1e-5)


@pytest.mark.parametrize("op", ARITH)
@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64, np.uint8, np.uint32])
def test_arith_int(op, dtype):
    if np.dtype(dtype).kind == "u":
        a = rng.integers(0, 100, (4, 5)).astype(dtype)
        b = rng.integers(1, 10, (5,)).astype(dtype)
    else:
        a = rng.integers(-100, 100, (4, 5)).astype(dtype)
        b = rng.integers(1, 10, (5,)).astype(dtype) * np.where(rng.random(5) > 0.5, 1, -1).astype(dtype)
    check(op, [a, b], opset=14)


def test_integer_div_truncates_toward_zero():
    a = np.array([7, -7, 7, -7, 6, -6, 0], np.int32)
    b = np.array([2, 2, -2, -2, 4, 4, 3], np.int32)
    (y,) = run_ours("Div", [a, b], opset=14)
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, [3, -3, -3, 3, 1, -1, 0])
    big = np.array([2**62 + 1, -(2**62) - 1], np.int64)
    (y,) = run_ours("Div", [big, np.array([3], np.int64)], opset=14)
    np.testing.assert_array_equal(y, [(2**62 + 1) // 3, -((2**62 + 1) // 3)])
    for dtype, bound in ((np.int64, 2**50), (np.int32, 2**31 - 1), (np.int16, 2**15 - 1)):
        a = rng.integers(-bound, bound, 5000).astype(dtype)
        b = (rng.integers(1, 1000, 5000) * rng.choice([-1, 1], 5000)).astype(dtype)
        (y,) = run_ours("Div", [a, b], opset=14)  # large inputs take the fast path via doubles
        exact = [(abs(int(p)) // abs(int(q))) * (1 if (p < 0) == (q < 0) else -1)
                 for p, q in zip(a, b)]
        assert y.dtype == dtype
        np.testing.assert_array_equal(y, exact)
    a = rng.integers(-(2**40), 2**40, 5000)
    b = rng.integers(1, 1000, 5000) * rng.choice([-1, 1], 5000)
    (y,) = run_ours("Div", [a, b], opset=14)  # large int64: the fast path through doubles
    np.testing.assert_array_equal(y, [int(p / q) if abs(p) < 2**52 else None for p, q in zip(a, b)])


def test_arith_does_not_mutate_inputs():
    a, b, c = f32(3, 4), f32(4), f32(3, 4)
    copies = [a.copy(), b.copy(), c.copy()]
    for op in ARITH:
        run_ours(op, [a, b], opset=14)
    run_ours("Sum", [a, b, c], opset=13)
    run_ours("Mean", [a, b, c], opset=13)
    run_ours("Clip", [a, np.array(-0.5, np.float32), np.array(0.5, np.float32)], opset=13)
    for x, x0 in zip((a, b, c), copies):
        np.testing.assert_array_equal(x, x0)


@pytest.mark.parametrize("op", ARITH + ["Pow"])
def test_legacy_broadcast(op):
    a = f32(2, 3, 4, lo=0.5)
    b_tail = f32(4, lo=0.5)
    b_mid = f32(3, lo=0.5)
    fn = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide,
          "Pow": np.power}[op]
    (y,) = run_ours(op, [a, b_tail], {"broadcast": 1}, opset=6)
    np.testing.assert_allclose(y, fn(a, b_tail), rtol=1e-6)
    (y,) = run_ours(op, [a, b_mid], {"broadcast": 1, "axis": 1}, opset=6)
    np.testing.assert_allclose(y, fn(a, b_mid[:, None]), rtol=1e-6)
    (y,) = run_ours(op, [a, np.array([2.0], np.float32)], {"broadcast": 1}, opset=1)
    np.testing.assert_allclose(y, fn(a, np.float32(2.0)), rtol=1e-6)
    (y,) = run_ours(op, [a, a], {}, opset=6)
    np.testing.assert_allclose(y, fn(a, a), rtol=1e-6)
    with pytest.raises(KernelError, match="broadcast=0"):
        run_ours(op, [a, b_tail], {}, opset=6)
    with pytest.raises(KernelError, match="legacy broadcast"):
        run_ours(op, [a, b_mid], {"broadcast": 1}, opset=6)


def test_legacy_broadcast_size1_dims():
    # Caffe2's rule (and pytorch's exported opset-6 models): B's size-1 dims stretch over A's
    a = np.arange(6, dtype=np.float64).reshape(2, 3)
    for b in (np.array([[10.0], [20.0]]), np.array([[10.0, 20.0, 30.0]])):
        (y,) = run_ours("Add", [a, b], {"broadcast": 1, "axis": 0}, opset=6)
        np.testing.assert_array_equal(y, a + b)
    x = f32(2, 3, 4)
    (y,) = run_ours("Mul", [x, np.ones((3, 1), np.float32) * 2], {"broadcast": 1, "axis": 1}, opset=6)
    np.testing.assert_allclose(y, x * 2)
    with pytest.raises(KernelError, match="legacy broadcast"):
        run_ours("Add", [a, np.ones((2, 2))], {"broadcast": 1, "axis": 0}, opset=6)
    with pytest.raises(KernelError, match="legacy broadcast"):
        run_ours("Add", [a, np.ones((3, 1))], {"broadcast": 1, "axis": 1}, opset=6)


def test_legacy_comparison_and_logic_broadcast():
    a = f32(2, 3)
    b = f32(3)
    (y,) = run_ours("Less", [a, b], {"broadcast": 1}, opset=1)
    np.testing.assert_array_equal(y, a < b)
    p, q = rng.random((2, 3)) > 0.5, rng.random(2) > 0.5
    (y,) = run_ours("And", [p, q], {"broadcast": 1, "axis": 0}, opset=1)
    np.testing.assert_array_equal(y, p & q[:, None])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_pow_float(dtype):
    a = f32(3, 4, lo=0.1, hi=3).astype(dtype)
    check("Pow", [a, f32(3, 4).astype(dtype)], opset=7)
    check("Pow", [a, np.array(2.0, dtype)], opset=15)
    check("Pow", [a, np.array([3], np.int64)], opset=15)
    check("Pow", [a, np.array(0.5, np.float32)], opset=15)


def test_pow_keeps_base_dtype():
    a = np.array([1, 2, 3, -2], np.int32)
    check("Pow", [a, np.array([2, 3, 0, 3], np.int32)], opset=15)
    check("Pow", [a, np.array(2, np.int64)], opset=15)
    (y,) = check("Pow", [a, np.array([0.5, 2.0, 1.0, 2.0], np.float32)], opset=15)
    np.testing.assert_array_equal(y, [1, 4, 3, 4])
    (y,) = run_ours("Pow", [np.array([2, 1, -1], np.int64), np.array(-1, np.int64)], opset=15)
    assert y.dtype == np.int64
    np.testing.assert_array_equal(y, [0, 1, -1])
    (y,) = run_ours("Pow", [np.float16([2, 3]), np.float32([2, 0.5])], opset=15)
    assert y.dtype == np.float16


@pytest.mark.parametrize("fmod", [0, 1])
@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.int8, np.float32, np.float64])
def test_mod(fmod, dtype):
    if np.dtype(dtype).kind == "f" and fmod == 0:
        a = f32(4, 5, lo=-10, hi=10).astype(dtype)
        b = f32(5, lo=1, hi=3).astype(dtype) * np.array([1, -1, 1, -1, 1], dtype)
    elif np.dtype(dtype).kind == "f":
        a = f32(4, 5, lo=-10, hi=10).astype(dtype)
        b = f32(5, lo=1, hi=3).astype(dtype)
    else:
        a = rng.integers(-20, 20, (4, 5)).astype(dtype)
        b = np.array([3, -3, 7, -5, 2], dtype)
    check("Mod", [a, b], {"fmod": fmod}, opset=13)


def test_mod_sign_semantics():
    a = np.array([-4, 7, 5, -7], np.int32)
    b = np.array([3, -3, 2, -2], np.int32)
    (y,) = run_ours("Mod", [a, b], {"fmod": 0}, opset=13)
    np.testing.assert_array_equal(y, [2, -2, 1, -1])  # sign of the divisor
    (y,) = run_ours("Mod", [a, b], {"fmod": 1}, opset=13)
    np.testing.assert_array_equal(y, [-1, 1, 1, -1])  # sign of the dividend
    with pytest.raises(KernelError, match="fmod"):
        run_ours("Mod", [a, b], {"fmod": 2}, opset=13)


@pytest.mark.parametrize("op", ["Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64, np.uint8])
def test_comparisons(op, dtype):
    a = rng.integers(0, 5, (3, 4)).astype(dtype)
    b = rng.integers(0, 5, (4,)).astype(dtype)
    (y,) = check(op, [a, b], opset=16)
    assert y.dtype == np.bool_


def test_equal_strings_and_bools():
    a = np.array(["a", "b", "c"], dtype=object)
    b = np.array(["a", "x", "c"], dtype=object)
    (y,) = run_ours("Equal", [a, b], opset=19)
    assert y.dtype == np.bool_
    np.testing.assert_array_equal(y, [True, False, True])
    p = np.array([True, False])
    check("Equal", [p, np.array([True, True])], opset=11)


@pytest.mark.parametrize("op", ["And", "Or", "Xor"])
def test_logic(op):
    a = rng.random((2, 3, 4)) > 0.5
    b = rng.random((3, 1)) > 0.5
    check(op, [a, b], opset=7)


@pytest.mark.parametrize("op", ["BitwiseAnd", "BitwiseOr", "BitwiseXor"])
@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.int32, np.uint64])
def test_bitwise(op, dtype):
    a = rng.integers(0, 120, (3, 4)).astype(dtype)
    b = rng.integers(0, 120, (4,)).astype(dtype)
    check(op, [a, b], opset=18)


@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.uint32, np.uint64])
def test_bitshift_unsigned(direction, dtype):
    x = rng.integers(0, 200, (3, 4)).astype(dtype)
    y = rng.integers(0, 6, (4,)).astype(dtype)
    check("BitShift", [x, y], {"direction": direction}, opset=11)


@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64, np.uint8])
def test_bitshift_opset28_out_of_range_shifts(direction, dtype):
    bits = np.dtype(dtype).itemsize * 8
    signed = np.dtype(dtype).kind == "i"
    x = np.array([5, -5, 1, -1, 100, -100] if signed else [5, 250, 1, 3, 100, 7], dtype)
    y = np.array([1, 2, bits - 1, bits, bits + 3, -1 if signed else 0], dtype)
    (z,) = check("BitShift", [x, y], {"direction": direction}, opset=28)
    if direction == "RIGHT" and signed:
        assert z[3] == -1 and z[4] == 0  # sign fill for negative X, 0 otherwise
        assert z[5] == -1
    if direction == "LEFT":
        assert z[3] == 0 and z[4] == 0


def test_bitshift_bad_direction():
    with pytest.raises(KernelError, match="direction"):
        run_ours("BitShift", [np.uint8([1]), np.uint8([1])], {"direction": "UP"}, opset=11)


# ---------------------------------------------------------------------------------- variadic

@pytest.mark.parametrize("op", ["Sum", "Max", "Min", "Mean"])
@pytest.mark.parametrize("opset", [6, 8, 13])
def test_variadic(op, opset):
    xs = [f32(3, 4) for _ in range(3)]
    check(op, xs[:1], opset=opset)
    check(op, xs[:2], opset=opset)
    check(op, xs, opset=opset)
    if opset >= 8:
        xs = [f32(3, 1), f32(4), f32(2, 3, 4)]
        if op != "Mean":  # the reference's Mean cannot broadcast; compare with numpy instead
            check(op, xs, opset=opset)
            check(op, xs[1:], opset=opset)
        (y,) = run_ours(op, xs, opset=opset)
        fn = {"Sum": np.add, "Max": np.maximum, "Min": np.minimum, "Mean": np.add}[op]
        expected = fn(fn(xs[0], xs[1]), xs[2]) / (3 if op == "Mean" else 1)
        assert y.dtype == np.float32
        np.testing.assert_allclose(y, expected, rtol=1e-6)


@pytest.mark.parametrize("op", ["Max", "Min"])
def test_variadic_int_max_min(op):
    xs = [rng.integers(-9, 9, (2, 3)).astype(np.int32) for _ in range(3)]
    check(op, xs, opset=13)


# ---------------------------------------------------------------------------------- Clip, Where

@pytest.mark.parametrize("opset", [11, 12, 13])
def test_clip_inputs(opset):
    x = f32(4, 5, lo=-3, hi=3)
    lo, hi = np.array(-1.0, np.float32), np.array(1.5, np.float32)
    (y,) = check("Clip", [x, lo, hi], opset=opset)
    assert y.min() >= -1 and y.max() <= 1.5
    check("Clip", [x, lo], opset=opset)
    check("Clip", [x, None, hi], opset=opset)
    (y,) = check("Clip", [x], opset=opset)
    np.testing.assert_array_equal(y, x)


def test_clip_int_and_min_above_max():
    x = rng.integers(-10, 10, (6,)).astype(np.int32)
    check("Clip", [x, np.array(-2, np.int32), np.array(3, np.int32)], opset=13)
    (y,) = run_ours("Clip", [f32(5), np.array(2.0, np.float32), np.array(1.0, np.float32)], opset=13)
    np.testing.assert_array_equal(y, np.full(5, 1.0, np.float32))  # min > max: all max


def test_clip_attributes():
    x = f32(3, 4, lo=-3, hi=3)
    (y,) = check("Clip", [x], {"min": -0.5, "max": 0.5}, opset=6)
    assert y.dtype == np.float32 and y.min() >= -0.5 and y.max() <= 0.5
    (y,) = run_ours("Clip", [x], {"min": -0.5}, opset=6)
    np.testing.assert_array_equal(y, np.maximum(x, np.float32(-0.5)))
    (y,) = run_ours("Clip", [x], {"max": 0.0, "consumed_inputs": [0]}, opset=1)
    np.testing.assert_array_equal(y, np.minimum(x, 0))
    (y,) = run_ours("Clip", [x.astype(np.float16)], {"min": 0.0}, opset=6)
    assert y.dtype == np.float16


def test_where():
    c = rng.random((3, 1)) > 0.5
    check("Where", [c, f32(3, 4), f32(4)], opset=16)
    check("Where", [c, rng.integers(0, 9, (4,)), rng.integers(0, 9, (3, 4))], opset=9)


# ---------------------------------------------------------------------------------- Cast

NUMERIC = [TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.INT8,
           TensorProto.INT16, TensorProto.INT32, TensorProto.INT64, TensorProto.UINT8,
           TensorProto.UINT16, TensorProto.UINT32, TensorProto.UINT64, TensorProto.BOOL,
           TensorProto.BFLOAT16]


@pytest.mark.parametrize("to", NUMERIC)
@pytest.mark.parametrize("src", [np.float32, np.int64, np.int8, np.bool_, np.float16, np.uint8])
def test_cast_numeric(to, src):
    x = rng.uniform(0, 100, (3, 4)).astype(src)
    check("Cast", [x], {"to": to}, opset=13 if to != TensorProto.BFLOAT16 else 21,
          rtol=1e-2 if to in (TensorProto.FLOAT16, TensorProto.BFLOAT16) else 1e-6)


def test_cast_semantics():
    x = np.array([0.0, -0.0, 0.5, np.nan, -2.0], np.float32)
    (y,) = run_ours("Cast", [x], {"to": TensorProto.BOOL}, opset=13)
    np.testing.assert_array_equal(y, [False, False, True, True, True])
    (y,) = run_ours("Cast", [np.array([200, -56, 300], np.int32)], {"to": TensorProto.INT8}, opset=13)
    np.testing.assert_array_equal(y, [-56, -56, 44])  # wraps two's complement
    (y,) = run_ours("Cast", [np.array([2.7, -2.7], np.float32)], {"to": TensorProto.INT32}, opset=13)
    np.testing.assert_array_equal(y, [2, -2])
    x = f32(4)
    (y,) = run_ours("Cast", [x], {"to": TensorProto.FLOAT}, opset=13)
    assert y is x  # no-op cast: no copy


def test_cast_opset1_string_type_names():
    x = f32(3, lo=-5, hi=5)
    (y,) = run_ours("Cast", [x], {"to": "INT32"}, opset=1)
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, x.astype(np.int32))
    (y,) = run_ours("Cast", [x], {"to": "double"}, opset=5)
    assert y.dtype == np.float64
    with pytest.raises(KernelError, match="unknown"):
        run_ours("Cast", [x], {"to": "FLOAT99"}, opset=1)


def test_cast_from_strings():
    x = np.array(["1.5", "-2e3", "INF", "-inf", "NaN", "+INF"], dtype=object)
    (y,) = run_ours("Cast", [x], {"to": TensorProto.FLOAT}, opset=13)
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y, [1.5, -2000, np.inf, -np.inf, np.nan, np.inf])
    (y,) = run_ours("Cast", [np.array(["12", "-7"], dtype=object)], {"to": TensorProto.INT64},
                    opset=13)
    np.testing.assert_array_equal(y, [12, -7])


def test_cast_to_string_is_a_clear_error():
    with pytest.raises(KernelError, match="to string is not supported"):
        run_ours("Cast", [f32(2)], {"to": TensorProto.STRING}, opset=13)
    strings = np.array(["a", "b"], dtype=object)
    (y,) = run_ours("Cast", [strings], {"to": TensorProto.STRING}, opset=13)
    assert y is strings  # string to string is the identity


@pytest.mark.parametrize("to", [TensorProto.INT4, TensorProto.UINT4])
def test_cast_4bit(to):
    x = np.array([0, 1, 5, 7, -3, 2], np.int32) if to == TensorProto.INT4 else np.arange(6, dtype=np.int32)
    (y,) = check("Cast", [x], {"to": to}, opset=21)
    np.testing.assert_array_equal(y.astype(np.int32), x)


@pytest.mark.parametrize("to", [TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E5M2,
                                TensorProto.FLOAT8E4M3FNUZ, TensorProto.FLOAT8E5M2FNUZ])
@pytest.mark.parametrize("saturate", [0, 1])
def test_cast_float8(to, saturate):
    x = np.array([0.0, 1.0, -3.5, 100.0, 1e6, -1e6, np.inf, -np.inf, np.nan], np.float32)
    if not saturate:
        x = x[:4]  # out-of-range values are implementation-defined without saturation
    check("Cast", [x], {"to": to, "saturate": saturate}, opset=19)


def test_cast_e8m0_rounding_and_saturation():
    import ml_dtypes

    to = TensorProto.FLOAT8E8M0
    x = np.array([0.0, 2.0**-130, 0.124, 0.25, 1.1, 1.5, 1.49, 3.0, 2.0**127 * 1.5, 3e38, np.inf,
                  np.nan], np.float32)
    expect = {  # biased exponents: value = 2^(e - 127), 255 is NaN
        "up": [0, 0, 124, 125, 128, 128, 128, 129, 254, 254, 254, 255],
        "down": [0, 0, 123, 125, 127, 127, 127, 128, 254, 254, 254, 255],
        "nearest": [0, 0, 124, 125, 127, 128, 127, 129, 254, 254, 254, 255],
    }
    for mode, bits in expect.items():
        (y,) = run_ours("Cast", [x], {"to": to, "round_mode": mode}, opset=24)
        assert y.dtype == np.dtype(ml_dtypes.float8_e8m0fnu)
        np.testing.assert_array_equal(y.view(np.uint8), bits, err_msg=mode)
    # without saturation, values outside [2^-127, 2^127] (zero and inf included) become NaN
    (y,) = run_ours("Cast", [x], {"to": to, "saturate": 0, "round_mode": "nearest"}, opset=24)
    np.testing.assert_array_equal(y.view(np.uint8), [255, 255, 124, 125, 127, 128, 127, 129, 255, 255,
                                                     255, 255])
    # float16 and float64 sources; back to float
    (y,) = run_ours("Cast", [np.array([0.3, 4.0], np.float16)], {"to": to}, opset=24)
    np.testing.assert_array_equal(y.astype(np.float32), [0.5, 4.0])
    (y,) = run_ours("Cast", [np.array([1.0 + 2.0**-40], np.float64)], {"to": to}, opset=24)
    np.testing.assert_array_equal(y.astype(np.float32), [2.0])  # no rounding through float32
    (z,) = run_ours("Cast", [y], {"to": TensorProto.FLOAT}, opset=24)
    assert z.dtype == np.float32 and z.tolist() == [2.0]
    with pytest.raises(KernelError, match="round_mode"):
        run_ours("Cast", [x], {"to": to, "round_mode": "zero"}, opset=24)


def test_cast_like():
    x = f32(3, 4, lo=-10, hi=10)
    check("CastLike", [x, np.array([1], np.int32)], opset=15)
    check("CastLike", [x, np.array([1.0], np.float16)], opset=19, rtol=1e-2)
    check("CastLike", [x.astype(np.int64), np.array([1.0], np.float64)], opset=21)
    (y,) = run_ours("CastLike", [x, np.zeros(1, np.float32)], opset=15)
    assert y is x


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int64, np.int8, np.bool_, np.float64])
@pytest.mark.parametrize("yshape", [(64, 1024), (1024,), ()])
def test_where_large_inputs(dtype, yshape):
    # large inputs use a branch-free bitwise select; it must agree with np.where exactly
    cond = rng.random((64, 1024)) > 0.5
    x = (rng.standard_normal((64, 1024)) * 100).astype(dtype)
    y = (rng.standard_normal(yshape) * 100).astype(dtype)
    if dtype == np.float32:
        x[0, :4] = [np.nan, np.inf, -np.inf, -0.0]
    (out,) = check("Where", [cond, x, y], opset=16)
    assert out.dtype == dtype
    np.testing.assert_array_equal(out, np.where(cond, x, y))
    (out,) = run_ours("Where", [cond[:1], x, y], opset=16)  # broadcast condition
    np.testing.assert_array_equal(out, np.where(cond[:1], x, y))


def test_clip_one_sided_integers():
    x = rng.integers(-100, 100, (50,)).astype(np.int16)
    (y,) = check("Clip", [x, np.array(-5, np.int16)], opset=13)
    assert y.min() == -5 and y.max() == x.max()
    (y,) = check("Clip", [x.astype(np.uint8), None, np.array(7, np.uint8)], opset=13)
    assert y.max() == 7
    (y,) = run_ours("Clip", [np.array([np.nan, 3.0], np.float32), np.array(0, np.float32)], opset=13)
    np.testing.assert_array_equal(y, [np.nan, 3.0])


def test_scalar_operands_give_arrays():
    # ufuncs return numpy scalars for 0-d operands; kernels must still return ndarrays
    s = np.array(0.75, np.float32)
    i = np.array(-7, np.int64)
    cases = [("Erf", [s], 13), ("Erf", [s.astype(np.float64)], 13), ("Exp", [s], 13),
             ("Abs", [i], 13), ("Add", [s, s], 14), ("Div", [i, np.array(2, np.int64)], 14),
             ("Div", [i.astype(np.int32), np.array(2, np.int32)], 14), ("Pow", [s, s], 15),
             ("Mod", [i, np.array(3, np.int64)], 13), ("Less", [s, s], 13), ("Sum", [s, s, s], 13),
             ("Mean", [s, s], 13), ("Max", [s, s, s], 13), ("Clip", [s, np.array(0, np.float32)], 13),
             ("IsInf", [s], 20), ("Where", [np.array(True), s, s], 16),
             ("Cast", [s], 13), ("BitShift", [np.array(3, np.uint8), np.array(1, np.uint8)], 11)]
    for op, inputs, opset in cases:
        attrs = {"to": TensorProto.INT32} if op == "Cast" else {}
        if op == "BitShift":
            attrs = {"direction": "LEFT"}
        (y,) = check(op, inputs, attrs, opset=opset)
        assert type(y) is np.ndarray and y.shape == (), op
    (y,) = run_ours("Add", [s, s], {"broadcast": 1}, opset=6)
    assert type(y) is np.ndarray and y == 1.5
