"""CPU kernels for running totals along one axis: CumSum and CumProd (exclusive/reverse).
Reductions that collapse an axis (ReduceSum, ...) are in the reduction module.
"""

from __future__ import annotations

import numpy as np

from ....errors import KernelError
from ....ir.graph import Node
from ..registry import register
from .shape_ops import normalize_axis


def _cumulative(accumulate, identity: int):
    """Factory for one of np.cumsum/np.cumprod; ``identity`` starts an exclusive run."""
    def factory(node: Node, opset: int):
        exclusive = bool(node.attr("exclusive", 0))
        reverse = bool(node.attr("reverse", 0))

        def kernel(x, axis):
            ax = np.asarray(axis)
            if ax.size != 1 or ax.dtype.kind not in "iu":
                raise KernelError(f"{node.label}: axis must be a single integer, got {ax.dtype} "
                                  f"{ax.shape}")
            a = normalize_axis(node, int(ax.reshape(-1)[0]), x.ndim)
            # half floats accumulate in float32 (one rounding at the end); other types in their
            # own dtype, so integers wrap as the spec's fixed-width arithmetic does
            acc = np.dtype(np.float32) if x.dtype.kind == "V" or x.dtype == np.float16 else x.dtype
            src = np.flip(x, axis=a) if reverse else x
            out = accumulate(src, axis=a, dtype=acc)
            if exclusive:  # shift by one along the axis; the first entry is the identity
                shifted = np.empty_like(out)
                lead = (slice(None),) * a
                shifted[lead + (slice(0, 1),)] = identity
                shifted[lead + (slice(1, None),)] = out[lead + (slice(0, -1),)]
                out = shifted
            if reverse:
                out = np.flip(out, axis=a)
            return (out.astype(x.dtype, copy=False),)
        return kernel
    return factory


register("CumSum", since=11)(_cumulative(np.cumsum, 0))
register("CumProd", since=26)(_cumulative(np.cumprod, 1))
