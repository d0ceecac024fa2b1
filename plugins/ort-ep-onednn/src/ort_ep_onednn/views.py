"""Stride arithmetic for the shape-only ops (Reshape, Flatten, Squeeze, Unsqueeze, Transpose) on values
held in a strided layout (plain row-major, channels-last, or any other dimension order).

A Transpose of a strided value is always a view (its strides permuted); a Reshape is a view when the
merged dimensions are contiguous (as numpy decides it). When it is not — a channel shuffle's final
Reshape over a transposed channels-last value — ``copy_layout`` picks the destination layout that
keeps the input's dimension order, so that one reorder does the work and the result stays in the
layout its neighbours use. Pure functions of shapes and strides; building memory is ``lowering``'s job.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def dense_strides(shape: Sequence[int]) -> list[int]:
    """Row-major element strides of ``shape``."""
    strides, step = [], 1
    for d in reversed(shape):
        strides.append(step)
        step *= max(int(d), 1)
    return strides[::-1]


def channels_last_strides(shape: Sequence[int]) -> list[int]:
    """Strides of (N, C, spatial...) laid out as N, spatial..., C (nhwc, ndhwc, nwc)."""
    order = [0, *range(2, len(shape)), 1]
    strides = [0] * len(shape)
    step = 1
    for d in reversed(order):
        strides[d] = step
        step *= max(int(shape[d]), 1)
    return strides


def normalized(shape: Sequence[int], strides: Sequence[int]) -> tuple[int, ...]:
    """``strides`` with the row-major ones put back when they describe the row-major layout (the
    strides of dimensions of size 1 do not matter, but layouts compare equal only when they agree)."""
    dense = dense_strides(shape)
    if all(s == d for s, d, n in zip(strides, dense, shape) if n != 1):
        return tuple(dense)
    return tuple(int(s) for s in strides)


def transposed(strides: Sequence[int], perm: Sequence[int]) -> list[int]:
    """Strides of the Transpose(perm) view: output axis i walks input axis perm[i]."""
    return [int(strides[p]) for p in perm]


def _groups(old: Sequence[int], new: Sequence[int]) -> list[tuple[list[int], list[int]]] | None:
    """The dimensions of sizes > 1 of both shapes in runs of equal product: [(old axes, new axes)];
    None when the element counts differ."""
    oi = [i for i, d in enumerate(old) if d != 1]
    ni = [i for i, d in enumerate(new) if d != 1]
    if math.prod(old) != math.prod(new):
        return None
    groups: list[tuple[list[int], list[int]]] = []
    a = b = 0
    while a < len(oi) and b < len(ni):
        go, gn = [oi[a]], [ni[b]]
        po, pn = old[oi[a]], new[ni[b]]
        a, b = a + 1, b + 1
        while po != pn:
            if po < pn:
                po *= old[oi[a]]
                go.append(oi[a])
                a += 1
            else:
                pn *= new[ni[b]]
                gn.append(ni[b])
                b += 1
        groups.append((go, gn))
    return groups


def reshaped(shape: Sequence[int], strides: Sequence[int], new: Sequence[int]) -> tuple[int, ...] | None:
    """Strides of ``new`` viewing the same elements as (``shape``, ``strides``) in row-major element
    order, or None when that needs a copy (merged dimensions that are not contiguous)."""
    groups = _groups(shape, new)
    if groups is None or 0 in shape:
        return None
    out = [0] * len(new)
    for go, gn in groups:
        for k, j in zip(go, go[1:]):
            if strides[k] != strides[j] * shape[j]:
                return None
        step = strides[go[-1]]
        for j in reversed(gn):
            out[j] = step
            step *= new[j]
    _fill_unit_axes(new, out)
    return normalized(new, out)


def copy_layout(shape: Sequence[int], strides: Sequence[int], new: Sequence[int]) -> tuple[tuple[int, ...],
                                                                                           tuple[int, ...]]:
    """For a Reshape that needs a copy: (strides of ``new`` for the destination, the same destination
    seen with ``shape``'s dimensions). The destination is dense; its runs of merged or split dimensions
    are ordered as the source orders them (smallest stride innermost), row-major inside each run."""
    groups = _groups(shape, new)
    assert groups is not None, "Reshape to a different element count"
    order = sorted(groups, key=lambda g: min(strides[k] for k in g[0]))
    out_new = [0] * len(new)
    out_old = [0] * len(shape)
    step = 1
    for go, gn in order:
        s = step
        for j in reversed(gn):
            out_new[j] = s
            s *= new[j]
        s = step
        for k in reversed(go):
            out_old[k] = s
            s *= shape[k]
        step = s
    _fill_unit_axes(new, out_new)
    _fill_unit_axes(shape, out_old)
    return normalized(new, out_new), normalized(shape, out_old)


def _fill_unit_axes(shape: Sequence[int], strides: list[int]) -> None:
    """Give axes of size 1 the stride a format tag would: that of the nearest larger axis on their left,
    or the whole extent when there is none (a leading batch of 1). oneDNN ignores them when it compares
    layouts; they only make descriptors read naturally."""
    extent = max((strides[i] * shape[i] for i in range(len(shape)) if shape[i] != 1), default=1)
    left = extent
    for i in range(len(shape)):
        if shape[i] == 1:
            strides[i] = left
        else:
            left = strides[i]
