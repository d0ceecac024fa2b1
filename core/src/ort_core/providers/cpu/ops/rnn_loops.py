"""The time loops of rnn.py's RNN, GRU and LSTM kernels: per step one recurrent product into a buffer made
before the loop, then the gate arithmetic in place (``out=`` ufuncs) on all directions and batch rows at
once; with one direction the arrays drop the direction axis. New hidden states go straight into Y's row
for the step (or the other half of a double buffer), so that steps where some sequences have ended can
put the old states back. No array is allocated per step (bar the rarer activations that have no
in-place form, see rnn.py), and nothing loops over elements.
"""

from __future__ import annotations

import numpy as np

from .rnn_prepared import RnnRun, RnnWeights, check_shape, recurrent_product


class _Steps:
    """Per-step views of one run, made once: X's projection, Y's rows, the rows whose sequence
    ended, and H's double buffer; without the direction axis when there is one direction."""

    def __init__(self, run: RnnRun, D: int, y):
        one = self.one_dir = D == 1
        self.xw = list(run.xw[0] if one else run.xw.swapaxes(0, 1))
        self.y = None if y is None else list(y[:, 0] if one else y)
        self.dead = None if run.dead is None else (run.dead[:, 0] if one else run.dead)
        self.full, self.T = run.full, run.T
        shape = (run.batch, run.H) if one else (D, run.batch, run.H)
        self.hbuf = list(np.empty((2, *shape), dtype=run.cdt))
        self.shape, self.cdt = shape, run.cdt
        # where step s writes its H: Y's row when every sequence is still running
        self.h_out = [self.y[s] if self.y is not None and s < self.full else self.hbuf[s & 1]
                      for s in range(self.T)]

    def state(self, value):
        return value[0] if self.one_dir else value

    def keep_dead(self, s: int, news, olds) -> None:
        """Rows whose sequence ended before step s keep their old states, and read 0 in Y."""
        dead = self.dead[s]
        for new, old in zip(news, olds):
            np.copyto(new, old, where=dead)
        if self.y is not None:
            np.copyto(self.y[s], news[0])
            np.copyto(self.y[s], 0, where=dead)

    def buffer(self, width: int):
        return np.empty((*self.shape[:-1], width), dtype=self.cdt)

    def result(self, state):
        return state[None] if self.one_dir else state


def rnn_loop(run: RnnRun, wts: RnnWeights, f, h, y):
    """Ht = f(xw_t + Ht-1 @ R^T); returns the final H."""
    D = h.shape[0]
    st = _Steps(run, D, y)
    h = st.state(h)
    product, r = recurrent_product(wts.r_t, D, run.batch)
    clip = wts.clipper(0, 1, st.one_dir)
    add, xw, h_out, f_ = np.add, st.xw, st.h_out, f.inplace(run.cdt)
    for s in range(run.T):
        hn = h_out[s]
        product(h, r, out=hn)
        add(hn, xw[s], out=hn)
        if clip is not None:
            clip(hn)
        f_(hn)
        if s >= st.full:
            st.keep_dead(s, (hn,), (h,))
        h = hn
    return st.result(h)


def gru_loop(run: RnnRun, wts: RnnWeights, f, g, lbr: bool, h, y):
    """z, r = f(xw_zr + Ht-1 @ Rzr^T); h~ = g(xw_h + r . (Ht-1 @ Rh^T + Rbh)) with linear_before_reset,
    else g(xw_h + (r . Ht-1) @ Rh^T); Ht = h~ + z . (Ht-1 - h~). Returns the final H."""
    D, H = h.shape[0], run.H
    st = _Steps(run, D, y)
    h = st.state(h)
    zrh, tmp = st.buffer(3 * H), st.buffer(H)
    zr, z, r, hh = zrh[..., :2 * H], zrh[..., :H], zrh[..., H:2 * H], zrh[..., 2 * H:]
    # with linear_before_reset one product gives all three gates; without, h's waits for r . Ht-1
    product, r_zr = recurrent_product(wts.r_t if lbr else wts.r_t[..., :2 * H], D, run.batch)
    product_h, r_h = recurrent_product(wts.r_t[..., 2 * H:], D, run.batch)
    out = zrh if lbr else zr
    xw_zr = [x[..., :2 * H] for x in st.xw]
    xw_h = [x[..., 2 * H:] for x in st.xw]
    rbh = None if wts.rbh is None else st.state(wts.rbh)
    clip_zr, clip_h = wts.clipper(0, 2, st.one_dir), wts.clipper(2, 3, st.one_dir)
    add, mul, sub = np.add, np.multiply, np.subtract
    h_out, full, f_, g_ = st.h_out, st.full, f.inplace(run.cdt), g.inplace(run.cdt)
    for s in range(run.T):
        product(h, r_zr, out=out)
        add(zr, xw_zr[s], out=zr)
        if clip_zr is not None:
            clip_zr(zr)
        f_(zr)
        if lbr:
            if rbh is not None:
                add(hh, rbh, out=hh)
            mul(hh, r, out=hh)
        else:
            mul(r, h, out=tmp)
            product_h(tmp, r_h, out=hh)
        add(hh, xw_h[s], out=hh)
        if clip_h is not None:
            clip_h(hh)
        g_(hh)
        hn = h_out[s]
        sub(h, hh, out=tmp)
        mul(tmp, z, out=tmp)
        add(hh, tmp, out=hn)
        if s >= full:
            st.keep_dead(s, (hn,), (h,))
        h = hn
    return st.result(h)


LSTM_ORDER = (1, 0, 2, 3)
"""The loop's LSTM gate order o, i, f, c (the node's is i, o, f, c): the sigmoid gates o, i, f lie
together, and i, f lie next to the candidate c and the cell state (see lstm_loop)."""


class _LstmSetup:
    """What lstm_loop derives from a node's weights and activation roles for one direction count and batch
    size, made once (kept on the RnnWeights, see ``lstm_setup``): a stateful model calling the node once
    per frame with one time step would otherwise spend more on this than on its arithmetic."""

    def __init__(self, wts: RnnWeights, f, g, h_act, D: int, batch: int):
        one_dir = D == 1
        H = wts.hidden
        self.product, self.r = recurrent_product(wts.r_t, D, batch)
        peep = self.peep = None if wts.peep is None else (wts.peep[0] if one_dir else wts.peep)
        self.pio = (None,) * 3 if peep is None else tuple(peep[..., k * H:(k + 1) * H] for k in range(3))
        # the usual case (sigmoid gates, tanh candidate, no peepholes): one tanh over all four gates, whose
        # sigmoid inputs arrive halved (RnnWeights), then sigmoid = tanh / 2 + 1/2 on o, i, f at once
        self.fused = peep is None and all(f.halved) and g.names == ("tanh",) * D
        self.clips = tuple(wts.clipper(a, b, one_dir) for a, b in ((0, 4), (0, 1), (1, 2), (2, 3), (3, 4)))
        self.h_into = None if h_act.names == ("tanh",) * D else h_act.into
        cdt = wts.cdt
        self.f_, self.g_ = f.inplace(cdt), g.inplace(cdt)


def lstm_setup(wts: RnnWeights, f, g, h_act, D: int, batch: int) -> _LstmSetup:
    key = ("lstm", D, batch)
    found = wts.setups.get(key)
    if found is None:
        found = _LstmSetup(wts, f, g, h_act, D, batch)
        if len(wts.setups) >= 16:
            wts.setups.clear()
        wts.setups[key] = found
    return found


def lstm_loop(run: RnnRun, wts: RnnWeights, f, g, h_act, input_forget: bool, h, c, y):
    """Gates i, o, f, c: i = f(.. + Pi . Ct-1), f = f(.. + Pf . Ct-1) (or 1 - i), c~ = g(..),
    Ct = f . Ct-1 + i . c~, o = f(.. + Po . Ct), Ht = o . h(Ct). Returns the final H and C.

    One buffer holds o, i, f, c~ (wts in LSTM_ORDER) and then the cell state: (i, f) . (c~, C) is one
    multiplication, and their sum the new cell state, written in place."""
    D, H = h.shape[0], run.H
    su = lstm_setup(wts, f, g, h_act, D, run.batch)
    st = _Steps(run, D, y)
    h = st.state(h)
    slots = st.buffer(5 * H)
    gates, sig = slots[..., :4 * H], slots[..., :3 * H]
    go, gi, gf, gc, cell = (slots[..., k * H:(k + 1) * H] for k in range(5))
    i_f, cand_cell = slots[..., H:3 * H], slots[..., 3 * H:]
    np.copyto(cell, st.state(c))
    tmp = st.buffer(H)
    c_old = st.buffer(H) if st.full < run.T else None
    product, r, peep, fused = su.product, su.r, su.peep, su.fused
    pi, po, pf = su.pio
    clip_all, clip_o, clip_i, clip_f, clip_c = su.clips
    h_into, f_, g_ = su.h_into, su.f_, su.g_
    half, one = st.cdt.type(0.5), st.cdt.type(1)
    add, mul, tanh = np.add, np.multiply, np.tanh
    xw, h_out, full = st.xw, st.h_out, st.full
    for s in range(run.T):
        product(h, r, out=gates)
        add(gates, xw[s], out=gates)
        if fused:
            if clip_all is not None:
                clip_all(gates)
            tanh(gates, out=gates)
            mul(sig, half, out=sig)
            add(sig, half, out=sig)
            if input_forget:
                np.subtract(one, gi, out=gf)
        else:
            if peep is not None:
                mul(cell, pi, out=tmp)
                add(gi, tmp, out=gi)
                mul(cell, pf, out=tmp)
                add(gf, tmp, out=gf)
            for gate, clip, role in ((gi, clip_i, f_), (gf, clip_f, f_), (gc, clip_c, g_)):
                if gate is gf and input_forget:
                    np.subtract(one, gi, out=gf)
                    continue
                if clip is not None:
                    clip(gate)
                role(gate)
        partial = s >= full
        if partial:
            np.copyto(c_old, cell)
        mul(i_f, cand_cell, out=i_f)
        add(gi, gf, out=cell)
        if not fused:
            if peep is not None:
                mul(cell, po, out=tmp)
                add(go, tmp, out=go)
            if clip_o is not None:
                clip_o(go)
            f_(go)
        hn = h_out[s]
        if h_into is None:
            tanh(cell, out=tmp)
        else:
            h_into(cell, tmp)
        mul(go, tmp, out=hn)
        if partial:
            st.keep_dead(s, (hn, cell), (h, c_old))
        h = hn
    return st.result(h), st.result(cell)


def lstm_one_step(wts: RnnWeights, x, h0, c0, layout: int, label: str, outputs) -> tuple:
    """The whole LSTM node for one time step, one direction, sigmoid/tanh/tanh activations, no peepholes,
    no sequence_lens and X in the compute type (a stateful model called once per frame): one product of
    [X, H] with [W; R] stacked once per weights, then the fused gate arithmetic of lstm_loop on fresh
    arrays. Returns Y, Y_h, Y_c as rnn.py's kernel does."""
    H = wts.hidden
    nb = x.shape[1 - layout]
    x2 = x.reshape(nb, x.shape[2])
    states = []
    for name, v in (("initial_h", h0), ("initial_c", c0)):
        if v is None:
            states.append(np.zeros((nb, H), dtype=wts.cdt))
            continue
        check_shape(label, name, v, (nb, 1, H) if layout else (1, nb, H))
        states.append(v.reshape(nb, H).astype(wts.cdt, copy=False))
    h, c = states
    su = wts.setups.get("lstm_one_step")
    if su is None:  # [W; R] transposed and stacked, the bias and the clip of the direction
        wr = np.ascontiguousarray(np.concatenate((wts.w_t[0], wts.r_t[0]), axis=0))
        wr.flags.writeable = False
        su = wts.setups["lstm_one_step"] = (wr, None if wts.bias is None else wts.bias[0],
                                            wts.clipper(0, 4, True))
    wr, bias, clip = su
    gates = np.matmul(np.concatenate((x2, h), axis=1), wr)
    if bias is not None:
        gates += bias
    if clip is not None:
        clip(gates)
    np.tanh(gates, out=gates)
    half = wts.cdt.type(0.5)
    sig = gates[:, :3 * H]  # o, i, f (LSTM_ORDER), their inputs halved: sigmoid = tanh / 2 + 1/2
    sig *= half
    sig += half
    go, gi, gf, gc = (gates[:, k * H:(k + 1) * H] for k in range(4))
    cell = gf * c
    cell += gi * gc
    hn = np.tanh(cell)
    hn *= go
    shape = (nb, 1, H) if layout else (1, nb, H)
    y = None
    if outputs and outputs[0]:
        y = (hn.copy() if len(outputs) > 1 and outputs[1] else hn).reshape((nb, 1, 1, H) if layout else (1, 1, nb, H))
    res = (y, hn.reshape(shape), cell.reshape(shape))
    return tuple(v if i < len(outputs) and outputs[i] else None for i, v in enumerate(res))[: len(outputs)]
