"""CPU kernel for DeformConv (opsets 19, 22): N-D deformable convolution with offsets, optional mask,
groups and offset groups.

Sampling builds the deformed im2col columns with N-linear gathers; the product is one grouped matmul.
Regular convolutions are in conv.py.
"""

from __future__ import annotations

import itertools

import numpy as np

from ....errors import KernelError
from ..registry import register
from .conv import ints_attr

_COLS_BUDGET = 32 << 20  # bytes of sampled columns built at once (the batch is split to stay under)


def _sample_columns(x, pos, work):
    """Deformed columns (n, G, Cg, K*P): x (n, G, Cg, *in) sampled N-linearly at pos, a list with one
    (n, G, K*P) coordinate array per spatial axis; points off the image read zeros."""
    spatial = x.shape[3:]
    n, g, cg = x.shape[:3]
    flat = x.reshape(n, g, cg, -1)
    strides = [int(np.prod(spatial[d + 1:])) for d in range(len(spatial))]
    base = [np.floor(p) for p in pos]
    frac = [p - b for p, b in zip(pos, base)]
    base = [b.astype(np.int64) for b in base]
    cols = None
    for corner in itertools.product((0, 1), repeat=len(spatial)):  # 2**nsp corners of the cell
        lin, weight, inside = 0, 1.0, True
        for d, c in enumerate(corner):
            idx = base[d] + c
            inside = inside & (idx >= 0) & (idx < spatial[d])
            lin = lin + np.clip(idx, 0, spatial[d] - 1) * strides[d]
            weight = weight * (frac[d] if c else 1 - frac[d])
        weight = np.where(inside, weight, 0).astype(work, copy=False)
        vals = np.take_along_axis(flat, lin[:, :, None, :], axis=3) * weight[:, :, None, :]
        cols = vals if cols is None else np.add(cols, vals, out=cols)
    return cols


@register("DeformConv", since=19)
def _deform_conv(node, opset):
    group = int(node.attr("group", 1))
    offset_group = int(node.attr("offset_group", 1))
    if group < 1 or offset_group < 1:
        raise KernelError(f"{node.label}: group and offset_group must be >= 1, got {group}, {offset_group}")
    kernel_attr = node.attr("kernel_shape")

    def kernel(x, w, offset, b=None, mask=None):
        if x.ndim < 3 or w.ndim != x.ndim:
            raise KernelError(f"{node.label}: X and W must have the same rank >= 3, got {x.shape} and {w.shape}")
        nsp = x.ndim - 2
        n, c, *in_sp = x.shape
        oc, cpg, *ks = w.shape
        if kernel_attr is not None and [int(k) for k in kernel_attr] != ks:
            raise KernelError(f"{node.label}: kernel_shape {list(kernel_attr)} does not match W's shape {w.shape}")
        dil, strides = ints_attr(node, "dilations", nsp, 1), ints_attr(node, "strides", nsp, 1)
        pads = ints_attr(node, "pads", nsp, 0, 2)
        if c != cpg * group or oc % group:
            raise KernelError(f"{node.label}: X has {c} channels and W shape {w.shape}; expected C = "
                              f"W.shape[1] * group ({group}) and oC divisible by group")
        if c % offset_group:
            raise KernelError(f"{node.label}: {c} input channels are not divisible by offset_group {offset_group}")
        out_sp = [(in_sp[i] + pads[i] + pads[i + nsp] - dil[i] * (ks[i] - 1) - 1) // strides[i] + 1
                  for i in range(nsp)]
        k = int(np.prod(ks))
        p = int(np.prod(out_sp))
        if tuple(offset.shape) != (n, offset_group * k * nsp, *out_sp):
            raise KernelError(f"{node.label}: offset must have shape {(n, offset_group * k * nsp, *out_sp)}, "
                              f"got {offset.shape}")
        if mask is not None and tuple(mask.shape) != (n, offset_group * k, *out_sp):
            raise KernelError(f"{node.label}: mask must have shape {(n, offset_group * k, *out_sp)}, "
                              f"got {mask.shape}")
        if b is not None and b.shape != (oc,):
            raise KernelError(f"{node.label}: B must have shape ({oc},), got {b.shape}")
        work = np.float64 if x.dtype == np.float64 else np.float32

        # undeformed sampling positions: window origin of each output + kernel tap, per axis (K, P)
        taps = np.meshgrid(*[np.arange(kk) * d for kk, d in zip(ks, dil)], indexing="ij")
        origins = np.meshgrid(*[np.arange(o) * s - pads[i] for i, (o, s) in enumerate(zip(out_sp, strides))],
                              indexing="ij")
        grid = [(t.reshape(-1, 1) + o.reshape(1, -1)).astype(work) for t, o in zip(taps, origins)]
        off = offset.astype(work, copy=False).reshape(n, offset_group, k, nsp, p)
        msk = None if mask is None else mask.astype(work, copy=False).reshape(n, offset_group, 1, k * p)
        xg = x.astype(work, copy=False).reshape(n, offset_group, c // offset_group, *in_sp)
        wg = w.astype(work, copy=False).reshape(group, oc // group, cpg * k)
        y = np.empty((n, oc, p), dtype=work)
        per_item = c * k * p * np.dtype(work).itemsize
        step = max(1, _COLS_BUDGET // max(per_item, 1))
        for lo in range(0, n, step):  # batch chunks bound the memory of the columns
            hi = min(n, lo + step)
            pos = [(grid[d][None, None] + off[lo:hi, :, :, d]).reshape(hi - lo, offset_group, k * p)
                   for d in range(nsp)]
            cols = _sample_columns(xg[lo:hi], pos, work)  # (m, G, Cg, K*P)
            if msk is not None:
                cols *= msk[lo:hi]
            cols = cols.reshape(hi - lo, group, cpg * k, p)
            y[lo:hi] = np.matmul(wg[None], cols).reshape(hi - lo, oc, p)
        if b is not None:
            y += b.astype(work).reshape(1, oc, 1)
        return (y.reshape(n, oc, *out_sp).astype(x.dtype, copy=False),)
    return kernel
