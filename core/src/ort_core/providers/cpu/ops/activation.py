"""CPU kernels for activations: Relu family, sigmoid/tanh family, Gelu, Mish, Softmax/LogSoftmax/Hardmax.

Plain elementwise math (Exp, Erf, Clip...) lives with the elementwise ops, not here.
"""

from __future__ import annotations

import math

import numpy as np

from ....errors import KernelError
from ..registry import register


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
# Gelu (needs erf, which numpy lacks: the classic fdlibm rational approximations, vectorized)
# ---------------------------------------------------------------------------------------------

# Coefficients of Sun's fdlibm s_erf.c (Copyright 1993 Sun Microsystems, Inc.; permission to use,
# copy, modify and distribute this software is freely granted, provided this notice is kept).
_ERX = 8.45062911510467529297e-01
_PP = (1.28379167095512558561e-01, -3.25042107247001499370e-01, -2.84817495755985104766e-02,
       -5.77027029648944159157e-03, -2.37630166566501626084e-05)
_QQ = (1.0, 3.97917223959155352819e-01, 6.50222499887672944485e-02, 5.08130628187576562776e-03,
       1.32494738004321644526e-04, -3.96022827877536812320e-06)
_PA = (-2.36211856075265944077e-03, 4.14856118683748331666e-01, -3.72207876035701323847e-01,
       3.18346619901161753674e-01, -1.10894694282396677476e-01, 3.54783043256182359371e-02,
       -2.16637559486879084300e-03)
_QA = (1.0, 1.06420880400844228286e-01, 5.40397917702171048937e-01, 7.18286544141962662868e-02,
       1.26171219808761642112e-01, 1.36370839120290507362e-02, 1.19844998467991074170e-02)
_RA = (-9.86494403484714822705e-03, -6.93858572707181764372e-01, -1.05586262253232909814e+01,
       -6.23753324503260060396e+01, -1.62396669462573470355e+02, -1.84605092906711035994e+02,
       -8.12874355063065934246e+01, -9.81432934416914548592e+00)
_SA = (1.0, 1.96512716674392571292e+01, 1.37657754143519042600e+02, 4.34565877475229228821e+02,
       6.45387271733267880336e+02, 4.29008140027567833386e+02, 1.08635005541779435134e+02,
       6.57024977031928170135e+00, -6.04244152148580987438e-02)
_RB = (-9.86494292470009928597e-03, -7.99283237680523006574e-01, -1.77579549177547519889e+01,
       -1.60636384855821916062e+02, -6.37566443368389627722e+02, -1.02509513161107724954e+03,
       -4.83519191608651397019e+02)
_SB = (1.0, 3.03380607434824582924e+01, 3.25792512996573918826e+02, 1.53672958608443695994e+03,
       3.19985821950859553908e+03, 2.55305040643316442583e+03, 4.74528541206955367215e+02,
       -2.24409524465858183362e+01)


def _poly(z, coefs):
    """coefs[0] + coefs[1] z + coefs[2] z^2 + ... (Horner)."""
    r = np.full_like(z, coefs[-1])
    for c in coefs[-2::-1]:
        r *= z
        r += c
    return r


def erfc_abs(a: np.ndarray) -> np.ndarray:
    """erfc(a) for a >= 0 (float64, full double precision); 1 - erfc_abs(|x|) is erf(|x|)."""
    out = np.empty_like(a)
    m1 = a < 0.84375
    m2 = (a >= 0.84375) & (a < 1.25)
    m3 = (a >= 1.25) & (a < 1 / 0.35)
    m4 = (a >= 1 / 0.35) & (a < 28.0)
    if m1.any():
        s = a[m1]
        z = s * s
        out[m1] = 1.0 - (s + s * (_poly(z, _PP) / _poly(z, _QQ)))
    if m2.any():
        s = a[m2] - 1.0
        out[m2] = (1.0 - _ERX) - _poly(s, _PA) / _poly(s, _QA)
    for m, r, q in ((m3, _RA, _SA), (m4, _RB, _SB)):
        if m.any():
            s = a[m]
            z = 1.0 / (s * s)
            out[m] = np.exp(-s * s - 0.5625 + _poly(z, r) / _poly(z, q)) / s
    out[a >= 28.0] = 0.0
    out[np.isnan(a)] = np.nan
    return out


# erfc(z) ~= t exp(-z^2 + P(t)), t = 1 / (1 + z/2): the Chebyshev fit of Numerical Recipes
# ("erfcc"), fractional error < 1.2e-7 for all z >= 0; in float32 it stays ~1e-6 relative where
# erfc is not tiny. Used for float32/float16 Gelu, where fdlibm's piecewise masks cost ~10x more.
_ERFC_FAST = (-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806, 0.27886807,
              -1.13520398, 1.48851587, -0.82215223, 0.17087277)


def _erfc_abs_fast(a: np.ndarray) -> np.ndarray:
    """erfc(a) for a >= 0 (a fresh array of a's dtype; a itself is reused as scratch)."""
    t = a.dtype.type
    u = np.multiply(a, t(0.5))
    u += t(1)
    np.reciprocal(u, out=u)
    p = np.multiply(u, t(_ERFC_FAST[-1]))
    for c in _ERFC_FAST[-2:0:-1]:
        p += t(c)
        p *= u
    p += t(_ERFC_FAST[0])
    np.square(a, out=a)
    p -= a
    np.exp(p, out=p)
    p *= u
    return p


def erf(x: np.ndarray) -> np.ndarray:
    """Vectorized erf in float64 (small |x| directly, to keep relative precision)."""
    x = np.asarray(x, dtype=np.float64)
    a = np.abs(x)
    y = 1.0 - erfc_abs(a)
    small = a < 0.84375
    if small.any():
        s = a[small]
        z = s * s
        y[small] = s + s * (_poly(z, _PP) / _poly(z, _QQ))
    return np.copysign(y, x)


@register("Gelu", since=20, until=None)
def gelu_factory(node, opset):
    approximate = node.attr("approximate", "none")
    if isinstance(approximate, bytes):
        approximate = approximate.decode()
    if approximate not in ("none", "tanh"):
        raise KernelError(f"{node.label}: unsupported Gelu approximate='{approximate}' "
                          f"(expected 'none' or 'tanh')")

    def gelu_erf(x):
        # 0.5 x (1 + erf(x / sqrt2)) = 0.5 x erfc(-x / sqrt2), relatively accurate for both signs
        if x.dtype == np.float64:
            e = erfc_abs(np.abs(x) * (1.0 / math.sqrt(2.0)))
        else:
            a = np.abs(x, dtype=np.float32)
            a *= np.float32(1.0 / math.sqrt(2.0))
            e = _erfc_abs_fast(a)
        # erfc(-z) = 2 - erfc(z) for z > 0: e += (x > 0) * (2 - 2e)
        fix = np.subtract(e.dtype.type(1), e)
        fix *= np.greater(x, 0)
        fix *= e.dtype.type(2)
        e += fix
        e *= x
        e *= e.dtype.type(0.5)
        return e.astype(x.dtype, copy=False)

    def gelu_tanh(x):
        t = x.dtype.type
        inner = np.square(x)
        inner *= t(0.044715)
        inner += t(1)
        inner *= x
        inner *= t(math.sqrt(2.0 / math.pi))
        np.tanh(inner, out=inner)
        inner += t(1)
        inner *= x
        inner *= t(0.5)
        return inner

    return _unary(gelu_tanh if approximate == "tanh" else gelu_erf)


# ---------------------------------------------------------------------------------------------
# Softmax / LogSoftmax / Hardmax
# ---------------------------------------------------------------------------------------------

# Shifting by the per-row maximum keeps exp() from overflowing, but numpy's row-wise max is
# slow (several times a full-array max). Any shift c works as long as exp(x - c) neither
# overflows nor underflows a whole row, so the kernels shift by the global maximum and fall back
# to row maxima only when some row sum becomes so small that its entries lose precision.
_MIN_ROW_SUM = {np.dtype(np.float32): np.exp(-60.0), np.dtype(np.float64): np.exp(-600.0)}


def _shifted_exp(x, axis):
    """(exp(x - c), row sums of it, c) with c the global or, if needed, the per-row maximum."""
    floor = _MIN_ROW_SUM.get(x.dtype)
    if floor is not None:
        m = np.max(x)
        if np.isfinite(m):
            e = np.subtract(x, m)
            np.exp(e, out=e)
            s = np.sum(e, axis=axis, keepdims=True)
            if np.min(s) >= floor:
                return e, s, m
    m = np.max(x, axis=axis, keepdims=True)
    e = np.subtract(x, m)
    np.exp(e, out=e)
    return e, np.sum(e, axis=axis, keepdims=True), m


def _softmax(x, axis):
    if x.dtype == np.float16:
        return _softmax(x.astype(np.float32), axis).astype(np.float16)
    e, s, _ = _shifted_exp(x, axis)
    e /= s
    return e


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
