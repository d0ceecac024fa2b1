"""CPU kernels for activations: Relu family, sigmoid/tanh family, Gelu, Mish, Softmax/LogSoftmax/Hardmax.

Plain elementwise math (Exp, Erf, Clip...) lives with the elementwise ops, not here.
"""

from __future__ import annotations

import math

import numpy as np

from ....errors import KernelError
from ..blocks import map_rows, over_rows
from ..registry import register
from .elementwise import erf


def _unary(fn):
    """Kernel applying fn(x) -> fresh array of x's dtype (0-d inputs run as 1-element arrays,
    since numpy ufuncs turn 0-d arrays into scalars that ``out=`` cannot write to)."""
    def kernel(x):
        if x.ndim == 0:
            return (fn(x.reshape(1)).reshape(()),)
        return (fn(x),)
    return kernel


def _float_attr(node, name, default):
    """A float attribute (ONNX stores them as float32: defaults are rounded the same way)."""
    return float(np.float32(node.attr(name, default)))


# numpy's maximum/minimum are several times slower against a scalar than against an array, and
# masked copies / np.where with data-dependent masks are slower still: kernels below use
# max/min against a cached constant row (broadcast over the last axis) and mask arithmetic.
_ROWS: dict = {}


def _row(x, value):
    """Read-only array of value in x's dtype broadcasting against x (a row over its last axis)."""
    n = x.shape[-1] if x.ndim else 1
    if n < 16:
        return x.dtype.type(value)
    key = (x.dtype.str, n, value)
    row = _ROWS.get(key)
    if row is None:
        if len(_ROWS) >= 256:
            _ROWS.clear()
        row = np.full(n, value, dtype=x.dtype)
        row.flags.writeable = False
        _ROWS[key] = row
    return row


def _pos(x):
    """max(x, 0) as a fresh array."""
    return np.maximum(x, _row(x, 0))


def _neg(x):
    """min(x, 0) as a fresh array."""
    return np.minimum(x, _row(x, 0))


def _clip01(y):
    """Clamp y to [0, 1] in place."""
    np.maximum(y, _row(y, 0), out=y)
    return np.minimum(y, _row(y, 1), out=y)


# ---------------------------------------------------------------------------------------------
# piecewise-linear
# ---------------------------------------------------------------------------------------------

@register("Relu", since=1, until=None)
def relu_factory(node, opset):
    return _unary(_pos)


def _leaky(x, slope):
    """x where x >= 0, slope * x elsewhere (slope a scalar or broadcastable array)."""
    y = _neg(x)
    y *= slope
    y += _pos(x)
    return y


@register("LeakyRelu", since=1, until=None)
def leaky_relu_factory(node, opset):
    alpha = _float_attr(node, "alpha", 0.01)

    def fn(x):
        a = x.dtype.type(alpha)
        if 0.0 <= alpha <= 1.0:  # max(x, alpha x): two passes
            return np.maximum(x, np.multiply(x, a))
        if alpha > 1.0:
            return np.minimum(x, np.multiply(x, a))
        return _leaky(x, a)

    return _unary(fn)


@register("PRelu", since=1, until=None)
def prelu_factory(node, opset):
    label = node.label

    def kernel(x, slope):
        if opset < 7 and slope.ndim == 1 and x.ndim > 2 and slope.size == x.shape[1] != x.shape[-1]:
            # PRelu-1/6: a 1-D slope of size C applies per channel (axis 1)
            slope = slope.reshape((-1,) + (1,) * (x.ndim - 2))
        try:
            shape = np.broadcast_shapes(x.shape, slope.shape)
        except ValueError:
            shape = None
        if shape != x.shape:
            raise KernelError(f"{label}: slope of shape {slope.shape} is not unidirectionally "
                              f"broadcastable to input shape {x.shape}")
        if x.ndim == 0:
            return (_leaky(x.reshape(1), slope.astype(x.dtype, copy=False).reshape(1)).reshape(()),)
        return (_leaky(x, slope.astype(x.dtype, copy=False)),)

    return kernel


@register("ThresholdedRelu", since=10, until=None)
def thresholded_relu_factory(node, opset):
    alpha = _float_attr(node, "alpha", 1.0)
    # np.where keeps x exactly and gives 0 (not nan) for -inf; a rare op, so no mask arithmetic
    return _unary(lambda x: np.where(x > x.dtype.type(alpha), x, x.dtype.type(0)))


@register("HardSigmoid", since=1, until=None)
def hard_sigmoid_factory(node, opset):
    alpha = _float_attr(node, "alpha", 0.2)
    beta = _float_attr(node, "beta", 0.5)

    def fn(x):
        t = x.dtype.type
        y = np.multiply(x, t(alpha))
        y += t(beta)
        return _clip01(y)

    return _unary(fn)


@register("HardSwish", since=14, until=None)
def hard_swish_factory(node, opset):
    def fn(x):
        t = x.dtype.type
        y = np.multiply(x, t(1.0 / 6.0))
        y += t(0.5)
        _clip01(y)
        y *= x
        return y

    return _unary(fn)


# ---------------------------------------------------------------------------------------------
# exponential family
# ---------------------------------------------------------------------------------------------

def _sigmoid(x):
    """1 / (1 + exp(-x)) as 0.5 + 0.5 tanh(x / 2): never overflows, four vectorized passes.
    (Like onnxruntime's, its error is absolute, ~1 ulp of 1, rather than relative in the tails.)"""
    t = x.dtype.type
    y = np.multiply(x, t(0.5))
    np.tanh(y, out=y)
    y *= t(0.5)
    y += t(0.5)
    return y


@register("Sigmoid", since=1, until=None)
def sigmoid_factory(node, opset):
    return _unary(_sigmoid)


@register("Tanh", since=1, until=None)
def tanh_factory(node, opset):
    return _unary(np.tanh)


def _exp_linear(x, scale_neg, inv_alpha, scale_pos):
    """scale_neg * expm1(min(x, 0) * inv_alpha) + scale_pos * max(x, 0) (Elu, Selu, Celu)."""
    t = x.dtype.type
    y = _neg(x)
    if inv_alpha != 1.0:
        y *= t(inv_alpha)
    np.expm1(y, out=y)
    y *= t(scale_neg)
    p = _pos(x)
    if scale_pos != 1.0:
        p *= t(scale_pos)
    y += p
    return y


@register("Elu", since=1, until=None)
def elu_factory(node, opset):
    alpha = _float_attr(node, "alpha", 1.0)
    return _unary(lambda x: _exp_linear(x, alpha, 1.0, 1.0))


@register("Selu", since=1, until=None)
def selu_factory(node, opset):
    alpha = _float_attr(node, "alpha", 1.67326319217681884765625)
    gamma = _float_attr(node, "gamma", 1.05070102214813232421875)
    return _unary(lambda x: _exp_linear(x, gamma * alpha, 1.0, gamma))


@register("Celu", since=12, until=None)
def celu_factory(node, opset):
    alpha = _float_attr(node, "alpha", 1.0)
    if alpha == 0.0:
        raise KernelError(f"{node.label}: Celu alpha must be non-zero")
    return _unary(lambda x: _exp_linear(x, alpha, 1.0 / alpha, 1.0))


def _softplus(x):
    """log(1 + exp(x)) = max(x, 0) + log1p(exp(-|x|)), overflow-free."""
    y = np.abs(x)
    np.negative(y, out=y)
    np.exp(y, out=y)
    np.log1p(y, out=y)
    y += _pos(x)
    return y


@register("Softplus", since=1, until=None)
def softplus_factory(node, opset):
    return _unary(_softplus)


@register("Softsign", since=1, until=None)
def softsign_factory(node, opset):
    def fn(x):
        d = np.abs(x)
        d += x.dtype.type(1)
        return np.divide(x, d, out=d)

    return _unary(fn)


@register("Mish", since=18, until=None)
def mish_factory(node, opset):
    def fn(x):
        y = _softplus(x)
        np.tanh(y, out=y)
        y *= x
        return y

    return _unary(fn)


# ---------------------------------------------------------------------------------------------
# Gelu (erf comes from the elementwise family, which owns the CPU provider's erf)
# ---------------------------------------------------------------------------------------------


def gelu_erf_values(x: np.ndarray) -> np.ndarray:
    """0.5 x (1 + erf(x / sqrt 2)), erf in the input's precision. Halving before the product with x
    (exact) keeps it finite up to the largest floats, where (1 + erf) x would overflow; shared with the
    fused ``ort_core::Gelu``."""
    t = x.dtype.type
    y = erf(np.multiply(x, t(1.0 / math.sqrt(2.0))))
    y += t(1)
    y *= t(0.5)
    with np.errstate(invalid="ignore"):  # 0 * -inf is NaN, as the formula says
        y *= x
    return y.astype(x.dtype, copy=False)


def gelu_tanh_values(x: np.ndarray) -> np.ndarray:
    """0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))); for huge |x| the cube overflows and tanh
    saturates, and halving first keeps the result x; shared with the fused ``ort_core::FastGelu``."""
    t = x.dtype.type
    with np.errstate(over="ignore", invalid="ignore"):
        y = np.square(x)
        y *= t(0.044715)
        y += t(1)
        y *= x
        y *= t(math.sqrt(2.0 / math.pi))
        np.tanh(y, out=y)
        y += t(1)
        y *= t(0.5)
        y *= x
    return y


@register("Gelu", since=20, until=None)
def gelu_factory(node, opset):
    approximate = node.attr("approximate", "none")
    if isinstance(approximate, bytes):
        approximate = approximate.decode()
    if approximate not in ("none", "tanh"):
        raise KernelError(f"{node.label}: unsupported Gelu approximate='{approximate}' "
                          f"(expected 'none' or 'tanh')")

    fn = gelu_tanh_values if approximate == "tanh" else gelu_erf_values

    def kernel(x):
        if x.ndim == 0:
            return (fn(x.reshape(1)).reshape(()),)
        return (by_rows(fn, x) if x.size >= BY_ROWS_MIN and x.dtype.kind == "f" else fn(x),)

    return kernel


BY_ROWS_MIN = 1 << 17  # elements from which an element-wise chain runs by row blocks (by_rows)
BY_ROWS_BLOCK = 1 << 17  # elements of one such block (512 KiB of float32)


def by_rows(fn, x: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    """``fn(x + bias)`` (bias over the last axis, or none) into a new array of x's dtype, by row blocks: a
    chain of a dozen element-wise passes (GELU's erf) then runs in cache rather than over memory (blocks.py)."""
    rows = np.ascontiguousarray(x).reshape(-1, x.shape[-1])
    out = np.empty(x.shape, x.dtype)
    map_rows(fn if bias is None else (lambda block: fn(np.add(block, bias))), rows, out.reshape(rows.shape),
             BY_ROWS_BLOCK)
    return out


# ---------------------------------------------------------------------------------------------
# Softmax / LogSoftmax / Hardmax
# ---------------------------------------------------------------------------------------------

# Shifting by the per-row maximum keeps exp() from overflowing, but numpy's row-wise max is
# slow (several times a full-array max). Any shift c works as long as exp(x - c) neither
# overflows nor underflows a whole row, so the kernels shift by the global maximum and fall back
# to row maxima only when some row sum becomes so small that its entries lose precision.
_MIN_ROW_SUM = {np.dtype(np.float32): np.exp(-60.0), np.dtype(np.float64): np.exp(-600.0)}


def _shifted_exp(x, axis, out=None):
    """(exp(x - c), row sums of it, c) with c the global or, if needed, the per-row maximum; the exps
    go into ``out`` when given."""
    floor = _MIN_ROW_SUM.get(x.dtype)
    if floor is not None:
        m = np.max(x)
        if np.isfinite(m):
            e = np.subtract(x, m, out=out)
            np.exp(e, out=e)
            s = np.sum(e, axis=axis, keepdims=True)
            if np.min(s) >= floor:
                return e, s, m
    m = np.max(x, axis=axis, keepdims=True)
    e = np.subtract(x, m, out=out)
    np.exp(e, out=e)
    return e, np.sum(e, axis=axis, keepdims=True), m


def _softmax(x, axis):
    # float16 stays float16 step by step (per-row shift), as the spec's formula in type T reads;
    # function bodies such as Attention's expansion are specified that way
    if axis in (-1, x.ndim - 1) and x.size >= _SOFTMAX_BLOCK and x.flags.c_contiguous:
        return softmax_last_axis(x)
    e, s, _ = _shifted_exp(x, axis)
    e /= s
    return e


_SOFTMAX_BLOCK = 1 << 18  # elements of a row block (1 MiB of float32: its exps stay in cache)


def softmax_last_axis(x: np.ndarray) -> np.ndarray:
    """Softmax over the last axis into a new array, by row blocks that stay in cache (blocks.py); each block
    shifts by its own maximum (see _shifted_exp)."""
    out = np.empty(x.shape, x.dtype)
    if x.size == 0:
        return out
    width = x.shape[-1]
    rows, o2 = np.ascontiguousarray(x).reshape(-1, width), out.reshape(-1, width)

    def block(i: int, j: int) -> None:
        e, s, _ = _shifted_exp(rows[i:j], -1, out=o2[i:j])
        e /= s

    over_rows(block, rows.shape[0], width, _SOFTMAX_BLOCK)
    return out


def softmax_rows_inplace(x: np.ndarray) -> np.ndarray:
    """Softmax over the last axis of the 2-D ``x``, written over it, each row shifted by its own maximum."""
    np.subtract(x, np.max(x, axis=-1, keepdims=True), out=x)
    np.exp(x, out=x)
    x /= np.sum(x, axis=-1, keepdims=True)
    return x


def _log_softmax(x, axis):
    if x.dtype == np.float16:
        return _log_softmax(x.astype(np.float32), axis).astype(np.float16)
    e, s, c = _shifted_exp(x, axis)
    np.subtract(x, c, out=e)  # (x - c) - log(s): subtracting c first keeps full precision
    e -= np.log(s, out=s)
    return e


def _hardmax(x, axis):
    y = np.zeros_like(x)
    np.put_along_axis(y, np.expand_dims(np.argmax(x, axis=axis), axis), 1, axis=axis)
    return y


def _softmax_family_factory(node, opset, fn):
    """opset < 13: coerce to 2-D at ``axis`` (default 1); opset >= 13: along ``axis`` (default -1)."""
    coerce_2d = opset < 13
    axis = int(node.attr("axis", 1 if coerce_2d else -1))
    label = node.label

    def kernel(x):
        r = max(x.ndim, 1)
        if not -r <= axis < r:
            raise KernelError(f"{label}: axis {axis} is out of range for input of rank {x.ndim}")
        if x.size == 0:
            return (np.empty_like(x),)
        if x.ndim == 0:
            return (fn(x.reshape(1), 0).reshape(()),)
        if coerce_2d:
            ax = axis % x.ndim
            rows = math.prod(x.shape[:ax])
            return (fn(x.reshape(rows, -1), 1).reshape(x.shape),)
        return (fn(x, axis),)

    return kernel


def _register_softmax_family(op_type, fn):
    @register(op_type, since=1, until=12)
    def factory_v1(node, opset):
        return _softmax_family_factory(node, opset, fn)

    @register(op_type, since=13, until=None)
    def factory_v13(node, opset):
        return _softmax_family_factory(node, opset, fn)

    return factory_v1, factory_v13


softmax_factories = _register_softmax_family("Softmax", _softmax)
log_softmax_factories = _register_softmax_family("LogSoftmax", _log_softmax)
hardmax_factories = _register_softmax_family("Hardmax", _hardmax)
