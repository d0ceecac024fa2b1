"""CPU kernel for RoiAlign (opsets 10-22): bilinear sampling of regions of interest with avg or max pooling.

All sample points of a batch of ROIs are laid out flat (ROIs may have different sampling grids) and
gathered at once; the quantizing RoiPool (MaxRoiPool) is not here.
"""

from __future__ import annotations

import numpy as np

from ....errors import KernelError
from ....limits import check_tensor_size
from ..registry import register

_SAMPLE_BUDGET = 1 << 22  # gathered values (samples x channels) held at once


def _str_attr(node, name: str, default: str, allowed) -> str:
    value = node.attr(name, default)
    value = value.decode() if isinstance(value, bytes) else value
    if value not in allowed:
        raise KernelError(f"{node.label}: unsupported {name} '{value}' (expected one of {allowed})")
    return value


def _bilinear_samples(y, x, height: int, width: int):
    """Corner offsets (4 arrays into an H*W plane) and weights of sample points, as ORT/torchvision
    compute them: points more than one pixel outside get zero weight, the rest clamp to the edge."""
    outside = (y < -1.0) | (y > height) | (x < -1.0) | (x > width)
    y = np.maximum(y, 0.0)
    x = np.maximum(x, 0.0)
    y_low = np.floor(y).astype(np.int64)
    x_low = np.floor(x).astype(np.int64)
    y_edge, x_edge = y_low >= height - 1, x_low >= width - 1
    y_low = np.where(y_edge, height - 1, y_low)
    x_low = np.where(x_edge, width - 1, x_low)
    y_high = np.where(y_edge, y_low, y_low + 1)
    x_high = np.where(x_edge, x_low, x_low + 1)
    ly = np.where(y_edge, 0.0, y - y_low)
    lx = np.where(x_edge, 0.0, x - x_low)
    hy, hx = 1.0 - ly, 1.0 - lx
    weights = [hy * hx, hy * lx, ly * hx, ly * lx]
    weights = [np.where(outside, 0.0, w) for w in weights]
    pos = [y_low * width + x_low, y_low * width + x_high, y_high * width + x_low, y_high * width + x_high]
    pos = [np.where(outside, 0, p) for p in pos]
    return pos, weights


def _geometry(plan, rois):
    """Per ROI: sampling start (h, w), bin size (h, w) and sampling grid (h, w) in input pixels."""
    out_h, out_w, offset, scale, ratio, aligned, _ = plan
    start_w, start_h, end_w, end_h = (rois[:, i] * scale - offset for i in range(4))
    roi_w, roi_h = end_w - start_w, end_h - start_h
    if not aligned:  # legacy behaviour: malformed ROIs are forced to 1x1
        roi_w, roi_h = np.maximum(roi_w, 1.0), np.maximum(roi_h, 1.0)
    if ratio > 0:
        grid_h = grid_w = np.full(len(rois), ratio, dtype=np.int64)
    else:  # adaptive: about one sample per input pixel
        grid_h = np.maximum(np.ceil(roi_h / out_h), 0).astype(np.int64)
        grid_w = np.maximum(np.ceil(roi_w / out_w), 0).astype(np.int64)
    return start_h, start_w, roi_h / out_h, roi_w / out_w, grid_h, grid_w


def _roi_chunk(plan, planes, height, width, geometry, batch):
    """Pooled values (num_rois, out_h * out_w, C) for one chunk of ROIs."""
    out_h, out_w, mode = plan[0], plan[1], plan[6]
    start_h, start_w, bin_h, bin_w, grid_h, grid_w = geometry
    work = planes.dtype
    r = len(batch)
    per_bin = grid_h * grid_w
    n_bins = out_h * out_w
    counts = per_bin * n_bins

    # ragged layout: ROI-major, then bin, then sample row, then sample column
    roi_of = np.repeat(np.arange(r), counts)
    k = np.arange(int(counts.sum()), dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
    gw, gh = grid_w[roi_of], grid_h[roi_of]
    ix = k % gw
    k //= gw
    iy = k % gh
    k //= gh
    pw = k % out_w
    ph = k // out_w
    y = start_h[roi_of] + ph * bin_h[roi_of] + (iy + 0.5) * bin_h[roi_of] / gh
    x = start_w[roi_of] + pw * bin_w[roi_of] + (ix + 0.5) * bin_w[roi_of] / gw
    pos, weights = _bilinear_samples(y, x, height, width)
    base = batch[roi_of] * (height * width)
    corners = [planes[base + p] * w.astype(work)[:, None] for p, w in zip(pos, weights)]

    out = np.zeros((r * n_bins, planes.shape[1]), dtype=work)
    nonempty = np.repeat(per_bin, n_bins) > 0  # bins with at least one sample
    if not nonempty.any():
        return out.reshape(r, n_bins, -1)
    starts = (np.cumsum(np.repeat(per_bin, n_bins)) - np.repeat(per_bin, n_bins))[nonempty]
    if mode == "avg":
        samples = corners[0] + corners[1] + corners[2] + corners[3]
        sums = np.add.reduceat(samples, starts, axis=0)
        out[nonempty] = sums / np.repeat(per_bin, n_bins)[nonempty, None].astype(work)
    else:
        # ORT's max mode: the largest weighted corner of each sample, then the largest sample
        samples = np.maximum(np.maximum(corners[0], corners[1]), np.maximum(corners[2], corners[3]))
        out[nonempty] = np.maximum.reduceat(samples, starts, axis=0)
    return out.reshape(r, n_bins, -1)


def _roi_align(label, plan, x, rois, batch_indices):
    out_h, out_w = plan[0], plan[1]
    if x.ndim != 4:
        raise KernelError(f"{label}: X must be 4-D (N, C, H, W), got shape {x.shape}")
    if rois.ndim != 2 or rois.shape[1] != 4:
        raise KernelError(f"{label}: rois must have shape (num_rois, 4), got {rois.shape}")
    batch = np.asarray(batch_indices).reshape(-1).astype(np.int64)
    if batch.shape[0] != rois.shape[0]:
        raise KernelError(f"{label}: batch_indices has {batch.shape[0]} entries for {rois.shape[0]} rois")
    n, c, height, width = x.shape
    if batch.size and (batch.min() < 0 or batch.max() >= n):
        raise KernelError(f"{label}: batch_indices must lie in [0, {n}), got {batch.tolist()}")
    work = np.float64 if x.dtype == np.float64 else np.float32
    check_tensor_size(label, (rois.shape[0], c, out_h, out_w), work)
    y = np.zeros((rois.shape[0], out_h * out_w, c), dtype=work)
    if rois.shape[0] and c and height and width:
        planes = np.moveaxis(x, 1, -1).reshape(-1, c).astype(work, copy=False)  # (N*H*W, C)
        geometry = _geometry(plan, rois.astype(np.float64))
        # huge ROIs sample a huge adaptive grid: one ROI's samples must fit the size limit
        grid = geometry[4].astype(np.float64) * geometry[5].astype(np.float64)
        if grid.size and grid.min() < 0:
            raise KernelError(f"{label}: rois {rois.tolist()[:4]} are too large to sample")
        check_tensor_size(label, (int(grid.max()) * out_h * out_w, 5 * c), work, "sampling grid of one ROI")
        # chunks of ROIs bound the memory of the gathered corner values
        cost = np.cumsum(np.maximum(geometry[4] * geometry[5], 1) * (out_h * out_w * 4 * c))
        lo = 0
        while lo < rois.shape[0]:
            hi = max(int(np.searchsorted(cost, (cost[lo - 1] if lo else 0) + _SAMPLE_BUDGET, "right")), lo + 1)
            y[lo:hi] = _roi_chunk(plan, planes, height, width, [g[lo:hi] for g in geometry], batch[lo:hi])
            lo = hi
    y = np.moveaxis(y.reshape(rois.shape[0], out_h, out_w, c), -1, 1)
    return np.ascontiguousarray(y).astype(x.dtype, copy=False)


@register("RoiAlign", since=10)
def _roi_align_factory(node, opset):
    mode = _str_attr(node, "mode", "avg", ("avg", "max"))
    if opset >= 16:
        coord = _str_attr(node, "coordinate_transformation_mode", "half_pixel", ("half_pixel", "output_half_pixel"))
    else:
        coord = "output_half_pixel"  # opset 10 had no input pixel shift
    out_h, out_w = int(node.attr("output_height", 1)), int(node.attr("output_width", 1))
    ratio = int(node.attr("sampling_ratio", 0))
    if out_h < 1 or out_w < 1 or ratio < 0:
        raise KernelError(f"{node.label}: output_height/output_width must be >= 1 and sampling_ratio >= 0, "
                          f"got {out_h}, {out_w}, {ratio}")
    aligned = coord == "half_pixel"
    plan = (out_h, out_w, 0.5 if aligned else 0.0, float(node.attr("spatial_scale", 1.0)), ratio, aligned, mode)

    def kernel(x, rois, batch_indices):
        return (_roi_align(node.label, plan, x, rois, batch_indices),)
    return kernel
