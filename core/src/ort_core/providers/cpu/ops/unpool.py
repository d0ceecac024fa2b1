"""CPU kernel for MaxUnpool: scatters pooled values back to the positions MaxPool's indices
name, zeros elsewhere. The pooling ops themselves are in the pool module.
"""

from __future__ import annotations

import math

import numpy as np

from ....errors import KernelError
from ....ir.graph import Node
from ....limits import check_tensor_size
from ..registry import register


@register("MaxUnpool", since=9)
def _max_unpool(node: Node, opset: int):
    kernel_shape = node.attr("kernel_shape")
    if not kernel_shape:
        raise KernelError(f"{node.label}: attribute 'kernel_shape' is required")
    kernel_shape = [int(k) for k in kernel_shape]
    n = len(kernel_shape)
    strides = [int(s) for s in node.attr("strides", None) or [1] * n]
    pads = [int(p) for p in node.attr("pads", None) or [0] * (2 * n)]
    if len(strides) != n or len(pads) != 2 * n:
        raise KernelError(f"{node.label}: strides {strides} and pads {pads} do not match "
                          f"kernel_shape {kernel_shape}")

    def kernel(x, indices, output_shape=None):
        if x.ndim != n + 2:
            raise KernelError(f"{node.label}: input of shape {x.shape} does not have "
                              f"{n} spatial dimensions (kernel_shape {kernel_shape})")
        if indices.shape != x.shape:
            raise KernelError(f"{node.label}: indices shape {indices.shape} differs from input "
                              f"shape {x.shape}")
        # the unpooled shape inverts MaxPool's output-size formula
        inferred = x.shape[:2] + tuple((d - 1) * s - (pads[i] + pads[i + n]) + k for i, (d, s, k)
                                       in enumerate(zip(x.shape[2:], strides, kernel_shape)))
        check_tensor_size(node.label, inferred, x.dtype, "unpooled output")
        total = math.prod(inferred)
        flat_idx = indices.reshape(-1)
        if flat_idx.size and (flat_idx.min() < 0 or flat_idx.max() >= total):
            raise KernelError(f"{node.label}: indices must lie in [0, {total}) for the unpooled "
                              f"shape {list(inferred)}")
        y = np.zeros(total, dtype=x.dtype)
        y[flat_idx] = x.reshape(-1)
        y = y.reshape(inferred)
        if output_shape is None:
            return (y,)
        # Indices address the inferred shape (as MaxPool's would for that size); a larger
        # requested output_shape pads it with zeros at the end of each axis, as the spec's
        # tests expect.
        shape = tuple(int(d) for d in output_shape.reshape(-1).tolist())
        if len(shape) != x.ndim or any(o < i for o, i in zip(shape, inferred)):
            raise KernelError(f"{node.label}: output_shape {list(shape)} must have rank {x.ndim} "
                              f"and be at least the unpooled shape {list(inferred)}")
        check_tensor_size(node.label, shape, x.dtype)
        out = np.zeros(shape, dtype=x.dtype)
        out[tuple(slice(0, d) for d in inferred)] = y
        return (out,)
    return kernel
