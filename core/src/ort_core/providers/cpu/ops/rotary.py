"""CPU kernel for RotaryEmbedding (opset 23): rotary position embeddings (RoPE), half-split or
interleaved, full or partial. The com.microsoft RotaryEmbedding contrib op is not here.
"""

from __future__ import annotations

import numpy as np

from ....errors import KernelError
from ....ir.graph import Node
from ..registry import register


@register("RotaryEmbedding", since=23, until=None)
def rotary_embedding_factory(node: Node, opset: int):
    label = node.label
    interleaved = bool(node.attr("interleaved", 0))
    rot_dim_attr = int(node.attr("rotary_embedding_dim", 0))
    num_heads = int(node.attr("num_heads", 0))

    def kernel(x, cos_cache, sin_cache, position_ids=None):
        if x.ndim == 4:  # (B, H, S, D): caches broadcast over heads as (B, 1, S, half)
            b, _, s, head = x.shape
            xv, head_axis = x, 1
        elif x.ndim == 3:  # (B, S, H*D) viewed as (B, S, H, D)
            if num_heads <= 0 or x.shape[2] % num_heads:
                raise KernelError(f"{label}: a 3-D input needs num_heads dividing its hidden size, "
                                  f"got num_heads={num_heads} for shape {x.shape}")
            b, s, hidden = x.shape
            head = hidden // num_heads
            xv, head_axis = x.reshape(b, s, num_heads, head), 2
        else:
            raise KernelError(f"{label}: input must be 3-D or 4-D, got shape {x.shape}")
        rot = rot_dim_attr or head
        if rot % 2 or rot > head:
            raise KernelError(f"{label}: rotary_embedding_dim {rot} must be even and at most the "
                              f"head size {head}")
        half = rot // 2
        if position_ids is not None:
            if position_ids.shape != (b, s):
                raise KernelError(f"{label}: position_ids must have shape ({b}, {s}), got "
                                  f"{position_ids.shape}")
            if cos_cache.ndim != 2 or sin_cache.shape != cos_cache.shape:
                raise KernelError(f"{label}: with position_ids the caches must be 2-D and alike, got "
                                  f"{cos_cache.shape} and {sin_cache.shape}")
            if position_ids.size and (position_ids.min() < 0 or position_ids.max() >= cos_cache.shape[0]):
                raise KernelError(f"{label}: position_ids must lie in [0, {cos_cache.shape[0]})")
            cos, sin = cos_cache[position_ids], sin_cache[position_ids]
        else:
            cos, sin = cos_cache, sin_cache
        if cos.shape != (b, s, half) or sin.shape != (b, s, half):
            raise KernelError(f"{label}: cos/sin caches must give shape ({b}, {s}, {half}) per token "
                              f"(rotary_embedding_dim / 2), got {cos.shape} and {sin.shape}")
        cos, sin = np.expand_dims(cos, head_axis), np.expand_dims(sin, head_axis)

        if interleaved:
            x1, x2 = xv[..., 0:rot:2], xv[..., 1:rot:2]
        else:
            x1, x2 = xv[..., :half], xv[..., half:rot]
        out = np.empty_like(xv)
        out[..., rot:] = xv[..., rot:]
        real, imag = (out[..., 0:rot:2], out[..., 1:rot:2]) if interleaved else \
            (out[..., :half], out[..., half:rot])
        real[...] = cos * x1 - sin * x2
        imag[...] = sin * x1 + cos * x2
        return (out.reshape(x.shape),)

    return kernel
