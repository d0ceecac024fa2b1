"""onnxruntime's quantized elementwise contrib ops (domain ``com.microsoft``) on 8-bit tensors:
QLinearAdd, QLinearMul, QLinearSigmoid, QLinearLeakyRelu, QLinearConcat and QLinearSoftmax.
The quantized pools are in qlinear_contrib_pool.py; QLinearMatMul/QLinearConv in qlinear.py.

Every tensor is uint8 or int8 (the output's type is the inputs'); scales are float32 and zero points
of the tensor's type, each a scalar or a 1-element vector, an optional zero point meaning 0. A real
value is ``scale * (q - zero_point)``. The arithmetic is float32, arranged as onnxruntime's CPU
kernels arrange it so that results agree bit for bit, rounding ties to even and saturating:

- QLinearAdd / QLinearMul (numpy broadcasting): ``(a - a_zp) * (a_scale / c_scale) + (b - b_zp) *
  (b_scale / c_scale)``, respectively ``(a - a_zp) * (b - b_zp) * (a_scale * b_scale / c_scale)``,
  plus ``c_zp``, then rounded: the zero point is added before rounding, as onnxruntime does. On large
  tensors that arithmetic runs once over all 65,536 byte pairs per parameter set and the kernel looks
  the pairs up (the same values, one gather instead of several float32 passes).
- QLinearSigmoid / QLinearLeakyRelu (``alpha``, default 0.01) and the inputs of QLinearConcat whose
  scale or zero point differs from the output's: one 256-entry table per node (or per input), built by
  dequantizing every code, applying the function and quantizing (rounded, then the zero point added).
  onnxruntime's table uses MLAS's approximate logistic; it has agreed with the exact one everywhere we
  looked, but an exact tie could come out one step apart.
- QLinearSoftmax(X, X_scale, x_zero_point?, y_scale, y_zero_point?; ``opset`` required, ``axis``
  default -1): onnxruntime's own fixed-shift scheme, not a plain dequantized softmax. With ``opset`` <
  13 the softmax runs over all the axes from ``axis`` on (flattened), from 13 on over ``axis`` alone.
  Per row, ``e = exp((x - max(x) + s) * X_scale)`` in float32 where the shift s keeps the sum finite
  (``s = max(0, ln(FLT_MAX / D) - 5) / X_scale``, D the reduced length); the row sum runs left to
  right; ``y = round(e / sum * floor(1 / y_scale)) + y_zero_point``, saturated. The output grid is
  thus ``1 / floor(1 / y_scale)``, not y_scale, when 1 / y_scale is not an integer; x_zero_point
  cancels out and is only type-checked.

Optional inputs follow the schema: onnxruntime's own graph checks are stricter (they want QLinearAdd's
and QLinearMul's A/B zero points, scalars there, and QLinearSoftmax's y_zero_point; a lookup op whose
Y_zero_point is left off the end crashes it); ort-core takes an omitted zero point as 0. The bit-exact
match is with onnxruntime's x86 kernels: on ARM, MLAS computes QLinearAdd in fixed point, which can
put a tie one step apart.
"""

from __future__ import annotations

import numpy as np

from ....errors import KernelError
from ....ir.graph import Node
from ....limits import check_tensor_size
from ..registry import register
from .quantize import saturate_to

DOMAIN = "com.microsoft"
QTYPES = (np.dtype(np.uint8), np.dtype(np.int8))
_F32 = np.float32
_CODES = np.arange(256, dtype=np.uint8)  # every byte: a table is indexed by the raw byte of a value


def check_qtype(label: str, name: str, x) -> np.dtype:
    """The dtype of a quantized tensor, which must be uint8 or int8."""
    if x is None:
        raise KernelError(f"{label}: input '{name}' is required")
    if x.dtype not in QTYPES:
        raise KernelError(f"{label}: input '{name}' must be uint8 or int8, got {x.dtype}")
    return x.dtype


def _one(label: str, name: str, p) -> np.ndarray:
    if p is None:
        raise KernelError(f"{label}: input '{name}' is required")
    if p.ndim > 1 or p.size != 1:
        raise KernelError(f"{label}: '{name}' must be a scalar or a 1-element vector, got shape {p.shape}")
    return p.reshape(())


def scale_of(label: str, name: str, p) -> np.float32:
    """A per-tensor float32 scale as a numpy float32 scalar."""
    p = _one(label, name, p)
    if p.dtype != np.float32:
        raise KernelError(f"{label}: scale '{name}' must be float32, got {p.dtype}")
    return _F32(p[()])


def zero_point_of(label: str, name: str, p, dtype: np.dtype, required: bool = False) -> np.ndarray:
    """A per-tensor zero point of ``dtype`` as a 0-d array; an omitted optional one is 0."""
    if p is None and not required:
        return np.zeros((), dtype=dtype)
    p = _one(label, name, p)
    if p.dtype != dtype:
        raise KernelError(f"{label}: zero point '{name}' has type {p.dtype}, its tensor has {dtype}")
    return p


def _shifted(x: np.ndarray, zp: np.ndarray) -> np.ndarray:
    """x - zero point in float32 (exact: small integers)."""
    out = x.astype(_F32)
    if zp != 0:
        out -= _F32(zp)
    return out


def lookup_table(label: str, dtype: np.dtype, x_scale, x_zp, y_scale, y_zp, fn=None) -> np.ndarray:
    """256 output codes of ``dtype``, indexed by an input's raw byte: every input code dequantized,
    mapped by ``fn`` (float32 -> float32; None: identity) and quantized to (y_scale, y_zp)."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        v = _shifted(_CODES.view(dtype), x_zp) * x_scale
        if fn is not None:
            v = fn(v)
        return saturate_to(label, v / y_scale, dtype, zp=y_zp)


def apply_table(table: np.ndarray, x: np.ndarray) -> np.ndarray:
    return np.take(table, x.view(np.uint8))  # take: about half the time of fancy indexing


# ---------------------------------------------------------------------------------------------
# QLinearAdd / QLinearMul
# ---------------------------------------------------------------------------------------------

_PAIR_MIN = 4096  # elements from which one 65,536-entry table per parameter set beats the float32 passes


def _binary_factory(node: Node, multiply: bool):
    label = node.label
    tables: dict = {}

    def compute(a, b, sa, sb, sc, za, zb, zc, dt):
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            if multiply:
                q = _shifted(a, za) * _shifted(b, zb)  # exact: |product| <= 255 * 255
                q *= sa * sb / sc
            else:
                q = _shifted(a, za) * (sa / sc) + _shifted(b, zb) * (sb / sc)
            q += _F32(zc)
        return saturate_to(label, q, dt)

    def pair_table(sa, sb, sc, za, zb, zc, dt):
        """The output code of every (a, b) byte pair, computed by the float32 arithmetic itself (so the
        table is that arithmetic, bit for bit), indexed by a_byte * 256 + b_byte; made once per
        parameter set."""
        key = (dt, sa, sb, sc, int(za), int(zb), int(zc))
        table = tables.get(key)  # concurrent runs may both build it: the same bytes, either one kept
        if table is None:
            if len(tables) >= 8:
                tables.clear()
            grid_a = np.repeat(_CODES, 256).view(dt)
            grid_b = np.tile(_CODES, 256).view(dt)
            table = tables[key] = compute(grid_a, grid_b, sa, sb, sc, za, zb, zc, dt)
        return table

    def kernel(a, a_scale, a_zp, b, b_scale, b_zp=None, c_scale=None, c_zp=None):
        dt = check_qtype(label, "A", a)
        if check_qtype(label, "B", b) != dt:
            raise KernelError(f"{label}: A is {dt} but B is {b.dtype}")
        sa, sb, sc = (scale_of(label, n, p) for n, p in (("A_scale", a_scale), ("B_scale", b_scale),
                                                            ("C_scale", c_scale)))
        za, zb, zc = (zero_point_of(label, n, p, dt) for n, p in (("A_zero_point", a_zp),
                                                                    ("B_zero_point", b_zp),
                                                                    ("C_zero_point", c_zp)))
        try:
            shape = np.broadcast_shapes(a.shape, b.shape)
        except ValueError:
            raise KernelError(f"{label}: shapes {a.shape} and {b.shape} do not broadcast") from None
        check_tensor_size(label, shape, dt)
        if a.size >= _PAIR_MIN and a.shape == shape:
            index = np.left_shift(a.view(np.uint8), 8, dtype=np.uint16)
            np.bitwise_or(index, b.view(np.uint8), out=index)
            return (np.take(pair_table(sa, sb, sc, za, zb, zc, dt), index),)
        return (compute(a, b, sa, sb, sc, za, zb, zc, dt),)

    return kernel


@register("QLinearAdd", since=1, domain=DOMAIN)
def _qlinear_add(node: Node, opset: int):
    return _binary_factory(node, multiply=False)


@register("QLinearMul", since=1, domain=DOMAIN)
def _qlinear_mul(node: Node, opset: int):
    return _binary_factory(node, multiply=True)


# ---------------------------------------------------------------------------------------------
# QLinearSigmoid / QLinearLeakyRelu
# ---------------------------------------------------------------------------------------------

def _unary_factory(node: Node, fn):
    label = node.label

    def kernel(x, x_scale, x_zp=None, y_scale=None, y_zp=None):
        dt = check_qtype(label, "X", x)
        table = lookup_table(label, dt, scale_of(label, "X_scale", x_scale),
                             zero_point_of(label, "X_zero_point", x_zp, dt),
                             scale_of(label, "Y_scale", y_scale),
                             zero_point_of(label, "Y_zero_point", y_zp, dt), fn)
        return (apply_table(table, x),)

    return kernel


def _sigmoid(v: np.ndarray) -> np.ndarray:
    return (1.0 / (1.0 + np.exp(-v.astype(np.float64)))).astype(_F32)


@register("QLinearSigmoid", since=1, domain=DOMAIN)
def _qlinear_sigmoid(node: Node, opset: int):
    return _unary_factory(node, _sigmoid)


@register("QLinearLeakyRelu", since=1, domain=DOMAIN)
def _qlinear_leaky_relu(node: Node, opset: int):
    alpha = _F32(node.attr("alpha", 0.01))
    return _unary_factory(node, lambda v: np.where(v >= 0, v, v * alpha))


# ---------------------------------------------------------------------------------------------
# QLinearConcat
# ---------------------------------------------------------------------------------------------

def _required_int(node: Node, name: str) -> int:
    """An int attribute the op's schema requires; KernelError naming it when the node lacks it."""
    value = node.attr(name)
    if value is None:
        raise KernelError(f"{node.label}: required attribute '{name}' is missing")
    return int(value)


@register("QLinearConcat", since=1, domain=DOMAIN)
def _qlinear_concat(node: Node, opset: int):
    label = node.label
    axis_attr = _required_int(node, "axis")

    def kernel(*inputs):
        if len(inputs) < 5 or (len(inputs) - 2) % 3:
            raise KernelError(f"{label}: expects Y_scale, Y_zero_point, then (tensor, scale, zero point) "
                              f"triples; got {len(inputs)} inputs")
        ys = scale_of(label, "Y_scale", inputs[0])
        dt = check_qtype(label, "Y_zero_point", inputs[1])
        yz = zero_point_of(label, "Y_zero_point", inputs[1], dt, required=True)
        tensors = inputs[2::3]
        check_qtype(label, "input 0", tensors[0])
        first = tensors[0].shape
        if not -len(first) <= axis_attr < len(first):
            raise KernelError(f"{label}: axis {axis_attr} is out of range for input rank {len(first)}")
        axis = axis_attr % len(first)
        parts = []
        for i, (x, s, z) in enumerate(zip(tensors, inputs[3::3], inputs[4::3])):
            if check_qtype(label, f"input {i}", x) != dt:
                raise KernelError(f"{label}: input {i} is {x.dtype}, the output's zero point {dt}")
            if x.ndim != len(first) or any(n != m for j, (n, m) in enumerate(zip(x.shape, first)) if j != axis):
                raise KernelError(f"{label}: input {i} of shape {x.shape} does not concatenate with "
                                  f"{first} on axis {axis}")
            xs = scale_of(label, f"scale of input {i}", s)
            xz = zero_point_of(label, f"zero point of input {i}", z, dt, required=True)
            if xs == ys and xz == yz:
                parts.append(x)  # same quantization: the codes are copied
            else:
                parts.append(apply_table(lookup_table(label, dt, xs, xz, ys, yz), x))
        return (np.concatenate(parts, axis=axis),)

    return kernel


# ---------------------------------------------------------------------------------------------
# QLinearSoftmax
# ---------------------------------------------------------------------------------------------

_FLT_MAX = _F32(np.finfo(np.float32).max)
_DIFFS = np.arange(-255, 1, dtype=np.float64)  # x - max(x) over a row of 8-bit codes


@register("QLinearSoftmax", since=1, domain=DOMAIN)
def _qlinear_softmax(node: Node, opset: int):
    label = node.label
    flatten = _required_int(node, "opset") < 13
    axis_attr = int(node.attr("axis", -1))

    def kernel(x, x_scale, x_zp=None, y_scale=None, y_zp=None):
        dt = check_qtype(label, "X", x)
        xs = scale_of(label, "X_scale", x_scale)
        zero_point_of(label, "x_zero_point", x_zp, dt)
        ys = scale_of(label, "y_scale", y_scale)
        yz = zero_point_of(label, "y_zero_point", y_zp, dt)
        if x.ndim == 0 or not -x.ndim <= axis_attr < x.ndim:
            raise KernelError(f"{label}: axis {axis_attr} is out of range for input rank {x.ndim}")
        axis = axis_attr % x.ndim
        if x.size == 0:
            return (np.empty(x.shape, dtype=dt),)
        rows = x.reshape(int(np.prod(x.shape[:axis])), -1) if flatten else np.moveaxis(x, axis, -1)
        d = rows.shape[-1]
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            shift = max(0.0, float(np.log(np.float64(_FLT_MAX / _F32(d)))) - 5.0) / np.float64(xs)
            exp_table = np.exp((_DIFFS + shift) * np.float64(xs)).astype(_F32)
            diff = rows.astype(np.int16)
            diff -= diff.max(axis=-1, keepdims=True)
            diff += 255
            e = exp_table[diff]
            total = np.cumsum(e, axis=-1, dtype=_F32)[..., -1:]  # left to right, as onnxruntime sums
            e /= total
            e *= np.floor(_F32(1) / ys)
            y = saturate_to(label, e, dt, zp=yz)
        y = y.reshape(x.shape) if flatten else np.moveaxis(y, -1, axis)
        return (np.ascontiguousarray(y),)

    return kernel
