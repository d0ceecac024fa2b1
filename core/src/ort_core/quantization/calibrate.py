"""Calibration: run the float model on ort-core's own InferenceSession over a CalibrationDataReader's
batches and reduce each tensor's values to a range (MinMax, Percentile, Entropy). The reductions follow
onnxruntime's calibrators; graph rewriting is elsewhere.

Differences from onnxruntime: calibration always runs on ort-core's CPU provider (calibration_providers
is ignored), all batches are held in one pass (CalibMaxIntermediateOutputs and CalibStridedMinMax are
ignored), Distribution is not offered; extra_options CalibProgress (show the progress line),
CalibNumBins and CalibNumQuantizedBins (histogram sizes) are ort-core's own keys."""

from __future__ import annotations

import abc
import warnings

import numpy as np
import onnx
from onnx import helper

from .progress import Progress
from .types import CalibrationMethod


class CalibrationDataReader(metaclass=abc.ABCMeta):
    """Yields feeds (dicts of input name -> array) from ``get_next()`` until it returns None."""

    @classmethod
    def __subclasshook__(cls, subclass):
        return (hasattr(subclass, "get_next") and callable(subclass.get_next)) or NotImplemented

    @abc.abstractmethod
    def get_next(self) -> dict:
        """The next feed, or None when there are no more."""
        raise NotImplementedError

    def __iter__(self):
        return self

    def __next__(self):
        result = self.get_next()
        if result is None:
            raise StopIteration
        return result

    def set_range(self, start_index: int, end_index: int) -> None:
        raise NotImplementedError


def augmented(model: onnx.ModelProto, tensors: list[str]) -> onnx.ModelProto:
    """``model`` with every tensor of ``tensors`` also a graph output (float, shape left open)."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    have = {o.name for o in copy.graph.output}
    for name in tensors:
        if name not in have:
            copy.graph.output.append(helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    return copy


def collect(model: onnx.ModelProto, tensors: list[str], reader, show_progress: bool | None = None):
    """Yield, per batch of ``reader``, {tensor: float32 values} for ``tensors`` computed by ort-core."""
    import ort_core  # the session stands above this package; imported when calibration runs

    aug = augmented(model, tensors)
    so = ort_core.SessionOptions()
    so.graph_optimization_level = ort_core.GraphOptimizationLevel.ORT_DISABLE_ALL
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sess = ort_core.InferenceSession(aug.SerializeToString(), so, providers=["CPUExecutionProvider"])
    wanted = [o.name for o in sess.get_outputs() if o.name in set(tensors)]
    progress = Progress("calibrating", show_progress)
    try:
        while True:
            feed = reader.get_next()
            if feed is None:
                break
            outs = sess.run(wanted, feed)
            progress.step()
            yield {name: np.asarray(v, dtype=np.float32) for name, v in zip(wanted, outs)}
    finally:
        progress.close()
    if progress.count == 0:
        raise ValueError("the calibration data reader gave no batch")


def compute_ranges(model: onnx.ModelProto, tensors: list[str], reader,
                   method: CalibrationMethod = CalibrationMethod.MinMax,
                   extra_options: dict | None = None) -> dict[str, tuple[np.float32, np.float32]]:
    """{tensor: (rmin, rmax)} over all batches, by ``method`` and onnxruntime's Calib* extra_options."""
    opts = extra_options or {}
    show = opts.get("CalibProgress")
    batches = collect(model, tensors, reader, show)
    if method == CalibrationMethod.MinMax:
        return _minmax(batches, bool(opts.get("CalibTensorRangeSymmetric", False)),
                       bool(opts.get("CalibMovingAverage", False)))
    if method in (CalibrationMethod.Percentile, CalibrationMethod.Entropy):
        # onnxruntime builds each histogram once, over the values of every batch together
        gathered: dict[str, list[np.ndarray]] = {}
        for values in batches:
            for name, v in values.items():
                gathered.setdefault(name, []).append(v.reshape(-1))
        whole = [{name: np.concatenate(parts) for name, parts in gathered.items()}]
        if method == CalibrationMethod.Percentile:
            return _percentile(whole, int(opts.get("CalibNumBins", 2048)), float(opts.get("CalibPercentile", 99.999)),
                               bool(opts.get("CalibTensorRangeSymmetric", True)))
        from .entropy import entropy_ranges

        return entropy_ranges(whole, int(opts.get("CalibNumBins", 128)), int(opts.get("CalibNumQuantizedBins", 128)))
    raise ValueError(f"calibration method {method} is not supported by ort_core.quantization "
                     "(MinMax, Percentile and Entropy are)")


def _minmax(batches, symmetric: bool, moving_average: bool):
    """Per batch min and max, then their extremes (or, with CalibMovingAverage, their means: onnxruntime
    averages the batches of one pass and smooths across passes only when it splits the data)."""
    seen: dict[str, tuple[list, list]] = {}
    for values in batches:
        for name, v in values.items():
            lo = np.float32(np.nanmin(v)) if v.size else np.float32(0)
            hi = np.float32(np.nanmax(v)) if v.size else np.float32(0)
            los, his = seen.setdefault(name, ([], []))
            los.append(lo)
            his.append(hi)
    reduce_lo, reduce_hi = (np.nanmean, np.nanmean) if moving_average else (np.nanmin, np.nanmax)
    ranges = {name: (np.float32(reduce_lo(los)), np.float32(reduce_hi(his))) for name, (los, his) in seen.items()}
    if symmetric:
        ranges = {k: (-max(abs(lo), abs(hi)), max(abs(lo), abs(hi))) for k, (lo, hi) in ranges.items()}
    return ranges


def _percentile(batches, num_bins: int, percentile: float, symmetric: bool):
    """Histograms of |x| (bins widened as larger values arrive), cut at ``percentile``; clipped to the
    observed min and max, as onnxruntime's PercentileCalibrater does."""
    if not 0 <= percentile <= 100:
        raise ValueError("CalibPercentile must be in [0, 100]")
    hists: dict[str, list] = {}
    for values in batches:
        for name, v in values.items():
            flat = v.reshape(-1)
            lo = np.float32(np.nanmin(flat)) if flat.size else np.float32(0)
            hi = np.float32(np.nanmax(flat)) if flat.size else np.float32(0)
            a = np.abs(flat)
            if name not in hists:
                hist, edges = np.histogram(a, bins=num_bins)
                hists[name] = [hist, edges.astype(np.float32), lo, hi]
                continue
            old_hist, edges, olo, ohi = hists[name]
            amax = np.nanmax(a) if a.size else np.float32(0)
            if amax > edges[-1]:
                width = edges[1] - edges[0]
                edges = np.hstack((edges, np.arange(edges[-1] + width, amax + width, width)))
            hist, edges = np.histogram(a, bins=edges)
            hist[: len(old_hist)] += old_hist
            hists[name] = [hist, edges.astype(np.float32), min(olo, lo), max(ohi, hi)]
    ranges = {}
    for name, (hist, edges, lo, hi) in hists.items():
        cdf = np.cumsum(hist / hist.sum())
        if symmetric:
            t = edges[np.searchsorted(cdf, percentile / 100.0)]
            rlo, rhi = -t, t
        else:
            cut = (100.0 - percentile) / 200.0
            rlo, rhi = edges[np.searchsorted(cdf, cut)], edges[np.searchsorted(cdf, 1.0 - cut)]
        ranges[name] = (np.float32(max(rlo, lo)), np.float32(min(rhi, hi)))
    return ranges
