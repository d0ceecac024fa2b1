"""Geometry of the selection ops (Slice, Gather with constant indices) as pure functions the CPU tests check
against numpy: which elements of a C-contiguous input the output holds, as a strided view for Slice (an offset
and per-axis element strides, read by the Identity kernel) and as 2-D copies for Gather (one per run of
consecutive indices). Nothing here loads CUDA.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ort_core.plugins import slice_window

from . import codegen


@dataclass(frozen=True)
class Strided:
    """``shape`` elements read at ``offset + sum(index[d] * strides[d])`` (in elements) of the input."""

    offset: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]


def slice_view(shape: Sequence[int], starts: Sequence[int], ends: Sequence[int], axes: Sequence[int] | None = None,
               steps: Sequence[int] | None = None) -> Strided:
    """ONNX Slice (opset 10 and later) of a C-contiguous input of ``shape``: starts and ends clamped as the
    operator defines them (``ort_core.plugins.slice_window``). ValueError for a zero step, a repeated or
    out-of-range axis, or lists of different lengths."""
    shape = tuple(int(d) for d in shape)
    rank = len(shape)
    starts, ends = [int(v) for v in starts], [int(v) for v in ends]
    axes = list(range(len(starts))) if axes is None else [int(a) for a in axes]
    steps = [1] * len(starts) if steps is None else [int(s) for s in steps]
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ValueError(f"Slice: starts, ends, axes and steps differ in length ({len(starts)}, {len(ends)}, "
                         f"{len(axes)}, {len(steps)})")
    norm = []
    for a in axes:
        if not -rank <= a < rank:
            raise ValueError(f"Slice: axis {a} is out of range for rank {rank}")
        norm.append(a % rank)
    if len(set(norm)) != len(norm):
        raise ValueError(f"Slice: axes {axes} repeat an axis")
    base = codegen.broadcast_strides(shape, None, 1, shape)  # C order, in elements
    first = [0] * rank
    sizes = list(shape)
    scale = [1] * rank
    for a, start, end, step in zip(norm, starts, ends, steps):
        if step == 0:
            raise ValueError("Slice: a step of 0")
        picked = range(shape[a])[slice_window(shape[a], start, end, step)]  # the spec's clamping, as the core's
        first[a], sizes[a], scale[a] = picked.start if len(picked) else 0, len(picked), step
    if 0 in sizes:
        return Strided(0, tuple(sizes), (0,) * rank)
    offset = sum(f * b for f, b in zip(first, base))
    return Strided(offset, tuple(sizes), tuple(b * s for b, s in zip(base, scale)))


@dataclass(frozen=True)
class Run:
    """``count`` consecutive slabs of the input from slab ``src`` go to output slabs ``dst``... onwards."""

    src: int
    dst: int
    count: int


@dataclass(frozen=True)
class Gather:
    """Gather along ``axis``: the output's shape, and the copies making it. Each ``Run`` is one 2-D copy of
    ``rows`` rows (the product of the dims before the axis); a row of the copy is ``count * inner`` elements,
    read at pitch ``dim * inner`` and written at pitch ``n * inner`` (``n``: the number of indices)."""

    shape: tuple[int, ...]
    rows: int
    inner: int
    dim: int
    n: int
    runs: tuple[Run, ...]


def gather_runs(shape: Sequence[int], indices: np.ndarray, axis: int) -> Gather:
    """ONNX Gather of a C-contiguous input of ``shape`` with constant ``indices`` (negative ones count from the
    end); ValueError for an index out of range or an axis out of range."""
    shape = tuple(int(d) for d in shape)
    rank = len(shape)
    if not -rank <= axis < rank:
        raise ValueError(f"Gather: axis {axis} is out of range for rank {rank}")
    axis %= rank
    dim = shape[axis]
    flat = np.asarray(indices, dtype=np.int64).reshape(-1)
    if flat.size and (flat.min() < -dim or flat.max() >= dim):
        bad = int(flat[(flat < -dim) | (flat >= dim)][0])
        raise ValueError(f"Gather: index {bad} is out of range for axis {axis} of size {dim}")
    flat = np.where(flat < 0, flat + dim, flat)
    runs: list[Run] = []
    for j, idx in enumerate(int(v) for v in flat):
        last = runs[-1] if runs else None
        if last is not None and idx == last.src + last.count:
            runs[-1] = Run(last.src, last.dst, last.count + 1)
        else:
            runs.append(Run(idx, j, 1))
    out = shape[:axis] + tuple(np.shape(indices)) + shape[axis + 1:]
    rows = int(np.prod(shape[:axis], dtype=np.int64))
    inner = int(np.prod(shape[axis + 1:], dtype=np.int64))
    return Gather(out, rows, inner, dim, int(flat.size), tuple(runs))


def emulate_gather(g: Gather, x: np.ndarray) -> np.ndarray:
    """What the copies of ``g`` write, with numpy (the tests' reference for the 2-D copy arithmetic)."""
    src = np.ascontiguousarray(x).reshape(-1)
    out = np.zeros(int(np.prod(g.shape, dtype=np.int64)), x.dtype)
    for run in g.runs:
        width = run.count * g.inner
        for row in range(g.rows):
            s = row * g.dim * g.inner + run.src * g.inner
            d = row * g.n * g.inner + run.dst * g.inner
            out[d:d + width] = src[s:s + width]
    return out.reshape(g.shape)
