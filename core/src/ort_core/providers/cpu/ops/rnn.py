"""CPU kernels for the recurrent layers RNN, GRU and LSTM (all directions, layouts, sequence_lens,
activation lists with alpha/beta, clip, peepholes). The input projection of all time steps is one
matmul; then Python loops over time steps only, one batched matmul per step for all directions.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from ....errors import KernelError
from ....ir.graph import Node
from ..registry import register


def _sigmoid(x, alpha, beta):
    # the tanh form never overflows in exp, for any x
    return np.tanh(x * 0.5) * 0.5 + 0.5


def _hard_sigmoid(x, alpha, beta):
    return np.clip(x * alpha + beta, 0, 1)


def _elu(x, alpha, beta):
    return np.where(x >= 0, x, alpha * np.expm1(np.minimum(x, 0)))


# name (lower case) -> (function(x, alpha, beta), default alpha, default beta, takes alpha, takes beta);
# defaults are those of the ONNX operators of the same names
_ACTIVATIONS = {
    "relu": (lambda x, a, b: np.maximum(x, 0), 0.0, 0.0, False, False),
    "tanh": (lambda x, a, b: np.tanh(x), 0.0, 0.0, False, False),
    "sigmoid": (_sigmoid, 0.0, 0.0, False, False),
    "affine": (lambda x, a, b: x * a + b, 1.0, 0.0, True, True),
    "leakyrelu": (lambda x, a, b: np.where(x >= 0, x, x * a), 0.01, 0.0, True, False),
    "thresholdedrelu": (lambda x, a, b: np.where(x > a, x, 0), 1.0, 0.0, True, False),
    "scaledtanh": (lambda x, a, b: np.tanh(x * b) * a, 1.0, 1.0, True, True),
    "hardsigmoid": (_hard_sigmoid, 0.2, 0.5, True, True),
    "elu": (_elu, 1.0, 0.0, True, False),
    "softsign": (lambda x, a, b: x / (1 + np.abs(x)), 0.0, 0.0, False, False),
    "softplus": (lambda x, a, b: np.logaddexp(0, x), 0.0, 0.0, False, False),
}

_DIRECTIONS = {"forward": 1, "reverse": 1, "bidirectional": 2}


class _Role:
    """One activation role (f, g or h) over the stacked directions: one call when every direction
    uses the same function, else one call per direction (at most two)."""

    def __init__(self, specs):
        self.specs = specs  # per direction: (function, alpha, beta)
        self.shared = all(s[0] is specs[0][0] and s[1:] == specs[0][1:] for s in specs)

    def __call__(self, x):
        if self.shared:
            fn, a, b = self.specs[0]
            return fn(x, a, b)
        return np.stack([fn(x[d], a, b) for d, (fn, a, b) in enumerate(self.specs)])


def _activations(node: Node, defaults: tuple[str, ...], num_dirs: int) -> list[_Role]:
    """The activation roles of a cell, from the activations list (one set per direction, or one set
    shared by both) and activation_alpha/beta, consumed in list order by the functions that take
    them (the rest get the ONNX defaults)."""
    label = node.label
    names = node.attr("activations")
    n = len(defaults)
    names = list(defaults) * num_dirs if not names else [str(s) for s in names]
    if len(names) == n and num_dirs == 2:
        names = names * 2
    if len(names) != n * num_dirs:
        raise KernelError(f"{label}: expected {n * num_dirs} activations ({n} per direction), got {names}")
    alphas = list(node.attr("activation_alpha") or [])
    betas = list(node.attr("activation_beta") or [])
    specs = []
    for name in names:
        entry = _ACTIVATIONS.get(name.lower())
        if entry is None:
            raise KernelError(f"{label}: unsupported activation '{name}' (supported: {sorted(_ACTIVATIONS)})")
        fn, a, b, takes_a, takes_b = entry
        if takes_a and alphas:
            a = float(alphas.pop(0))
        if takes_b and betas:
            b = float(betas.pop(0))
        specs.append((fn, a, b))
    return [_Role([specs[d * n + k] for d in range(num_dirs)]) for k in range(n)]


class RnnConfig:
    """Attributes shared by the three cells, read and checked once per node."""

    def __init__(self, node: Node, opset: int, n_gates: int, default_acts: tuple[str, ...]):
        self.label = node.label
        direction = node.attr("direction", "forward")
        if direction not in _DIRECTIONS:
            raise KernelError(f"{self.label}: unknown direction '{direction}' (expected {sorted(_DIRECTIONS)})")
        self.num_dirs = _DIRECTIONS[direction]
        # per direction: does it run back to front
        self.reverse = [direction == "reverse", True][: self.num_dirs]
        self.layout = int(node.attr("layout", 0)) if opset >= 14 else 0
        if self.layout not in (0, 1):
            raise KernelError(f"{self.label}: layout must be 0 or 1, got {self.layout}")
        hs = node.attr("hidden_size")
        self.hidden = None if hs is None else int(hs)
        clip = node.attr("clip")
        self.clip = None if clip is None else float(clip)
        self.n_gates = n_gates
        self.roles = _activations(node, default_acts, self.num_dirs)
        self.outputs = [bool(o) for o in node.outputs]

    def clipped(self, x):
        if self.clip is not None:
            np.clip(x, -self.clip, self.clip, out=x)
        return x


def _compute_dtype(dtype: np.dtype) -> np.dtype:
    """float16/bfloat16 recur in float32 (no BLAS for them, and less rounding per step)."""
    return np.dtype(np.float64) if dtype == np.float64 else np.dtype(np.float32)


def _check_shape(label: str, name: str, arr, shape) -> None:
    if arr is not None and tuple(arr.shape) != tuple(shape):
        raise KernelError(f"{label}: input '{name}' has shape {tuple(arr.shape)}, expected {tuple(shape)}")


class RnnSequence:
    """The time-major inputs of one run: X projected through W for every time step and direction
    (plus the biases that can be folded in), reordered so that step s of every direction reads
    xw[:, s] (reverse directions run each sequence back to front within its own length)."""

    def __init__(self, cfg: RnnConfig, x, w, r, b, seq_lens, fold_bias):
        label = cfg.label
        if x.ndim != 3:
            raise KernelError(f"{label}: input 'X' must be 3-D, got shape {tuple(x.shape)}")
        if cfg.layout:
            x = x.swapaxes(0, 1)
        T, nb, isz = x.shape
        D, G = cfg.num_dirs, cfg.n_gates
        H = cfg.hidden if cfg.hidden is not None else (r.shape[-1] if r.ndim == 3 else -1)
        _check_shape(label, "W", w, (D, G * H, isz))
        _check_shape(label, "R", r, (D, G * H, H))
        _check_shape(label, "B", b, (D, 2 * G * H))
        if w.dtype != x.dtype or r.dtype != x.dtype:
            raise KernelError(f"{label}: W ({w.dtype}) and R ({r.dtype}) must have X's type {x.dtype}")
        self.T, self.batch, self.H, self.dtype = T, nb, H, x.dtype
        cdt = self.cdt = _compute_dtype(x.dtype)
        self.r_t = r.astype(cdt, copy=False).transpose(0, 2, 1)  # (D, H, G*H): state @ r_t (a view: no copy)
        xw = np.matmul(x.reshape(T * nb, isz).astype(cdt, copy=False), w.astype(cdt, copy=False).transpose(0, 2, 1))
        xw = xw.reshape(D, T, nb, G * H)
        self.rb = None
        if b is not None:
            bias = b.astype(cdt, copy=False).reshape(D, 2, G * H)
            folded = bias[:, 0] + bias[:, 1] * fold_bias  # fold_bias masks R biases kept apart
            xw += folded[:, None, None, :]
            self.rb = bias[:, 1]
        self.lens = None
        if seq_lens is not None:
            lens = np.asarray(seq_lens).astype(np.int64).reshape(-1)
            if lens.shape != (nb,) or lens.min(initial=0) < 0 or lens.max(initial=0) > T:
                raise KernelError(f"{label}: sequence_lens {lens.tolist()} must hold {nb} lengths in [0, {T}]")
            if (lens != T).any():
                self.lens = lens
        steps = np.arange(T)[:, None]
        # per (step, batch) the time index each reverse direction reads; steps past a sequence's
        # end keep their own index (they are masked out)
        self.rev_idx = None
        if any(cfg.reverse):
            lens = self.lens if self.lens is not None else np.full(nb, T)
            self.rev_idx = np.where(steps < lens, lens - 1 - steps, steps)
            cols = np.arange(nb)[None, :]
            for d in range(D):
                if cfg.reverse[d]:
                    xw[d] = xw[d][self.rev_idx, cols]
        self.xw = xw
        # (T, 1, B, 1) validity per step, broadcasting over directions and hidden units
        self.valid = None if self.lens is None else (steps < self.lens)[:, None, :, None]

    def initial(self, cfg: RnnConfig, name: str, value):
        """An initial state as (D, B, H) in the compute type; zeros when omitted."""
        D, nb, H = cfg.num_dirs, self.batch, self.H
        if value is None:
            return np.zeros((D, nb, H), dtype=self.cdt)
        if value.ndim == 3 and cfg.layout:
            value = value.swapaxes(0, 1)
        _check_shape(cfg.label, name, value, (D, nb, H))
        return value.astype(self.cdt)

    def run(self, cfg: RnnConfig, step, states):
        """Loop over the time steps: ``step(xw_s, *states) -> new states`` (the first is H). Returns
        (Y or None, final states) with Y as (T, D, B, H) in original time order."""
        want_y = cfg.outputs and cfg.outputs[0]
        y = np.empty((self.T, cfg.num_dirs, self.batch, self.H), dtype=self.cdt) if want_y else None
        for s in range(self.T):
            new = step(self.xw[:, s], *states)
            if self.valid is not None:
                ok = self.valid[s]
                new = tuple(np.where(ok, n, old) for n, old in zip(new, states))
                if y is not None:
                    y[s] = np.where(ok, new[0], 0)  # outputs past a sequence's end are zero
            elif y is not None:
                y[s] = new[0]
            states = new
        if y is not None and self.rev_idx is not None:
            cols = np.arange(self.batch)[None, :]
            for d in range(cfg.num_dirs):
                if cfg.reverse[d]:
                    back = np.empty_like(y[:, d])
                    back[self.rev_idx, cols] = y[:, d]
                    y[:, d] = back
        return y, states

    def outputs(self, cfg: RnnConfig, y, states) -> tuple:
        """Y, Y_h[, Y_c] in the node's layout and type; None for outputs the node omits."""
        res = []
        if y is not None and cfg.layout:
            y = y.transpose(2, 0, 1, 3)
        res.append(y)
        for st in states:
            res.append(st.swapaxes(0, 1) if cfg.layout else st)
        res = [None if v is None else np.ascontiguousarray(v, dtype=self.dtype) for v in res]
        return tuple(v if i < len(cfg.outputs) and cfg.outputs[i] else None
                     for i, v in enumerate(res))[: len(cfg.outputs)]


_FLOATS = (np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))


def _check_x(label: str, x) -> None:
    if x.dtype not in _FLOATS:
        raise KernelError(f"{label}: input 'X' must be a float tensor, got {x.dtype}")


# ---------------------------------------------------------------------------------------------
# RNN
# ---------------------------------------------------------------------------------------------

@register("RNN", since=1)
def _rnn(node: Node, opset: int):
    """Ht = f(Xt*W^T + Ht-1*R^T + Wb + Rb)."""
    cfg = RnnConfig(node, opset, 1, ("Tanh",))
    f = cfg.roles[0]

    def kernel(x, w, r, b=None, seq_lens=None, h0=None):
        _check_x(cfg.label, x)
        seq = RnnSequence(cfg, x, w, r, b, seq_lens, fold_bias=1.0)
        r_t = seq.r_t

        def step(xw, h):
            return (f(cfg.clipped(xw + np.matmul(h, r_t))),)

        y, states = seq.run(cfg, step, (seq.initial(cfg, "initial_h", h0),))
        return seq.outputs(cfg, y, states)

    return kernel


# ---------------------------------------------------------------------------------------------
# GRU
# ---------------------------------------------------------------------------------------------

@register("GRU", since=1)
def _gru(node: Node, opset: int):
    """z = f(Xt*Wz + Ht-1*Rz + b), r = f(Xt*Wr + Ht-1*Rr + b),
    h~ = g(Xt*Wh + (r . Ht-1)*Rh + Rbh + Wbh), or with linear_before_reset
    h~ = g(Xt*Wh + r . (Ht-1*Rh + Rbh) + Wbh); Ht = (1 - z) . h~ + z . Ht-1."""
    cfg = RnnConfig(node, opset, 3, ("Sigmoid", "Tanh"))
    lbr = bool(node.attr("linear_before_reset", 0)) if opset >= 3 else False
    f, g = cfg.roles

    def kernel(x, w, r, b=None, seq_lens=None, h0=None):
        _check_x(cfg.label, x)
        H = cfg.hidden if cfg.hidden is not None else r.shape[-1]
        if r.ndim != 3 or r.shape[-1] != H:  # before sizing anything by the hidden_size attribute
            raise KernelError(f"{cfg.label}: R of shape {tuple(r.shape)} does not fit hidden_size {H}")
        # Rbh stays out of the folded bias when it must be multiplied by r
        fold = np.ones(3 * H)
        if lbr:
            fold[2 * H:] = 0
        seq = RnnSequence(cfg, x, w, r, b, seq_lens, fold_bias=fold)
        r_t = seq.r_t
        r_zr, r_h = r_t[..., :2 * H], r_t[..., 2 * H:]
        rbh = None if seq.rb is None or not lbr else seq.rb[:, None, 2 * H:]

        def step(xw, h):
            if lbr:
                hr = np.matmul(h, r_t)
                zr = f(cfg.clipped(xw[..., :2 * H] + hr[..., :2 * H]))
                hh = hr[..., 2 * H:]
                if rbh is not None:
                    hh += rbh
                hh *= zr[..., H:]
            else:
                zr = f(cfg.clipped(xw[..., :2 * H] + np.matmul(h, r_zr)))
                hh = np.matmul(zr[..., H:] * h, r_h)
            hh += xw[..., 2 * H:]
            hh = g(cfg.clipped(hh))
            z = zr[..., :H]
            return (hh + z * (h - hh),)

        y, states = seq.run(cfg, step, (seq.initial(cfg, "initial_h", h0),))
        return seq.outputs(cfg, y, states)

    return kernel


# ---------------------------------------------------------------------------------------------
# LSTM
# ---------------------------------------------------------------------------------------------

@register("LSTM", since=1)
def _lstm(node: Node, opset: int):
    """Gates in order i, o, f, c: i = f(.. + Pi . Ct-1), f = f(.. + Pf . Ct-1) (or 1 - i with
    input_forget), c~ = g(..), Ct = f . Ct-1 + i . c~, o = f(.. + Po . Ct), Ht = o . h(Ct).
    clip bounds the inputs of f and g (not of h, as in onnxruntime)."""
    cfg = RnnConfig(node, opset, 4, ("Sigmoid", "Tanh", "Tanh"))
    input_forget = bool(node.attr("input_forget", 0))
    f, g, h_act = cfg.roles

    def kernel(x, w, r, b=None, seq_lens=None, h0=None, c0=None, p=None):
        _check_x(cfg.label, x)
        seq = RnnSequence(cfg, x, w, r, b, seq_lens, fold_bias=1.0)
        H, r_t = seq.H, seq.r_t
        peep = None
        if p is not None:
            _check_shape(cfg.label, "P", p, (cfg.num_dirs, 3 * H))
            pc = p.astype(seq.cdt)[:, None, :]  # (D, 1, 3H): i, o, f
            peep = (pc[..., :H], pc[..., H:2 * H], pc[..., 2 * H:])

        def step(xw, h, c):
            gates = xw + np.matmul(h, r_t)
            gi, go, gf, gc = (gates[..., k * H:(k + 1) * H] for k in range(4))
            if peep is not None:
                gi += peep[0] * c
                gf += peep[2] * c
            i = f(cfg.clipped(gi))
            fg = 1 - i if input_forget else f(cfg.clipped(gf))
            c_new = fg * c + i * g(cfg.clipped(gc))
            if peep is not None:
                go += peep[1] * c_new
            o = f(cfg.clipped(go))
            return o * h_act(c_new), c_new

        states = (seq.initial(cfg, "initial_h", h0), seq.initial(cfg, "initial_c", c0))
        y, states = seq.run(cfg, step, states)
        return seq.outputs(cfg, y, states)

    return kernel
