"""CPU kernels for the recurrent layers RNN, GRU and LSTM (all directions, layouts, sequence_lens,
activation lists with alpha/beta, clip, peepholes): attributes and activation roles are read once per
node, the weights prepared once (rnn_prepared.py) and the time loops run in place (rnn_loops.py).
RnnSequence, a plainer per-step driver, is what contrib_qlstm.py builds its quantized LSTM on.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from ....errors import KernelError
from ....ir.graph import Node
from ..registry import register
from .contrib_matmul_nbits import constant_inputs
from .rnn_loops import LSTM_ORDER, gru_loop, lstm_loop, lstm_one_step, rnn_loop
from .rnn_prepared import (
    RnnRun,
    RnnWeights,
    check_shape,
    compute_dtype,
    initial_state,
    sequence_lengths,
    zero_length_states,
)


def _sigmoid(x, alpha, beta):
    # the tanh form never overflows in exp, for any x
    return np.tanh(x * 0.5) * 0.5 + 0.5


def _hard_sigmoid(x, alpha, beta):
    return np.clip(x * alpha + beta, 0, 1)


def _elu(x, alpha, beta):
    return np.where(x >= 0, x, alpha * np.expm1(np.minimum(x, 0)))


def _sigmoid_halved_(x, alpha, beta):
    # in place, on an input already halved (the gate's weights, biases and clip were halved once, exactly:
    # 1/2 is a power of two), so that sigmoid(2x) = tanh(x) / 2 + 1/2 costs three passes
    np.tanh(x, out=x)
    x *= 0.5
    x += 0.5


def _affine_(x, alpha, beta):
    x *= alpha
    x += beta


# name (lower case) -> (function(x, alpha, beta), default alpha, default beta, takes alpha, takes beta,
# in-place function(x, alpha, beta) or None); defaults are those of the ONNX operators of the same names
_ACTIVATIONS = {
    "relu": (lambda x, a, b: np.maximum(x, 0), 0.0, 0.0, False, False, lambda x, a, b: np.maximum(x, 0, out=x)),
    "tanh": (lambda x, a, b: np.tanh(x), 0.0, 0.0, False, False, lambda x, a, b: np.tanh(x, out=x)),
    "sigmoid": (_sigmoid, 0.0, 0.0, False, False, _sigmoid_halved_),
    "affine": (lambda x, a, b: x * a + b, 1.0, 0.0, True, True, _affine_),
    "leakyrelu": (lambda x, a, b: np.where(x >= 0, x, x * a), 0.01, 0.0, True, False, None),
    "thresholdedrelu": (lambda x, a, b: np.where(x > a, x, 0), 1.0, 0.0, True, False, None),
    "scaledtanh": (lambda x, a, b: np.tanh(x * b) * a, 1.0, 1.0, True, True, None),
    "hardsigmoid": (_hard_sigmoid, 0.2, 0.5, True, True, None),
    "elu": (_elu, 1.0, 0.0, True, False, None),
    "softsign": (lambda x, a, b: x / (1 + np.abs(x)), 0.0, 0.0, False, False, None),
    "softplus": (lambda x, a, b: np.logaddexp(0, x), 0.0, 0.0, False, False, None),
}

_DIRECTIONS = {"forward": 1, "reverse": 1, "bidirectional": 2}


class _Role:
    """One activation role (f, g or h) over the stacked directions: one call when every direction
    uses the same function, else one call per direction (at most two). ``__call__`` returns a new
    array; ``apply_`` works in place and takes a sigmoid's input halved (see ``halved``)."""

    def __init__(self, specs):
        self.specs = specs  # per direction: (function, alpha, beta, name, in-place function or None)
        self.shared = all(s[0] is specs[0][0] and s[1:3] == specs[0][1:3] for s in specs)
        self.names = tuple(s[3] for s in specs)
        # per direction: whether apply_ expects its input halved (the sigmoid)
        self.halved = tuple(s[0] is _sigmoid for s in specs)
        if self.names == ("tanh",) * len(specs):  # the usual h role of LSTM: no copy first
            self.into = lambda x, out: np.tanh(x, out=out)

    def __call__(self, x):
        if self.shared:
            fn, a, b = self.specs[0][:3]
            return fn(x, a, b)
        return np.stack([fn(x[d], a, b) for d, (fn, a, b, *_) in enumerate(self.specs)])

    def apply_(self, x) -> None:
        """x (directions first) replaced by its activation, in place."""
        if self.shared:
            _apply_one_(self.specs[0], x)
        else:
            for d, spec in enumerate(self.specs):
                _apply_one_(spec, x[d])

    def inplace(self, dtype: np.dtype):
        """apply_ with the least overhead per call, for arrays of ``dtype`` (the time loops call it at
        every step): sigmoid and tanh shared by all directions call the ufuncs directly."""
        if self.shared and self.names[0] == "sigmoid":
            half, tanh, mul, add = dtype.type(0.5), np.tanh, np.multiply, np.add

            def sigmoid_halved_(x):
                tanh(x, out=x)
                mul(x, half, out=x)
                add(x, half, out=x)

            return sigmoid_halved_
        if self.shared and self.names[0] == "tanh":
            return lambda x: np.tanh(x, out=x)
        return self.apply_

    def into(self, x, out) -> None:
        """out = activation of x (out is a buffer of x's shape; x is left alone)."""
        np.copyto(out, x)
        self.apply_(out)


def _apply_one_(spec, x) -> None:
    fn, a, b, _, inplace = spec
    if inplace is not None:
        inplace(x, a, b)
    else:
        np.copyto(x, fn(x, a, b), casting="same_kind")


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
        fn, a, b, takes_a, takes_b, inplace = entry
        if takes_a and alphas:
            a = float(alphas.pop(0))
        if takes_b and betas:
            b = float(betas.pop(0))
        specs.append((fn, a, b, name.lower(), inplace))
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
        check_shape(label, "W", w, (D, G * H, isz))
        check_shape(label, "R", r, (D, G * H, H))
        check_shape(label, "B", b, (D, 2 * G * H))
        if w.dtype != x.dtype or r.dtype != x.dtype:
            raise KernelError(f"{label}: W ({w.dtype}) and R ({r.dtype}) must have X's type {x.dtype}")
        self.T, self.batch, self.H, self.dtype = T, nb, H, x.dtype
        cdt = self.cdt = compute_dtype(x.dtype)
        self.r_t = r.astype(cdt, copy=False).transpose(0, 2, 1)  # (D, H, G*H): state @ r_t (a view: no copy)
        xw = np.matmul(x.reshape(T * nb, isz).astype(cdt, copy=False), w.astype(cdt, copy=False).transpose(0, 2, 1))
        xw = xw.reshape(D, T, nb, G * H)
        self.rb = None
        if b is not None:
            bias = b.astype(cdt, copy=False).reshape(D, 2, G * H)
            folded = bias[:, 0] + bias[:, 1] * fold_bias  # fold_bias masks R biases kept apart
            xw += folded[:, None, None, :]
            self.rb = bias[:, 1]
        self.lens = sequence_lengths(seq_lens, nb, T, label)
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
        return initial_state(cfg, name, value, (cfg.num_dirs, self.batch, self.H), self.cdt, copy=True)

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
        finals = [np.array(st, dtype=self.dtype) for st in states]  # new arrays: zeroed below, never shared
        zero_length_states(finals, self.lens)
        res.append(y)
        res.extend(st.swapaxes(0, 1) if cfg.layout else st for st in finals)
        res = [None if v is None else np.ascontiguousarray(v, dtype=self.dtype) for v in res]
        return tuple(v if i < len(cfg.outputs) and cfg.outputs[i] else None
                     for i, v in enumerate(res))[: len(cfg.outputs)]


_FLOATS = (np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))


def _check_x(label: str, x) -> None:
    if x.dtype not in _FLOATS:
        raise KernelError(f"{label}: input 'X' must be a float tensor, got {x.dtype}")


class _Weights:
    """Where a kernel gets its RnnWeights: checked against each run's inputs, and prepared once at build
    time when W, R, B (and P) are constant initializers, else once per run. ``gate_roles``: the
    activation role of each gate, whose sigmoids take their inputs halved."""

    def __init__(self, cfg: RnnConfig, node: Node, graph, gate_roles, rbh_apart: bool = False, order=None):
        self.cfg, self.rbh_apart, self.order = cfg, rbh_apart, order
        self.halve = np.array([[role.halved[d] for role in gate_roles] for d in range(cfg.num_dirs)])
        self.prepared = None
        consts = constant_inputs(node, graph, (1, 2, 3, 7) if cfg.n_gates == 4 else (1, 2, 3))
        if consts is not None:
            w, r, b, p = (*consts, None)[:4]
            ok = w.dtype in _FLOATS and r.dtype == w.dtype and w.ndim == 3
            try:
                self.check(w.shape[-1] if ok else -1, w, r, b, p)
            except KernelError:  # reported when the node runs, as for weights fed at run time
                ok = False
            if ok:
                self.prepared = self.make(w, r, b, p)
                self.sources = (w, r, b, p)  # checked here: a run given these very arrays checks X only

    def hidden(self, r) -> int:
        cfg = self.cfg
        return cfg.hidden if cfg.hidden is not None else (r.shape[-1] if r.ndim == 3 else -1)

    def check(self, isz: int, w, r, b, p) -> None:
        cfg, H = self.cfg, self.hidden(r)
        D, G = cfg.num_dirs, cfg.n_gates
        check_shape(cfg.label, "W", w, (D, G * H, isz))
        check_shape(cfg.label, "R", r, (D, G * H, H))
        check_shape(cfg.label, "B", b, (D, 2 * G * H))
        check_shape(cfg.label, "P", p, (D, 3 * H))

    def make(self, w, r, b, p) -> RnnWeights:
        return RnnWeights(w, r, b, p, self.hidden(r), self.halve, self.cfg.clip, self.rbh_apart, self.order)

    def __call__(self, x, w, r, b, p=None) -> RnnWeights:
        label = self.cfg.label
        _check_x(label, x)
        if x.ndim != 3:
            raise KernelError(f"{label}: input 'X' must be 3-D, got shape {tuple(x.shape)}")
        if self.prepared is not None:
            src = self.sources
            if (w is src[0] and r is src[1] and b is src[2] and p is src[3] and x.shape[2] == w.shape[2]
                    and x.dtype == w.dtype):
                return self.prepared
        self.check(x.shape[2], w, r, b, p)
        if w.dtype != x.dtype or r.dtype != x.dtype:
            raise KernelError(f"{label}: W ({w.dtype}) and R ({r.dtype}) must have X's type {x.dtype}")
        return self.prepared if self.prepared is not None else self.make(w, r, b, p)


# ---------------------------------------------------------------------------------------------
# RNN
# ---------------------------------------------------------------------------------------------

@register("RNN", since=1)
def _rnn(node: Node, opset: int, graph=None):
    """Ht = f(Xt*W^T + Ht-1*R^T + Wb + Rb)."""
    cfg = RnnConfig(node, opset, 1, ("Tanh",))
    (f,) = cfg.roles
    weights = _Weights(cfg, node, graph, (f,))

    def kernel(x, w, r, b=None, seq_lens=None, h0=None):
        wts = weights(x, w, r, b)
        run = RnnRun(cfg, x, wts, seq_lens)
        y = run.y_buffer(cfg)
        h = rnn_loop(run, wts, f, run.initial(cfg, "initial_h", h0), y)
        return run.outputs(cfg, y, (h,))

    return kernel


# ---------------------------------------------------------------------------------------------
# GRU
# ---------------------------------------------------------------------------------------------

@register("GRU", since=1)
def _gru(node: Node, opset: int, graph=None):
    """z = f(Xt*Wz + Ht-1*Rz + b), r = f(Xt*Wr + Ht-1*Rr + b),
    h~ = g(Xt*Wh + (r . Ht-1)*Rh + Rbh + Wbh), or with linear_before_reset
    h~ = g(Xt*Wh + r . (Ht-1*Rh + Rbh) + Wbh); Ht = (1 - z) . h~ + z . Ht-1."""
    cfg = RnnConfig(node, opset, 3, ("Sigmoid", "Tanh"))
    lbr = bool(node.attr("linear_before_reset", 0)) if opset >= 3 else False
    f, g = cfg.roles
    weights = _Weights(cfg, node, graph, (f, f, g), rbh_apart=lbr)

    def kernel(x, w, r, b=None, seq_lens=None, h0=None):
        _check_x(cfg.label, x)
        H = cfg.hidden if cfg.hidden is not None else r.shape[-1]
        if r.ndim != 3 or r.shape[-1] != H:  # before sizing anything by the hidden_size attribute
            raise KernelError(f"{cfg.label}: R of shape {tuple(r.shape)} does not fit hidden_size {H}")
        wts = weights(x, w, r, b)
        run = RnnRun(cfg, x, wts, seq_lens)
        y = run.y_buffer(cfg)
        h = gru_loop(run, wts, f, g, lbr, run.initial(cfg, "initial_h", h0), y)
        return run.outputs(cfg, y, (h,))

    return kernel


# ---------------------------------------------------------------------------------------------
# LSTM
# ---------------------------------------------------------------------------------------------

@register("LSTM", since=1)
def _lstm(node: Node, opset: int, graph=None):
    """Gates in order i, o, f, c: i = f(.. + Pi . Ct-1), f = f(.. + Pf . Ct-1) (or 1 - i with
    input_forget), c~ = g(..), Ct = f . Ct-1 + i . c~, o = f(.. + Po . Ct), Ht = o . h(Ct).
    clip bounds the inputs of f and g (not of h, as in onnxruntime)."""
    cfg = RnnConfig(node, opset, 4, ("Sigmoid", "Tanh", "Tanh"))
    input_forget = bool(node.attr("input_forget", 0))
    f, g, h_act = cfg.roles
    weights = _Weights(cfg, node, graph, (f, f, f, g), order=LSTM_ORDER)
    # one time step of the usual cell runs as one product (rnn_loops.lstm_one_step)
    plain = (cfg.num_dirs == 1 and not input_forget and all(f.halved) and g.names == ("tanh",)
             and h_act.names == ("tanh",))

    def kernel(x, w, r, b=None, seq_lens=None, h0=None, c0=None, p=None):
        wts = weights(x, w, r, b, p)
        if plain and seq_lens is None and wts.peep is None and x.shape[cfg.layout] == 1 and x.dtype == wts.cdt:
            return lstm_one_step(wts, x, h0, c0, cfg.layout, cfg.label, cfg.outputs)
        run = RnnRun(cfg, x, wts, seq_lens)
        y = run.y_buffer(cfg)
        h0, c0 = run.initial(cfg, "initial_h", h0), run.initial(cfg, "initial_c", c0)
        h, c = lstm_loop(run, wts, f, g, h_act, input_forget, h0, c0, y)
        return run.outputs(cfg, y, (h, c))

    return kernel
