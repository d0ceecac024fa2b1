"""Exact 8-bit integer products on float32 BLAS, planned once per constant weight (helpers, no kernels).

The method: a float32 dot product of integers is exact, in any summation order, while the sum of the
magnitudes of its terms stays below 2**24 (every partial sum is then an integer float32 holds). For a
constant weight W (zero point already subtracted) and an activation whose shifted values are at most
``a_max`` in magnitude (255 for any 8-bit input, less when its zero point is known), that sum is at most
``a_max * sum_k |W[k, n]|`` for output column n. ``k_blocks`` splits K into the fewest contiguous blocks
whose bound stays below 2**24 (usually one or two; the loose bound K * 255 * 255 would give K / 258): each
block is one float32 GEMM, exact, and blocks are added as int32, which is how an int32 accumulator wraps.
The result then goes to float32 once, like onnxruntime's int32 accumulator does before rescaling.
Requantization (``requantize``) runs in float32 as onnxruntime's MLAS does: multiply, clamp, round half
to even, add the zero point.
"""

from __future__ import annotations

import numpy as np

EXACT = 2 ** 24
RANGES = {np.dtype(np.uint8): (0, 255), np.dtype(np.int8): (-128, 127)}


def a_bound(dtype: np.dtype, zp: int | None) -> int:
    """The largest |a - zp| for 8-bit ``dtype`` (255 when the zero point is not known)."""
    if zp is None or dtype not in RANGES:
        return 255
    lo, hi = RANGES[dtype]
    return max(abs(lo - zp), abs(hi - zp))


def k_blocks(w_abs_rows: np.ndarray, a_max: int) -> list[tuple[int, int]] | None:
    """Contiguous (start, stop) blocks of K for a shifted weight given as |W| with K on axis 0 (any
    columns after it): each block's ``a_max * max_n sum_k |W|`` is below 2**24. None when a single
    row already exceeds it (no block split can make the product exact in float32)."""
    k = w_abs_rows.shape[0]
    per_row = w_abs_rows.reshape(k, -1).astype(np.float64) * a_max
    if k == 0:
        return [(0, 0)]
    if per_row.sum(axis=0).max(initial=0.0) < EXACT:
        return [(0, k)]
    blocks, start, run = [], 0, np.zeros(per_row.shape[1])
    for i in range(k):
        if per_row[i].max(initial=0.0) >= EXACT:
            return None
        nxt = run + per_row[i]
        if nxt.max(initial=0.0) >= EXACT:
            blocks.append((start, i))
            start, nxt = i, per_row[i].copy()
        run = nxt
    blocks.append((start, k))
    return blocks


def shifted(x: np.ndarray, zp) -> np.ndarray:
    """x - zp as float32 in one pass (exact: small integers)."""
    if zp is None or not np.any(zp):
        return x.astype(np.float32)
    return np.subtract(x, np.asarray(zp).astype(np.float32), dtype=np.float32)


def add_blocks(parts) -> np.ndarray:
    """The exact integer sum of exact float32 partial products, as float32 rounded once (int32 wrap)."""
    parts = list(parts)
    if len(parts) == 1:
        return parts[0]
    total = parts[0].astype(np.int64)
    for p in parts[1:]:
        total += p.astype(np.int64)  # exact: float32 integers below 2**24, or an int32 bias
    return total.astype(np.int32).astype(np.float32)


_CHUNK = 1 << 15  # float32 elements per cache-sized piece of the requantization


def requantize(y: np.ndarray, mult, zp: int, out: np.dtype, bias=None, rows: bool = False) -> np.ndarray:
    """round_half_even(clamp((y + bias) * mult, lo - zp, hi - zp)) + zp in ``out``, as MLAS requantizes; y
    (float32, C-contiguous) is overwritten. ``rows``: y is (N, M, ...) with ``mult`` and ``bias`` one value per
    M (a convolution's output channels); else they are per tensor or per last-axis column. The passes run
    piece by piece over about 128 KiB at a time, so that the four or five of them read the accumulator from
    memory once (over the whole tensor each would stream it again)."""
    lo, hi = RANGES[out]
    if rows:
        n, m = y.shape[0], y.shape[1]
        y2 = y.reshape(n * m, -1)
        m2 = np.tile(np.broadcast_to(np.asarray(mult, np.float32).reshape(-1), (m,)), n).reshape(-1, 1)
        b2 = None if bias is None else np.tile(np.asarray(bias, np.float32).reshape(-1), n).reshape(-1, 1)
    else:
        y2 = y.reshape(-1, y.shape[-1]) if y.ndim else y.reshape(1, 1)
        m2, b2 = mult, bias
    res = np.empty(y2.shape, out)
    step = max(1, _CHUNK // max(1, y2.shape[1]))
    zf = np.float32(zp)
    for i in range(0, y2.shape[0], step):
        blk = y2[i:i + step]
        if b2 is not None:
            blk += b2[i:i + step] if rows else b2
        np.multiply(blk, m2[i:i + step] if rows else m2, out=blk)
        np.clip(blk, lo - zp, hi - zp, out=blk)
        np.rint(blk, out=blk)
        np.add(blk, zf, out=res[i:i + step], casting="unsafe")
    return res.reshape(y.shape)


def dynamic_shifted(x: np.ndarray) -> tuple[np.ndarray, np.float32, np.uint8]:
    """DynamicQuantizeLinear's codes minus their zero point, straight in float32, with its scale and zero
    point: the same float32 arithmetic as quantize.py's kernel (range widened to 0, scale (hi - lo) / 255,
    x / scale rounded half to even), the uint8 codes never materialized (clip to [-zp, 255 - zp] instead of
    adding zp, saturating and subtracting it again; fmin/fmax send NaN where the saturation sends it)."""
    f32 = np.float32
    hi = f32(max(0.0, float(x.max()))) if x.size else f32(0)
    lo = f32(min(0.0, float(x.min()))) if x.size else f32(0)
    scale = f32(1.0 if hi == lo else hi - lo) / f32(255)
    zp = np.rint(np.clip(f32(0) - lo / scale, 0, 255))
    y = np.empty(x.shape, f32)
    flat = x.ndim and x.size and x.flags.c_contiguous
    x2, y2 = (x.reshape(-1, x.shape[-1]), y.reshape(-1, x.shape[-1])) if flat else (x.reshape(1, -1), y.reshape(1, -1))
    top, bottom = f32(255) - f32(zp), -f32(zp)
    step = max(1, _CHUNK // max(1, x2.shape[1]))
    for i in range(0, x2.shape[0], step):  # cache-sized pieces: the four passes read x from memory once
        blk = y2[i:i + step]
        np.divide(x2[i:i + step], scale, out=blk, dtype=f32)
        np.rint(blk, out=blk)
        np.fmin(blk, top, out=blk)
        np.fmax(blk, bottom, out=blk)
    return y, scale, np.uint8(zp)
