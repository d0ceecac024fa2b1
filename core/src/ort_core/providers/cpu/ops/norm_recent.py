"""CPU kernels for RMSNormalization (opset 23), LpNormalization and MeanVarianceNormalization.

Batch/Layer/Group/Instance normalization and LRN are in normalization.py, not here.
"""

from __future__ import annotations

import math

import numpy as np

from ....errors import KernelError
from ....ir.graph import Node
from ..registry import register

_STASH_TYPES = {1: np.float32, 10: np.float16, 11: np.float64}
_F32 = np.dtype(np.float32)


def _compute_dtype(dtype: np.dtype, stash=_F32) -> np.dtype:
    """The wider of the stash type and the input type; 16-bit inputs always run in float32."""
    if dtype.name in ("float16", "bfloat16"):
        dtype = _F32
    return np.result_type(stash, dtype)


def _axis(label: str, axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise KernelError(f"{label}: axis {axis} is out of range for input of rank {rank}")
    return axis + rank if axis < 0 else axis


def _check_float(label: str, x: np.ndarray) -> None:
    if x.dtype.kind != "f" and x.dtype.name != "bfloat16":
        raise KernelError(f"{label}: input must be a float tensor, got {x.dtype}")


@register("RMSNormalization", since=23, until=None)
def rms_normalization_factory(node: Node, opset: int):
    label = node.label
    axis = int(node.attr("axis", -1))
    epsilon = float(np.float32(node.attr("epsilon", 1e-5)))
    stash_type = int(node.attr("stash_type", 1))
    if stash_type not in _STASH_TYPES:
        raise KernelError(f"{label}: unsupported stash_type {stash_type} (supported: {sorted(_STASH_TYPES)})")
    stash = np.dtype(_STASH_TYPES[stash_type])

    def kernel(x, scale):
        _check_float(label, x)
        ax = _axis(label, axis, x.ndim)
        cdt = _compute_dtype(x.dtype, stash)
        rows = math.prod(x.shape[:ax])
        x2 = x.reshape(rows, math.prod(x.shape[ax:])).astype(cdt, copy=False)
        ms = np.einsum("ij,ij->i", x2, x2) / cdt.type(max(x2.shape[1], 1))  # mean of squares
        ms += cdt.type(epsilon)
        inv_rms = np.reciprocal(np.sqrt(ms, out=ms), out=ms)
        y = (x2 * inv_rms[:, None]).reshape(x.shape)
        if y.dtype != x.dtype:  # stage one ends with a cast back to X's type
            y = y.astype(x.dtype).astype(cdt)
        try:
            y = y * scale.astype(cdt, copy=False)
        except ValueError:
            raise KernelError(f"{label}: scale of shape {scale.shape} does not broadcast to X of "
                              f"shape {x.shape}") from None
        if y.shape != x.shape:
            raise KernelError(f"{label}: scale of shape {scale.shape} must broadcast to X's shape "
                              f"{x.shape}, not widen it")
        return (y.astype(scale.dtype, copy=False),)

    return kernel


@register("LpNormalization", since=1, until=None)
def lp_normalization_factory(node: Node, opset: int):
    """x / ||x||_p along one axis; a zero norm gives zeros rather than NaN."""
    label = node.label
    axis = int(node.attr("axis", -1))
    p = int(node.attr("p", 2))
    if p not in (1, 2):
        raise KernelError(f"{label}: p must be 1 or 2, got {p}")

    def kernel(x):
        _check_float(label, x)
        ax = _axis(label, axis, x.ndim)
        cdt = _compute_dtype(x.dtype)
        xc = x.astype(cdt, copy=False)
        if p == 1:
            norm = np.sum(np.abs(xc), axis=ax, keepdims=True)
        else:
            norm = np.sqrt(np.sum(np.square(xc), axis=ax, keepdims=True))
        y = np.zeros(x.shape, cdt)
        np.divide(xc, norm, out=y, where=norm != 0)
        return (y.astype(x.dtype, copy=False),)

    return kernel


@register("MeanVarianceNormalization", since=9, until=None)
def mean_variance_normalization_factory(node: Node, opset: int):
    """(x - mean) / (std + 1e-9) over ``axes``; the variance is taken as the mean squared
    deviation (two passes), which equals E[x^2] - E[x]^2 without its cancellation."""
    label = node.label
    axes = [int(a) for a in node.attr("axes", [0, 2, 3])]

    def kernel(x):
        _check_float(label, x)
        red = tuple(sorted({_axis(label, a, x.ndim) for a in axes}))
        cdt = _compute_dtype(x.dtype)
        d = x.astype(cdt)
        d -= np.mean(d, axis=red, keepdims=True)
        std = np.sqrt(np.mean(np.square(d), axis=red, keepdims=True))
        std += cdt.type(1e-9)
        d /= std
        return (d.astype(x.dtype, copy=False),)

    return kernel
