"""CPU kernel for Det, the determinant of square matrices over the last two axes (batched).
MatMul/Gemm live in the linalg module; no decompositions or inverses are offered here.
"""

from __future__ import annotations

import numpy as np

from ....errors import KernelError
from ....ir.graph import Node
from ..registry import register


@register("Det", since=11)
def _det(node: Node, opset: int):
    def kernel(x):
        if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
            raise KernelError(f"{node.label}: input must be (..., M, M) square matrices, got shape "
                              f"{x.shape}")
        if x.dtype.kind != "f" and x.dtype.kind != "V":
            raise KernelError(f"{node.label}: input must be a float tensor, got {x.dtype}")
        # LU-based, batched by numpy; half floats go through float32
        work = x if x.dtype in (np.float32, np.float64) else x.astype(np.float32)
        return (np.asarray(np.linalg.det(work)).astype(x.dtype, copy=False),)
    return kernel
