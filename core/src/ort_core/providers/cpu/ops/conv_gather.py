"""Small convolutions as one gathered GEMM, planned once per input shape (used by conv.py's Conv).

Where the column matrix is small (audio frames, late CNN stages, strided "STFT" convolutions) the cost of
a convolution is its Python set-up, not its arithmetic. The plan, made once per input shape, holds the
flat positions every kernel tap reads for every output position in the zero-padded input; a call then
pads once, gathers all columns with one fancy index and multiplies once per group: a handful of numpy
calls, whatever the kernel size, stride or dilation.
"""

from __future__ import annotations

import math

import numpy as np

# Column-matrix elements (N * C * taps * outputs) up to which this path is taken: a fancy-index gather costs
# more per element than the wide layout's contiguous copies, so it pays only where the set-up dominates,
# which is for tiny column matrices, or where the wide layout would loop over many taps and phases (long
# strided kernels: a 256-tap, stride-128 audio convolution takes 0.8 ms this way against 2.4).
GATHER_BUDGET = 12 << 10
LOOPS_BUDGET = 64 << 10
MANY_LOOPS = 64  # taps + stride phases


def gather_plan(in_sp, kernel, strides, dils, begin, end, out_sp) -> dict | None:
    """Index plan for one input shape, or None when the padding is negative (a cropped input)."""
    if min(begin) < 0 or min(end) < 0:
        return None
    nsp = len(kernel)
    padded = tuple(int(n) + b + e for n, b, e in zip(in_sp, begin, end))
    taps = np.indices(kernel).reshape(nsp, -1)  # (nsp, T)
    outs = np.indices(out_sp).reshape(nsp, -1)  # (nsp, O)
    step, dil = np.array(strides).reshape(nsp, 1, 1), np.array(dils).reshape(nsp, 1, 1)
    positions = outs[:, None, :] * step + taps[:, :, None] * dil  # (nsp, T, O) in padded coordinates
    index = np.ravel_multi_index(tuple(positions), padded).astype(np.intp)
    inner = tuple(slice(b, b + int(n)) for b, n in zip(begin, in_sp))
    return dict(index=index, padded=padded, inner=inner, pads=any(begin) or any(end), taps=index.shape[0],
                outputs=index.shape[1])


def fits(x_shape, kernel, strides, out_sp) -> bool:
    cols = x_shape[0] * x_shape[1] * math.prod(kernel) * math.prod(out_sp)
    return cols <= GATHER_BUDGET or cols <= LOOPS_BUDGET and math.prod(kernel) + math.prod(strides) >= MANY_LOOPS


def conv_gather(x: np.ndarray, w: np.ndarray, g: dict, group: int) -> np.ndarray:
    """(N, M, outputs) convolution of x with w through the plan ``g``."""
    N, C = x.shape[:2]
    M = w.shape[0]
    if g["pads"]:
        xp = np.zeros((N, C, *g["padded"]), x.dtype)
        xp[(slice(None), slice(None), *g["inner"])] = x
    else:
        xp = x
    cols = xp.reshape(N, C, -1)[:, :, g["index"]]  # (N, C, taps, outputs)
    k = (C // group) * g["taps"]
    if group == 1:
        return np.matmul(w.reshape(M, k), cols.reshape(N, k, g["outputs"]))
    y = np.matmul(w.reshape(group, M // group, k), cols.reshape(N, group, k, g["outputs"]))
    return y.reshape(N, M, g["outputs"])
