"""CPU kernels resampling tensors on a regular grid: Resize (opsets 10-19) and the deprecated Upsample.

Resizing is separable: each resized axis is mapped to source taps (indices + weights) once and the
data is gathered along that axis. Grid/ROI samplers (GridSample, RoiAlign) live elsewhere.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ....errors import KernelError
from ....limits import check_tensor_size
from ..registry import register

_MODES = ("nearest", "linear", "cubic")
_COORD_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
                "tf_half_pixel_for_nn", "tf_crop_and_resize")
# "simple" is the pre-opset-11 rule (Upsample, Resize-10): truncate when upsampling, ceil when downsampling.
_NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil", "simple")
_POLICIES = ("stretch", "not_larger", "not_smaller")


class _Axis(NamedTuple):
    """How one dimension is resized."""
    out_len: int
    scale: float
    length: float  # target length before rounding: in_len * scale
    roi: tuple[float, float] = (0.0, 1.0)


def _str_attr(node, name: str, default: str, allowed) -> str:
    value = node.attr(name, default)
    if isinstance(value, bytes):
        value = value.decode()
    if value not in allowed:
        raise KernelError(f"{node.label}: unsupported {name} '{value}' (expected one of {tuple(allowed)})")
    return value


# ---------------------------------------------------------------------------------------------
# one axis: output positions -> source coordinates -> taps
# ---------------------------------------------------------------------------------------------

def _source_coords(mode: str, in_len: int, ax: _Axis):
    """Source coordinate of every output position along one axis (float64), per the spec's formulas.

    As in onnx's reference, length_resized in the formulas is the fractional target length
    in_len * scale, which exceeds the integer output length when 'scales' do not land on integers."""
    out_len, scale, length = ax.out_len, ax.scale, ax.length
    y = np.arange(out_len, dtype=np.float64)
    if mode == "half_pixel":
        return (y + 0.5) / scale - 0.5
    if mode == "half_pixel_symmetric":
        # shifts the grid so that the kept input centre maps onto the output centre when the
        # integer output size is not exactly in_len * scale; the spec's offset
        # in_len / 2 * (1 - out_len / length) is written as below to keep exact cases exact
        return (in_len - in_len * out_len / length) / 2 + (y + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        # a single output samples position 0 as the spec says (onnx's reference uses -0.5 here)
        return (y + 0.5) / scale - 0.5 if length > 1 else np.zeros(out_len)
    if mode == "align_corners":
        return y * (in_len - 1) / (length - 1) if out_len > 1 else np.zeros(out_len)
    if mode == "asymmetric":
        return y / scale
    if mode == "tf_half_pixel_for_nn":
        return (y + 0.5) / scale
    start, end = ax.roi  # tf_crop_and_resize
    if length > 1:
        return start * (in_len - 1) + y * (end - start) * (in_len - 1) / (length - 1)
    return np.full(out_len, 0.5 * (start + end) * (in_len - 1))


def _nearest_index(x: np.ndarray, rule: str, scale: float) -> np.ndarray:
    if rule == "round_prefer_floor":
        idx = np.ceil(x - 0.5)
    elif rule == "round_prefer_ceil":
        idx = np.floor(x + 0.5)
    elif rule == "floor":
        idx = np.floor(x)
    elif rule == "ceil":
        idx = np.ceil(x)
    else:  # simple
        idx = np.ceil(x) if scale < 1 else np.trunc(x)
    return idx.astype(np.int64)


def _cubic_filter(a: float):
    def f(d):
        d = np.abs(d)
        d2, d3 = d * d, d * d * d
        near = (a + 2) * d3 - (a + 3) * d2 + 1
        far = a * d3 - 5 * a * d2 + 8 * a * d - 4 * a
        return np.where(d <= 1, near, np.where(d < 2, far, 0.0))
    return f


def _linear_filter(d):
    return np.maximum(0.0, 1 - np.abs(d))


def _filter_taps(x, in_len, scale, support, filt, antialias, exclude_outside):
    """(indices, weights), each (out_len, n): an interpolation filter centred on x.

    With antialias and downsampling the filter is stretched by 1/scale (more taps, lower peak)."""
    s = min(scale, 1.0) if antialias else 1.0
    m = math.ceil(support / s)
    x0 = np.floor(x)
    t = x - x0
    offsets = np.arange(1 - m, m + 1, dtype=np.float64)
    weights = filt((offsets[None, :] - t[:, None]) * s)
    idx = x0.astype(np.int64)[:, None] + offsets.astype(np.int64)[None, :]
    if exclude_outside:
        weights = np.where((idx < 0) | (idx >= in_len), 0.0, weights)
    if antialias or exclude_outside:
        total = weights.sum(axis=1, keepdims=True)
        weights = weights / np.where(total == 0, 1.0, total)
    # taps beyond the edge repeat the edge pixel
    return np.clip(idx, 0, in_len - 1), weights


@dataclass(frozen=True)
class _Plan:
    """Static per-node settings of Resize/Upsample."""
    label: str
    mode: str
    coord: str
    nearest: str
    cubic_a: float = -0.75
    exclude_outside: bool = False
    extrapolation: float = 0.0
    antialias: bool = False
    policy: str = "stretch"

    def axis_taps(self, in_len: int, ax: _Axis):
        """(indices (out, n), weights (out, n) or None for nearest, extrapolated mask or None)."""
        scale = ax.scale
        x = _source_coords(self.coord, in_len, ax)
        outside = None
        if self.coord == "tf_crop_and_resize":
            outside = (x < 0) | (x > in_len - 1)
            if not outside.any():
                outside = None
        if self.mode == "nearest":
            idx = np.clip(_nearest_index(x, self.nearest, scale), 0, in_len - 1)
            return idx[:, None], None, outside
        if self.mode == "linear":
            idx, w = _filter_taps(x, in_len, scale, 1.0, _linear_filter, self.antialias, self.exclude_outside)
        else:
            idx, w = _filter_taps(x, in_len, scale, 2.0, _cubic_filter(self.cubic_a), self.antialias,
                                  self.exclude_outside)
        return idx, w, outside


def work_dtype(dtype: np.dtype) -> np.dtype:
    """Accumulation type: float32 for narrow types, float64 for double and wide integers."""
    if dtype.kind == "c":
        return dtype
    if dtype == np.float64 or (dtype.kind in "iu" and dtype.itemsize >= 4):
        return np.dtype(np.float64)
    return np.dtype(np.float32)


def cast_back(y: np.ndarray, dtype: np.dtype) -> np.ndarray:
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return np.clip(np.rint(y), info.min, info.max).astype(dtype)
    return y.astype(dtype, copy=False)


def _resize_axis(x: np.ndarray, axis: int, idx, weights, outside, extrapolation, work):
    if weights is None:
        y = np.take(x, idx[:, 0], axis=axis)
    else:
        shape = [1] * x.ndim
        shape[axis] = -1
        w = weights.astype(work, copy=False)
        y = None
        for k in range(idx.shape[1]):  # taps: 1-4 without antialias, a few more with it
            term = np.take(x, idx[:, k], axis=axis)
            term *= w[:, k].reshape(shape)
            y = term if y is None else np.add(y, term, out=y)
    if outside is not None:
        shape = [1] * x.ndim
        shape[axis] = -1
        y = np.where(outside.reshape(shape), np.asarray(extrapolation).astype(y.dtype), y)
    return y


def _resample(plan: _Plan, x: np.ndarray, axes: list[_Axis]) -> np.ndarray:
    """Resize x as described by one _Axis per dimension of x."""
    out_shape = [ax.out_len for ax in axes]
    if plan.mode != "nearest" and x.dtype.kind not in "fiuc" and x.dtype.name != "bfloat16":
        raise KernelError(f"{plan.label}: mode '{plan.mode}' needs a numeric input, got {x.dtype}")
    for a, (n_in, n_out) in enumerate(zip(x.shape, out_shape)):
        if n_in == 0 and n_out != 0:
            raise KernelError(f"{plan.label}: cannot resize empty axis {a} to size {n_out}")
    check_tensor_size(plan.label, out_shape, x.dtype)
    if 0 in x.shape or 0 in out_shape:
        return np.empty(out_shape, dtype=x.dtype)
    dtype = x.dtype
    work = dtype if plan.mode == "nearest" else work_dtype(dtype)
    y = x
    for axis, ax in enumerate(axes):
        n_in = x.shape[axis]
        identity_roi = plan.coord != "tf_crop_and_resize" or ax.roi == (0.0, 1.0)
        if n_in == ax.out_len and ax.scale == 1.0 and identity_roi:
            continue
        # axes are resized one after another: an intermediate may exceed both ends (up, then down)
        check_tensor_size(plan.label, y.shape[:axis] + (ax.out_len,) + y.shape[axis + 1:], work,
                          "intermediate result")
        idx, w, outside = plan.axis_taps(n_in, ax)
        if w is not None and y.dtype != work:
            y = y.astype(work)
        y = _resize_axis(y, axis, idx, w, outside, plan.extrapolation, work)
    if y is x:
        return x.copy()
    return cast_back(y, dtype) if y.dtype != dtype else y


# ---------------------------------------------------------------------------------------------
# Resize
# ---------------------------------------------------------------------------------------------

def _as_floats(v) -> list[float]:
    return [float(s) for s in np.asarray(v, dtype=np.float64).reshape(-1)]


def _resolve(plan: _Plan, x: np.ndarray, axes_attr, roi, scales, sizes) -> list[_Axis]:
    """One _Axis per dimension of x from Resize's inputs; dimensions not in 'axes' keep their size."""
    label, rank = plan.label, x.ndim
    if axes_attr is None:
        axes = list(range(rank))
    else:
        axes = [a + rank if a < 0 else a for a in axes_attr]
        if any(not 0 <= a < rank for a in axes) or len(set(axes)) != len(axes):
            raise KernelError(f"{label}: axes {list(axes_attr)} are invalid or repeated for rank {rank}")
    n = len(axes)
    has_scales = scales is not None and scales.size > 0
    has_sizes = sizes is not None and sizes.size > 0
    if has_scales == has_sizes:
        raise KernelError(f"{label}: exactly one of 'scales' and 'sizes' must be given "
                          f"({'both' if has_scales else 'neither'} given)")
    rois = [(0.0, 1.0)] * n
    if plan.coord == "tf_crop_and_resize":
        if roi is None or roi.size == 0:
            raise KernelError(f"{label}: coordinate_transformation_mode 'tf_crop_and_resize' needs 'roi'")
        r = _as_floats(roi)
        if len(r) != 2 * n:
            raise KernelError(f"{label}: 'roi' has {len(r)} values, expected {2 * n}")
        rois = [(r[i], r[n + i]) for i in range(n)]
    result = [_Axis(d, 1.0, float(d)) for d in x.shape]
    if has_scales:
        s = _as_floats(scales)
        if len(s) != n:
            raise KernelError(f"{label}: 'scales' has {len(s)} values, expected {n}")
        if min(s) <= 0:
            raise KernelError(f"{label}: 'scales' must be positive, got {s}")
        if not all(math.isfinite(v) for v in s):
            raise KernelError(f"{label}: 'scales' must be finite, got {s}")
        for a, v, r in zip(axes, s, rois):
            length = x.shape[a] * v
            result[a] = _Axis(int(math.floor(length)), v, length, r)
        return result
    sz = [int(v) for v in np.asarray(sizes).reshape(-1)]
    if len(sz) != n:
        raise KernelError(f"{label}: 'sizes' has {len(sz)} values, expected {n}")
    if min(sz) < 0:
        raise KernelError(f"{label}: 'sizes' must not be negative, got {sz}")
    if plan.policy == "stretch":
        for a, v, r in zip(axes, sz, rois):
            result[a] = _Axis(v, v / x.shape[a] if x.shape[a] else 1.0, float(v), r)
        return result
    ratios = [v / x.shape[a] for a, v in zip(axes, sz) if x.shape[a]]
    scale = (min(ratios) if plan.policy == "not_larger" else max(ratios)) if ratios else 1.0
    for a, r in zip(axes, rois):
        length = scale * x.shape[a]
        result[a] = _Axis(int(math.floor(length + 0.5)), scale, length, r)  # round half up
    return result


@register("Resize", since=10, until=10)
def _resize_10(node, opset):
    mode = _str_attr(node, "mode", "nearest", ("nearest", "linear"))
    plan = _Plan(node.label, mode, "asymmetric", "simple")

    def kernel(x, scales):
        return (_resample(plan, x, _resolve(plan, x, None, None, scales, None)),)
    return kernel


@register("Resize", since=11)
def _resize(node, opset):
    coord_modes = _COORD_MODES if opset < 13 else tuple(m for m in _COORD_MODES if m != "tf_half_pixel_for_nn")
    if opset < 18:
        coord_modes = tuple(m for m in coord_modes if m != "half_pixel_symmetric")
    mode = _str_attr(node, "mode", "nearest", _MODES)
    coord = _str_attr(node, "coordinate_transformation_mode", "half_pixel", coord_modes)
    nearest = _str_attr(node, "nearest_mode", "round_prefer_floor", _NEAREST_MODES[:4])
    antialias = bool(node.attr("antialias", 0)) if opset >= 18 else False
    if antialias and mode == "nearest":
        raise KernelError(f"{node.label}: antialias applies to 'linear' and 'cubic' modes only")
    policy = _str_attr(node, "keep_aspect_ratio_policy", "stretch", _POLICIES) if opset >= 18 else "stretch"
    axes = node.attr("axes") if opset >= 18 else None
    axes = None if axes is None else [int(a) for a in axes]
    plan = _Plan(node.label, mode, coord, nearest, float(node.attr("cubic_coeff_a", -0.75)),
                 bool(node.attr("exclude_outside", 0)), float(node.attr("extrapolation_value", 0.0)),
                 antialias, policy)

    def kernel(x, roi=None, scales=None, sizes=None):
        return (_resample(plan, x, _resolve(plan, x, axes, roi, scales, sizes)),)
    return kernel


# ---------------------------------------------------------------------------------------------
# Upsample (deprecated since opset 10; Resize-10 with scales >= 1)
# ---------------------------------------------------------------------------------------------

def _upsample_plan(node) -> _Plan:
    mode = _str_attr(node, "mode", "nearest", ("nearest", "linear"))
    return _Plan(node.label, mode, "asymmetric", "simple")


def _upsample(plan: _Plan, x: np.ndarray, scales) -> np.ndarray:
    s = _as_floats(scales)
    if len(s) != x.ndim:
        raise KernelError(f"{plan.label}: 'scales' has {len(s)} values, expected {x.ndim} (rank of X)")
    if min(s, default=1.0) < 1 or not all(math.isfinite(v) for v in s):
        raise KernelError(f"{plan.label}: Upsample scales must be finite and >= 1, got {s}")
    return _resample(plan, x, [_Axis(int(math.floor(n * v)), v, n * v) for n, v in zip(x.shape, s)])


@register("Upsample", since=7, until=8)
def _upsample_7(node, opset):
    plan = _upsample_plan(node)
    scales = node.attr("scales")
    if scales is None:
        raise KernelError(f"{node.label}: attribute 'scales' is required")

    def kernel(x):
        return (_upsample(plan, x, scales),)
    return kernel


@register("Upsample", since=9)
def _upsample_9(node, opset):
    plan = _upsample_plan(node)

    def kernel(x, scales):
        return (_upsample(plan, x, scales),)
    return kernel
