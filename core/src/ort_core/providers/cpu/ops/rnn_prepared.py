"""Weights and per-run inputs of rnn.py's RNN, GRU and LSTM kernels, ready for rnn_loops.py's time loops.

RnnWeights converts W, R and the biases once (at build time when they are constant initializers): the
compute type, the rows of sigmoid gates halved, Wb + Rb summed. RnnRun projects X for every time step
(one product per direction), sets up sequence_lens masks and initial states, and shapes the outputs.
It runs no time step itself; the quantized LSTM (contrib_qlstm.py) has its own weights and uses neither.
"""

from __future__ import annotations

import numpy as np

from ....errors import KernelError

# per direction, the recurrent product of a few batch rows runs as one vector product per row when R is
# at least this large: BLAS libraries (OpenBLAS in numpy's wheels) take two to four times longer for a
# matrix product with 2 to 4 rows than for as many vector products over a large R
_ROWS_APART_BYTES = 2 << 20
_ROWS_APART_MAX = 4


def compute_dtype(dtype: np.dtype) -> np.dtype:
    """float16/bfloat16 recur in float32 (no BLAS for them, and less rounding per step)."""
    return np.dtype(np.float64) if dtype == np.float64 else np.dtype(np.float32)


def check_shape(label: str, name: str, arr, shape) -> None:
    if arr is not None and tuple(arr.shape) != tuple(shape):
        raise KernelError(f"{label}: input '{name}' has shape {tuple(arr.shape)}, expected {tuple(shape)}")


def initial_state(cfg, name: str, value, shape: tuple[int, int, int], cdt, copy: bool):
    """An initial state (initial_h / initial_c) as a (D, B, H) array of type ``cdt``, zeros when omitted;
    the node's batch-major layout moved to direction-major. ``copy``: a new array even when the given one
    has the type already (for drivers that write their states in place)."""
    if value is None:
        return np.zeros(shape, dtype=cdt)
    if value.ndim == 3 and cfg.layout:
        value = value.swapaxes(0, 1)
    check_shape(cfg.label, name, value, shape)
    return value.astype(cdt, copy=copy)


def zero_length_states(states, lens) -> None:
    """Final states ([directions, batch, hidden]) of sequences of length 0 become zeros, as onnxruntime
    returns them (they never ran a step)."""
    if lens is not None and not lens.all():
        for st in states:
            st[:, lens == 0] = 0


def sequence_lengths(seq_lens, batch: int, steps: int, label: str):
    """``sequence_lens`` checked (one length in [0, steps] per batch row) as int64, or None when every
    sequence runs all the steps (or none was given)."""
    if seq_lens is None:
        return None
    lens = np.asarray(seq_lens).astype(np.int64).reshape(-1)
    if lens.shape != (batch,) or lens.min(initial=0) < 0 or lens.max(initial=0) > steps:
        raise KernelError(f"{label}: sequence_lens {lens.tolist()} must hold {batch} lengths in [0, {steps}]")
    return lens if (lens != steps).any() else None


class RnnWeights:
    """W, R, B (and LSTM's P) of one node in the compute type. ``halve`` (directions, gates) marks the
    gates whose activation takes its input halved (rnn.py's in-place sigmoid): their rows of W and R,
    their biases, peepholes and clip bounds are halved here, which is exact (a power of two), so the
    time loop spends no pass on it. Wb + Rb is one bias, added to X's projection, except the R bias of
    GRU's h gate under linear_before_reset (``rbh``), which the reset gate multiplies. ``order`` lists
    the node's gates in the order the loop wants them (P keeps the node's i, o, f)."""

    def __init__(self, w, r, b, p, hidden: int, halve, clip, rbh_apart: bool = False, order=None):
        cdt = self.cdt = compute_dtype(w.dtype)
        D, G = halve.shape
        H = self.hidden = hidden
        scale = np.repeat(np.where(halve, 0.5, 1.0), H, axis=1).astype(cdt)  # (D, G*H), the node's order
        rows = None if order is None else np.concatenate([np.arange(k * H, (k + 1) * H) for k in order])
        self.w = self._rows(w, scale, rows)
        self.r = self._rows(r, scale, rows)
        self.w_t = self.w.transpose(0, 2, 1)  # (D, input, G*H): x @ w_t
        self.r_t = self.r.transpose(0, 2, 1)  # (D, H, G*H): h @ r_t (BLAS reads the transpose, no copy)
        self.bias = self.rbh = None
        if b is not None:
            bb = b.astype(cdt).reshape(D, 2, G * H) * scale[:, None]
            rb = bb[:, 1].copy()
            if rbh_apart:
                self.rbh = rb[:, None, 2 * H:].copy()  # (D, 1, H)
                rb[:, 2 * H:] = 0
            self.bias = bb[:, 0] + rb  # (D, G*H)
            if rows is not None:
                self.bias = self.bias[:, rows]
        self.peep = None
        if p is not None:  # i, o, f: the first three gates of LSTM's i, o, f, c
            self.peep = (p.astype(cdt) * scale[:, :3 * H])[:, None, :]  # (D, 1, 3H)
        self.setups: dict = {}  # what the time loops derive from these weights, per direction count and batch
        self.hi = None
        if clip is not None:
            self.hi = (scale * cdt.type(clip))[:, None, :]  # (D, 1, G*H)
            if rows is not None:
                self.hi = self.hi[..., rows]
        for arr in (self.w, self.r, self.bias, self.rbh, self.peep, self.hi):
            if arr is not None and arr is not w and arr is not r:  # ours, not the caller's
                arr.flags.writeable = False

    @staticmethod
    def _rows(m, scale, rows):
        """W or R in the compute type, scaled by gate row and reordered; m itself when nothing changes."""
        if (scale != 1).any():
            m = m.astype(scale.dtype) * scale[..., None]
        if rows is not None:
            m = m[:, rows]
        return np.ascontiguousarray(m, dtype=scale.dtype)

    def clipper(self, start: int, stop: int, one_dir: bool):
        """A function clipping gates [start, stop) (in units of H, the loop's order) in place, or None
        without clip; ``one_dir``: for arrays without the direction axis."""
        if self.hi is None:
            return None
        hi = self.hi[..., start * self.hidden:stop * self.hidden]
        hi = hi[0] if one_dir else hi
        lo = -hi
        return lambda x: np.clip(x, lo, hi, out=x)


def recurrent_product(r_t, num_dirs: int, batch: int):
    """(product, r) such that ``product(state, r, out=out)`` writes ``state @ r_t`` into ``out``:
    (D, B, K) @ (D, K, N) -> (D, B, N), or (B, K) @ (K, N) -> (B, N) with one direction; np.matmul
    itself, or one vector product per row (see _ROWS_APART_BYTES)."""
    r = r_t[0] if num_dirs == 1 else r_t
    if not 1 < batch <= _ROWS_APART_MAX or r_t[0].nbytes < _ROWS_APART_BYTES:
        return np.matmul, r
    rows = [((k,), r) for k in range(batch)] if num_dirs == 1 else \
        [((d, k), r[d]) for d in range(num_dirs) for k in range(batch)]

    def per_row(a, _r, out):
        for at, rd in rows:
            np.matmul(a[at], rd, out=out[at])

    return per_row, r


class RnnRun:
    """One run's inputs, time-major: X projected through W (plus the folded bias) for every step and
    direction as ``xw`` (D, T, B, G*H), reordered so that step s of every direction reads xw[:, s]
    (reverse directions run each sequence back to front within its own length); ``full`` leading
    steps cover every sequence, and ``dead[s]`` (1, B, 1) marks the rows whose sequence ended."""

    def __init__(self, cfg, x, wts: RnnWeights, seq_lens):
        if cfg.layout:
            x = x.swapaxes(0, 1)
        T, nb, isz = x.shape
        D, GH = cfg.num_dirs, wts.w.shape[1]
        self.T, self.batch, self.H, self.dtype, self.cdt = T, nb, wts.hidden, x.dtype, wts.cdt
        self.lens = sequence_lengths(seq_lens, nb, T, cfg.label)
        self.full, self.dead, self.rev_idx = T, None, None
        if self.lens is not None:
            steps = np.arange(T)[:, None]
            self.full = int(self.lens.min(initial=T))
            self.dead = (steps >= self.lens)[:, None, :, None]
            # per (step, batch) the time index a reverse direction reads (past a sequence's end: its own)
            if any(cfg.reverse):
                self.rev_idx = np.where(steps < self.lens, self.lens - 1 - steps, steps)
        xc = x.astype(self.cdt, copy=False)
        xw = self.xw = np.empty((D, T, nb, GH), dtype=self.cdt)
        for d in range(D):
            src = xc
            if cfg.reverse[d]:
                src = xc[::-1] if self.rev_idx is None else xc[self.rev_idx, np.arange(nb)[None, :]]
            np.matmul(src.reshape(T * nb, isz), wts.w_t[d], out=xw[d].reshape(T * nb, GH))
        if wts.bias is not None:
            xw += wts.bias[:, None, None, :]

    def initial(self, cfg, name: str, value):
        """An initial state as a (D, B, H) array in the compute type, zeros when omitted; the given array
        itself when it has the compute type already (the loops only read it, and outputs() copies)."""
        return initial_state(cfg, name, value, (cfg.num_dirs, self.batch, self.H), self.cdt, copy=False)

    def y_buffer(self, cfg):
        """Y by step (T, D, B, H) when the node produces Y, else None."""
        if cfg.outputs and cfg.outputs[0]:
            return np.empty((self.T, cfg.num_dirs, self.batch, self.H), dtype=self.cdt)
        return None

    def outputs(self, cfg, y, states) -> tuple:
        """Y, Y_h[, Y_c] in the node's layout and type (new arrays); None for outputs the node omits."""
        # the states first: one may be a view of Y, which is reordered in place below
        res = [np.array(st, dtype=self.dtype, order="C") for st in states]
        zero_length_states(res, self.lens)
        res = [np.ascontiguousarray(st.swapaxes(0, 1)) if cfg.layout else st for st in res]
        if y is not None:
            for d in range(cfg.num_dirs):
                if not cfg.reverse[d]:
                    continue
                if self.rev_idx is None:
                    y[:, d] = y[::-1, d].copy()
                else:
                    back = np.empty_like(y[:, d])
                    back[self.rev_idx, np.arange(self.batch)[None, :]] = y[:, d]
                    y[:, d] = back
            if cfg.layout:
                y = y.transpose(2, 0, 1, 3)
            y = np.ascontiguousarray(y, dtype=self.dtype)
        res.insert(0, y)
        return tuple(v if i < len(cfg.outputs) and cfg.outputs[i] else None
                     for i, v in enumerate(res))[: len(cfg.outputs)]
