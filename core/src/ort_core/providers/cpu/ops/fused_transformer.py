"""The transformer op of ort-core's own domain ``ort_core`` that the extended-level CPU fusions make
(optimizer/attention_fusion.py) where onnxruntime's com.microsoft Attention cannot take the mask; the
other transformer fusions emit onnxruntime's contrib ops (contrib_norm.py, contrib_activation.py).

SelfAttention(x, weight, bias?, mask?, where_cond?, where_fill?) -> y, self-attention of x (B, S, C) with
``num_heads`` heads: weight (C, 3 H D) packs [Wq | Wk | Wv] (any q.k scale already folded into Wq),
bias (3 H D) likewise; scores = q k^T * ``scale`` (default 1.0) per head, then where_cond (bool,
broadcastable to (B, H, S, S), True keeps) replaces masked scores by where_fill, then the additive
mask (broadcastable to (B, H, S, S), e.g. (B, 1, 1, S)) is added; softmax over keys, times v, heads
merged back: y (B, S, H D). Float32 stays float32; never in a saved model.
"""

from __future__ import annotations

import numpy as np

from ....errors import KernelError
from ..registry import register
from .activation import softmax_last_axis

DOMAIN = "ort_core"


@register("SelfAttention", since=1, domain=DOMAIN)
def attention_factory(node, opset):
    heads = int(node.attr("num_heads"))
    scale = float(node.attr("scale", 1.0))
    label = node.label

    def kernel(x, weight, bias=None, mask=None, cond=None, fill=None):
        if x.ndim != 3 or weight.ndim != 2 or weight.shape[0] != x.shape[2] or weight.shape[1] % (3 * heads):
            raise KernelError(f"{label}: expected x (B, S, C) and weight (C, 3*H*D) with H={heads}, got "
                              f"{x.shape} and {weight.shape}")
        batch, seq, width = x.shape
        size = weight.shape[1] // (3 * heads)
        qkv = np.matmul(x.reshape(batch * seq, width), weight)
        if bias is not None:
            qkv += bias
        qkv = qkv.reshape(batch, seq, 3, heads, size)
        q = qkv[:, :, 0].transpose(0, 2, 1, 3)
        k = qkv[:, :, 1].transpose(0, 2, 3, 1)
        v = qkv[:, :, 2].transpose(0, 2, 1, 3)
        scores = np.matmul(q, k)  # (B, H, S, S); numpy hands the strided head views to BLAS as they are
        if scale != 1.0:
            scores *= scores.dtype.type(scale)
        if cond is not None:
            if np.broadcast_shapes(scores.shape, cond.shape, np.shape(fill)) == scores.shape:
                np.copyto(scores, fill, where=np.logical_not(cond))
            else:
                scores = np.where(cond, scores, fill)
        if mask is not None:
            if np.broadcast_shapes(scores.shape, mask.shape) == scores.shape:
                scores += mask
            else:
                scores = scores + mask
        if scores.shape != (batch, heads, seq, seq):
            raise KernelError(f"{label}: masks of shapes {np.shape(cond)}/{np.shape(mask)} do not broadcast to "
                              f"the scores' {(batch, heads, seq, seq)}")
        scores = softmax_last_axis(scores)
        out = np.empty((batch, seq, heads, size), scores.dtype)
        np.matmul(scores, v, out=out.transpose(0, 2, 1, 3))
        return (out.reshape(batch, seq, heads * size),)

    return kernel
