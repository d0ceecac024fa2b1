"""CPU kernels for convolutions: Conv (1-D/2-D/3-D, grouped, depthwise) and ConvTranspose.

Also holds the window helpers (auto_pad/pads/output sizes, the "wide" tap layout) pool.py reuses; small
convolutions take conv_gather.py's one-gather path.
Quantized convolutions (ConvInteger, QLinearConv) and DeformConv are not here.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ....errors import KernelError
from ....limits import check_tensor_size
from ..registry import register
from .contrib_matmul_nbits import constant_inputs
from .conv_gather import conv_gather, fits, gather_plan

_AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")
_CACHE_MAX = 64  # per-kernel cache entries (keyed by input shapes) before it is reset
_COLS_BUDGET = 16 << 20  # bytes of im2col columns built at once


# ---------------------------------------------------------------------------------------------
# shared helpers (also used by pool.py)
# ---------------------------------------------------------------------------------------------

def read_auto_pad(node) -> str:
    auto_pad = node.attr("auto_pad", "NOTSET")
    if isinstance(auto_pad, bytes):
        auto_pad = auto_pad.decode()
    if auto_pad not in _AUTO_PADS:
        raise KernelError(f"{node.label}: unsupported auto_pad '{auto_pad}' (expected one of {_AUTO_PADS})")
    return auto_pad


def ints_attr(node, name: str, nsp: int | None, default: int, length_factor: int = 1) -> list[int] | None:
    """An int-list attribute checked against the spatial rank, or None when absent and nsp unknown."""
    value = node.attr(name)
    if value is None:
        return None if nsp is None else [default] * (nsp * length_factor)
    value = [int(v) for v in value]
    if nsp is not None and len(value) != nsp * length_factor:
        raise KernelError(f"{node.label}: attribute '{name}' has {len(value)} values, "
                          f"expected {nsp * length_factor} for {nsp} spatial dimensions")
    return value


def window_geometry(label: str, in_sp, kernel, strides, dilations, pads, auto_pad: str,
                    ceil_mode: bool = False):
    """(pad_begin, pad_end, fill_end, out_shape) per spatial dim for a sliding window.

    ``pad_begin``/``pad_end`` are the logical pads (explicit for NOTSET, computed for SAME_*);
    ``fill_end`` is the tail padding actually needed so that every window lies inside the
    padded input (more than pad_end with ceil_mode, possibly less when windows stop early).
    """
    nsp = len(in_sp)
    begin, end, fill, out = [], [], [], []
    for i in range(nsp):
        n, k, s, d = in_sp[i], kernel[i], strides[i], dilations[i]
        dk = (k - 1) * d + 1
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            o = -(-n // s)
            total = max(0, (o - 1) * s + dk - n)
            pb = total // 2 if auto_pad == "SAME_UPPER" else total - total // 2
            pe = total - pb
        elif auto_pad == "VALID":
            pb = pe = 0
            o = (n - dk) // s + 1
        else:
            pb, pe = pads[i], pads[i + nsp]
            span = n + pb + pe - dk
            if ceil_mode:
                o = -(-span // s) + 1
                if (o - 1) * s >= n + pb:  # the last window must start inside input or left pad
                    o -= 1
            else:
                o = span // s + 1
        if o <= 0:
            raise KernelError(f"{label}: window of size {dk} (kernel {k}, dilation {d}) does not fit "
                              f"spatial dim {i} of size {n} with pads ({pb}, {pe}) -> output size {o}")
        begin.append(pb)
        end.append(pe)
        fill.append(max(0, (o - 1) * s + dk - n - pb))
        out.append(o)
    return begin, end, fill, out


def check_window_sizes(label: str, x_shape, channels_out: int, begin, end, out_sp, dtype) -> None:
    """Refuse a padded input or an output past the size limit (huge pads or strides in attributes)."""
    n, c = x_shape[:2]
    padded = [d + b + e for d, b, e in zip(x_shape[2:], begin, end)]
    check_tensor_size(label, (n, c, *padded), dtype, "padded input")
    check_tensor_size(label, (n, channels_out, *out_sp), dtype)


def pad_input(x: np.ndarray, begin, end, value=0) -> np.ndarray:
    """x padded on its spatial axes (2..) with a constant; x itself when all pads are zero."""
    if not any(begin) and not any(end):
        return x
    shape = x.shape[:2] + tuple(n + b + e for n, b, e in zip(x.shape[2:], begin, end))
    xp = np.full(shape, value, dtype=x.dtype) if value != 0 else np.zeros(shape, dtype=x.dtype)
    xp[(slice(None), slice(None)) + tuple(slice(b, b + n) for b, n in zip(begin, x.shape[2:]))] = x
    return xp


def tap_slices(kernel, strides, dilations, out_sp):
    """For each kernel tap: the tuple of (N, C, spatial...) slices of the padded input that the
    tap reads for all out_sp output positions."""
    per_dim = [
        [slice(t * d, t * d + s * (o - 1) + 1, s) for t in range(k)]
        for k, s, d, o in zip(kernel, strides, dilations, out_sp)
    ]
    return [(slice(None), slice(None)) + combo for combo in itertools.product(*per_dim)]


def bounded_cache(cache: dict, key, make):
    """cache[key], computing it with make() once; thread-safe enough (worst case computed twice)."""
    value = cache.get(key)
    if value is None:
        if len(cache) >= _CACHE_MAX:
            cache.clear()
        value = cache[key] = make()
    return value


def _check_lengths(label, named_values):
    """Each (name, values, expected length): right length, strides/dilations >= 1, pads >= 0."""
    for name, v, n in named_values:
        if len(v) != n:
            raise KernelError(f"{label}: attribute '{name}' has {len(v)} values, expected {n}")
        if min(v, default=0) < (0 if name in ("pads", "output_padding") else 1):
            raise KernelError(f"{label}: attribute '{name}' has unsupported values {v}")


def _compute_dtype(dtype: np.dtype) -> np.dtype:
    """float16 GEMMs run in float32 (numpy has no fp16 BLAS); other dtypes run as they are."""
    return np.dtype(np.float32) if dtype == np.float16 else dtype


# The "wide" layout: the zero-padded input is split into stride phases (one phase when all
# strides are 1), each flattened over its spatial dims. Output position o then reads, for tap t,
# flat element off_t + sum(o_i * Qs_i) of phase ph_t, so each tap is one contiguous slice of
# length n_w for all outputs at once. Outputs come out "wide" (rows of Q_i instead of out_i
# elements along the inner dims) and are cropped once at the end.

def phase_plan(in_sp, kernel, strides, dils, begin, out_sp):
    """Index plan of the wide layout for one input shape: phase grid Q, per-tap (phase, offset),
    wide length n_w, buffer length and the slice copies that fill the buffer from x."""
    nsp = len(in_sp)
    Q = [o + ((k - 1) * d) // s for o, k, s, d in zip(out_sp, kernel, strides, dils)]
    Qs = [math.prod(Q[i + 1:]) for i in range(nsp)]
    tap_phase, tap_off = [], []
    for combo in itertools.product(*[range(k) for k in kernel]):
        a = [(t * d) % s for t, d, s in zip(combo, dils, strides)]
        c = [(t * d) // s for t, d, s in zip(combo, dils, strides)]
        tap_phase.append(int(np.ravel_multi_index(a, strides)))
        tap_off.append(sum(ci * qs for ci, qs in zip(c, Qs)))
    n_w = out_sp[0] * Qs[0]
    flat = max(math.prod(Q), max(tap_off) + n_w)
    copies = []  # (phase index, destination slices in Q space, source slices in x)
    for a in itertools.product(*[range(s) for s in strides]):
        dst, src = [], []
        for i in range(nsp):
            s, pb, n = strides[i], begin[i], in_sp[i]
            q_lo = max(0, -(-(pb - a[i]) // s))
            q_hi = min(Q[i], -(-(n + pb - a[i]) // s))
            if q_hi <= q_lo:
                break
            x0 = a[i] + s * q_lo - pb
            dst.append(slice(q_lo, q_hi))
            src.append(slice(x0, x0 + s * (q_hi - q_lo - 1) + 1, s))
        else:
            copies.append((int(np.ravel_multi_index(a, strides)), tuple(dst), tuple(src)))
    return dict(Q=Q, n_w=n_w, flat=flat, nph=math.prod(strides), out_sp=out_sp,
                tap_phase=tap_phase, tap_off=tap_off, copies=copies)


def phase_buffer(x, ph, fill=0):
    """(N, C, phases, flat) padded (with ``fill``), phase-split copy of x (see the layout note)."""
    N, C = x.shape[:2]
    Q = ph["Q"]
    nq = math.prod(Q)
    shape = (N, C, ph["nph"], ph["flat"])
    buf = np.zeros(shape, dtype=x.dtype) if fill == 0 else np.full(shape, fill, dtype=x.dtype)
    everything = (slice(None), slice(None))
    for p, dst, src in ph["copies"]:
        view = buf[:, :, p, :nq].reshape(N, C, *Q)  # splitting the last axis: always a view
        view[everything + dst] = x[everything + src]
    return buf


def wide_taps(buf, ph):
    """For each kernel tap, the (N, C, n_w) contiguous-row slice of the phase buffer it reads."""
    n_w = ph["n_w"]
    return [buf[:, :, p, off:off + n_w] for p, off in zip(ph["tap_phase"], ph["tap_off"])]


def crop_view(y_wide, ph):
    """(N, C, n_w) wide result -> (N, C, *out) view of the valid positions."""
    N, C = y_wide.shape[:2]
    out_sp, Q = ph["out_sp"], ph["Q"]
    return y_wide.reshape(N, C, out_sp[0], *Q[1:])[(slice(None),) * 3 + tuple(slice(o) for o in out_sp[1:])]


# ---------------------------------------------------------------------------------------------
# Conv
# ---------------------------------------------------------------------------------------------

@register("Conv", since=1, until=None)
def conv_factory(node, opset, graph=None):
    auto_pad = read_auto_pad(node)
    group = int(node.attr("group", 1))
    if group < 1:
        raise KernelError(f"{node.label}: group must be >= 1, got {group}")
    kshape_attr = node.attr("kernel_shape")
    nsp_attr = len(kshape_attr) if kshape_attr is not None else None
    strides_attr = ints_attr(node, "strides", nsp_attr, 1)
    dil_attr = ints_attr(node, "dilations", nsp_attr, 1)
    pads_attr = ints_attr(node, "pads", nsp_attr, 0, 2)
    label = node.label
    cache: dict = {}
    # W (and B) constant initializers: small convolutions run through a per-input-shape closure holding the
    # weight matrix and bias made once (fixed_conv); the kernel checks it got those very arrays
    fixed = _fixed_weights(node, graph, group)
    fast: dict = {}

    def plan(x_shape, w_shape, dtype=np.float32):
        nsp = len(x_shape) - 2
        if nsp < 1 or len(w_shape) != nsp + 2:
            raise KernelError(f"{label}: input rank {len(x_shape)} and weight rank {len(w_shape)} "
                              f"do not describe a convolution")
        kernel = list(w_shape[2:])
        if kshape_attr is not None and [int(k) for k in kshape_attr] != kernel:
            raise KernelError(f"{label}: kernel_shape {list(kshape_attr)} does not match weight shape "
                              f"{tuple(w_shape)}")
        C, M = x_shape[1], w_shape[0]
        if C != w_shape[1] * group or M % group:
            raise KernelError(f"{label}: input channels {C} / output channels {M} do not match weight "
                              f"shape {tuple(w_shape)} with group={group}")
        strides = strides_attr or [1] * nsp
        dils = dil_attr or [1] * nsp
        pads = pads_attr or [0] * (2 * nsp)
        _check_lengths(label, (("strides", strides, nsp), ("dilations", dils, nsp), ("pads", pads, 2 * nsp)))
        begin, _, fill, out_sp = window_geometry(label, x_shape[2:], kernel, strides, dils, pads, auto_pad)
        check_window_sizes(label, x_shape, M, begin, fill, out_sp, dtype)
        p = dict(nsp=nsp, kernel=kernel, strides=strides, dils=dils, begin=begin, end=fill, out_sp=out_sp)
        if all(k == 1 for k in kernel) and not any(begin) and not any(fill):
            p["mode"] = "pointwise"
            return p
        if fits(x_shape, kernel, strides, out_sp) and (g := gather_plan(x_shape[2:], kernel, strides, dils, begin, fill,
                                                                out_sp)) is not None:
            p["mode"], p["gather"] = "gather", g
            return p
        p["phases"] = ph = phase_plan(x_shape[2:], kernel, strides, dils, begin, out_sp)
        if w_shape[1] == 1 and M == group:
            p["mode"] = "depthwise"
        elif ph["n_w"] <= 1.15 * math.prod(out_sp):
            p["mode"] = "stacked" if _stacked_pays(x_shape, w_shape, group, ph) else "im2col_wide"
        else:
            p["mode"] = "im2col"
        return p

    def kernel(x, w, b=None):
        if fixed is not None and w is fixed[0] and b is fixed[1] and x.dtype == w.dtype:
            run = fast.get(x.shape)
            if run is None:
                run = bounded_cache(fast, x.shape, lambda: fixed_conv(plan(x.shape, w.shape, x.dtype), x.shape, w, b)
                                    or False)
            if run is not False:
                return (run(x),)
        p = cache.get((x.shape, w.shape))
        if p is None:
            p = bounded_cache(cache, (x.shape, w.shape), lambda: plan(x.shape, w.shape, x.dtype))
        out_dtype = x.dtype
        if out_dtype == np.float16:  # _compute_dtype: float16 GEMMs run in float32
            x, w = x.astype(np.float32), w.astype(np.float32)
        N, M = x.shape[0], w.shape[0]
        mode = p["mode"]
        if mode == "pointwise":
            y = _conv_pointwise(x, w, p["strides"], group).reshape((N, M, *p["out_sp"]))
        elif mode == "gather":
            y = conv_gather(x, w, p["gather"], group).reshape((N, M, *p["out_sp"]))
        elif mode == "im2col":
            y = _conv_im2col(x, w, p, group).reshape((N, M, *p["out_sp"]))
        else:
            buf = phase_buffer(x, p["phases"])
            if mode == "depthwise":
                y_wide = _conv_depthwise(buf, w, p["phases"])
            elif mode == "stacked":
                y_wide = _conv_stacked(buf, w, p["phases"])
            else:
                y_wide = _conv_im2col_wide(buf, w, p["phases"], group)
            return (_crop_wide(y_wide, p["phases"], b, out_dtype),)
        if b is not None:
            y += b.astype(y.dtype, copy=False).reshape((M,) + (1,) * p["nsp"])
        if y.dtype != out_dtype:
            y = y.astype(out_dtype)
        return (y,)

    return kernel


def _fixed_weights(node, graph, group: int):
    """(W, B or None) when both are constant initializers of ``graph`` in float32/float64 and group is 1,
    else None."""
    if group != 1 or graph is None:
        return None
    consts = constant_inputs(node, graph, (1, 2))
    if consts is None:
        return None
    w, b = consts
    if not isinstance(w, np.ndarray) or w.dtype not in (np.float32, np.float64) or w.ndim < 3:
        return None
    if b is not None and (not isinstance(b, np.ndarray) or b.dtype != w.dtype or b.shape != (w.shape[0],)):
        return None
    return w, b


def fixed_conv(p: dict, x_shape, w, b):
    """``x -> Conv(x, w, b)`` for one input shape, the weight matrix made once, or None outside the
    pointwise and gather plans. A gather is one fancy index and one product: the input, flattened per
    image, gets two columns appended, a 0 that padded positions read and a 1 that multiplies the bias,
    which rides as one more column of the weight matrix."""
    mode = p["mode"]
    N, C = x_shape[:2]
    M = w.shape[0]
    L = math.prod(x_shape[2:])
    out_shape = (N, M, *p["out_sp"])
    if mode == "pointwise":
        if any(s != 1 for s in p["strides"]):
            return None
        wm = np.ascontiguousarray(w.reshape(M, C))
        wm.flags.writeable = False
        bias = None if b is None else b.reshape(M, 1)

        def pointwise(x):
            y = np.matmul(wm, x.reshape(N, C, L))
            if bias is not None:
                y += bias
            return y.reshape(out_shape)

        return pointwise
    if mode != "gather":
        return None
    g = p["gather"]
    T, O = g["taps"], g["outputs"]
    CL = C * L
    # padded spatial position -> the input's spatial position, or CL - c * L: channel c's read of the 0 column
    where = np.full(g["padded"], -1, dtype=np.intp)
    where[g["inner"]] = np.arange(L, dtype=np.intp).reshape(x_shape[2:])
    spatial = where.reshape(-1)[g["index"]]  # (T, O)
    index = np.arange(C, dtype=np.intp)[:, None, None] * L + spatial  # (C, T, O) flat positions
    index[:, spatial < 0] = CL
    index = index.reshape(C * T, O)
    wm = w.reshape(M, C * T)
    if b is not None:
        index = np.concatenate((index, np.full((1, O), CL + 1, dtype=np.intp)))
        wm = np.concatenate((wm, b.reshape(M, 1)), axis=1)
    wm = np.ascontiguousarray(wm)
    wm.flags.writeable = False
    tail = np.zeros((N, 2), dtype=w.dtype)
    tail[:, 1] = 1

    def gather(x):
        cols = np.concatenate((x.reshape(N, CL), tail), axis=1)[:, index]  # (N, C * T (+ 1), O)
        return np.matmul(wm, cols).reshape(out_shape)

    return gather


def _crop_wide(y_wide, ph, b, out_dtype):
    """(N, M, n_w) wide result -> (N, M, *out) contiguous output, adding the bias on the way."""
    N, M = y_wide.shape[:2]
    out_sp = ph["out_sp"]
    nsp = len(out_sp)
    wide = crop_view(y_wide, ph)
    y = np.empty((N, M, *out_sp), dtype=out_dtype)
    if b is not None:
        np.add(wide, b.astype(y_wide.dtype, copy=False).reshape((M,) + (1,) * nsp), out=y,
               casting="unsafe")
    else:
        np.copyto(y, wide, casting="unsafe")
    return y


def _conv_im2col_wide(buf, w, ph, group):
    """im2col in the wide layout (one contiguous copy per tap) followed by one GEMM per group.

    Large inputs are processed in bands of output rows so the column matrix stays within
    _COLS_BUDGET bytes (a 640x640 image would otherwise need hundreds of MB of columns)."""
    N, C = buf.shape[:2]
    M = w.shape[0]
    n_w = ph["n_w"]
    taps = wide_taps(buf, ph)
    K = (C // group) * len(taps)
    rows = ph["out_sp"][0]
    row_len = n_w // rows
    band = max(1, _COLS_BUDGET // (N * C * len(taps) * row_len * buf.itemsize))
    wg = w.reshape(group, M // group, K)
    y = None if band >= rows else np.empty((N, M, n_w), dtype=buf.dtype)
    for r0 in range(0, rows, band):
        lo, hi = r0 * row_len, min(rows, r0 + band) * row_len
        cols = np.empty((N, C, len(taps), hi - lo), dtype=buf.dtype)
        for t, src in enumerate(taps):
            cols[:, :, t] = src[..., lo:hi]
        if group == 1 and N == 1:
            part = np.matmul(wg[0], cols.reshape(K, hi - lo)).reshape(1, M, hi - lo)
        elif group == 1:
            part = np.matmul(wg[0], cols.reshape(N, K, hi - lo))
        else:
            part = np.matmul(wg, cols.reshape(N, group, K, hi - lo)).reshape(N, M, hi - lo)
        if y is None:
            return part
        y[..., lo:hi] = part
    return y


_STACKED_BUDGET = 8 << 20  # bytes of the tap-stacked GEMM result


def _stacked_pays(x_shape, w_shape, group, ph) -> bool:
    """Whether one GEMM of all taps' weights over the whole buffer beats im2col: a single input
    phase (stride 1), batch 1, one group, few output channels against the input's (the shifted
    sums then cost less than im2col's copy of the input per tap), and a result that fits the budget."""
    M, C = w_shape[0], x_shape[1]
    taps = len(ph["tap_off"])
    return (ph["nph"] == 1 and x_shape[0] == 1 and group == 1 and taps > 1 and 4 * M <= C
            and taps * M * ph["flat"] * 4 <= _STACKED_BUDGET)


def _conv_stacked(buf, w, ph):
    """Convolution as one GEMM (taps*M, C) @ (C, flat) over the padded buffer followed by the sum
    of each tap's result shifted by its offset: no im2col copy of the input (see _stacked_pays)."""
    C = buf.shape[1]
    M = w.shape[0]
    n_w = ph["n_w"]
    taps = len(ph["tap_off"])
    wt = np.ascontiguousarray(np.moveaxis(w.reshape(M, C, taps), 2, 0)).reshape(taps * M, C)
    z = np.matmul(wt, buf.reshape(C, ph["flat"])).reshape(taps, M, ph["flat"])
    offs = ph["tap_off"]
    y = np.add(z[0, :, offs[0]:offs[0] + n_w], z[1, :, offs[1]:offs[1] + n_w])
    for t in range(2, taps):
        y += z[t, :, offs[t]:offs[t] + n_w]
    return y.reshape(1, M, n_w)


def _conv_depthwise(buf, w, ph):
    """Depthwise convolution (one input and one output channel per group) in the wide layout:
    a sum over the kernel taps of contiguous input slices times per-channel weights."""
    N, C = buf.shape[:2]
    wt = w.reshape(C, -1)
    y = np.empty((N, C, ph["n_w"]), dtype=buf.dtype)
    tmp = np.empty_like(y)
    for t, src in enumerate(wide_taps(buf, ph)):
        if t == 0:
            np.multiply(src, wt[:, 0:1], out=y)
        else:
            np.multiply(src, wt[:, t:t + 1], out=tmp)
            y += tmp
    return y


def _conv_pointwise(x, w, strides, group):
    """1x1 convolution: a plain (batched) matmul over the flattened spatial positions."""
    if any(s != 1 for s in strides):
        x = x[(slice(None), slice(None)) + tuple(slice(None, None, s) for s in strides)]
    N, C = x.shape[:2]
    M = w.shape[0]
    L = math.prod(x.shape[2:])
    if group == 1:
        w2 = w.reshape(M, C)
        if N == 1:
            return np.matmul(w2, x.reshape(C, L))
        return np.matmul(w2, x.reshape(N, C, L))
    return np.matmul(w.reshape(group, M // group, C // group), x.reshape(N, group, C // group, L))


def _conv_im2col(x, w, p, group):
    """Convolution by a strided-view im2col of the padded input (one copy) and one GEMM per
    group; used where the wide layout would waste too many GEMM columns (small outputs)."""
    xp = pad_input(x, p["begin"], p["end"])
    N, C = x.shape[:2]
    M = w.shape[0]
    kernel, out_sp = p["kernel"], p["out_sp"]
    sp_strides = xp.strides[2:]
    view = as_strided(
        xp,
        shape=(N, C, *kernel, *out_sp),
        strides=(xp.strides[0], xp.strides[1],
                 *(st * d for st, d in zip(sp_strides, p["dils"])),
                 *(st * s for st, s in zip(sp_strides, p["strides"]))),
        writeable=False,
    )
    K = (C // group) * math.prod(kernel)
    L = math.prod(out_sp)
    if group == 1:
        if N == 1:
            return np.matmul(w.reshape(M, K), view.reshape(K, L))
        return np.matmul(w.reshape(M, K), view.reshape(N, K, L))
    return np.matmul(w.reshape(group, M // group, K), view.reshape(N, group, K, L))


# ---------------------------------------------------------------------------------------------
# ConvTranspose
# ---------------------------------------------------------------------------------------------

@register("ConvTranspose", since=1, until=None)
def conv_transpose_factory(node, opset):
    auto_pad = read_auto_pad(node)
    group = int(node.attr("group", 1))
    if group < 1:
        raise KernelError(f"{node.label}: group must be >= 1, got {group}")
    kshape_attr = node.attr("kernel_shape")
    nsp_attr = len(kshape_attr) if kshape_attr is not None else None
    strides_attr = ints_attr(node, "strides", nsp_attr, 1)
    dil_attr = ints_attr(node, "dilations", nsp_attr, 1)
    pads_attr = ints_attr(node, "pads", nsp_attr, 0, 2)
    outpad_attr = ints_attr(node, "output_padding", nsp_attr, 0)
    outshape_attr = node.attr("output_shape")
    label = node.label
    cache: dict = {}

    def plan(x_shape, w_shape, dtype=np.float32):
        nsp = len(x_shape) - 2
        if nsp < 1 or len(w_shape) != nsp + 2:
            raise KernelError(f"{label}: input rank {len(x_shape)} and weight rank {len(w_shape)} "
                              f"do not describe a transposed convolution")
        kernel = list(w_shape[2:])
        if kshape_attr is not None and [int(k) for k in kshape_attr] != kernel:
            raise KernelError(f"{label}: kernel_shape {list(kshape_attr)} does not match weight shape "
                              f"{tuple(w_shape)}")
        C = x_shape[1]
        if w_shape[0] != C or C % group:
            raise KernelError(f"{label}: input channels {C} do not match weight shape {tuple(w_shape)} "
                              f"with group={group}")
        strides = strides_attr or [1] * nsp
        dils = dil_attr or [1] * nsp
        outpad = outpad_attr or [0] * nsp
        _check_lengths(label, (("strides", strides, nsp), ("dilations", dils, nsp),
                               ("output_padding", outpad, nsp)))
        in_sp = x_shape[2:]
        # size of the full (uncropped) scatter target per spatial dim
        full = [s * (n - 1) + (k - 1) * d + 1 for n, k, s, d in zip(in_sp, kernel, strides, dils)]
        if outshape_attr is not None:
            out_sp = [int(v) for v in outshape_attr][-nsp:]
            if len(out_sp) != nsp:
                raise KernelError(f"{label}: output_shape {list(outshape_attr)} does not have "
                                  f"{nsp} spatial values")
        elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            out_sp = [n * s for n, s in zip(in_sp, strides)]
        else:
            out_sp = None
        # pads come from output_shape / SAME_* unless given explicitly (then, as in the
        # reference evaluator, explicit begin pads place the output and output_shape sizes it)
        if out_sp is not None and (pads_attr is None or auto_pad in ("SAME_UPPER", "SAME_LOWER")):
            begin = []
            for i in range(nsp):
                # an output larger than the full scatter gets a zero tail, as in onnxruntime
                total = max(0, full[i] + outpad[i] - out_sp[i])
                begin.append(total // 2 if auto_pad == "SAME_UPPER" else total - total // 2)
        else:
            pads = [0] * (2 * nsp) if (pads_attr is None or auto_pad == "VALID") else pads_attr
            _check_lengths(label, (("pads", pads, 2 * nsp),))
            begin = pads[:nsp]
            if out_sp is None:
                out_sp = [f + op - pads[i] - pads[i + nsp] for i, (f, op) in enumerate(zip(full, outpad))]
        if min(out_sp) <= 0:
            raise KernelError(f"{label}: computed output shape {out_sp} is not positive")
        m_out = w_shape[1] * group
        check_tensor_size(label, (x_shape[0], m_out, *full), dtype, "scatter buffer")
        check_tensor_size(label, (x_shape[0], m_out, *out_sp), dtype)
        # the part of the full buffer that lands in the output, and where
        src = tuple(slice(max(b, 0), min(f, b + o)) for b, f, o in zip(begin, full, out_sp))
        dst = tuple(slice(max(-b, 0), max(-b, 0) + (sl.stop - sl.start)) for b, sl in zip(begin, src))
        direct = all(b >= 0 and b + o <= f for b, f, o in zip(begin, full, out_sp))
        taps = tap_slices(kernel, strides, dils, in_sp)  # where each tap's contribution lands
        return dict(nsp=nsp, kernel=kernel, full=full, out_sp=out_sp, src=src, dst=dst,
                    direct=direct, taps=taps)

    def kernel(x, w, b=None):
        p = bounded_cache(cache, (x.shape, w.shape), lambda: plan(x.shape, w.shape, x.dtype))
        out_dtype = x.dtype
        cdt = _compute_dtype(out_dtype)
        if cdt != out_dtype:
            x, w = x.astype(cdt), w.astype(cdt)
        N, C = x.shape[:2]
        cg = C // group
        mg = w.shape[1]
        M = mg * group
        K = math.prod(p["kernel"])
        L = math.prod(x.shape[2:])
        # cols[n, g, (m, taps), l] = sum_c w[g, c, (m, taps)] * x[n, g, c, l]
        wt = w.reshape(group, cg, mg * K).transpose(0, 2, 1)
        if N == 1 and group == 1:
            cols = np.matmul(wt[0], x.reshape(C, L))
        else:
            cols = np.matmul(wt, x.reshape(N, group, cg, L))
        cols = cols.reshape((N, M, K, *x.shape[2:]))
        full = np.zeros((N, M, *p["full"]), dtype=cols.dtype)
        for t, sl in enumerate(p["taps"]):
            full[sl] += cols[:, :, t]
        sp = (slice(None), slice(None))
        if p["direct"]:
            y = full[sp + p["src"]]
            if y.shape != full.shape:
                y = np.ascontiguousarray(y)
        else:
            y = np.zeros((N, M, *p["out_sp"]), dtype=full.dtype)
            y[sp + p["dst"]] = full[sp + p["src"]]
        if b is not None:
            y += b.astype(y.dtype, copy=False).reshape((M,) + (1,) * p["nsp"])
        if y.dtype != out_dtype:
            y = y.astype(out_dtype)
        return (y,)

    return kernel
