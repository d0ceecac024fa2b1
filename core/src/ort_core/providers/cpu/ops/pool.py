"""CPU kernels for pooling: MaxPool (with Indices), AveragePool, LpPool and their Global variants.

Windows are a loop over kernel taps of contiguous slices of the padded, stride-phase-split input
(the "wide" layout of conv.py). MaxUnpool, RoiPool/RoiAlign and quantized pools are not here.
"""

from __future__ import annotations

import math

import numpy as np

from ....errors import KernelError
from ..registry import register
from .conv import (
    bounded_cache,
    check_window_sizes,
    crop_view,
    ints_attr,
    phase_buffer,
    phase_plan,
    read_auto_pad,
    wide_taps,
    window_geometry,
)


class PoolAttrs:
    """Window attributes of a pooling node, resolved per input shape by ``geometry``."""

    def __init__(self, node, opset, dilations_allowed: bool, ceil_allowed: bool):
        self.label = node.label
        kshape = node.attr("kernel_shape")
        if kshape is None:
            raise KernelError(f"{node.label}: required attribute 'kernel_shape' is missing")
        self.kernel = [int(k) for k in kshape]
        if not self.kernel or min(self.kernel) < 1:
            raise KernelError(f"{node.label}: kernel_shape must be positive, got {self.kernel}")
        nsp = len(self.kernel)
        self.nsp = nsp
        self.auto_pad = read_auto_pad(node)
        self.strides = ints_attr(node, "strides", nsp, 1)
        self.pads = ints_attr(node, "pads", nsp, 0, 2)
        self.dilations = ints_attr(node, "dilations", nsp, 1) if dilations_allowed else [1] * nsp
        self.ceil_mode = bool(node.attr("ceil_mode", 0)) if ceil_allowed else False
        if min(self.strides) < 1 or min(self.dilations) < 1:
            raise KernelError(f"{node.label}: strides and dilations must be positive, "
                              f"got {self.strides} and {self.dilations}")
        if min(self.pads) < 0:
            raise KernelError(f"{node.label}: negative pads {self.pads} are not supported")
        self._cache: dict = {}

    def geometry(self, x_shape, dtype=np.float32):
        """Cached per input shape: dict(begin, end, out, ph) with ph the wide-layout plan."""
        return bounded_cache(self._cache, x_shape, lambda: self._geometry(x_shape, dtype))

    def _geometry(self, x_shape, dtype):
        if len(x_shape) != self.nsp + 2:
            raise KernelError(f"{self.label}: input of rank {len(x_shape)} does not match kernel_shape "
                              f"{self.kernel} (expected rank {self.nsp + 2})")
        begin, end, _, out = window_geometry(self.label, x_shape[2:], self.kernel, self.strides,
                                                self.dilations, self.pads, self.auto_pad, self.ceil_mode)
        check_window_sizes(self.label, x_shape, x_shape[1], begin, end, out, dtype)
        ph = phase_plan(x_shape[2:], self.kernel, self.strides, self.dilations, begin, out)
        return dict(begin=begin, end=end, out=out, ph=ph)

    def counts(self, x_shape, include_pad: bool) -> np.ndarray:
        """Number of window taps inside the input (or input + explicit pads) per output position."""
        def make():
            g = self.geometry(x_shape)
            result = np.ones((), dtype=np.int64)
            for i in range(self.nsp):
                n, s, d, k = x_shape[2 + i], self.strides[i], self.dilations[i], self.kernel[i]
                lo, hi = (-g["begin"][i], n + g["end"][i]) if include_pad else (0, n)
                pos = np.arange(g["out"][i])[:, None] * s - g["begin"][i] + np.arange(k)[None, :] * d
                cnt = ((pos >= lo) & (pos < hi)).sum(axis=1)
                result = np.multiply.outer(result, cnt)
            return result
        return bounded_cache(self._cache, (x_shape, "counts", include_pad), make)


def _min_value(dtype):
    return -np.inf if dtype.kind == "f" else np.iinfo(dtype).min


# ---------------------------------------------------------------------------------------------
# MaxPool
# ---------------------------------------------------------------------------------------------

@register("MaxPool", since=1, until=None)
def max_pool_factory(node, opset):
    pa = PoolAttrs(node, opset, dilations_allowed=opset >= 10, ceil_allowed=opset >= 10)
    storage_order = int(node.attr("storage_order", 0))
    if storage_order not in (0, 1):
        raise KernelError(f"{node.label}: storage_order must be 0 or 1, got {storage_order}")
    want_indices = len(node.outputs) > 1 and bool(node.outputs[1])
    if want_indices and opset < 8:
        raise KernelError(f"{node.label}: MaxPool-{opset} has a single output")

    def kernel(x):
        g = pa.geometry(x.shape, x.dtype)
        ph = g["ph"]
        taps = wide_taps(phase_buffer(x, ph, _min_value(x.dtype)), ph)
        y = taps[0].copy()
        if not want_indices:
            for src in taps[1:]:
                np.maximum(y, src, out=y)
            return (np.ascontiguousarray(crop_view(y, ph)),)
        # first tap (in row-major kernel order) holding the maximum, via mask arithmetic
        # (masked copies with data-dependent masks are much slower in numpy)
        best = np.zeros(y.shape, dtype=np.int32)
        for t, src in enumerate(taps[1:], start=1):
            gt = np.greater(src, y)
            np.maximum(y, src, out=y)
            best += gt * (t - best)
        return (np.ascontiguousarray(crop_view(y, ph)),
                _max_indices(x.shape, crop_view(best, ph), pa, g, storage_order))

    return kernel


def _max_indices(x_shape, best, pa, g, storage_order):
    """Flat input indices (ignoring padding) of the selected taps, row- or column-major."""
    nsp = pa.nsp
    in_sp = x_shape[2:]
    if storage_order == 0:
        dim_strides = [math.prod(in_sp[i + 1:]) for i in range(nsp)]
    else:
        dim_strides = [math.prod(in_sp[:i]) for i in range(nsp)]
    tap_coords = np.array(np.unravel_index(np.arange(math.prod(pa.kernel)), pa.kernel))  # (nsp, T)
    nc = x_shape[0] * x_shape[1]
    idx = (np.arange(nc, dtype=np.int64) * math.prod(in_sp)).reshape(x_shape[:2] + (1,) * nsp)
    idx = np.broadcast_to(idx, best.shape).copy()
    for i in range(nsp):
        shape = [1] * (nsp + 2)
        shape[2 + i] = g["out"][i]
        base = (np.arange(g["out"][i], dtype=np.int64) * pa.strides[i] - g["begin"][i]).reshape(shape)
        coord = base + (tap_coords[i] * pa.dilations[i])[best]
        idx += coord * dim_strides[i]
    return idx


# ---------------------------------------------------------------------------------------------
# AveragePool / LpPool
# ---------------------------------------------------------------------------------------------

def window_sum(x, g):
    """(N, C, *out) view of the window sums of x (zero padding), in float32 for float16 x."""
    ph = g["ph"]
    if x.dtype == np.float16:
        x = x.astype(np.float32)
    taps = wide_taps(phase_buffer(x, ph), ph)
    acc = taps[0].copy()
    for src in taps[1:]:
        acc += src
    return crop_view(acc, ph)


@register("AveragePool", since=1, until=None)
def average_pool_factory(node, opset):
    pa = PoolAttrs(node, opset, dilations_allowed=opset >= 19, ceil_allowed=opset >= 10)
    include_pad = bool(node.attr("count_include_pad", 0)) if opset >= 7 else False
    full = math.prod(pa.kernel)

    def kernel(x):
        g = pa.geometry(x.shape, x.dtype)
        acc = window_sum(x, g)
        counts = pa.counts(x.shape, include_pad)
        y = np.empty(acc.shape, dtype=x.dtype)
        divisor = acc.dtype.type(full) if (counts == full).all() else counts.astype(acc.dtype)
        np.divide(acc, divisor, out=y, casting="unsafe")
        return (y,)

    return kernel


@register("LpPool", since=1, until=None)
def lp_pool_factory(node, opset):
    pa = PoolAttrs(node, opset, dilations_allowed=opset >= 18, ceil_allowed=opset >= 18)
    p = _read_p(node, opset)

    def kernel(x):
        acc = np.ascontiguousarray(window_sum(_lp_power(x, p), pa.geometry(x.shape, x.dtype)))
        return (_lp_root(acc, p).astype(x.dtype, copy=False),)

    return kernel


def _read_p(node, opset):
    p = node.attr("p", 2.0 if opset < 2 else 2)
    if p <= 0:
        raise KernelError(f"{node.label}: p must be positive, got {p}")
    return float(p)


def _lp_power(x, p):
    """|x|**p in a fresh array of x's float dtype (float32 for float16)."""
    xf = x.astype(np.float32) if x.dtype == np.float16 else x
    if p == 1.0:
        return np.abs(xf)
    if p == 2.0:
        return np.square(xf)
    a = np.abs(xf)
    return np.power(a, a.dtype.type(p), out=a)


def _lp_root(acc, p):
    if p == 1.0:
        return acc
    if p == 2.0:
        return np.sqrt(acc, out=acc)
    return np.power(acc, acc.dtype.type(1.0 / p), out=acc)


# ---------------------------------------------------------------------------------------------
# Global pools
# ---------------------------------------------------------------------------------------------

def _spatial_axes(x, label):
    if x.ndim < 3:
        raise KernelError(f"{label}: input must have rank >= 3 (N, C, spatial...), got shape {x.shape}")
    return tuple(range(2, x.ndim))


@register("GlobalAveragePool", since=1, until=None)
def global_average_pool_factory(node, opset):
    label = node.label

    def kernel(x):
        return (np.mean(x, axis=_spatial_axes(x, label), keepdims=True, dtype=None),)

    return kernel


@register("GlobalMaxPool", since=1, until=None)
def global_max_pool_factory(node, opset):
    label = node.label

    def kernel(x):
        return (np.max(x, axis=_spatial_axes(x, label), keepdims=True),)

    return kernel


@register("GlobalLpPool", since=1, until=None)
def global_lp_pool_factory(node, opset):
    label = node.label
    p = _read_p(node, opset)

    def kernel(x):
        axes = _spatial_axes(x, label)
        acc = np.sum(_lp_power(x, p), axis=axes, keepdims=True)
        return (_lp_root(acc, p).astype(x.dtype, copy=False),)

    return kernel
