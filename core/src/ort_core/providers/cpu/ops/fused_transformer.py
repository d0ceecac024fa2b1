"""Transformer ops of ort-core's own domain ``ort_core``, made by the extended-level CPU fusions
(optimizer/layernorm_fusion.py, skip_layernorm_fusion.py, gelu_fusion.py, attention_fusion.py).

LayerNorm(x, scale, bias?) -> y, attribute ``epsilon``: layer normalization over the last axis (the
opset < 17 stand-in for LayerNormalization). SkipLayerNorm(input, skip, gamma, beta?, bias?) -> (y, sum?):
sum = input (+ bias) + skip, y = LayerNorm(sum) over the last axis with ``epsilon``; the optional second
output is the sum itself (like com.microsoft::SkipLayerNormalization's input_skip_bias_sum).
Gelu(x): 0.5 x (1 + erf(x / sqrt 2)). FastGelu(x): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
Attention(x, weight, bias?, mask?, where_cond?, where_fill?) -> y, self-attention of x (B, S, C) with
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
from .activation import gelu_erf_values, gelu_tanh_values

DOMAIN = "ort_core"


def _layer_norm(s: np.ndarray, gamma: np.ndarray, beta: np.ndarray | None, epsilon: float) -> np.ndarray:
    """LayerNorm of s over its last axis into a new array; 16-bit floats computed in float32."""
    cdt = np.dtype(np.float32) if s.dtype.itemsize < 4 else s.dtype
    width = s.shape[-1]
    rows = s.reshape(-1, 1, width)
    # row means and variances as batched dot products: BLAS is much faster than numpy's reductions here
    mean = np.matmul(rows.astype(cdt, copy=False), np.full((width, 1), 1.0 / width, cdt))
    y = np.subtract(rows, mean, dtype=cdt)
    var = np.matmul(y, y.transpose(0, 2, 1))
    var *= cdt.type(1.0 / width)
    var += cdt.type(epsilon)
    np.sqrt(var, out=var)
    np.reciprocal(var, out=var)
    y *= var
    y *= gamma
    if beta is not None:
        y += beta
    return y.reshape(s.shape).astype(s.dtype, copy=False)


def _epsilon(node) -> float:
    return float(np.float32(node.attr("epsilon", 1e-5)))


@register("LayerNorm", since=1, domain=DOMAIN)
def layer_norm_factory(node, opset):
    epsilon = _epsilon(node)
    return lambda x, scale, bias=None: (_layer_norm(x, scale, bias, epsilon),)


@register("SkipLayerNorm", since=1, domain=DOMAIN)
def skip_layer_norm_factory(node, opset):
    epsilon = _epsilon(node)
    with_sum = len(node.outputs) > 1 and bool(node.outputs[1])

    def kernel(x, skip, gamma, beta=None, bias=None):
        # the order of the unfused graph, (x + bias) + skip, so the sum is bit for bit the same
        s = np.add(x, bias) if bias is not None else x
        if bias is not None and s.shape == np.broadcast_shapes(s.shape, skip.shape):
            s += skip
        else:
            s = np.add(s, skip)
        y = _layer_norm(s, gamma, beta, epsilon)
        return (y, s) if with_sum else (y,)

    return kernel


@register("Gelu", since=1, domain=DOMAIN)
def gelu_factory(node, opset):
    def kernel(x):
        return (gelu_erf_values(x),)

    return kernel


@register("FastGelu", since=1, domain=DOMAIN)
def fast_gelu_factory(node, opset):
    def kernel(x):
        return (gelu_tanh_values(x),)

    return kernel


_MIN_ROW_SUM = {np.dtype(np.float32): np.exp(-60.0), np.dtype(np.float64): np.exp(-600.0)}


def softmax_last_axis(scores: np.ndarray) -> np.ndarray:
    """Softmax over the last axis into a new array. Shifts by the global maximum (a row-wise max costs
    several full passes) and falls back to per-row maxima only if some row's sum got too small."""
    top = np.max(scores)
    if np.isfinite(top):
        e = np.subtract(scores, top)
        np.exp(e, out=e)
        total = np.sum(e, axis=-1, keepdims=True)
        if np.min(total) >= _MIN_ROW_SUM.get(e.dtype, np.inf):
            e /= total
            return e
    e = np.subtract(scores, np.max(scores, axis=-1, keepdims=True))
    np.exp(e, out=e)
    e /= np.sum(e, axis=-1, keepdims=True)
    return e


@register("Attention", since=1, domain=DOMAIN)
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
