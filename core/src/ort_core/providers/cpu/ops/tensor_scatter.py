"""CPU kernel for TensorScatter (opset 24): writes an update block into a KV-cache tensor at
per-batch offsets along the sequence axis (linear or circular). Scatter/ScatterND/ScatterElements
are elsewhere.
"""

from __future__ import annotations

import numpy as np

from ....errors import KernelError
from ....ir.graph import Node
from ..registry import register


@register("TensorScatter", since=24, until=None)
def tensor_scatter_factory(node: Node, opset: int):
    label = node.label
    axis = int(node.attr("axis", -2))
    mode = node.attr("mode", "linear")
    if mode not in ("linear", "circular"):
        raise KernelError(f"{label}: mode must be 'linear' or 'circular', got {mode!r}")

    def kernel(past_cache, update, write_indices=None):
        rank = past_cache.ndim
        if not -rank <= axis < rank or axis % rank == 0:
            raise KernelError(f"{label}: axis {axis} must name a non-batch axis of a rank-{rank} cache")
        ax = axis % rank
        if (update.ndim != rank or update.dtype != past_cache.dtype
                or update.shape[:ax] + update.shape[ax + 1:] != past_cache.shape[:ax] + past_cache.shape[ax + 1:]
                or update.shape[ax] > past_cache.shape[ax]):
            raise KernelError(f"{label}: update {update.dtype} {list(update.shape)} does not fit cache "
                              f"{past_cache.dtype} {list(past_cache.shape)} along axis {ax}")
        batch, max_len, n = past_cache.shape[0], past_cache.shape[ax], update.shape[ax]
        if write_indices is None:
            starts = np.zeros(batch, np.int64)
        else:
            starts = np.asarray(write_indices, np.int64).reshape(-1)
            if starts.shape != (batch,):
                raise KernelError(f"{label}: write_indices must have shape ({batch},), got "
                                  f"{write_indices.shape}")
        pos = starts[:, None] + np.arange(n)  # (batch, n) cache positions
        if mode == "circular":
            pos %= max_len
        elif n and (starts.min() < 0 or (starts + n).max() > max_len):
            raise KernelError(f"{label}: linear writes of {n} positions at {starts.tolist()} leave "
                              f"the cache length {max_len}")
        present = past_cache.copy()
        # with the sequence axis moved next to the batch axis, [batch, pos] addresses the rows
        view = np.moveaxis(present, ax, 1)
        view[np.arange(batch)[:, None], pos] = np.moveaxis(update, ax, 1)
        return (present,)

    return kernel
