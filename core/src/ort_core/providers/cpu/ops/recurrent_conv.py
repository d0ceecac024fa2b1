"""CPU kernel for CausalConvWithState (opset 27): causal depthwise 1-D convolution carrying its
last k-1 inputs as state, with optional fused SiLU. General Conv/ConvTranspose are in conv.py.
"""

from __future__ import annotations

import numpy as np

from ....errors import KernelError
from ....ir.graph import Node
from ..registry import register

_ACTIVATIONS = ("none", "silu", "swish")


@register("CausalConvWithState", since=27, until=None)
def causal_conv_with_state_factory(node: Node, opset: int):
    """Sums one shifted, per-channel-scaled slice of the padded input per kernel tap (a loop over
    the k taps), accumulating in float32 (float64 for double inputs)."""
    label = node.label
    activation = node.attr("activation", "none")
    if activation not in _ACTIVATIONS:
        raise KernelError(f"{label}: activation must be one of {list(_ACTIVATIONS)}, got {activation!r}")
    silu = activation != "none"

    def kernel(x, weight, bias=None, past_state=None):
        if x.ndim != 3 or weight.ndim != 3 or weight.shape[:2] != (x.shape[1], 1) or weight.shape[2] < 1:
            raise KernelError(f"{label}: input must be (batch, channels, length) and weight "
                              f"(channels, 1, k); got {list(x.shape)} and {list(weight.shape)}")
        b, c, length = x.shape
        k = weight.shape[2]
        if bias is not None and bias.shape != (c,):
            raise KernelError(f"{label}: bias must have shape ({c},), got {bias.shape}")
        if past_state is None:
            pad = np.zeros((b, c, k - 1), x.dtype)
        elif past_state.shape != (b, c, k - 1):
            raise KernelError(f"{label}: past_state must have shape ({b}, {c}, {k - 1}), got "
                              f"{past_state.shape}")
        else:
            pad = past_state.astype(x.dtype, copy=False)
        padded = np.concatenate((pad, x), axis=2)
        ct = np.dtype(np.float64) if x.dtype == np.float64 else np.dtype(np.float32)
        w = weight.astype(ct).reshape(c, k)
        src = padded.astype(ct, copy=False)
        y = np.zeros((b, c, length), ct)
        for j in range(k):  # tap j reads position t + j of the padded sequence
            y += w[:, j, None] * src[:, :, j:j + length]
        if bias is not None:
            y += bias.astype(ct)[:, None]
        if silu:  # on the convolution output rounded to the input type, as the spec's two steps
            y = y.astype(x.dtype).astype(ct)
            sig = np.tanh(y * ct.type(0.5))
            sig *= ct.type(0.5)
            sig += ct.type(0.5)
            y *= sig
        present = padded[:, :, length:].copy()  # the last k-1 positions, a fresh small array
        return (y.astype(x.dtype), present)

    return kernel
