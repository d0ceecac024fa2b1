"""CPU kernels for arithmetic on quantized tensors: MatMulInteger, ConvInteger, QLinearMatMul and
QLinearConv. Integer accumulation is exact (see exact_product and exact_float); convolutions run
through conv.py's Conv kernel. Plain (de)quantization is in quantize.py. QLinearConv and QLinearMatMul
with constant weights and parameters get the kernels prepared at build time in qlinear_conv.py and
qlinear_matmul.py (exact blocked float32 products, qexact.py); the kernels here serve everything else.
"""

from __future__ import annotations

import math

import numpy as np

from ....errors import KernelError
from ....ir.graph import Node
from ..registry import register
from .conv import conv_factory
from .qlinear_conv import prepared_qlinear_conv
from .qlinear_matmul import prepared_qlinear_matmul
from .quantize import FLOAT8, INT_RANGES, saturate_to

INT8_TYPES = (np.dtype(np.int8), np.dtype(np.uint8))
# largest |(a - a_zero_point) * (b - b_zero_point)| for 8-bit operands: 255 * 255
_MAX_PRODUCT = 255 * 255


def exact_float(k_terms: int):
    """The float type in which a dot product of ``k_terms`` zero-point-shifted 8-bit products is
    exact: every product and partial sum is an integer of magnitude <= k_terms * 255**2, exact in
    float32 below 2**24 and in float64 below 2**53 (k_terms < 2**37). BLAS then gives the integer
    result exactly, in any summation order, which numpy's integer matmul (no BLAS) would not speed."""
    return np.float32 if k_terms * _MAX_PRODUCT < 2 ** 24 else np.float64


_BLOCK = 2 ** 24 // _MAX_PRODUCT  # 258: a float32 sum of this many 8-bit products is exact
_MIN_BLOCK = 64


def exact_product(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a @ b, exactly, for float32 arrays holding zero-point-shifted 8-bit integers (b 2-D, or any
    shape when K is short). Up to 258 terms float32 BLAS is exact; longer dot products run as float32
    BLAS over blocks of K (each partial sum exact) added up in float64, about twice as fast as one
    float64 product. The result is float32 or float64, integer-valued."""
    k = a.shape[-1]
    if k <= _BLOCK:
        return np.matmul(a, b)
    size = next((d for d in range(_BLOCK, _MIN_BLOCK - 1, -1) if k % d == 0), 0)
    if b.ndim != 2 or a.ndim == 0 or not size:
        return np.matmul(a.astype(np.float64), b.astype(np.float64))
    blocks = k // size
    parts = np.matmul(a.reshape(-1, blocks, size).transpose(1, 0, 2), b.reshape(blocks, size, b.shape[1]))
    return np.add.reduce(parts, axis=0, dtype=np.float64).reshape(*a.shape[:-1], b.shape[1])


def to_int32(acc: np.ndarray) -> np.ndarray:
    """Exact integer-valued float accumulator -> int32, wrapping on overflow as 32-bit
    accumulation does (the spec allows overflow only there)."""
    return acc.astype(np.int64).astype(np.int32)


def check_int8(label: str, name: str, arr: np.ndarray) -> None:
    """KernelError naming the node and input unless ``arr`` holds int8 or uint8."""
    if arr.dtype not in INT8_TYPES:
        raise KernelError(f"{label}: input '{name}' must be int8 or uint8, got {arr.dtype}")


def check_zero_point_type(label: str, name: str, zp, x: np.ndarray) -> None:
    """KernelError naming the node unless the zero point ``zp`` (when given) has the type of ``x``."""
    if zp is not None and zp.dtype != x.dtype:
        raise KernelError(f"{label}: zero point '{name}' has type {zp.dtype}, its input has {x.dtype}")


def _scalar(label: str, name: str, p) -> np.ndarray:
    """A per-tensor parameter as a 0-d array."""
    if p.size != 1:
        raise KernelError(f"{label}: '{name}' must be a scalar (per-tensor), got shape {p.shape}")
    return p.reshape(())


def _row_param(label: str, name: str, p, a: np.ndarray):
    """A per-tensor or per-row parameter of the left matmul operand, shaped to broadcast over a:
    a 1-D vector holds one value per row (M) of a 2-D or batched a."""
    if p is None or p.size == 1:
        return None if p is None else p.reshape(())
    if p.ndim == 1 and a.ndim >= 2:
        if p.shape[0] != a.shape[-2]:
            raise KernelError(f"{label}: '{name}' has {p.shape[0]} values, input has {a.shape[-2]} rows")
        return p.reshape(-1, 1)
    return p


def _col_param(p):
    """A per-tensor or per-column parameter of the right operand (1-D: one value per column)."""
    return None if p is None else (p.reshape(()) if p.size == 1 else p)


def zero_point_shifted(x: np.ndarray, zp, dtype) -> np.ndarray:
    """x - zero point in ``dtype`` (exact: both are small integers or float8 values)."""
    out = x.astype(dtype)
    if zp is not None and np.any(zp):
        out -= zp.astype(dtype)
    return out


def int_matmul(label: str, a, b, a_zp, b_zp) -> np.ndarray:
    """(a - a_zp) @ (b - b_zp) as an exact integer-valued float array."""
    if a.ndim == 0 or b.ndim == 0:
        raise KernelError(f"{label}: matmul operands must have rank >= 1, got {a.shape} and {b.shape}")
    k = a.shape[-1]
    if k != b.shape[0 if b.ndim == 1 else -2]:
        raise KernelError(f"{label}: matmul shapes {a.shape} and {b.shape} do not match")
    return exact_product(zero_point_shifted(a, a_zp, np.float32), zero_point_shifted(b, b_zp, np.float32))


# ---------------------------------------------------------------------------------------------
# MatMulInteger / QLinearMatMul
# ---------------------------------------------------------------------------------------------

@register("MatMulInteger", since=10)
def _matmul_integer(node: Node, opset: int):
    label = node.label

    def kernel(a, b, a_zp=None, b_zp=None):
        check_int8(label, "A", a)
        check_int8(label, "B", b)
        check_zero_point_type(label, "a_zero_point", a_zp, a)
        check_zero_point_type(label, "b_zero_point", b_zp, b)
        acc = int_matmul(label, a, b, _row_param(label, "a_zero_point", a_zp, a), _col_param(b_zp))
        return (to_int32(acc),)

    return kernel


@register("QLinearMatMul", since=10)
def _qlinear_matmul(node: Node, opset: int, graph=None):
    """Integer operands accumulate exactly; float8 operands (opset 21) are dequantized to float32,
    multiplied and quantized back with saturation (the reference evaluator has no float8 path). A constant
    8-bit B with constant parameters is prepared once (qlinear_matmul.py)."""
    prepared = prepared_qlinear_matmul(node, opset, graph)
    if prepared is not None:
        return prepared
    label = node.label

    def kernel(a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp):
        check_zero_point_type(label, "a_zero_point", a_zp, a)
        check_zero_point_type(label, "b_zero_point", b_zp, b)
        out = y_zp.dtype
        if out not in INT_RANGES and out not in FLOAT8:
            raise KernelError(f"{label}: y_zero_point type {out} is not int8, uint8 or float8")
        a_s, a_z = (_row_param(label, n, p, a) for n, p in (("a_scale", a_scale), ("a_zero_point", a_zp)))
        b_s, b_z = _col_param(b_scale), _col_param(b_zp)
        if a.dtype in FLOAT8 or b.dtype in FLOAT8:
            acc = np.matmul(zero_point_shifted(a, a_z, np.float32), zero_point_shifted(b, b_z, np.float32))
        else:
            check_int8(label, "a", a)
            check_int8(label, "b", b)
            acc = int_matmul(label, a, b, a_z, b_z)
        # the combined rescale runs in double: the exact accumulator times the multiplier is then
        # rounded once, to the output's integers
        y_s = _scalar(label, "y_scale", y_scale).astype(np.float64)
        mult = a_s.astype(np.float64) * b_s.astype(np.float64) / y_s
        q = acc.astype(np.float64, copy=False) * mult
        return (saturate_to(label, q, out, zp=_scalar(label, "y_zero_point", y_zp)),)

    return kernel


# ---------------------------------------------------------------------------------------------
# ConvInteger / QLinearConv
# ---------------------------------------------------------------------------------------------

def _per_channel(label: str, name: str, p, m: int, rank: int, lead: int):
    """Scalar, or one value per output channel shaped (M, 1, ...) (lead=0, for weights) or
    (1, M, 1, ...) (lead=1, for outputs)."""
    if p is None or p.size == 1:
        return None if p is None else p.reshape(())
    if p.ndim != 1 or p.shape[0] != m:
        raise KernelError(f"{label}: '{name}' must be a scalar or hold one value per output channel ({m}), "
                          f"got shape {p.shape}")
    return p.reshape((1,) * lead + (m,) + (1,) * (rank - 1 - lead))


def _int_conv(label: str, conv, x, w, x_zp, w_zp, bias=None) -> np.ndarray:
    """Convolution of the zero-point-shifted integer tensors, exact in float (padding with the
    zero point is padding the shifted input with 0, which is what Conv does)."""
    if x.ndim < 3 or w.ndim != x.ndim:
        raise KernelError(f"{label}: input rank {x.ndim} and weight rank {w.ndim} do not describe a convolution")
    if x_zp is not None and x_zp.size != 1:
        raise KernelError(f"{label}: x_zero_point must be a scalar, got shape {x_zp.shape}")
    dt = exact_float(math.prod(w.shape[1:]))
    if bias is not None:
        # an int32 bias on top of the accumulator only stays exact in double
        dt = np.float64
    xs = zero_point_shifted(x, None if x_zp is None else x_zp.reshape(()), dt)
    ws = zero_point_shifted(w, _per_channel(label, "w_zero_point", w_zp, w.shape[0], w.ndim, 0), dt)
    return conv(xs, ws, None if bias is None else bias.astype(dt))[0]


@register("ConvInteger", since=10)
def _conv_integer(node: Node, opset: int):
    label = node.label
    conv = conv_factory(node, opset)  # geometry attributes are Conv's: auto_pad, pads, strides, ...

    def kernel(x, w, x_zp=None, w_zp=None):
        check_int8(label, "x", x)
        check_int8(label, "w", w)
        check_zero_point_type(label, "x_zero_point", x_zp, x)
        check_zero_point_type(label, "w_zero_point", w_zp, w)
        return (to_int32(_int_conv(label, conv, x, w, x_zp, w_zp)),)

    return kernel


@register("QLinearConv", since=10)
def _qlinear_conv(node: Node, opset: int, graph=None):
    prepared = prepared_qlinear_conv(node, opset, graph)  # constant weights: prepared once (qlinear_conv.py)
    if prepared is not None:
        return prepared
    label = node.label
    conv = conv_factory(node, opset)

    def kernel(x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, bias=None):
        check_int8(label, "x", x)
        check_int8(label, "w", w)
        check_zero_point_type(label, "x_zero_point", x_zp, x)
        check_zero_point_type(label, "w_zero_point", w_zp, w)
        if y_zp is None:
            out = x.dtype
        else:
            out = y_zp.dtype
            check_int8(label, "y_zero_point", y_zp)
        if bias is not None and bias.dtype != np.int32:
            raise KernelError(f"{label}: bias must be int32, got {bias.dtype}")
        acc = _int_conv(label, conv, x, w, x_zp, w_zp, bias)
        ws = _per_channel(label, "w_scale", w_scale, w.shape[0], acc.ndim, 1)
        x_s = _scalar(label, "x_scale", x_scale).astype(np.float64)
        mult = x_s * ws.astype(np.float64) / _scalar(label, "y_scale", y_scale).astype(np.float64)
        q = acc.astype(np.float64, copy=False) * mult
        return (saturate_to(label, q, out, zp=None if y_zp is None else _scalar(label, "y_zero_point", y_zp)),)

    return kernel
