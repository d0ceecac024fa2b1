"""CPU kernels for linear (de)quantization: QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear,
per tensor, per axis or blocked, to and from 8/16-bit, 4-bit and 2-bit integers and float8/float6/float4.
Arithmetic on quantized values (QLinearMatMul, QLinearConv, ...) is in qlinear.py.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from ....errors import KernelError
from ....ir.graph import Node
from ....ir.types import np_dtype
from ..registry import register

# saturation bounds of the integer target types
INT_RANGES: dict[np.dtype, tuple[int, int]] = {
    np.dtype(np.uint8): (0, 255),
    np.dtype(np.int8): (-128, 127),
    np.dtype(np.uint16): (0, 65535),
    np.dtype(np.int16): (-32768, 32767),
    np.dtype(ml_dtypes.uint4): (0, 15),
    np.dtype(ml_dtypes.int4): (-8, 7),
    np.dtype(ml_dtypes.uint2): (0, 3),
    np.dtype(ml_dtypes.int2): (-2, 1),
}
# float8 types: with saturate=0 an overflow becomes inf/NaN, so saturation is a choice
FLOAT8 = {np.dtype(t) for t in (ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e4m3fnuz,
                                 ml_dtypes.float8_e5m2, ml_dtypes.float8_e5m2fnuz)}
# tiny float types without inf/NaN: casting saturates by itself
SMALL_FLOATS = {np.dtype(getattr(ml_dtypes, n)) for n in ("float4_e2m1fn", "float6_e2m3fn", "float6_e3m2fn")
                if hasattr(ml_dtypes, n)}
_SCALE_FLOATS = {np.dtype(np.float32), np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16),
                 np.dtype(np.float64)}


def saturate_to(label: str, q: np.ndarray, out: np.dtype, saturate: bool = True, zp=None) -> np.ndarray:
    """Real values q (x already divided by the scale) plus the zero point, in the quantized type
    ``out``. Integers: round half to even, then add the zero point and clip (NaN -> the lowest
    value, as a C cast through int32 would give). float8: clip to the finite range unless
    saturate is off (then overflow becomes inf or NaN). float4/float6 saturate by themselves."""
    if out in INT_RANGES:
        lo, hi = INT_RANGES[out]
        r = np.asarray(np.rint(q))  # a 0-d q rounds to a numpy scalar, which out= below refuses
        if r.dtype not in (np.float32, np.float64):  # float16/bfloat16 cannot hold 65535 + zero point
            r = r.astype(np.float32)
        if zp is not None:
            # rounding before adding keeps the tie-breaking of x / scale; integers up to 2**24 are
            # exact in float32 and anything larger is clipped away anyway
            r += zp.astype(r.dtype)
        np.minimum(r, hi, out=r)
        np.fmax(r, lo, out=r)  # fmax picks lo over NaN
        return r.astype(out)
    if out not in FLOAT8 and out not in SMALL_FLOATS:
        raise KernelError(f"{label}: {out} is not a quantized type")
    if q.dtype != np.float64:
        q = q.astype(np.float32, copy=False)
    if not _is_zero(zp):
        q = q + zp.astype(q.dtype)
    if out in FLOAT8 and saturate:
        m = float(ml_dtypes.finfo(out).max)
        q = np.clip(q, -m, m)  # NaN stays NaN, +-inf becomes +-max
    return q.astype(out)


def _axis(label: str, axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise KernelError(f"{label}: axis {axis} is out of range for input rank {rank}")
    return axis % rank


def align_params(label: str, x: np.ndarray, scale: np.ndarray, zp, axis: int, block: int):
    """(x_work, scale_b, zp_b, out_shape): x reshaped if needed and scale/zero point shaped so that
    they broadcast against it, per tensor, per axis or per block of ``block`` along ``axis``.

    Blocks that divide the axis evenly are handled by splitting the axis into (blocks, block) in
    x rather than repeating the scale to x's size; an uneven last block needs the repeat."""
    if zp is not None and zp.shape != scale.shape and not (zp.size == 1 and scale.size == 1):
        raise KernelError(f"{label}: zero point shape {zp.shape} differs from scale shape {scale.shape}")
    if scale.size == 1 and (block <= 0 or scale.ndim != x.ndim):
        return x, scale.reshape(()), None if zp is None else zp.reshape(()), x.shape
    if block <= 0:
        if scale.ndim != 1:
            raise KernelError(f"{label}: scale of shape {scale.shape} is neither a scalar nor 1-D "
                              f"(set block_size for blocked quantization)")
        ax = _axis(label, axis, x.ndim)
        if scale.shape[0] != x.shape[ax]:
            raise KernelError(f"{label}: per-axis scale has {scale.shape[0]} values, input axis {ax} "
                              f"has size {x.shape[ax]}")
        shape = [1] * x.ndim
        shape[ax] = -1
        return x, scale.reshape(shape), None if zp is None else zp.reshape(shape), x.shape
    ax = _axis(label, axis, x.ndim)
    d = x.shape[ax]
    nb = -(-d // block)
    want = x.shape[:ax] + (nb,) + x.shape[ax + 1:]
    if scale.shape != want:
        raise KernelError(f"{label}: blocked scale shape {scale.shape} does not match input shape {x.shape} "
                          f"with block_size={block} on axis {ax} (expected {want})")
    if d % block == 0:
        work = x.shape[:ax] + (nb, block) + x.shape[ax + 1:]
        pshape = x.shape[:ax] + (nb, 1) + x.shape[ax + 1:]
        return (x.reshape(work), scale.reshape(pshape), None if zp is None else zp.reshape(pshape), x.shape)
    idx = np.arange(d) // block

    def spread(p):
        return None if p is None else np.take(p, idx, axis=ax)
    return x, spread(scale), spread(zp), x.shape


def _is_zero(zp) -> bool:
    """True for an absent or all-zero zero point (small tensor: the check is cheap)."""
    return zp is None or not np.any(zp.astype(np.float32) if zp.dtype.itemsize == 1 else zp)


# ---------------------------------------------------------------------------------------------
# QuantizeLinear
# ---------------------------------------------------------------------------------------------

@register("QuantizeLinear", since=10)
def _quantize_linear(node: Node, opset: int):
    label = node.label
    axis = int(node.attr("axis", 1)) if opset >= 13 else 1
    saturate = bool(node.attr("saturate", 1)) if opset >= 19 else True
    block = int(node.attr("block_size", 0)) if opset >= 21 else 0
    out_attr = int(node.attr("output_dtype", 0)) if opset >= 21 else 0
    precision = int(node.attr("precision", 0)) if opset >= 23 else 0
    if block < 0:
        raise KernelError(f"{label}: block_size must be positive, got {block}")
    out_dtype = np_dtype(out_attr) if out_attr else None
    if out_dtype is not None and out_dtype not in INT_RANGES and out_dtype not in FLOAT8 | SMALL_FLOATS:
        raise KernelError(f"{label}: output_dtype {out_dtype} is not a quantized type")
    cdt = np_dtype(precision) if precision else None
    if cdt is not None and cdt not in _SCALE_FLOATS:
        raise KernelError(f"{label}: precision {cdt} is not a floating-point type")

    def kernel(x, scale, zp=None):
        out = out_dtype or np.dtype(np.uint8)
        if zp is not None:
            if out_dtype is not None and zp.dtype != out_dtype:
                raise KernelError(f"{label}: output_dtype {out_dtype} differs from the zero point's type "
                                  f"{zp.dtype}")
            out = zp.dtype
        if out not in INT_RANGES and out not in FLOAT8 and out not in SMALL_FLOATS:
            raise KernelError(f"{label}: zero point type {out} is not a quantized type")
        if opset < 13 and scale.size != 1:
            raise KernelError(f"{label}: opset {opset} supports a scalar scale only, got shape {scale.shape}")
        xw, s, z, shape = align_params(label, x, scale, zp, axis, block)
        # division precision: the `precision` attribute, else the common type of x and the scale;
        # int32 x divides in double, which holds every int32 exactly
        dt = cdt
        if dt is None:
            if x.dtype.kind in "iu":
                dt = np.dtype(np.float64)
            elif x.dtype == s.dtype:
                dt = x.dtype
            else:
                dt = np.dtype(np.float32)
        q = xw.astype(dt, copy=False) / s.astype(dt, copy=False)
        return (saturate_to(label, q, out, saturate, z).reshape(shape),)

    return kernel


# ---------------------------------------------------------------------------------------------
# DequantizeLinear
# ---------------------------------------------------------------------------------------------

@register("DequantizeLinear", since=10)
def _dequantize_linear(node: Node, opset: int):
    label = node.label
    axis = int(node.attr("axis", 1)) if opset >= 13 else 1
    block = int(node.attr("block_size", 0)) if opset >= 21 else 0
    out_attr = int(node.attr("output_dtype", 0)) if opset >= 23 else 0
    if block < 0:
        raise KernelError(f"{label}: block_size must be positive, got {block}")
    out_dtype = np_dtype(out_attr) if out_attr else None
    if out_dtype is not None and out_dtype not in _SCALE_FLOATS:
        raise KernelError(f"{label}: output_dtype {out_dtype} is not a floating-point type")

    def kernel(x, scale, zp=None):
        out = out_dtype or scale.dtype
        if out not in _SCALE_FLOATS:
            raise KernelError(f"{label}: output type {out} (from x_scale) is not float, float16 or bfloat16; "
                              f"set output_dtype")
        if zp is not None and zp.dtype != x.dtype:
            raise KernelError(f"{label}: zero point type {zp.dtype} differs from input type {x.dtype}")
        if opset < 13 and scale.size != 1:
            raise KernelError(f"{label}: opset {opset} supports a scalar scale only, got shape {scale.shape}")
        xw, s, z, shape = align_params(label, x, scale, zp, axis, block)
        # 8-bit and narrower values (integers or floats) times a float32/16 scale are exact in
        # float32, so the product is rounded once, to the output type; wider inputs go through double
        cdt = np.float32 if x.dtype.itemsize == 1 and out != np.float64 else np.float64
        y = xw.astype(cdt)
        if not _is_zero(z):
            y -= z.astype(cdt)
        y *= s.astype(cdt)
        return (y.reshape(shape).astype(out, copy=False),)

    return kernel


# ---------------------------------------------------------------------------------------------
# DynamicQuantizeLinear
# ---------------------------------------------------------------------------------------------

@register("DynamicQuantizeLinear", since=11)
def dynamic_quantize_linear(node: Node, opset: int):
    """DynamicQuantizeLinear's factory (also the first step of com.microsoft DynamicQuantizeMatMul)."""
    label = node.label

    def kernel(x):
        if x.dtype != np.float32:
            raise KernelError(f"{label}: input must be float32, got {x.dtype}")
        f32 = np.float32
        # the range is widened to include 0 so that 0 is exactly representable
        hi = f32(max(0.0, float(x.max()))) if x.size else f32(0)
        lo = f32(min(0.0, float(x.min()))) if x.size else f32(0)
        scale = f32(1.0 if hi == lo else hi - lo) / f32(255)
        zp = np.rint(np.clip(f32(0) - lo / scale, 0, 255))
        y = saturate_to(label, x / scale, np.dtype(np.uint8), zp=np.asarray(zp, dtype=f32))
        return (y, np.array(scale, dtype=f32), np.array(zp, dtype=np.uint8))

    return kernel
