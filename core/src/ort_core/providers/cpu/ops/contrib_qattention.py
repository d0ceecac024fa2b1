"""CPU kernel for onnxruntime's com.microsoft ``QAttention``: Attention (contrib_attention.py) whose Q/K/V
projection takes 8-bit quantized input and weights, with the semantics of onnxruntime's CPU kernel.

QAttention(input (B, S, C) uint8 or int8, weight (C, 3 D) uint8 or int8, bias (3 D), input_scale (scalar),
weight_scale (scalar or per column, 3 D), mask_index?, input_zero_point?, weight_zero_point? (scalar or per
column), past?) -> (output (B, S, D), present?): qkv = (input - input_zero_point) x (weight - weight_zero_point),
accumulated exactly as integers, times input_scale * weight_scale, plus bias; then attention exactly as
Attention does (masks, past/present, unidirectional, scale, mask_filter_value). bias and the scales are float32
or float16 (then computed in float32 and the outputs rounded to float16, as onnxruntime does). onnxruntime's CPU
kernel ignores do_rotary here and so does this one; int8 input (refused by onnxruntime's CPU kernel, which has
only uint8) is accepted; past_present_share_buffer=1 with a past is refused like Attention's.
"""

from __future__ import annotations

import numpy as np

from ....errors import KernelError
from ....ir.graph import Node
from ..registry import register
from .contrib_attention import DOMAIN, attention_core, attention_options, check_float
from .qlinear import exact_float

_INT8 = (np.dtype(np.int8), np.dtype(np.uint8))


def _param(label: str, name: str, p, columns: int, dtype=None) -> np.ndarray:
    """A per-tensor (one element) or, when ``columns``, per-column (columns,) quantization parameter."""
    if dtype is not None and p.dtype != dtype:
        raise KernelError(f"{label}: {name} has type {p.dtype}, its tensor has {dtype}")
    if p.size == 1:
        return p.reshape(())
    if columns and p.shape == (columns,):
        return p
    raise KernelError(f"{label}: {name} must be a scalar" + (f" or have shape ({columns},)" if columns else "") +
                      f", got shape {p.shape}")


@register("QAttention", since=1, domain=DOMAIN)
def qattention_factory(node: Node, opset: int):
    attrs, want_present = attention_options(node, past_index=8)
    label, heads = attrs.label, attrs.heads
    n_out = len(node.outputs)

    def kernel(x, weight, bias, input_scale, weight_scale, mask_index=None, input_zero_point=None,
               weight_zero_point=None, past=None):
        for name, t in (("input", x), ("weight", weight)):
            if t.dtype not in _INT8:
                raise KernelError(f"{label}: {name} must be uint8 or int8, got {t.dtype}")
        if bias is None:
            raise KernelError(f"{label}: input 'bias' is required")
        check_float(label, "bias", bias)
        dtype = bias.dtype
        if x.ndim != 3 or weight.ndim != 2 or weight.shape[0] != x.shape[2]:
            raise KernelError(f"{label}: expected input (B, S, C) and weight (C, 3 D), got {x.shape} and "
                              f"{weight.shape}")
        width = weight.shape[1]
        hidden = width // 3
        if width % 3 or not hidden or hidden % heads or bias.shape != (width,):
            raise KernelError(f"{label}: weight width {width} must be 3 D with D a multiple of num_heads={heads} "
                              f"and bias of shape ({width},), got bias {bias.shape}")
        check_float(label, "input_scale", input_scale, dtype)
        check_float(label, "weight_scale", weight_scale, dtype)
        scale = (_param(label, "input_scale", input_scale, 0).astype(np.float32)
                 * _param(label, "weight_scale", weight_scale, width).astype(np.float32))
        batch, seq, channels = x.shape
        exact = exact_float(channels)
        a = x.reshape(batch * seq, channels).astype(exact)
        if input_zero_point is not None:
            a -= _param(label, "input_zero_point", input_zero_point, 0, x.dtype)
        w = weight.astype(exact)
        if weight_zero_point is not None:
            w -= _param(label, "weight_zero_point", weight_zero_point, width, weight.dtype)
        qkv = np.matmul(a, w).astype(np.float32, copy=False)  # integer-exact; rounded once, like int32 -> float
        qkv *= scale
        qkv += bias
        out, present = attention_core(attrs, qkv, (hidden,) * 3, batch, seq, mask_index, past, None, want_present,
                                      dtype)
        return (out, present)[:n_out]

    return kernel
