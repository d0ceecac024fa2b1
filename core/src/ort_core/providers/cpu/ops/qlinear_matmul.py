"""QLinearMatMul with a constant 8-bit B and constant parameters, prepared once when the kernel is built.

What the CPU provider runs for the QLinearMatMul the QDQ fusion makes: B is shifted by its zero point and
converted to float32 once, K split into the blocks qexact.py proves exact, and the per-column multiplier
a_scale * b_scale / y_scale computed in float32 once; a run shifts A, takes one float32 BLAS product per block
and requantizes in float32 (qexact.requantize). Anything else (B fed at run time, per-row A parameters,
float8) takes qlinear.py's general kernel; this module registers no op.
"""

from __future__ import annotations

import numpy as np

from ....errors import KernelError
from ....ir.graph import Node
from .contrib_matmul_nbits import constant_inputs
from .qexact import RANGES, a_bound, add_blocks, k_blocks, requantize, shifted

_F32 = np.float32


def prepared_qlinear_matmul(node: Node, opset: int, graph):
    """The prepared kernel for ``node``, or None when its parameters are not constants of the usual form."""
    consts = constant_inputs(node, graph, (3, 1, 2, 4, 5, 6, 7))
    if consts is None:
        return None
    b, a_scale, a_zp, b_scale, b_zp, y_scale, y_zp = consts
    if any(p is None for p in consts) or b.ndim != 2 or b.dtype not in RANGES or a_zp.dtype not in RANGES:
        return None
    n = b.shape[1]
    if (y_zp.dtype not in RANGES or b_zp.dtype != b.dtype or any(p.size != 1 for p in (a_scale, a_zp, y_scale, y_zp))
            or b_scale.size not in (1, n) or b_zp.size not in (1, n)
            or any(s.dtype != _F32 for s in (a_scale, b_scale, y_scale))):
        return None
    sb = shifted(b, b_zp.reshape(-1) if b_zp.size == n else b_zp.reshape(()))
    az = int(a_zp.reshape(-1)[0])
    blocks = k_blocks(np.abs(sb), a_bound(a_zp.dtype, az))
    if blocks is None:
        return None
    sb.flags.writeable = False
    mult = (_F32(a_scale.reshape(-1)[0]) * np.broadcast_to(b_scale.reshape(-1), (n,)).astype(_F32)
            / _F32(y_scale.reshape(-1)[0])).astype(_F32)
    yz, out, in_dtype, label = int(y_zp.reshape(-1)[0]), y_zp.dtype, a_zp.dtype, node.label

    def kernel(a, *_):
        if a.dtype != in_dtype:
            raise KernelError(f"{label}: input 'a' has type {a.dtype}, its zero point {in_dtype}")
        if a.ndim == 0 or a.shape[-1] != sb.shape[0]:
            raise KernelError(f"{label}: matmul shapes {a.shape} and {b.shape} do not match")
        sa = shifted(a, az)
        if len(blocks) == 1:
            acc = np.matmul(sa, sb)
        else:
            acc = add_blocks(np.matmul(sa[..., i:j], sb[i:j]) for i, j in blocks)
        return (requantize(acc, mult, yz, out),)

    return kernel
