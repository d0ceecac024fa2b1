"""CPU kernels for index-driven reads and writes: ScatterElements, ScatterND and the deprecated
Scatter (with their none/add/mul/max/min reductions) and GatherND (with batch_dims).
Gather, GatherElements (shape_ops) and TensorScatter are not here.
"""

from __future__ import annotations

import math

import numpy as np

from ....errors import KernelError
from ....ir.graph import Node
from ..registry import register
from .shape_ops import normalize_axis

# reduction -> ufunc whose unbuffered .at() applies repeated indices one after the other
_REDUCE_UFUNCS = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _reduction(node: Node, opset: int) -> str:
    r = node.attr("reduction", "none") if opset >= 16 else "none"
    r = r.decode() if isinstance(r, bytes) else str(r)
    allowed = ("none", "add", "mul") + (("max", "min") if opset >= 18 else ())
    if r not in allowed:
        raise KernelError(f"{node.label}: reduction must be one of {allowed} at opset {opset}, "
                          f"got {r!r}")
    return r


def _wrap(node: Node, idx: np.ndarray, dims, what: str) -> np.ndarray:
    """Indices as intp with negatives counted from the end; KernelError when out of range.
    ``dims`` broadcasts against idx (one size per index column)."""
    idx = idx.astype(np.intp, copy=False)
    dims = np.asarray(dims, dtype=np.intp)
    if idx.size and (np.any(idx < -dims) or np.any(idx >= dims)):
        raise KernelError(f"{node.label}: {what} out of range for dimension size(s) "
                          f"{dims.tolist()}")
    return np.where(idx < 0, idx + dims, idx)


def _scatter(data: np.ndarray, key: tuple, updates: np.ndarray, reduction: str) -> np.ndarray:
    out = data.copy()  # never write into the input: it may be a shared initializer
    if reduction == "none":
        out[key] = updates  # repeated indices: the spec leaves the winner undefined
        return out
    ufunc = _REDUCE_UFUNCS[reduction]
    if out.dtype.kind == "V":  # ml_dtypes floats (bfloat16, ...): reduce in float32
        wide = out.astype(np.float32)
        ufunc.at(wide, key, updates.astype(np.float32))
        return wide.astype(out.dtype)
    ufunc.at(out, key, updates)
    return out


def _scatter_elements(node: Node, axis: int, reduction: str):
    def kernel(data, indices, updates):
        a = normalize_axis(node, axis, data.ndim)
        if indices.shape != updates.shape or indices.ndim != data.ndim:
            raise KernelError(f"{node.label}: indices {indices.shape} and updates {updates.shape} "
                              f"must have one shape, of the rank of data {data.shape}")
        if any(i != a and n > d for i, (n, d) in enumerate(zip(indices.shape, data.shape))):
            raise KernelError(f"{node.label}: indices shape {indices.shape} exceeds data shape "
                              f"{data.shape} outside axis {axis}")
        key = list(np.indices(indices.shape, sparse=True))
        key[a] = _wrap(node, indices, data.shape[a], "index")
        return (_scatter(data, tuple(key), updates.astype(data.dtype, copy=False), reduction),)
    return kernel


@register("ScatterElements", since=11)
def _scatter_elements_factory(node: Node, opset: int):
    return _scatter_elements(node, int(node.attr("axis", 0)), _reduction(node, opset))


@register("Scatter", since=9, until=10)
def _scatter_factory(node: Node, opset: int):
    return _scatter_elements(node, int(node.attr("axis", 0)), "none")


@register("ScatterND", since=11)
def _scatter_nd_factory(node: Node, opset: int):
    reduction = _reduction(node, opset)

    def kernel(data, indices, updates):
        k = indices.shape[-1] if indices.ndim else -1
        if not 1 <= k <= data.ndim:
            raise KernelError(f"{node.label}: the last dimension of indices {indices.shape} must "
                              f"be in [1, {data.ndim}] (the rank of data)")
        want = indices.shape[:-1] + data.shape[k:]
        if updates.shape != want:
            raise KernelError(f"{node.label}: updates shape {updates.shape} must be {want} for "
                              f"data {data.shape} and indices {indices.shape}")
        idx = _wrap(node, indices, data.shape[:k], "index")
        key = tuple(idx[..., i] for i in range(k))
        return (_scatter(data, key, updates.astype(data.dtype, copy=False), reduction),)
    return kernel


@register("GatherND", since=11)
def _gather_nd_factory(node: Node, opset: int):
    b = int(node.attr("batch_dims", 0)) if opset >= 12 else 0

    def kernel(data, indices):
        if indices.ndim < 1 or not 0 <= b < min(data.ndim, indices.ndim):
            raise KernelError(f"{node.label}: batch_dims={b} needs data {data.shape} and indices "
                              f"{indices.shape} of rank greater than {b}")
        k = indices.shape[-1]
        if data.shape[:b] != indices.shape[:b] or b + k > data.ndim:
            raise KernelError(f"{node.label}: indices {indices.shape} do not fit data {data.shape} "
                              f"with batch_dims={b}")
        n_batch = math.prod(data.shape[:b])
        m = math.prod(indices.shape[b:-1])
        d = data.reshape((n_batch,) + data.shape[b:])
        idx = _wrap(node, indices.reshape(n_batch, m, k), data.shape[b:b + k], "index")
        batch = np.broadcast_to(np.arange(n_batch)[:, None], (n_batch, m))
        out = d[(batch,) + tuple(idx[..., i] for i in range(k))]
        return (out.reshape(indices.shape[:-1] + data.shape[b + k:]),)
    return kernel
