"""onnxruntime's quantized average pools (domain ``com.microsoft``) on uint8/int8 tensors:
QLinearAveragePool and QLinearGlobalAveragePool. The other quantized contrib ops are in qlinear_contrib.py.

Inputs are (X, x_scale, x_zero_point, y_scale, y_zero_point): per-tensor float32 scales, zero points of
X's type (optional for QLinearAveragePool, meaning 0; required for the global pool); Y has X's type.
``channels_last`` = 1 reads and writes (N, spatial..., C) instead of (N, C, spatial...).

QLinearGlobalAveragePool, like onnxruntime, sums the codes exactly, subtracts ``n * x_zero_point`` (n
the number of spatial positions) and multiplies by the float32 factor ``x_scale / (y_scale * n)``,
then rounds half to even, adds y_zero_point and saturates (onnxruntime's x86 arithmetic; its ARM
kernel is fixed point and can put a tie one step apart).

QLinearAveragePool takes AveragePool's window attributes (auto_pad, ceil_mode, count_include_pad,
kernel_shape, pads, strides; no dilations). It dequantizes X to float32, sums each window (padding
contributes zeros) and divides by the number of window positions inside X, or, with
count_include_pad, by the full kernel size even where a ceil_mode window runs past the padding (as
onnxruntime does); then ``round(mean / y_scale + y_zero_point)``, saturated: the zero point is added
before rounding. A window that covers the whole unpadded image is computed as the global pool, as
onnxruntime switches to it there (kernel_shape equal to the spatial size, all pads zero). The windows are pool.py's.

onnxruntime refuses more than 3 spatial dimensions here and a global-pool factor outside
[2**-32, 256); ort-core computes those cases too.
"""

from __future__ import annotations

import math

import numpy as np

from ....errors import KernelError
from ....ir.graph import Node
from ..registry import register
from .pool import PoolAttrs, window_sum
from .qlinear_contrib import DOMAIN, check_qtype, scale_of, zero_point_of
from .quantize import saturate_to

_F32 = np.float32


def _global_mean(label: str, x: np.ndarray, axes: tuple, xs, xz, ys, yz) -> np.ndarray:
    """The quantized mean of x over ``axes`` (kept as size-1 dims), from exact integer sums."""
    n = math.prod(x.shape[a] for a in axes)
    if n == 0:
        raise KernelError(f"{label}: cannot average over an empty image (input shape {x.shape})")
    acc = x.sum(axis=axes, keepdims=True, dtype=np.int64)
    if xz != 0:
        acc -= int(xz) * n
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        factor = xs / (ys * _F32(n))
        return saturate_to(label, acc.astype(_F32) * factor, x.dtype, zp=yz)


def _params(label: str, x, x_scale, x_zp, y_scale, y_zp, zp_required: bool):
    dt = check_qtype(label, "X", x)
    if x.ndim < 3:
        raise KernelError(f"{label}: input must have rank >= 3 (batch, channels and spatial axes), "
                          f"got shape {x.shape}")
    return (scale_of(label, "x_scale", x_scale), zero_point_of(label, "x_zero_point", x_zp, dt, zp_required),
            scale_of(label, "y_scale", y_scale), zero_point_of(label, "y_zero_point", y_zp, dt, zp_required))


def _channels_last(node: Node) -> bool:
    value = int(node.attr("channels_last", 0))
    if value not in (0, 1):
        raise KernelError(f"{node.label}: channels_last must be 0 or 1, got {value}")
    return bool(value)


@register("QLinearGlobalAveragePool", since=1, domain=DOMAIN)
def _qlinear_global_average_pool(node: Node, opset: int):
    label = node.label
    channels_last = _channels_last(node)

    def kernel(x, x_scale, x_zp=None, y_scale=None, y_zp=None):
        params = _params(label, x, x_scale, x_zp, y_scale, y_zp, zp_required=True)
        axes = tuple(range(1, x.ndim - 1)) if channels_last else tuple(range(2, x.ndim))
        return (_global_mean(label, x, axes, *params),)

    return kernel


@register("QLinearAveragePool", since=1, domain=DOMAIN)
def _qlinear_average_pool(node: Node, opset: int):
    label = node.label
    if node.attr("dilations") is not None:
        raise KernelError(f"{label}: QLinearAveragePool has no 'dilations' attribute")
    pa = PoolAttrs(node, opset, dilations_allowed=False, ceil_allowed=True)
    include_pad = bool(node.attr("count_include_pad", 0))
    channels_last = _channels_last(node)
    full = _F32(math.prod(pa.kernel))

    def kernel(x, x_scale, x_zp=None, y_scale=None, y_zp=None):
        xs, xz, ys, yz = _params(label, x, x_scale, x_zp, y_scale, y_zp, zp_required=False)
        xn = np.moveaxis(x, -1, 1) if channels_last else x
        g = pa.geometry(xn.shape, _F32)
        if list(xn.shape[2:]) == pa.kernel and not any(g["begin"]) and not any(g["end"]):
            y = _global_mean(label, xn, tuple(range(2, xn.ndim)), xs, xz, ys, yz)
        else:
            xf = xn.astype(_F32)
            if xz != 0:
                xf -= _F32(xz)
            xf *= xs
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                q = window_sum(xf, g) / (full if include_pad else pa.counts(xn.shape, False).astype(_F32))
                q /= ys
                q += _F32(yz)
            y = saturate_to(label, q, x.dtype)
        return (np.ascontiguousarray(np.moveaxis(y, 1, -1) if channels_last else y),)

    return kernel
