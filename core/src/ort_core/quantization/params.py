"""Quantization parameters and quantized values: scale and zero point from a range, weights per tensor or
per channel, biases as int32. The formulas are onnxruntime's (quant_utils), so that both tools write the
same numbers; nothing here edits a graph."""

from __future__ import annotations

import numpy as np

from .types import FULL_RANGE, NP_TYPES, REDUCED_RANGE, SYMMETRIC_RANGE


def qrange(qtype: int, reduce_range: bool = False, symmetric: bool = False) -> tuple[int, int]:
    """(qmin, qmax) of ``qtype``: reduced (one bit less), symmetric (-127..127 for int8) or full."""
    if reduce_range:
        return REDUCED_RANGE[qtype]
    if symmetric and qtype in SYMMETRIC_RANGE:
        return SYMMETRIC_RANGE[qtype]
    return FULL_RANGE[qtype]


def scale_zero_point(rmin, rmax, qtype: int, symmetric: bool, reduce_range: bool = False,
                     min_real_range: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(scale, zero_point) mapping [rmin, rmax] (widened to hold 0) onto the range of ``qtype``.

    The scale is computed in float64 and stored in the range's float type; the zero point is
    round(qmin - rmin / scale) (half to even), or the middle of the range when symmetric."""
    qmin, qmax = qrange(qtype, reduce_range, symmetric)
    rmin = np.asarray(rmin, dtype=np.float32)
    rmax = np.asarray(rmax, dtype=np.float32)
    rmin = np.minimum(rmin, np.float32(0))
    rmax = np.maximum(rmax, np.float32(0))
    if min_real_range is not None:
        rmax = np.maximum(rmax, rmin + np.float32(min_real_range))
    if symmetric:
        absmax = np.maximum(np.abs(rmin), np.abs(rmax))
        rmin, rmax = -absmax, absmax
    scale = (rmax.astype(np.float64) - rmin.astype(np.float64)) / (float(qmax) - float(qmin))
    dtype = NP_TYPES[qtype]
    if scale < np.finfo(np.float32).tiny:  # an all-zero range
        return np.array(1.0, np.float32), np.array(0, dtype)
    if symmetric:
        zp = np.round((qmin + qmax) / 2.0)
    else:
        zp = np.round(qmin - rmin.astype(np.float64) / scale)
    return np.array(scale, np.float32), np.array(zp).astype(dtype)


def quantize_values(data: np.ndarray, scale, zero_point, qtype: int) -> np.ndarray:
    """round(data / scale) + zero_point, clipped to the full range of ``qtype`` (float32 arithmetic, as
    QuantizeLinear does)."""
    qmin, qmax = FULL_RANGE[qtype]
    q = np.round(data.astype(np.float32) / np.asarray(scale, np.float32)) + np.asarray(zero_point).astype(np.float32)
    return np.clip(q, qmin, qmax).astype(NP_TYPES[qtype])


def quantize_tensor(data: np.ndarray, qtype: int, symmetric: bool, reduce_range: bool = False,
                    min_real_range: float | None = None):
    """(quantized, scale, zero_point) of a whole tensor with one scale."""
    flat = data.reshape(-1)
    if flat.size:
        scale, zp = scale_zero_point(flat.min(), flat.max(), qtype, symmetric, reduce_range, min_real_range)
    else:
        scale, zp = np.array(1.0, np.float32), np.array(0, NP_TYPES[qtype])
    return quantize_values(data, scale, zp, qtype), scale, zp


def quantize_per_channel(data: np.ndarray, axis: int, qtype: int, symmetric: bool, reduce_range: bool = False,
                         min_real_range: float | None = None):
    """(quantized, scales, zero_points) with one scale per index of ``axis`` (1-D scales)."""
    axis %= data.ndim
    moved = np.moveaxis(data, axis, 0).reshape(data.shape[axis], -1)
    scales, zps = [], []
    for row in moved:
        s, z = scale_zero_point(row.min(), row.max(), qtype, symmetric, reduce_range, min_real_range)
        scales.append(s)
        zps.append(z)
    scale = np.array(scales, np.float32)
    zp = np.array(zps).astype(NP_TYPES[qtype])
    shape = [1] * data.ndim
    shape[axis] = -1
    return quantize_values(data, scale.reshape(shape), zp.reshape(shape), qtype), scale, zp


def quantize_bias(bias: np.ndarray, input_scale, weight_scale, beta: float = 1.0):
    """(int32 bias, its float32 scale) with scale = input_scale * weight_scale * beta and zero point 0."""
    scale = np.asarray(input_scale, np.float32) * np.asarray(weight_scale, np.float32) * np.float32(beta)
    q = np.round(bias.astype(np.float64) / scale.astype(np.float64))
    info = np.iinfo(np.int32)
    return np.clip(q, info.min, info.max).astype(np.int32), scale.astype(np.float32)
