"""QLinearConv with constant weights and parameters, prepared once when the kernel is built.

What the CPU provider runs for a QLinearConv whose weight, scales, zero points and bias are constants (what
the QDQ fusion makes): the weight is shifted by its zero point and converted to float32 once, its input
channels split into the blocks qexact.py proves exact, the per-channel multiplier x_scale * w_scale / y_scale
computed in float32 once. A run shifts x to float32, convolves through conv.py's Conv kernel (the same
pointwise / gather / im2col paths as float Conv, plans cached per shape), then adds the int32 bias and
requantizes in float32 in cache-sized pieces (qexact.requantize). Anything else (a weight fed at run time,
float8) takes qlinear.py's general kernel; this module registers no op.
"""

from __future__ import annotations

import numpy as np

from ....errors import KernelError
from ....ir.graph import Node
from .contrib_matmul_nbits import constant_inputs
from .conv import conv_factory
from .qexact import EXACT, RANGES, a_bound, add_blocks, k_blocks, requantize, shifted

_F32 = np.float32


def _scalar(p) -> bool:
    return p is not None and p.size == 1


def prepared_qlinear_conv(node: Node, opset: int, graph):
    """The prepared kernel for ``node``, or None when its parameters are not constants of the usual form."""
    consts = constant_inputs(node, graph, (3, 1, 2, 4, 5, 6, 7, 8))
    if consts is None:
        return None
    w, x_scale, x_zp, w_scale, w_zp, y_scale, y_zp, bias = consts
    params = (x_scale, x_zp, y_scale, y_zp)
    if (not all(map(_scalar, params)) or w.dtype not in RANGES or x_zp.dtype not in RANGES
            or y_zp.dtype not in RANGES or any(s.dtype != _F32 for s in (x_scale, w_scale, y_scale)) or w.ndim < 3):
        return None
    m = w.shape[0]
    group = int(node.attr("group", 1))
    if w_scale.size not in (1, m) or (w_zp is not None and (w_zp.size not in (1, m) or w_zp.dtype != w.dtype)):
        return None
    if bias is not None and (bias.dtype != np.int32 or bias.shape != (m,)):
        return None
    wz = None if w_zp is None else w_zp.reshape((-1,) + (1,) * (w.ndim - 1))
    ws = shifted(w, wz)
    xz = int(x_zp.reshape(-1)[0])
    # K of one group is (C / group) x kernel taps; blocks split the input channels of every group alike
    abs_k = np.abs(ws).reshape(m, ws.shape[1], -1).sum(axis=2).T  # (C / group, M)
    blocks = k_blocks(abs_k, a_bound(x_zp.dtype, xz))
    if blocks is None or (group > 1 and len(blocks) > 1):
        return None
    ws.flags.writeable = False
    parts = [np.ascontiguousarray(ws[:, a:b]) for a, b in blocks] if len(blocks) > 1 else [ws]
    conv = conv_factory(node, opset)
    mult = (_F32(x_scale.reshape(-1)[0]) * np.broadcast_to(w_scale.reshape(-1), (m,)).astype(_F32)
            / _F32(y_scale.reshape(-1)[0])).astype(_F32)
    yz, out = int(y_zp.reshape(-1)[0]), y_zp.dtype
    b32 = None if bias is None else bias
    b_exact = b32 is not None and np.abs(b32).max(initial=0) < EXACT
    b_f32 = None if b32 is None else b32.astype(_F32)
    in_dtype = x_zp.dtype
    label = node.label

    def kernel(x, *_):
        if x.dtype != in_dtype:
            raise KernelError(f"{label}: input 'x' has type {x.dtype}, its zero point {in_dtype}")
        xs = shifted(x, xz)
        if len(parts) == 1:
            acc = conv(xs, parts[0])[0]
            if b32 is None or b_exact:  # exact integers: one rounding, as int32 -> float32
                return (requantize(acc, mult, yz, out, bias=None if b32 is None else b_f32, rows=True),)
            spatial = (1,) * (acc.ndim - 2)
            acc = (acc.astype(np.int64) + b32.reshape((m,) + spatial)).astype(np.int32).astype(_F32)
        else:
            pieces = [conv(xs[:, a:b], p)[0] for (a, b), p in zip(blocks, parts)]
            spatial = (1,) * (pieces[0].ndim - 2)
            if b32 is not None:
                pieces.append(np.broadcast_to(b32.reshape((m,) + spatial), pieces[0].shape))  # int32: exact
            acc = add_blocks(pieces)
        return (requantize(acc, mult, yz, out, rows=True),)

    return kernel

