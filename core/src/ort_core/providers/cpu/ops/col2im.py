"""CPU kernel for Col2Im (opset 18): folds N-D column blocks back into an image, summing overlaps.

It is the adjoint of the im2col used by convolutions; the unfolding direction has no ONNX operator.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from ....errors import KernelError
from ....limits import check_tensor_size
from ..registry import register
from .conv import ints_attr


@register("Col2Im", since=18)
def _col2im(node, opset):
    def kernel(data, image_shape, block_shape):
        image = [int(v) for v in np.asarray(image_shape).reshape(-1)]
        block = [int(v) for v in np.asarray(block_shape).reshape(-1)]
        nsp = len(image)
        if len(block) != nsp:
            raise KernelError(f"{node.label}: image_shape {image} and block_shape {block} differ in length")
        dil, strides = ints_attr(node, "dilations", nsp, 1), ints_attr(node, "strides", nsp, 1)
        pads = ints_attr(node, "pads", nsp, 0, 2)
        if min(dil + strides) < 1 or min(pads) < 0:
            raise KernelError(f"{node.label}: dilations and strides must be >= 1 and pads >= 0, "
                              f"got {dil}, {strides}, {pads}")
        if data.ndim != 3:
            raise KernelError(f"{node.label}: input must be 3-D (N, C * prod(block_shape), L), got {data.shape}")
        if min(block, default=0) < 1 or min(image, default=0) < 0:
            raise KernelError(f"{node.label}: block_shape {block} must be positive and image_shape {image} "
                              "non-negative")
        taps = math.prod(block)
        n, ck, length = data.shape
        if taps <= 0 or ck % taps:
            raise KernelError(f"{node.label}: input dimension 1 ({ck}) is not a multiple of "
                              f"prod(block_shape) = {taps}")
        padded = [image[i] + pads[i] + pads[i + nsp] for i in range(nsp)]
        blocks = [(padded[i] - dil[i] * (block[i] - 1) - 1) // strides[i] + 1 for i in range(nsp)]
        if min(blocks) < 1 or math.prod(blocks) != length:
            raise KernelError(f"{node.label}: input has {length} blocks but image_shape {image}, block_shape "
                              f"{block}, dilations {dil}, pads {pads}, strides {strides} give {blocks}")
        c = ck // taps
        check_tensor_size(node.label, (n, c, *padded), data.dtype)
        cols = data.reshape(n, c, *block, *blocks)
        out = np.zeros((n, c, *padded), dtype=data.dtype)
        for tap in itertools.product(*(range(b) for b in block)):  # kernel taps, each a strided slab
            region = tuple(slice(t * d, t * d + s * (nb - 1) + 1, s)
                           for t, d, s, nb in zip(tap, dil, strides, blocks))
            out[(slice(None), slice(None)) + region] += cols[(slice(None), slice(None)) + tap]
        crop = tuple(slice(pads[i], pads[i] + image[i]) for i in range(nsp))
        return (np.ascontiguousarray(out[(slice(None), slice(None)) + crop]),)
    return kernel
