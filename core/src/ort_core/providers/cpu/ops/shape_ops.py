"""CPU kernels that move data without arithmetic: Reshape, (Un)Squeeze, Flatten, Transpose,
Concat, Split, Slice, Gather(Elements), Shape, Size, Identity, Expand, Tile, Pad, DepthToSpace
and SpaceToDepth. Reshape-like ops return views of their input; none of them computes values.
"""

from __future__ import annotations

import math

import numpy as np

from ....errors import KernelError
from ....ir.graph import Node
from ....ir.shape_values import slice_window
from ....limits import check_tensor_size
from ..registry import register


def _ints(value) -> list[int]:
    """A list of Python ints from an int tensor/list/scalar (None -> [])."""
    if value is None:
        return []
    if isinstance(value, np.ndarray):
        return [int(v) for v in value.reshape(-1).tolist()]
    if isinstance(value, (list, tuple)):
        return [int(v) for v in value]
    return [int(value)]


def normalize_axis(node: Node, axis: int, rank: int, what: str = "axis") -> int:
    """``axis`` normalized to [0, rank); KernelError naming the node when out of range."""
    if not -rank <= axis < rank:
        raise KernelError(f"{node.label}: {what} {axis} is out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


class _Memo:
    """What a kernel derives from small integer inputs (axes, starts/ends, shapes) and the input's shape, kept
    for the last values seen: models pass the same constants on every run, so a run costs a key of a few
    bytes instead of list conversions and axis checks. Keyed by the values' bytes, never by object identity
    (a caller may refill a fed array in place)."""

    __slots__ = ("entry",)

    def __init__(self) -> None:
        self.entry: tuple | None = None  # (key, value), replaced whole: safe under concurrent runs

    def get(self, key: tuple, make):
        entry = self.entry
        if entry is not None and entry[0] == key:
            return entry[1]
        value = make()
        self.entry = (key, value)
        return value


def _key(value) -> object:
    """A hashable stand-in for a small integer input's values (None stays None)."""
    return None if value is None else (value.dtype.char, value.shape, value.tobytes())


def _axes(node: Node, axes, rank: int) -> tuple[int, ...]:
    out = tuple(normalize_axis(node, a, rank) for a in _ints(axes))
    if len(set(out)) != len(out):
        raise KernelError(f"{node.label}: repeated axes {list(_ints(axes))}")
    return out


# --------------------------------------------------------------------------------------------
# Reshape family (views)
# --------------------------------------------------------------------------------------------

def _reshape(node: Node, x: np.ndarray, shape: list[int], allowzero: bool) -> np.ndarray:
    if not allowzero and 0 in shape:
        if len(shape) > x.ndim and any(d == 0 for d in shape[x.ndim:]):
            raise KernelError(f"{node.label}: shape {shape} copies dimension {x.ndim} or "
                              f"beyond from an input of rank {x.ndim}")
        shape = [x.shape[i] if d == 0 else d for i, d in enumerate(shape)]
    if shape.count(-1) > 1:
        raise KernelError(f"{node.label}: shape {shape} has more than one -1")
    if allowzero and -1 in shape and 0 in shape:
        raise KernelError(f"{node.label}: shape {shape} has both -1 and 0 with allowzero=1")
    try:
        return x.reshape(shape)
    except ValueError as e:
        raise KernelError(f"{node.label}: cannot reshape {x.shape} to {shape}") from e


@register("Reshape", since=1, until=4)
def _reshape_v1(node: Node, opset: int):
    shape = _ints(node.attr("shape"))

    def kernel(x):
        return (_reshape(node, x, shape, False),)
    return kernel


@register("Reshape", since=5)
def _reshape_v5(node: Node, opset: int):
    allowzero = bool(node.attr("allowzero", 0)) if opset >= 14 else False

    def kernel(x, shape):
        return (_reshape(node, x, shape.tolist(), allowzero),)
    return kernel


def _unsqueeze(node: Node, x: np.ndarray, axes: list[int]) -> np.ndarray:
    rank = x.ndim + len(axes)
    axes_n = _axes(node, axes, rank)
    shape = list(x.shape)
    for a in sorted(axes_n):
        shape.insert(a, 1)
    return x.reshape(shape)


@register("Unsqueeze", since=1, until=12)
def _unsqueeze_attr(node: Node, opset: int):
    axes = _ints(node.attr("axes"))
    if not axes:
        raise KernelError(f"{node.label}: attribute 'axes' is required")

    def kernel(x):
        return (_unsqueeze(node, x, axes),)
    return kernel


@register("Unsqueeze", since=13)
def _unsqueeze_input(node: Node, opset: int):
    memo = _Memo()

    def kernel(x, axes):
        shape = memo.get((x.shape, _key(axes)), lambda: _unsqueeze(node, x, _ints(axes)).shape)
        return (x.reshape(shape),)
    return kernel


def _squeeze(node: Node, x: np.ndarray, axes: list[int] | None) -> np.ndarray:
    if not axes:
        return x.reshape([d for d in x.shape if d != 1])
    axes_n = _axes(node, axes, x.ndim)
    for a in axes_n:
        if x.shape[a] != 1:
            raise KernelError(f"{node.label}: cannot squeeze axis {a} of size {x.shape[a]} "
                              f"(input shape {x.shape})")
    return x.reshape([d for i, d in enumerate(x.shape) if i not in axes_n])


@register("Squeeze", since=1, until=12)
def _squeeze_attr(node: Node, opset: int):
    axes = _ints(node.attr("axes"))

    def kernel(x):
        return (_squeeze(node, x, axes),)
    return kernel


@register("Squeeze", since=13)
def _squeeze_input(node: Node, opset: int):
    memo = _Memo()

    def kernel(x, axes=None):
        shape = memo.get((x.shape, _key(axes)), lambda: _squeeze(node, x, _ints(axes)).shape)
        return (x.reshape(shape),)
    return kernel


@register("Flatten", since=1)
def _flatten(node: Node, opset: int):
    axis = int(node.attr("axis", 1))

    def kernel(x):
        a = axis + x.ndim if axis < 0 else axis
        if not 0 <= a <= x.ndim:
            raise KernelError(f"{node.label}: axis {axis} is out of range for rank {x.ndim}")
        return (x.reshape(math.prod(x.shape[:a]), math.prod(x.shape[a:])),)
    return kernel


@register("Identity", since=1)
def _identity(node: Node, opset: int):
    def kernel(x):
        return (x,)
    return kernel


@register("Transpose", since=1)
def _transpose(node: Node, opset: int):
    perm = node.attr("perm")
    perm = None if perm is None else _ints(perm)

    def kernel(x):
        if perm is None:
            return (x.transpose(),)
        if sorted(perm) != list(range(x.ndim)):
            raise KernelError(f"{node.label}: perm {perm} is not a permutation of the "
                              f"{x.ndim} input axes")
        return (x.transpose(perm),)
    return kernel


# --------------------------------------------------------------------------------------------
# Concat / Split / Slice
# --------------------------------------------------------------------------------------------

@register("Concat", since=1)
def _concat(node: Node, opset: int):
    axis = node.attr("axis")
    if axis is None:
        if opset >= 4:
            raise KernelError(f"{node.label}: attribute 'axis' is required")
        axis = 1
    axis = int(axis)

    def kernel(*inputs):
        if not inputs:
            raise KernelError(f"{node.label}: needs at least one input")
        a = normalize_axis(node, axis, inputs[0].ndim)
        if len(inputs) == 1:
            return (inputs[0],)
        try:
            return (np.concatenate(inputs, axis=a),)
        except ValueError as e:
            raise KernelError(f"{node.label}: cannot concatenate shapes "
                              f"{[x.shape for x in inputs]} on axis {axis}") from e
    return kernel


def _split(node: Node, x: np.ndarray, axis: int, split: list[int] | None, n_out: int):
    a = normalize_axis(node, axis, x.ndim)
    dim = x.shape[a]
    if split is None:
        chunk = -(-dim // n_out)  # ceil: the last chunk is smaller when not divisible
        split = [min(chunk, max(dim - i * chunk, 0)) for i in range(n_out)]
    elif len(split) != n_out or sum(split) != dim or min(split, default=0) < 0:
        raise KernelError(f"{node.label}: split {split} does not divide axis {axis} of size {dim} "
                          f"into {n_out} outputs")
    index = [slice(None)] * x.ndim
    outs = []
    pos = 0
    for n in split:
        index[a] = slice(pos, pos + n)
        outs.append(x[tuple(index)])
        pos += n
    return tuple(outs)


@register("Split", since=1, until=12)
def _split_attr(node: Node, opset: int):
    axis = int(node.attr("axis", 0))
    split = node.attr("split")
    split = None if split is None or len(split) == 0 else _ints(split)
    n_out = len(node.outputs)

    def kernel(x, split_input=None):  # opset 1 could also take 'split' as a second input
        s = split if split_input is None else _ints(split_input)
        return _split(node, x, axis, s, n_out)
    return kernel


@register("Split", since=13)
def _split_input(node: Node, opset: int):
    axis = int(node.attr("axis", 0))
    num_outputs = node.attr("num_outputs") if opset >= 18 else None
    n_out = len(node.outputs)
    if num_outputs is not None and int(num_outputs) != n_out:
        raise KernelError(f"{node.label}: num_outputs={num_outputs} but the node has {n_out} outputs")

    def kernel(x, split=None):
        if split is not None and num_outputs is not None:
            raise KernelError(f"{node.label}: 'split' input and 'num_outputs' are exclusive")
        return _split(node, x, axis, None if split is None or split.size == 0 else _ints(split),
                      n_out)
    return kernel


def _slice(node: Node, x: np.ndarray, starts, ends, axes, steps) -> np.ndarray:
    return x[_slice_index(node, x.ndim, starts, ends, axes, steps, x.shape)]


NEEDS_DIMS = object()
"""What ``_slice_index`` answers without the input's dims for a backward slice starting at a negative index:
whether that start lies before the first element (where ONNX and Python differ) depends on the dim."""


def _slice_index(node: Node, ndim: int, starts, ends, axes, steps, shape=None) -> tuple | object:
    """The numpy index of a Slice over an input of rank ``ndim``. With ``shape``, each axis is clamped by the spec's
    rule (``slice_window``). Without it, Python slices stand in (they clamp as ONNX does), except for a negative
    step whose start may lie before the first element once the dim is added: ONNX clamps such a start to 0 (one
    element), Python reads nothing, so the answer is NEEDS_DIMS."""
    if axes is None and steps is None and len(starts) == len(ends) <= ndim:  # fast path
        return tuple(slice(s, e) for s, e in zip(starts, ends))
    if len(ends) != len(starts):
        raise KernelError(f"{node.label}: starts and ends differ in length ({len(starts)} vs "
                          f"{len(ends)})")
    if axes is None or len(axes) == 0:
        axes_n = tuple(range(len(starts)))
        if len(starts) > ndim:
            raise KernelError(f"{node.label}: {len(starts)} starts for an input of rank {ndim}")
    else:
        if len(axes) != len(starts):
            raise KernelError(f"{node.label}: axes and starts differ in length")
        axes_n = _axes(node, axes, ndim)
    if steps is None or len(steps) == 0:
        steps = [1] * len(starts)
    elif len(steps) != len(starts):
        raise KernelError(f"{node.label}: steps and starts differ in length")
    index = [slice(None)] * ndim
    for a, s, e, st in zip(axes_n, starts, ends, steps):
        if st == 0:
            raise KernelError(f"{node.label}: slice step cannot be 0")
        if shape is not None:
            index[a] = slice_window(shape[a], s, e, st)
        elif st < 0 and s < 0:
            return NEEDS_DIMS
        else:
            index[a] = slice(s, e, st)
    return tuple(index)


@register("Slice", since=1, until=9)
def _slice_attr(node: Node, opset: int):
    starts = _ints(node.attr("starts"))
    ends = _ints(node.attr("ends"))
    axes = node.attr("axes")
    axes = None if axes is None else _ints(axes)

    def kernel(x):
        return (_slice(node, x, starts, ends, axes, None),)
    return kernel


@register("Slice", since=10)
def _slice_input(node: Node, opset: int):
    memo = _Memo()

    def kernel(x, starts, ends, axes=None, steps=None):
        key = (x.ndim, _key(starts), _key(ends), _key(axes), _key(steps))

        def index_of(shape=None):
            return _slice_index(node, x.ndim, starts.reshape(-1).tolist(), ends.reshape(-1).tolist(),
                                None if axes is None else axes.reshape(-1).tolist(),
                                None if steps is None or not steps.size else steps.reshape(-1).tolist(), shape)

        index = memo.get(key, index_of)
        if index is NEEDS_DIMS:  # a backward start counting from the end: it depends on this input's dims
            index = index_of(x.shape)
        return (x[index],)
    return kernel


# --------------------------------------------------------------------------------------------
# Gather
# --------------------------------------------------------------------------------------------

@register("Gather", since=1)
def _gather(node: Node, opset: int):
    axis = int(node.attr("axis", 0))

    def kernel(x, indices):
        a = normalize_axis(node, axis, x.ndim)
        try:
            if indices.ndim == 0:  # a single index: a view, no copy
                return (x[(slice(None),) * a + (int(indices), Ellipsis)],)
            return (np.take(x, indices, axis=a),)
        except IndexError as e:
            raise KernelError(f"{node.label}: index out of range for axis {axis} of size "
                              f"{x.shape[a]}") from e
    return kernel


@register("GatherElements", since=11)
def _gather_elements(node: Node, opset: int):
    axis = int(node.attr("axis", 0))

    def kernel(x, indices):
        a = normalize_axis(node, axis, x.ndim)
        if indices.ndim != x.ndim:
            raise KernelError(f"{node.label}: indices rank {indices.ndim} != data rank {x.ndim}")
        dim = x.shape[a]
        if indices.size and (indices.min() < -dim or indices.max() >= dim):
            raise KernelError(f"{node.label}: index out of range for axis {axis} of size {dim}")
        idx = np.where(indices < 0, indices + dim, indices) if indices.size else indices
        if any(i != a and n > d for i, (n, d) in enumerate(zip(indices.shape, x.shape))):
            raise KernelError(f"{node.label}: indices shape {indices.shape} exceeds data "
                              f"shape {x.shape} outside axis {axis}")
        if indices.shape != x.shape:  # indices may cover only a corner of the other dims
            x = x[tuple(slice(None) if i == a else slice(0, n)
                        for i, n in enumerate(indices.shape))]
        return (np.take_along_axis(x, idx.astype(np.intp, copy=False), axis=a),)
    return kernel


# --------------------------------------------------------------------------------------------
# Shape / Size
# --------------------------------------------------------------------------------------------

@register("Shape", since=1)
def _shape(node: Node, opset: int):
    start = int(node.attr("start", 0)) if opset >= 15 else 0
    end = node.attr("end") if opset >= 15 else None
    end = None if end is None else int(end)

    def kernel(x):
        # slicing clamps start/end to [0, rank] after adding rank to negatives, as specified
        return (np.array(x.shape[start:end], dtype=np.int64),)
    return kernel


@register("Size", since=1)
def _size(node: Node, opset: int):
    def kernel(x):
        return (np.array(x.size, dtype=np.int64),)
    return kernel


# --------------------------------------------------------------------------------------------
# Expand / Tile / Pad
# --------------------------------------------------------------------------------------------

@register("Expand", since=8)
def _expand(node: Node, opset: int):
    def kernel(x, shape):
        target = shape.tolist()
        n = max(x.ndim, len(target))
        dims = (1,) * (n - x.ndim) + x.shape
        out_shape = []
        for d, t in zip(dims, [1] * (n - len(target)) + target):
            if d != t and d != 1 and t != 1:
                raise KernelError(f"{node.label}: cannot expand shape {x.shape} to {target}")
            out_shape.append(d if t == 1 else t)
        out_shape = tuple(out_shape)
        if out_shape == x.shape:
            return (x,)
        check_tensor_size(node.label, out_shape, x.dtype)
        out = np.empty(out_shape, dtype=x.dtype)
        np.copyto(out, x)
        return (out,)
    return kernel


@register("Tile", since=1, until=5)
def _tile_v1(node: Node, opset: int):
    def kernel(x, tiles, axis):
        reps = [1] * x.ndim
        reps[normalize_axis(node, int(np.asarray(axis).reshape(-1)[0]), x.ndim)] = int(
            np.asarray(tiles).reshape(-1)[0])
        check_tensor_size(node.label, [d * r for d, r in zip(x.shape, reps)], x.dtype)
        return (np.tile(x, reps),)
    return kernel


@register("Tile", since=6)
def _tile(node: Node, opset: int):
    def kernel(x, repeats):
        reps = _ints(repeats)
        if len(reps) != x.ndim or min(reps, default=0) < 0:
            raise KernelError(f"{node.label}: repeats {reps} must hold {x.ndim} non-negative "
                              "values")
        check_tensor_size(node.label, [d * r for d, r in zip(x.shape, reps)], x.dtype)
        return (np.tile(x, reps),)
    return kernel


_PAD_MODES = {"constant", "reflect", "edge", "wrap"}


def _pad(node: Node, x: np.ndarray, pads: list[int], mode: str, value, axes) -> np.ndarray:
    return _pad_apply(_pad_plan(node, x.shape, x.dtype, pads, mode, axes), x, value)


def _pad_plan(node: Node, shape, dtype, pads: list[int], mode: str, axes) -> tuple:
    """What padding an input of ``shape`` takes, worked out once per shape and pads: (crop slices or None,
    padded shape or None when nothing is padded, the slices of the input in the padded output, and for
    the modes that copy input values one (axis, positions) gather per padded axis)."""
    rank = len(shape)
    axes_n = tuple(range(rank)) if axes is None else _axes(node, axes, rank)
    if len(pads) != 2 * len(axes_n):
        raise KernelError(f"{node.label}: pads has {len(pads)} values; expected "
                          f"{2 * len(axes_n)} for {len(axes_n)} axes")
    begin = [0] * rank
    end = [0] * rank
    for i, a in enumerate(axes_n):
        begin[a], end[a] = pads[i], pads[i + len(axes_n)]
    crop = None
    if any(b < 0 for b in begin) or any(e < 0 for e in end):  # negative pads crop
        crop = tuple(slice(-b if b < 0 else 0, shape[i] + e if e < 0 else None)
                     for i, (b, e) in enumerate(zip(begin, end)))
        shape = tuple(len(range(*sl.indices(d))) for sl, d in zip(crop, shape))
        begin = [max(b, 0) for b in begin]
        end = [max(e, 0) for e in end]
    if not any(begin) and not any(end):
        return crop, None, (), ()
    padded = tuple(d + b + e for d, b, e in zip(shape, begin, end))
    check_tensor_size(node.label, padded, dtype)
    inner = tuple(slice(b, b + d) for b, d in zip(begin, shape))
    gathers = ()
    if mode != "constant":
        if math.prod(shape) == 0:
            raise KernelError(f"{node.label}: mode {mode!r} cannot pad an empty input {tuple(shape)}")
        # one gather per padded axis: np.pad costs ~20 us to set up
        gathers = tuple((a, _pad_positions(shape[a], b, e, mode)) for a, (b, e) in enumerate(zip(begin, end))
                        if b or e)
        for _, pos in gathers:
            pos.flags.writeable = False  # shared by every run of this shape
    return crop, padded, inner, gathers


def _pad_apply(plan: tuple, x: np.ndarray, value) -> np.ndarray:
    crop, padded, inner, gathers = plan
    if crop is not None:
        x = x[crop]
    if padded is None:
        return x
    if gathers:
        for a, pos in gathers:
            x = x.take(pos, axis=a)
        return x
    if value is None or (x.dtype.kind != "O" and value == 0):
        out = np.zeros(padded, dtype=x.dtype)  # calloc: only the copy below touches memory
    else:
        out = np.full(padded, value, dtype=x.dtype)
    out[inner] = x
    return out


def _pad_positions(n: int, begin: int, end: int, mode: str) -> np.ndarray:
    """For each position of a padded axis of length ``n``, the input position it copies: mirrored
    without repeating the edge (reflect, repeatedly for pads longer than the axis), the nearest edge
    (edge), or around (wrap)."""
    pos = np.arange(-begin, n + end)
    if mode == "edge" or mode == "reflect" and n == 1:
        return np.clip(pos, 0, n - 1)
    if mode == "wrap":
        return pos % n
    period = 2 * (n - 1)
    pos = np.abs(pos) % period
    return np.where(pos >= n, period - pos, pos)


def _pad_mode(node: Node, opset: int) -> str:
    mode = node.attr("mode", "constant")
    if isinstance(mode, bytes):
        mode = mode.decode()
    if mode not in _PAD_MODES or (mode == "wrap" and opset < 19):
        raise KernelError(f"{node.label}: unsupported pad mode {mode!r} at opset {opset}")
    return mode


@register("Pad", since=1, until=10)
def _pad_attr(node: Node, opset: int):
    mode = _pad_mode(node, opset)
    pads = _ints(node.attr("paddings" if opset < 2 else "pads"))
    value = float(node.attr("value", 0.0))

    def kernel(x):
        return (_pad(node, x, pads, mode, value, None),)
    return kernel


@register("Pad", since=11)
def _pad_input(node: Node, opset: int):
    mode = _pad_mode(node, opset)

    memo = _Memo()

    def kernel(x, pads, constant_value=None, axes=None):
        value = None
        if constant_value is not None and constant_value.size:
            value = constant_value.reshape(-1)[0]
        plan = memo.get((x.shape, x.dtype, _key(pads), _key(axes)),
                        lambda: _pad_plan(node, x.shape, x.dtype, _ints(pads), mode,
                                          None if axes is None else _ints(axes)))
        return (_pad_apply(plan, x, value),)
    return kernel


# --------------------------------------------------------------------------------------------
# DepthToSpace / SpaceToDepth
# --------------------------------------------------------------------------------------------

def _blocksize(node: Node) -> int:
    bs = node.attr("blocksize")
    if bs is None or int(bs) <= 0:
        raise KernelError(f"{node.label}: attribute 'blocksize' must be a positive int, got {bs}")
    return int(bs)


def _block_mode(node: Node, opset: int, first: int) -> str:
    mode = node.attr("mode", "DCR") if opset >= first else "DCR"
    if isinstance(mode, bytes):
        mode = mode.decode()
    if mode not in ("DCR", "CRD"):
        raise KernelError(f"{node.label}: mode must be 'DCR' or 'CRD', got {mode!r}")
    return mode


@register("DepthToSpace", since=1)
def _depth_to_space(node: Node, opset: int):
    bs = _blocksize(node)
    crd = _block_mode(node, opset, 11) == "CRD"

    def kernel(x):
        if x.ndim != 4 or x.shape[1] % (bs * bs):
            raise KernelError(f"{node.label}: input must be 4-D with channels divisible by "
                              f"{bs * bs}, got {x.shape}")
        b, c, h, w = x.shape
        if crd:
            t = x.reshape(b, c // (bs * bs), bs, bs, h, w).transpose(0, 1, 4, 2, 5, 3)
        else:
            t = x.reshape(b, bs, bs, c // (bs * bs), h, w).transpose(0, 3, 4, 1, 5, 2)
        return (t.reshape(b, c // (bs * bs), h * bs, w * bs),)
    return kernel


@register("SpaceToDepth", since=1)
def _space_to_depth(node: Node, opset: int):
    bs = _blocksize(node)
    crd = _block_mode(node, opset, 28) == "CRD"

    def kernel(x):
        if x.ndim != 4 or x.shape[2] % bs or x.shape[3] % bs:
            raise KernelError(f"{node.label}: input must be 4-D with H and W divisible by {bs}, "
                              f"got {x.shape}")
        b, c, h, w = x.shape
        t = x.reshape(b, c, h // bs, bs, w // bs, bs)
        t = t.transpose(0, 1, 3, 5, 2, 4) if crd else t.transpose(0, 3, 5, 1, 2, 4)
        return (t.reshape(b, c * bs * bs, h // bs, w // bs),)
    return kernel
