"""CPU kernels for element-wise ops: unary math, binary arithmetic/comparison/logic/bitwise,
variadic Sum/Max/Min/Mean, Clip, Where, Cast and CastLike.

Activations (Relu, Sigmoid, Tanh, ...) live in the activation module, not here.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from onnx import TensorProto

from ....errors import KernelError
from ....ir.graph import Node
from ....ir.types import elem_type_name, elem_type_of, np_dtype
from ....limits import check_broadcast
from ..registry import register


def _nd(r) -> np.ndarray:
    """ufuncs return numpy scalars for 0-d operands; kernels always return arrays."""
    return r if type(r) is np.ndarray else np.asarray(r)


# --------------------------------------------------------------------------------------------
# Erf: numpy has no erf, so it is computed here from polynomials (no per-element Python).
# --------------------------------------------------------------------------------------------

# float32 (and narrower): erf(x) = tanh(x * P(x^2)). P was fitted once, offline, to
# atanh(erf(x)) / x on [0, 3.95] by weighted minimax (Lawson iterations) so that the
# relative error of erf stays below 1e-7 (measured: <= 3 float32 ulp over the whole
# line). P is positive for x^2 >= 0, so tanh saturates to +-1 for large |x|, inf and NaN
# propagate correctly and no clamping is needed.
_ERF_TANH_P = (1.12837925e+00, 1.02769864e-01, -1.95287945e-04, -6.14838505e-04,
               8.45967231e-05, -4.79464019e-06, 2.75800983e-08, 5.42143643e-09)
_ERF_TANH_P32 = tuple(np.float32(c) for c in _ERF_TANH_P)


def _erf_f32(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):  # x*x overflows to inf for |x| > 1.8e19: still fine
        z = x * x
    c = _ERF_TANH_P32
    r = z * c[-1]
    r += c[-2]
    for k in range(len(c) - 3, -1, -1):
        r *= z
        r += c[k]
    r *= x
    return np.tanh(r, out=r)


def _erf_f64_table(step: float, amax: float, degree: int) -> list[np.ndarray]:
    """Taylor coefficients of erf around the centers 0, step, 2*step, ..., amax.

    erf^(k)(c) = 2/sqrt(pi) * (-1)^(k-1) * H_(k-1)(c) * exp(-c^2) with H the physicists'
    Hermite polynomials; erf(c) itself comes from math.erf (computed once, at import).
    """
    n = round(amax / step) + 1
    coefs = np.zeros((degree + 1, n))
    for i in range(n):
        c = i * step
        g = 2.0 / math.sqrt(math.pi) * math.exp(-c * c)
        coefs[0, i] = math.erf(c)
        h_prev, h, fact = 0.0, 1.0, 1.0
        for k in range(1, degree + 1):
            fact *= k
            coefs[k, i] = (-1) ** (k - 1) * h * g / fact
            h_prev, h = h, 2.0 * c * h - 2.0 * (k - 1) * h_prev
    return [np.ascontiguousarray(row) for row in coefs]


# float64: piecewise Taylor polynomials on intervals of width 1/8 (<= 2 ulp). Beyond 6,
# erf(x) rounds to 1 in double precision.
_ERF64_STEP, _ERF64_MAX = 0.125, 6.0
_ERF64_ROWS = _erf_f64_table(_ERF64_STEP, _ERF64_MAX, 13)


def _erf_f64(x: np.ndarray) -> np.ndarray:
    a = np.abs(x)
    np.fmin(a, _ERF64_MAX, out=a)  # NaN -> 6 here; the sign factor restores NaN below
    k = a * (1.0 / _ERF64_STEP)
    np.rint(k, out=k)
    idx = k.astype(np.intp)
    k *= _ERF64_STEP
    d = np.subtract(a, k, out=a)  # offset from the interval center, |d| <= 1/16
    r = _ERF64_ROWS[-1].take(idx)
    for row in _ERF64_ROWS[-2::-1]:
        r *= d
        r += row.take(idx)
    r *= np.sign(x)
    return r


def erf(x: np.ndarray) -> np.ndarray:
    """Vectorized error function keeping the input's dtype."""
    if x.ndim == 0:
        return erf(x.reshape(1)).reshape(())
    if x.dtype == np.float32:
        return _erf_f32(x)
    if x.dtype == np.float64:
        return _erf_f64(x)
    # float16/bfloat16 and integers: float32 math, result cast back (ints give 0 or +-1)
    return _erf_f32(x.astype(np.float32)).astype(x.dtype)


# --------------------------------------------------------------------------------------------
# Unary ops
# --------------------------------------------------------------------------------------------

_UNARY = {
    # name: (function, first opset)
    "Abs": (np.abs, 1), "Neg": (np.negative, 1), "Exp": (np.exp, 1), "Log": (np.log, 1),
    "Sqrt": (np.sqrt, 1), "Reciprocal": (np.reciprocal, 1), "Floor": (np.floor, 1),
    "Ceil": (np.ceil, 1), "Round": (np.rint, 11), "Sign": (np.sign, 9),
    "Sin": (np.sin, 7), "Cos": (np.cos, 7), "Tan": (np.tan, 7), "Asin": (np.arcsin, 7),
    "Acos": (np.arccos, 7), "Atan": (np.arctan, 7), "Sinh": (np.sinh, 9), "Cosh": (np.cosh, 9),
    "Asinh": (np.arcsinh, 9), "Acosh": (np.arccosh, 9), "Atanh": (np.arctanh, 9),
    "Erf": (erf, 9), "IsNaN": (np.isnan, 9), "Not": (np.logical_not, 1),
    "BitwiseNot": (np.invert, 18),
}


def _unary_factory(fn):
    def factory(node: Node, opset: int):
        def kernel(x):
            return (_nd(fn(x)),)
        return kernel
    return factory


for _name, (_fn, _since) in _UNARY.items():
    register(_name, since=_since)(_unary_factory(_fn))


@register("IsInf", since=10)
def _isinf(node: Node, opset: int):
    neg = bool(node.attr("detect_negative", 1))
    pos = bool(node.attr("detect_positive", 1))
    if neg and pos:
        fn = np.isinf
    elif neg:
        fn = np.isneginf
    elif pos:
        fn = np.isposinf
    else:
        def kernel(x):
            return (np.zeros(x.shape, dtype=bool),)
        return kernel

    def kernel(x):
        return (_nd(fn(x)),)
    return kernel


# --------------------------------------------------------------------------------------------
# Binary ops
# --------------------------------------------------------------------------------------------

_EXACT_IN_DOUBLE = 2**53


def _div(a, b):
    if a.dtype.kind == "i":  # C-style division: truncate toward zero
        # Through doubles when every value is below 2^53 in magnitude: trunc(a / b) is then
        # exact (the rounding error of a / b is smaller than its distance to any other
        # integer) and several times faster than numpy's integer division.
        if a.dtype.itemsize <= 4 or (a.size > 1024 and
                                     max(-int(a.min()), int(a.max())) < _EXACT_IN_DOUBLE):
            q = _nd(np.true_divide(a, b))
            np.trunc(q, out=q)
            return q.astype(a.dtype)
        q = _nd(np.subtract(a, np.fmod(a, b)))  # an exact multiple of b, broadcast shape
        return np.floor_divide(q, b, out=q)
    if a.dtype.kind == "u":
        return np.floor_divide(a, b)
    return np.divide(a, b)


def _pow(a, b):
    if b.ndim == 0 and a.dtype.kind == "f" and b == 2:
        return np.square(a)
    try:
        r = np.power(a, b)
    except ValueError:  # integers to negative integer powers: go through floats
        r = np.power(a.astype(np.float64), b)
    return r if r.dtype == a.dtype else r.astype(a.dtype)


_BINARY = {
    # name: (function, first opset of the numpy-broadcasting form, first opset overall)
    "Add": (np.add, 7, 1), "Sub": (np.subtract, 7, 1), "Mul": (np.multiply, 7, 1),
    "Div": (_div, 7, 1), "Pow": (_pow, 7, 1),
    "Equal": (np.equal, 7, 1), "Less": (np.less, 7, 1), "Greater": (np.greater, 7, 1),
    "LessOrEqual": (np.less_equal, 12, 12), "GreaterOrEqual": (np.greater_equal, 12, 12),
    "And": (np.logical_and, 7, 1), "Or": (np.logical_or, 7, 1), "Xor": (np.logical_xor, 7, 1),
    "BitwiseAnd": (np.bitwise_and, 18, 18), "BitwiseOr": (np.bitwise_or, 18, 18),
    "BitwiseXor": (np.bitwise_xor, 18, 18),
}


def _binary_factory(fn):
    def factory(node: Node, opset: int):
        label = node.label

        def kernel(a, b):
            if a.shape != b.shape:
                check_broadcast(label, a, b)
            return (_nd(fn(a, b)),)
        return kernel
    return factory


def _legacy_binary_factory(fn):
    """Opset < 7 form: shapes must match unless ``broadcast=1``, which lets B (a suffix of
    A's shape, or a run of A's dims starting at ``axis``) broadcast onto A. As in Caffe2, where
    this rule comes from (and as exporters rely on), a B dim of size 1 stretches over A's."""
    def factory(node: Node, opset: int):
        broadcast = int(node.attr("broadcast", 0))
        axis = node.attr("axis")

        def kernel(a, b):
            if not broadcast:
                if a.shape != b.shape:
                    raise KernelError(f"{node.label}: input shapes {a.shape} and {b.shape} differ "
                                      "and broadcast=0 (legacy opset < 7 semantics)")
                return (_nd(fn(a, b)),)
            if b.size == 1 and b.ndim <= a.ndim:
                return (_nd(fn(a, b.reshape(()))),)
            ax = a.ndim - b.ndim if axis is None else int(axis) % max(a.ndim, 1)
            if ax < 0 or ax + b.ndim > a.ndim or any(
                    bd not in (ad, 1) for bd, ad in zip(b.shape, a.shape[ax:])):
                raise KernelError(f"{node.label}: cannot broadcast B of shape {b.shape} onto A of "
                                  f"shape {a.shape} at axis {ax} (legacy broadcast)")
            return (_nd(fn(a, b.reshape(b.shape + (1,) * (a.ndim - ax - b.ndim)))),)
        return kernel
    return factory


for _name, (_fn, _modern, _first) in _BINARY.items():
    if _modern > _first:
        register(_name, since=_first, until=_modern - 1)(_legacy_binary_factory(_fn))
    register(_name, since=_modern)(_binary_factory(_fn))


@register("Mod", since=10)
def _mod(node: Node, opset: int):
    fmod = int(node.attr("fmod", 0))
    if fmod not in (0, 1):
        raise KernelError(f"{node.label}: fmod must be 0 or 1, got {fmod}")
    fn = np.fmod if fmod else np.mod

    def kernel(a, b):
        if a.shape != b.shape:
            check_broadcast(node.label, a, b)
        return (_nd(fn(a, b)),)
    return kernel


@register("BitShift", since=11)
def _bitshift_factory(node: Node, opset: int):
    direction = node.attr("direction")
    if isinstance(direction, bytes):
        direction = direction.decode()
    if direction not in ("LEFT", "RIGHT"):
        raise KernelError(f"{node.label}: direction must be 'LEFT' or 'RIGHT', got {direction!r}")
    # numpy already gives the opset-28 answer for shift counts outside [0, bits): 0, or -1
    # for an arithmetic right shift of a negative value.
    fn = np.left_shift if direction == "LEFT" else np.right_shift

    def kernel(x, y):
        if x.shape != y.shape:
            check_broadcast(node.label, x, y)
        return (_nd(fn(x, y)),)
    return kernel


# --------------------------------------------------------------------------------------------
# Variadic ops
# --------------------------------------------------------------------------------------------

_IN_PLACE_MIN = 1 << 12  # result elements from which later inputs accumulate in place rather than in new arrays


def _variadic(fn):
    def run(inputs):
        if len(inputs) == 1:
            return inputs[0]
        out = _nd(fn(inputs[0], inputs[1]))  # a fresh array: later inputs accumulate in place
        if out.size < _IN_PLACE_MIN:  # tiny: a new array per input costs a third of the call with out=
            for x in inputs[2:]:
                out = fn(out, x)
            return _nd(out)
        for x in inputs[2:]:
            try:
                fn(out, x, out=out)
            except ValueError:  # x broadcasts the result to a larger shape
                out = fn(out, x)
        return out
    return run


_VARIADIC = {"Sum": np.add, "Max": np.maximum, "Min": np.minimum}


def _variadic_factory(fn):
    run = _variadic(fn)

    def factory(node: Node, opset: int):
        label = node.label

        def kernel(*inputs):
            if len(inputs) > 1:
                shape = getattr(inputs[0], "shape", None)
                if shape is None:
                    check_broadcast(label, *inputs)
                else:
                    for x in inputs:  # inputs of one shape (the usual case) make a result no larger than each
                        if getattr(x, "shape", None) != shape:
                            check_broadcast(label, *inputs)
                            break
            return (run(inputs),)
        return kernel
    return factory


for _name, _fn in _VARIADIC.items():
    register(_name, since=1)(_variadic_factory(_fn))

_sum_all = _variadic(np.add)


@register("Mean", since=1)
def _mean(node: Node, opset: int):
    def kernel(*inputs):
        if len(inputs) == 1:
            return (inputs[0],)
        check_broadcast(node.label, *inputs)
        s = _sum_all(inputs)
        if s.dtype.kind in "iu":
            return (np.floor_divide(s, len(inputs), out=s),)
        return (np.divide(s, len(inputs), out=s),)
    return kernel


# --------------------------------------------------------------------------------------------
# Clip and Where
# --------------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=64)
def _extremes(dtype: np.dtype) -> tuple:
    """The lowest and highest values of a dtype: the bounds of an omitted min/max."""
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return dtype.type(info.min), dtype.type(info.max)
    return dtype.type(-np.inf), dtype.type(np.inf)


def _clip(x, lo, hi):
    if lo is None and hi is None:
        return x
    if lo is None or hi is None:
        low, high = _extremes(x.dtype)
        lo = low if lo is None else lo
        hi = high if hi is None else hi
    # np.clip is several times faster than maximum+minimum; NaN stays NaN, min > max gives max
    return _nd(np.clip(x, lo, hi))


@register("Clip", since=1, until=10)
def _clip_attr(node: Node, opset: int):
    # opset 1 has no defaults; opset 6 defaults to -/+FLT_MAX, i.e. no clipping for float32
    lo = node.attr("min")
    hi = node.attr("max")
    lo = None if lo is None else float(lo)
    hi = None if hi is None else float(hi)

    def kernel(x):
        return (_clip(x, lo, hi),)
    return kernel


@register("Clip", since=11)
def _clip_input(node: Node, opset: int):
    def kernel(x, lo=None, hi=None):
        if lo is not None and lo.size != 1 or hi is not None and hi.size != 1:
            raise KernelError(f"{node.label}: min and max must be scalars (one element)")
        return (_clip(x, None if lo is None else lo.reshape(()),
                      None if hi is None else hi.reshape(())),)
    return kernel


def _where(cond, x, y):
    if (cond.dtype != np.bool_ or x.dtype != y.dtype or x.dtype.kind not in "fiub"
            or max(x.size, y.size) < 32768):
        return np.where(cond, x, y)
    # Branch-free select on the bit patterns: np.where mispredicts on irregular masks and
    # then runs several times slower than these five passes.
    shape = np.broadcast_shapes(cond.shape, x.shape, y.shape)
    bits = np.dtype(f"u{x.dtype.itemsize}")
    mask = np.empty(shape, bits)
    np.copyto(mask, cond, casting="unsafe")  # 0 / 1
    np.negative(mask, out=mask)  # 0 / all ones
    out = np.bitwise_and(x.view(bits), mask)
    np.invert(mask, out=mask)
    np.bitwise_and(y.view(bits), mask, out=mask)
    np.bitwise_or(out, mask, out=out)
    return out.view(x.dtype)


@register("Where", since=9)
def _where_factory(node: Node, opset: int):
    def kernel(cond, x, y):
        if not cond.shape == x.shape == y.shape:
            check_broadcast(node.label, cond, x, y)
        return (_where(cond, x, y),)
    return kernel


# --------------------------------------------------------------------------------------------
# Cast and CastLike
# --------------------------------------------------------------------------------------------

_FLOAT8 = {TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E4M3FNUZ, TensorProto.FLOAT8E5M2,
           TensorProto.FLOAT8E5M2FNUZ}
_UNSUPPORTED_TARGETS = {TensorProto.UNDEFINED, TensorProto.COMPLEX64,
                        TensorProto.COMPLEX128}
for _t in ("FLOAT6E2M3", "FLOAT6E3M2"):
    if hasattr(TensorProto, _t):
        _UNSUPPORTED_TARGETS.add(getattr(TensorProto, _t))


def _parse_strings(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Numbers from a string tensor ('3.5', '1e-5', 'INF', '-inf', 'NaN', '+INF')."""
    flat = np.array([s.decode() if isinstance(s, bytes) else str(s) for s in x.ravel()],
                    dtype=np.str_).reshape(x.shape)
    if dtype.kind in "iu":
        try:
            return flat.astype(dtype)
        except ValueError:
            pass
    if dtype == np.bool_:
        return flat.astype(np.float64).astype(np.bool_)
    return flat.astype(np.float64).astype(dtype)


_E8M0 = getattr(TensorProto, "FLOAT8E8M0", None)


def _to_e8m0(x: np.ndarray, dtype: np.dtype, saturate: bool, round_mode: str) -> np.ndarray:
    """FLOAT8E8M0 (a bare power of two 2^(e - 127), e in [0, 254]; 255 is NaN) from numbers.

    The sign is dropped (negative inputs are undefined by the spec). ``round_mode`` picks
    between the two neighbouring powers of two: 'up' (away from zero), 'down', or 'nearest'
    (by the mantissa, ties up). With ``saturate``, out-of-range values, zero and +-inf clamp to
    the smallest/largest power; without it they become NaN, as the spec's table says.
    """
    f = np.abs(x.astype(np.float64) if x.dtype != np.float64 else x)
    mant, exp = np.frexp(f)  # f = mant * 2^exp with mant in [0.5, 1)
    e = exp.astype(np.int32) + 126  # biased exponent of 2^floor(log2 f)
    if round_mode == "up":
        e += mant > 0.5
    elif round_mode == "nearest":
        e += mant >= 0.75
    bad = np.isnan(f)
    if saturate:
        np.clip(e, 0, 254, out=e)
        e[f == 0] = 0
        e[np.isinf(f)] = 254
    else:
        bad |= (e < 0) | (e > 254) | (f == 0) | np.isinf(f)
    e[bad] = 255
    return e.astype(np.uint8).view(dtype)


def _caster(node: Node, to: int, saturate: bool, round_mode: str = "up"):
    """Function converting an array to ONNX element type ``to``."""
    if to == TensorProto.STRING:
        def to_string(x: np.ndarray) -> np.ndarray:
            if x.dtype.kind in "OUS":
                return x
            raise KernelError(f"{node.label}: cast from {x.dtype} to string is not supported by "
                              "the CPU provider")
        return to_string
    if to in _UNSUPPORTED_TARGETS:
        raise KernelError(f"{node.label}: cast to {elem_type_name(to)} is not supported by the "
                          "CPU provider")
    try:
        dtype = np_dtype(to)
    except (KeyError, TypeError, ValueError) as e:
        raise KernelError(f"{node.label}: unknown target element type {to}") from e
    if to == _E8M0:
        def to_e8m0(x: np.ndarray) -> np.ndarray:
            if x.dtype == dtype:
                return x
            if x.dtype.kind in "OUS":
                x = _parse_strings(x, np.dtype(np.float64))
            return _to_e8m0(x, dtype, saturate, round_mode)
        return to_e8m0
    limit = None
    if to in _FLOAT8 and saturate:
        import ml_dtypes

        limit = float(ml_dtypes.finfo(dtype).max)

    def cast(x: np.ndarray) -> np.ndarray:
        if x.dtype == dtype:
            return x
        if x.dtype.kind in "OUS":
            return _parse_strings(x, dtype)
        if limit is not None:  # saturate: out-of-range values and +-inf go to +-max, NaN stays
            x = np.clip(x if x.dtype == np.float64 else x.astype(np.float32), -limit, limit)
        return x.astype(dtype)
    return cast


_CAST1_NAMES = dict(TensorProto.DataType.items())  # Cast-1 names its 'to' type: "FLOAT", ...


@register("Cast", since=1, until=5)
def _cast_v1(node: Node, opset: int):
    to = node.attr("to")
    if isinstance(to, bytes):
        to = to.decode()
    if isinstance(to, str):
        if to.upper() not in _CAST1_NAMES:
            raise KernelError(f"{node.label}: unknown 'to' type name {to!r}")
        to = _CAST1_NAMES[to.upper()]
    if to is None:
        raise KernelError(f"{node.label}: attribute 'to' is required")
    cast = _caster(node, int(to), True)

    def kernel(x):
        return (cast(x),)
    return kernel


def _round_mode(node: Node) -> str:
    round_mode = node.attr("round_mode", "up")
    if isinstance(round_mode, bytes):
        round_mode = round_mode.decode()
    if round_mode not in ("up", "down", "nearest"):
        raise KernelError(f"{node.label}: unknown round_mode {round_mode!r}")
    return round_mode


@register("Cast", since=6)
def _cast(node: Node, opset: int):
    to = node.attr("to")
    if to is None:
        raise KernelError(f"{node.label}: attribute 'to' is required")
    cast = _caster(node, int(to), bool(node.attr("saturate", 1)), _round_mode(node))

    def kernel(x):
        return (cast(x),)
    return kernel


@register("CastLike", since=15)
def _cast_like(node: Node, opset: int):
    saturate = bool(node.attr("saturate", 1))
    round_mode = _round_mode(node)
    casters: dict[np.dtype, object] = {}  # target dtype -> cast function (benign races)

    def kernel(x, like):
        if x.dtype == like.dtype:
            return (x,)
        cast = casters.get(like.dtype)
        if cast is None:
            to = elem_type_of(like.dtype)
            if to is None:
                raise KernelError(f"{node.label}: unsupported target dtype {like.dtype}")
            cast = casters[like.dtype] = _caster(node, to, saturate, round_mode)
        return (cast(x),)
    return kernel
