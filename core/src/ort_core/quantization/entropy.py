"""Entropy calibration: a histogram of each tensor's values over all batches, and the clipping
threshold whose quantized histogram is closest to it (smallest KL divergence), as onnxruntime's
EntropyCalibrater computes it (scipy's entropy written out in numpy)."""

from __future__ import annotations

import numpy as np


def entropy_ranges(batches, num_bins: int = 128, num_quantized_bins: int = 128):
    hists: dict[str, tuple] = {}
    for values in batches:
        for name, v in values.items():
            data = v.reshape(-1)
            lo = np.float32(np.nanmin(data)) if data.size else np.float32(0)
            hi = np.float32(np.nanmax(data)) if data.size else np.float32(0)
            threshold = np.float32(max(abs(lo), abs(hi)))
            if name not in hists:
                hist, edges = np.histogram(data, num_bins, range=(-threshold, threshold))
                hists[name] = (hist, edges, lo, hi, threshold)
            else:
                hists[name] = _merge(hists[name], data, lo, hi, threshold)
    return {name: _threshold(h, num_quantized_bins) for name, h in hists.items()}


def _merge(old, data, lo, hi, threshold):
    old_hist, old_edges, old_lo, old_hi, old_t = old
    if threshold <= old_t:
        hist, _ = np.histogram(data, len(old_hist), range=(-old_t, old_t))
        return hist + old_hist, old_edges, min(old_lo, lo), max(old_hi, hi), old_t
    if old_t == 0:
        hist, edges = np.histogram(data, len(old_hist), range=(-threshold, threshold))
        hist += old_hist
    else:
        stride = 2 * old_t / len(old_hist)
        half = int((threshold - old_t) // stride + 1)
        n = len(old_hist) + 2 * half
        threshold = half * stride + old_t
        hist, edges = np.histogram(data, n, range=(-threshold, threshold))
        hist[half:n - half] += old_hist
    return hist, edges, min(old_lo, lo), max(old_hi, hi), threshold


def _smooth(p: np.ndarray, eps: float = 0.0001):
    zeros = (p == 0).astype(np.float32)
    nonzeros = (p != 0).astype(np.float32)
    n_zeros = zeros.sum()
    n_nonzeros = p.size - n_zeros
    if not n_nonzeros:
        return None
    eps1 = eps * float(n_zeros) / float(n_nonzeros)
    return p.astype(np.float32) + eps * zeros + (-eps1) * nonzeros


def _kl(p: np.ndarray, q: np.ndarray) -> float:
    p = p.astype(np.float64) / p.sum()
    q = q.astype(np.float64) / q.sum()
    return float(np.sum(np.where(p > 0, p * np.log(p / q), 0.0)))


def _threshold(histogram, num_quantized_bins: int):
    hist, edges, lo, hi, _ = histogram
    num_bins = hist.size
    zero_bin = num_bins // 2
    half_q = num_quantized_bins // 2
    best, best_div = None, np.inf
    for i in range(half_q, zero_bin + 1):
        start, end = zero_bin - i, min(zero_bin + i + 1, num_bins)
        sliced = hist[start:end].copy()
        p = sliced.copy()
        p[0] += hist[:start].sum()
        p[-1] += hist[end:].sum()
        nonzeros = (p != 0).astype(np.int64)
        merged = sliced.size // num_quantized_bins
        quantized = np.zeros(num_quantized_bins, dtype=np.int64)
        for k in range(num_quantized_bins):
            quantized[k] = sliced[k * merged:(k + 1) * merged].sum()
        quantized[-1] += sliced[num_quantized_bins * merged:].sum()
        q = np.zeros(p.size, dtype=np.int64)  # integer on purpose: onnxruntime truncates here too
        for k in range(num_quantized_bins):
            norm = nonzeros[k * merged:(k + 1) * merged].sum()
            if norm:
                q[k * merged:(k + 1) * merged] = quantized[k] / norm
        ps, qs = _smooth(p), _smooth(q)
        div = np.inf if ps is None or qs is None else _kl(ps, qs)
        if best is None or div < best_div:
            best, best_div = (edges[start], edges[end]), div
    rlo, rhi = best
    return np.float32(max(rlo, lo)), np.float32(min(rhi, hi))
