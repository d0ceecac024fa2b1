"""CPU kernels for normalized sampling grids: GridSample (N-D, nearest/linear/cubic, zeros/border/reflection
padding) and AffineGrid, which builds such grids from affine matrices.

Sampling gathers all output points of one interpolation tap at once; regular-grid Resize is in resize.py.
"""

from __future__ import annotations

import itertools

import numpy as np

from ....errors import KernelError
from ....limits import check_tensor_size
from ..registry import register
from .resize import cast_back, work_dtype

_PADDINGS = ("zeros", "border", "reflection")
_CUBIC_A = -0.75  # Keys' coefficient torch.grid_sample uses


def _str_attr(node, name: str, default: str) -> str:
    value = node.attr(name, default)
    return value.decode() if isinstance(value, bytes) else value


def _reflect(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """Fold coordinates outside [lo, hi] back inside, bouncing off both borders as often as needed."""
    span = hi - lo
    if span <= 0:
        return np.full_like(x, lo)
    below, above = x < lo, x > hi
    dist = np.where(below, lo - x, np.where(above, x - hi, 0))
    bounces = np.floor(dist / span)
    rest = dist - bounces * span
    even = bounces % 2 == 0
    from_lo = np.where(even, lo + rest, hi - rest)
    from_hi = np.where(even, hi - rest, lo + rest)
    return np.where(below, from_lo, np.where(above, from_hi, x))


def _cubic_weights(t: np.ndarray) -> list[np.ndarray]:
    """Keys cubic weights of the taps at offsets -1, 0, 1, 2 from floor(x), t = x - floor(x)."""
    a = _CUBIC_A

    def near(d):
        return ((a + 2) * d - (a + 3)) * d * d + 1

    def far(d):
        return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def _axis_taps(x: np.ndarray, length: int, mode: str, padding: str, align_corners: bool):
    """Taps along one spatial axis: list of (index, weight, inside) arrays shaped like x.

    ``inside`` is False where a tap falls off the image and zeros padding applies (None when
    every tap is valid); indices are always clamped into the image so gathers stay legal."""
    lo, hi = (0.0, length - 1.0) if align_corners else (-0.5, length - 0.5)
    if mode == "nearest":
        x = np.rint(x)  # halfway points go to the even index, like torch
    if padding == "border":  # only coordinates past the border move; taps near it clamp below
        x = np.where((x < lo) | (x > hi), np.clip(x, 0, length - 1), x)
    elif padding == "reflection":
        x = _reflect(x, lo, hi)
    if mode == "nearest":
        base, offsets, weights = x, (0,), [None]
    else:
        base = np.floor(x)
        t = x - base
        offsets, weights = ((0, 1), [1 - t, t]) if mode == "linear" else ((-1, 0, 1, 2), _cubic_weights(t))
    base = base.astype(np.int64)
    taps = []
    for off, w in zip(offsets, weights):
        idx = base + off
        inside = None
        if padding == "zeros":
            inside = (idx >= 0) & (idx < length)
        elif padding == "reflection":
            # a tap past the border mirrors about it, as the reflected coordinate itself did
            idx = _reflect(idx.astype(x.dtype), lo, hi).astype(np.int64)
        taps.append((np.clip(idx, 0, length - 1), w, inside))
    return taps


def _grid_sample(label, x: np.ndarray, grid: np.ndarray, mode: str, padding: str, align_corners: bool):
    n, c, *spatial = x.shape
    r = len(spatial)
    if grid.ndim != r + 2 or grid.shape[0] != n or grid.shape[-1] != r:
        raise KernelError(f"{label}: grid must have shape (N={n}, *out, {r}) for input {x.shape}, "
                          f"got {grid.shape}")
    out_sp = grid.shape[1:-1]
    check_tensor_size(label, (n, c, *out_sp), x.dtype)
    numeric = x.dtype.kind in "fiuc" or x.dtype.name == "bfloat16"
    if mode != "nearest" and not numeric:
        raise KernelError(f"{label}: mode '{mode}' needs a numeric input, got {x.dtype}")
    if x.size == 0 or grid.size == 0 or 0 in spatial:
        if 0 in spatial and grid.size:
            raise KernelError(f"{label}: cannot sample from an empty image of shape {x.shape}")
        return np.zeros((n, c, *out_sp), dtype=x.dtype)
    coord_dtype = np.float64 if grid.dtype == np.float64 else np.float32
    g = grid.astype(coord_dtype, copy=False)
    # grid[..., 0] addresses the last (innermost) spatial axis, grid[..., r-1] the first
    per_axis = []
    for d, length in enumerate(spatial):
        nrm = g[..., r - 1 - d]
        pos = (nrm + 1) / 2 * (length - 1) if align_corners else ((nrm + 1) * length - 1) / 2
        per_axis.append(_axis_taps(pos, length, mode, padding, align_corners))

    # channels first with batches side by side: one gather per tap yields (C, N * points)
    work = x.dtype if mode == "nearest" else work_dtype(x.dtype)
    size = int(np.prod(spatial))
    planes = np.moveaxis(x.reshape(n, c, size), 1, 0).reshape(c, n * size).astype(work, copy=False)
    batch = (np.arange(n, dtype=np.int64) * size).reshape((n,) + (1,) * len(out_sp))
    strides = [int(np.prod(spatial[d + 1:])) for d in range(r)]
    acc = None
    for combo in itertools.product(*per_axis):  # 1, 2**r or 4**r taps
        lin = batch
        weight, inside = None, None
        for (idx, w, ok), stride in zip(combo, strides):
            lin = lin + idx * stride
            if w is not None:
                weight = w if weight is None else weight * w
            if ok is not None:
                inside = ok if inside is None else inside & ok
        vals = np.take(planes, lin.reshape(-1), axis=1)
        if weight is None:  # nearest
            if inside is not None:
                zero = "" if x.dtype == object else 0
                vals = np.where(inside.reshape(-1), vals, np.asarray(zero, dtype=x.dtype))
            acc = vals
            continue
        if inside is not None:
            weight = np.where(inside, weight, 0)
        term = vals * weight.astype(work, copy=False).reshape(-1)
        acc = term if acc is None else np.add(acc, term, out=acc)
    y = np.moveaxis(acc.reshape(c, n, *out_sp), 0, 1)
    if y.dtype != x.dtype:
        y = cast_back(y, x.dtype)
    return np.ascontiguousarray(y)


@register("GridSample", since=16)
def _grid_sample_factory(node, opset):
    legacy = opset < 20  # opset 16 spells the modes bilinear/bicubic and handles 4-D inputs only
    modes = {"bilinear": "linear", "nearest": "nearest", "bicubic": "cubic"} if legacy else \
        {"linear": "linear", "nearest": "nearest", "cubic": "cubic"}
    mode_name = _str_attr(node, "mode", "bilinear" if legacy else "linear")
    if mode_name not in modes:
        raise KernelError(f"{node.label}: unsupported mode '{mode_name}' (expected one of {tuple(modes)})")
    mode = modes[mode_name]
    padding = _str_attr(node, "padding_mode", "zeros")
    if padding not in _PADDINGS:
        raise KernelError(f"{node.label}: unsupported padding_mode '{padding}' (expected one of {_PADDINGS})")
    align_corners = bool(node.attr("align_corners", 0))

    def kernel(x, grid):
        if x.ndim < 3 or (legacy and x.ndim != 4):
            raise KernelError(f"{node.label}: input X must be {'4-D' if legacy else 'at least 3-D'}, "
                              f"got shape {x.shape}")
        return (_grid_sample(node.label, x, grid, mode, padding, align_corners),)
    return kernel


def _base_coords(length: int, align_corners: bool) -> np.ndarray:
    """Normalized centres of `length` pixels in [-1, 1]."""
    if length <= 1:
        return np.zeros(length)
    i = np.arange(length, dtype=np.float64)
    return i * 2 / (length - 1) - 1 if align_corners else (2 * i + 1) / length - 1


@register("AffineGrid", since=20)
def _affine_grid(node, opset):
    align_corners = bool(node.attr("align_corners", 0))

    def kernel(theta, size):
        dims = [int(v) for v in np.asarray(size).reshape(-1)]
        if len(dims) not in (4, 5):
            raise KernelError(f"{node.label}: size must be (N, C, H, W) or (N, C, D, H, W), got {dims}")
        r = len(dims) - 2
        n, spatial = dims[0], dims[2:]
        if theta.shape != (n, r, r + 1):
            raise KernelError(f"{node.label}: theta must have shape {(n, r, r + 1)} for size {dims}, "
                              f"got {theta.shape}")
        # homogeneous base points (x, y[, z], 1) with x along the innermost axis
        axes = [_base_coords(length, align_corners) for length in spatial]
        mesh = np.meshgrid(*axes, indexing="ij")
        base = np.stack([*mesh[::-1], np.ones(spatial)], axis=-1).reshape(-1, r + 1)
        work = np.float64 if theta.dtype == np.float64 else np.float32
        pts = base.astype(work) @ np.swapaxes(theta.astype(work), 1, 2)  # (N, P, r)
        return (pts.reshape(n, *spatial, r).astype(theta.dtype),)
    return kernel
