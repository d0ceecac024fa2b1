"""CPU kernels that select, order or place elements by value or position: TopK, Unique, NonZero,
Compress, OneHot, Trilu, ReverseSequence and CenterCropPad.
Gather-style indexing is in shape_ops and scatter_gather; nothing here does arithmetic on values.
"""

from __future__ import annotations

import math

import numpy as np

from ....errors import KernelError
from ....ir.graph import Node
from ....limits import check_tensor_size
from ..registry import register
from .shape_ops import normalize_axis


def _scalar_int(node: Node, value, what: str) -> int:
    v = np.asarray(value)
    if v.size != 1:
        raise KernelError(f"{node.label}: {what} must hold exactly one value, got shape {v.shape}")
    return int(v.reshape(-1)[0])


def _sortable(x: np.ndarray) -> np.ndarray:
    """ml_dtypes floats (bfloat16, float8) sorted through float32, which keeps their order."""
    return x.astype(np.float32) if x.dtype.kind == "V" else x


def _fill_value(dtype: np.dtype):
    """The 'zero' of a dtype, used where an op leaves positions empty ('' for strings)."""
    return "" if dtype.kind == "O" else np.zeros((), dtype=dtype)


# --------------------------------------------------------------------------------------------
# TopK
# --------------------------------------------------------------------------------------------

def _topk(node: Node, x: np.ndarray, k: int, axis: int, largest: bool):
    a = normalize_axis(node, axis, x.ndim)
    n = x.shape[a]
    if not 0 <= k <= n:
        raise KernelError(f"{node.label}: k={k} is out of range for axis {axis} of size {n}")
    keys = _sortable(x)
    if largest:
        # Ties must keep the lower index first: a stable ascending sort of the reversed axis,
        # read backwards, is descending with equal values in increasing original index.
        order = np.argsort(np.flip(keys, axis=a), axis=a, kind="stable")
        idx = (n - 1) - np.flip(order, axis=a)
    else:
        idx = np.argsort(keys, axis=a, kind="stable")
    idx = idx[(slice(None),) * a + (slice(0, k),)]
    return np.take_along_axis(x, idx, axis=a), idx.astype(np.int64, copy=False)


@register("TopK", since=1, until=9)
def _topk_v1(node: Node, opset: int):
    k = node.attr("k")
    if k is None:
        raise KernelError(f"{node.label}: attribute 'k' is required")
    k, axis = int(k), int(node.attr("axis", -1))

    def kernel(x):
        return _topk(node, x, k, axis, True)
    return kernel


@register("TopK", since=10)
def _topk_v10(node: Node, opset: int):
    axis = int(node.attr("axis", -1))
    largest = bool(node.attr("largest", 1)) if opset >= 11 else True
    # sorted=0 leaves the order unspecified: the sorted order is one valid answer

    def kernel(x, k):
        return _topk(node, x, _scalar_int(node, k, "k"), axis, largest)
    return kernel


# --------------------------------------------------------------------------------------------
# Unique
# --------------------------------------------------------------------------------------------

def _unique_rows(rows: np.ndarray):
    """np.unique over the rows of a 2-D array: (first index, inverse, counts), rows sorted."""
    n, width = rows.shape
    if n == 0:
        empty = np.zeros(0, dtype=np.intp)
        return empty, empty, empty
    if width == 0:  # every (empty) row is the same
        return np.zeros(1, np.intp), np.zeros(n, np.intp), np.array([n], np.intp)
    # Element codes first: they keep the values' order and make any dtype (strings, bfloat16)
    # comparable row-wise by numpy's axis-aware unique.
    _, codes = np.unique(_sortable(rows.reshape(-1)), return_inverse=True)
    _, first, inverse, counts = np.unique(codes.reshape(n, width), axis=0, return_index=True,
                                          return_inverse=True, return_counts=True)
    return first, inverse.reshape(-1), counts


@register("Unique", since=11)
def _unique(node: Node, opset: int):
    axis = node.attr("axis")
    axis = None if axis is None else int(axis)
    is_sorted = bool(node.attr("sorted", 1))
    n_out = len(node.outputs)

    def kernel(x):
        if axis is None:
            a = 0
            src = x.reshape(-1)
            _, first, inverse, counts = np.unique(_sortable(src), return_index=True,
                                                  return_inverse=True, return_counts=True)
            inverse = inverse.reshape(-1)
        else:
            a = normalize_axis(node, axis, x.ndim)
            src = x
            moved = np.moveaxis(x, a, 0)
            first, inverse, counts = _unique_rows(
                moved.reshape(moved.shape[0], math.prod(moved.shape[1:])))
        if not is_sorted:  # order of first occurrence instead of ascending
            order = np.argsort(first, kind="stable")
            rank = np.empty_like(order)
            rank[order] = np.arange(order.size)
            first, counts, inverse = first[order], counts[order], rank[inverse]
        y = np.take(src, first, axis=a)
        outs = (y, first.astype(np.int64), inverse.astype(np.int64), counts.astype(np.int64))
        return outs[:n_out]
    return kernel


# --------------------------------------------------------------------------------------------
# NonZero / Compress
# --------------------------------------------------------------------------------------------

@register("NonZero", since=9)
def _nonzero(node: Node, opset: int):
    def kernel(x):
        # a scalar counts as a one-element vector, as numpy and onnxruntime treat it
        return (np.array(np.nonzero(x.reshape(1) if x.ndim == 0 else x), dtype=np.int64),)
    return kernel


@register("Compress", since=9)
def _compress(node: Node, opset: int):
    axis = node.attr("axis")
    axis = None if axis is None else int(axis)

    def kernel(x, condition):
        if condition.ndim != 1:
            raise KernelError(f"{node.label}: condition must be 1-D, got shape {condition.shape}")
        src, a = (x.reshape(-1), 0) if axis is None else (x, normalize_axis(node, axis, x.ndim))
        cond = condition.astype(bool, copy=False)
        n = src.shape[a]
        if cond.size > n:  # a longer condition is fine as long as it selects nothing beyond
            if cond[n:].any():
                raise KernelError(f"{node.label}: condition selects index {n + int(np.argmax(cond[n:]))}"
                                  f" beyond the size {n} of the selected axis")
            cond = cond[:n]
        return (np.compress(cond, src, axis=a),)
    return kernel


# --------------------------------------------------------------------------------------------
# OneHot
# --------------------------------------------------------------------------------------------

@register("OneHot", since=9)
def _one_hot(node: Node, opset: int):
    axis = int(node.attr("axis", -1))
    negative_indices = opset >= 11  # opset 9 puts negative indices out of range (all off)

    def kernel(indices, depth, values):
        d = np.asarray(depth)
        if d.size != 1:
            raise KernelError(f"{node.label}: depth must hold exactly one value, got shape {d.shape}")
        n = int(d.reshape(-1)[0])  # non-integer depths are truncated, as the spec says
        if n < 1:
            raise KernelError(f"{node.label}: depth must be positive, got {n}")
        if values.size != 2:
            raise KernelError(f"{node.label}: values must be [off_value, on_value], got shape "
                              f"{values.shape}")
        rank = indices.ndim + 1
        if not -rank <= axis < rank:
            raise KernelError(f"{node.label}: axis {axis} is out of range for output rank {rank}")
        a = axis % rank
        check_tensor_size(node.label, indices.shape[:a] + (n,) + indices.shape[a:], values.dtype)
        idx = indices.astype(np.int64)
        if negative_indices:
            idx = np.where(idx < 0, idx + n, idx)
        classes = np.arange(n).reshape((n,) + (1,) * (rank - 1 - a))
        hot = np.expand_dims(idx, a) == classes  # out-of-range indices match no class
        return (values.reshape(2).take(hot.astype(np.intp)),)
    return kernel


# --------------------------------------------------------------------------------------------
# Trilu
# --------------------------------------------------------------------------------------------

@register("Trilu", since=14)
def _trilu(node: Node, opset: int):
    upper = bool(node.attr("upper", 1))

    def kernel(x, k=None):
        if x.ndim < 2:
            raise KernelError(f"{node.label}: input must have rank >= 2, got shape {x.shape}")
        kk = 0 if k is None else _scalar_int(node, k, "k")
        rows, cols = x.shape[-2:]
        diag = np.arange(cols)[None, :] - np.arange(rows)[:, None]  # column - row
        keep = diag >= kk if upper else diag <= kk
        return (np.where(keep, x, _fill_value(x.dtype)).astype(x.dtype, copy=False),)
    return kernel


# --------------------------------------------------------------------------------------------
# ReverseSequence
# --------------------------------------------------------------------------------------------

@register("ReverseSequence", since=10)
def _reverse_sequence(node: Node, opset: int):
    time_axis = int(node.attr("time_axis", 0))
    batch_axis = int(node.attr("batch_axis", 1))
    if {time_axis, batch_axis} != {0, 1}:
        raise KernelError(f"{node.label}: time_axis and batch_axis must be 0 and 1 (either order), "
                          f"got {time_axis} and {batch_axis}")

    def kernel(x, sequence_lens):
        if x.ndim < 2:
            raise KernelError(f"{node.label}: input must have rank >= 2, got shape {x.shape}")
        steps, batch = x.shape[time_axis], x.shape[batch_axis]
        lens = sequence_lens.astype(np.intp).reshape(-1)
        if lens.shape != (batch,) or (lens.size and (lens.min() < 0 or lens.max() > steps)):
            raise KernelError(f"{node.label}: sequence_lens must hold {batch} values in "
                              f"[0, {steps}], got {sequence_lens.tolist()}")
        t = np.arange(steps)[:, None]
        src = np.where(t < lens, lens - 1 - t, t)  # (time, batch): the time step each reads
        if time_axis == 1:
            src = src.T
        src = np.broadcast_to(src.reshape(src.shape + (1,) * (x.ndim - 2)), x.shape)
        return (np.take_along_axis(x, src, axis=time_axis),)
    return kernel


# --------------------------------------------------------------------------------------------
# CenterCropPad
# --------------------------------------------------------------------------------------------

@register("CenterCropPad", since=18)
def _center_crop_pad(node: Node, opset: int):
    axes = node.attr("axes")
    axes = None if axes is None else [int(a) for a in axes]

    def kernel(x, shape):
        target = [int(s) for s in shape.reshape(-1).tolist()]
        axes_n = list(range(x.ndim)) if axes is None else [normalize_axis(node, a, x.ndim) for a in axes]
        if len(target) != len(axes_n) or min(target, default=0) < 0:
            raise KernelError(f"{node.label}: shape {target} must hold one non-negative size per "
                              f"axis {axes_n}")
        out_shape = list(x.shape)
        src = [slice(None)] * x.ndim
        dst = [slice(None)] * x.ndim
        for a, want in zip(axes_n, target):
            have = x.shape[a]
            out_shape[a] = want
            if want < have:  # crop: the odd extra element is cut from the end
                start = (have - want) // 2
                src[a] = slice(start, start + want)
            elif want > have:  # pad: the odd extra element goes at the end
                start = (want - have) // 2
                dst[a] = slice(start, start + have)
        check_tensor_size(node.label, out_shape, x.dtype)
        out = np.full(out_shape, _fill_value(x.dtype), dtype=x.dtype)
        out[tuple(dst)] = x[tuple(src)]
        return (out,)
    return kernel
