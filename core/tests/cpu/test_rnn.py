"""RNN, GRU and LSTM against onnx's reference evaluator (basic cases) and against a naive per-sample
loop written from the spec (sequence_lens, activation lists, clip, input_forget), which the
reference evaluator ignores."""

from __future__ import annotations

import numpy as np
import pytest

from ort_core.errors import KernelError
from ort_core.ir.graph import Node
from ort_core.providers.cpu.registry import lookup

from .kernel_harness import check, run_ours

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def weights(rng, op, dirs, hidden, isz, dtype=np.float32, bias=True):
    g = GATES[op]
    w = rng.standard_normal((dirs, g * hidden, isz)).astype(dtype) * 0.5
    r = rng.standard_normal((dirs, g * hidden, hidden)).astype(dtype) * 0.5
    b = rng.standard_normal((dirs, 2 * g * hidden)).astype(dtype) * 0.5 if bias else None
    return w, r, b


def run_node(op, inputs, attrs, outputs, opset=22):
    """Our kernel for a node whose output list may contain omitted ('') outputs."""
    names = [f"x{i}" if x is not None else "" for i, x in enumerate(inputs)]
    node = Node(op, names, outputs, dict(attrs), name=f"test_{op}", id=0)
    return list(lookup("", op, opset).factory(node, opset)(*inputs))


# ---------------------------------------------------------------------------------------------
# a naive reference written from the spec: one sample, one direction, one step at a time
# ---------------------------------------------------------------------------------------------

ACTS = {
    "Relu": lambda x, a, b: np.maximum(x, 0),
    "Tanh": lambda x, a, b: np.tanh(x),
    "Sigmoid": lambda x, a, b: 1 / (1 + np.exp(-x)),
    "Affine": lambda x, a, b: a * x + b,
    "LeakyRelu": lambda x, a, b: np.where(x < 0, a * x, x),
    "ThresholdedRelu": lambda x, a, b: np.where(x > a, x, 0),
    "ScaledTanh": lambda x, a, b: a * np.tanh(b * x),
    "HardSigmoid": lambda x, a, b: np.maximum(0, np.minimum(1, a * x + b)),
    "Elu": lambda x, a, b: np.where(x < 0, a * (np.exp(x) - 1), x),
    "Softsign": lambda x, a, b: x / (1 + np.abs(x)),
    "Softplus": lambda x, a, b: np.log(1 + np.exp(x)),
}
DEFAULT_ACTS = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"]}
DEFAULT_AB = {"Affine": (1.0, 0.0), "LeakyRelu": (0.01, 0.0), "ThresholdedRelu": (1.0, 0.0),
              "ScaledTanh": (1.0, 1.0), "HardSigmoid": (0.2, 0.5), "Elu": (1.0, 0.0)}
TAKES = {"Affine": "ab", "LeakyRelu": "a", "ThresholdedRelu": "a", "ScaledTanh": "ab", "HardSigmoid": "ab",
         "Elu": "a"}


def naive(op, x, w, r, b=None, lens=None, h0=None, c0=None, p=None, direction="forward",
          activations=None, alphas=(), betas=(), clip=None, lbr=0, input_forget=0):
    x, w, r = (v.astype(np.float64) for v in (x, w, r))
    T, N, _ = x.shape
    D, H = w.shape[0], r.shape[-1]
    n = len(DEFAULT_ACTS[op])
    names = activations or DEFAULT_ACTS[op] * D
    alphas, betas = list(alphas), list(betas)
    fns = []
    for name in names:
        a, bb = DEFAULT_AB.get(name, (0.0, 0.0))
        if "a" in TAKES.get(name, "") and alphas:
            a = alphas.pop(0)
        if "b" in TAKES.get(name, "") and betas:
            bb = betas.pop(0)
        fns.append(lambda v, fn=ACTS[name], a=a, bb=bb: fn(v, a, bb))

    def cl(v):
        return v if clip is None else np.clip(v, -clip, clip)

    y = np.zeros((T, D, N, H))
    yh, yc = np.zeros((D, N, H)), np.zeros((D, N, H))
    for d in range(D):
        F = fns[d * n:(d + 1) * n]
        bias = np.zeros(2 * GATES[op] * H) if b is None else b[d].astype(np.float64)
        wb, rb = bias[:GATES[op] * H], bias[GATES[op] * H:]
        rev = direction == "reverse" or d == 1
        for s in range(N):
            L = T if lens is None else int(lens[s])
            h = np.zeros(H) if h0 is None else h0[d, s].astype(np.float64)
            c = np.zeros(H) if c0 is None else c0[d, s].astype(np.float64)
            for t in (range(L - 1, -1, -1) if rev else range(L)):
                xt = x[t, s]
                if op == "RNN":
                    h = F[0](cl(w[d] @ xt + r[d] @ h + wb + rb))
                elif op == "GRU":
                    gx = w[d] @ xt + wb
                    z = F[0](cl(gx[:H] + r[d][:H] @ h + rb[:H]))
                    rr = F[0](cl(gx[H:2 * H] + r[d][H:2 * H] @ h + rb[H:2 * H]))
                    if lbr:
                        hh = F[1](cl(gx[2 * H:] + rr * (r[d][2 * H:] @ h + rb[2 * H:])))
                    else:
                        hh = F[1](cl(gx[2 * H:] + r[d][2 * H:] @ (rr * h) + rb[2 * H:]))
                    h = (1 - z) * hh + z * h
                else:
                    gt = w[d] @ xt + r[d] @ h + wb + rb
                    pi, po, pf = (np.zeros(H),) * 3 if p is None else np.split(p[d].astype(np.float64), 3)
                    i = F[0](cl(gt[:H] + pi * c))
                    f = 1 - i if input_forget else F[0](cl(gt[2 * H:3 * H] + pf * c))
                    c = f * c + i * F[1](cl(gt[3 * H:]))
                    o = F[0](cl(gt[H:2 * H] + po * c))
                    h = o * F[2](c)
                y[t, d, s] = h
            if L > 0:  # a sequence of length 0 ends with zero states, as in onnxruntime
                yh[d, s], yc[d, s] = h, c
    return y, yh, yc


def compare(op, inputs, attrs, rtol=1e-5, atol=1e-6, **naive_kw):
    n_out = 3 if op == "LSTM" else 2
    ours = run_ours(op, inputs, attrs, opset=22, n_outputs=n_out)
    x, w, r, b, lens, h0 = (inputs + [None] * 6)[:6]
    c0, p = (inputs[6:] + [None, None])[:2]
    expected = naive(op, x, w, r, b, lens, h0, c0, p, direction=attrs.get("direction", "forward"),
                     activations=attrs.get("activations"), alphas=attrs.get("activation_alpha", ()),
                     betas=attrs.get("activation_beta", ()), clip=attrs.get("clip"),
                     lbr=attrs.get("linear_before_reset", 0), input_forget=attrs.get("input_forget", 0))
    for i, (a, e) in enumerate(zip(ours, expected)):
        assert a.dtype == x.dtype, f"output {i}"
        np.testing.assert_allclose(a.astype(np.float64), e, rtol=rtol, atol=atol, err_msg=f"output {i}")
    return ours


# ---------------------------------------------------------------------------------------------
# against onnx's reference evaluator
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("layout", [0, 1])
def test_against_reference(op, direction, layout):
    rng = np.random.default_rng(0)
    T, N, isz, H = 5, 3, 4, 6
    D = 2 if direction == "bidirectional" else 1
    w, r, b = weights(rng, op, D, H, isz)
    x = rng.standard_normal((N, T, isz) if layout else (T, N, isz)).astype(np.float32)
    h0 = rng.standard_normal((N, D, H) if layout else (D, N, H)).astype(np.float32)
    inputs = [x, w, r, b, None, h0]
    if op == "LSTM":
        inputs += [rng.standard_normal(h0.shape).astype(np.float32), rng.standard_normal((D, 3 * H)).astype(np.float32)]
    attrs = dict(hidden_size=H, direction=direction, layout=layout)
    check(op, inputs, attrs, opset=22, n_outputs=3 if op == "LSTM" else 2, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("lbr", [0, 1])
def test_gru_linear_before_reset(lbr):
    rng = np.random.default_rng(1)
    w, r, b = weights(rng, "GRU", 2, 5, 3)
    x = rng.standard_normal((4, 2, 3)).astype(np.float32)
    attrs = dict(hidden_size=5, linear_before_reset=lbr, direction="bidirectional")
    check("GRU", [x, w, r, b], attrs, opset=22, n_outputs=2, rtol=1e-5, atol=1e-5)
    compare("GRU", [x, w, r, b], attrs)


def test_defaults_without_bias_or_states():
    rng = np.random.default_rng(2)
    for op in GATES:
        w, r, _ = weights(rng, op, 1, 3, 2, bias=False)
        x = rng.standard_normal((3, 2, 2)).astype(np.float32)
        check(op, [x, w, r], dict(hidden_size=3), opset=14, n_outputs=2, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------------------------
# against the naive loop: what the reference evaluator does not implement
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_sequence_lens(op, direction):
    rng = np.random.default_rng(3)
    T, N, isz, H = 6, 4, 3, 5
    D = 2 if direction == "bidirectional" else 1
    w, r, b = weights(rng, op, D, H, isz)
    x = rng.standard_normal((T, N, isz)).astype(np.float32)
    lens = np.array([6, 2, 0, 4], np.int32)
    h0 = rng.standard_normal((D, N, H)).astype(np.float32)
    inputs = [x, w, r, b, lens, h0]
    if op == "LSTM":
        inputs += [rng.standard_normal((D, N, H)).astype(np.float32), None]
    y = compare(op, inputs, dict(hidden_size=H, direction=direction))[0]
    assert not y[2:, :, 1].any() and not y[:, :, 2].any()  # past each sequence's end: zeros


def test_sequence_lens_batch_major():
    rng = np.random.default_rng(4)
    w, r, b = weights(rng, "LSTM", 2, 4, 3)
    x = rng.standard_normal((3, 5, 3)).astype(np.float32)  # layout 1: [batch, seq, input]
    lens = np.array([5, 1, 3], np.int32)
    ours = run_ours("LSTM", [x, w, r, b, lens], dict(hidden_size=4, direction="bidirectional", layout=1),
                    opset=22, n_outputs=3)
    y, yh, yc = naive("LSTM", x.swapaxes(0, 1), w, r, b, lens, direction="bidirectional")
    np.testing.assert_allclose(ours[0], y.transpose(2, 0, 1, 3), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ours[1], yh.swapaxes(0, 1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ours[2], yc.swapaxes(0, 1), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op,acts,alphas,betas", [
    ("RNN", ["Relu"], [], []),
    ("RNN", ["Affine", "LeakyRelu"], [0.5, 0.2], [0.1]),
    ("RNN", ["Softsign", "Softplus"], [], []),
    ("GRU", ["HardSigmoid", "Softsign", "Sigmoid", "Elu"], [0.3, 0.7], [0.4]),
    ("GRU", ["Sigmoid", "ScaledTanh"], [1.5], [0.5]),
    ("LSTM", ["HardSigmoid", "Tanh", "ThresholdedRelu", "Sigmoid", "Elu", "Softsign"], [0.25, 0.1, 0.9], [0.6]),
    ("LSTM", ["sigmoid", "relu", "tanh"], [], []),
], ids=lambda v: str(v))
def test_activations(op, acts, alphas, betas):
    rng = np.random.default_rng(5)
    n = len(DEFAULT_ACTS[op])
    D = len(acts) // n
    direction = "bidirectional" if D == 2 else "forward"
    w, r, b = weights(rng, op, D, 4, 3)
    x = rng.standard_normal((5, 2, 3)).astype(np.float32)
    attrs = dict(hidden_size=4, direction=direction, activations=acts)
    if alphas:
        attrs["activation_alpha"] = alphas
    if betas:
        attrs["activation_beta"] = betas
    names = [a.capitalize() if a.islower() else a for a in acts]  # our kernel ignores case
    ours = run_ours(op, [x, w, r, b], attrs, opset=22, n_outputs=2)
    y, yh, _ = naive(op, x, w, r, b, direction=direction, activations=names, alphas=alphas, betas=betas)
    np.testing.assert_allclose(ours[0], y, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ours[1], yh, rtol=1e-5, atol=1e-6)


def test_one_activation_set_shared_by_both_directions():
    rng = np.random.default_rng(6)
    w, r, b = weights(rng, "RNN", 2, 3, 2)
    x = rng.standard_normal((4, 1, 2)).astype(np.float32)
    ours = run_ours("RNN", [x, w, r, b], dict(hidden_size=3, direction="bidirectional", activations=["Relu"]),
                    opset=22, n_outputs=2)
    y, _, _ = naive("RNN", x, w, r, b, direction="bidirectional", activations=["Relu", "Relu"])
    np.testing.assert_allclose(ours[0], y, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_clip(op):
    rng = np.random.default_rng(7)
    w, r, b = weights(rng, op, 1, 4, 3)
    x = (rng.standard_normal((5, 2, 3)) * 4).astype(np.float32)
    compare(op, [x, w * 3, r * 3, b], dict(hidden_size=4, clip=0.5))


def test_lstm_input_forget_and_peepholes():
    rng = np.random.default_rng(8)
    w, r, b = weights(rng, "LSTM", 2, 4, 3)
    x = rng.standard_normal((5, 3, 3)).astype(np.float32)
    p = rng.standard_normal((2, 12)).astype(np.float32)
    compare("LSTM", [x, w, r, b, None, None, None, p], dict(hidden_size=4, input_forget=1,
                                                           direction="bidirectional"))


def test_float64_and_float16():
    rng = np.random.default_rng(9)
    w, r, b = weights(rng, "GRU", 1, 4, 3, dtype=np.float64)
    x = rng.standard_normal((5, 2, 3))
    compare("GRU", [x, w, r, b], dict(hidden_size=4), rtol=1e-12, atol=1e-12)
    h = [v.astype(np.float16) for v in (x, w, r, b)]
    compare("GRU", h, dict(hidden_size=4), rtol=2e-3, atol=2e-3)


def test_omitted_outputs_and_old_opsets():
    rng = np.random.default_rng(10)
    w, r, b = weights(rng, "LSTM", 1, 3, 2)
    x = rng.standard_normal((4, 2, 2)).astype(np.float32)
    y, yh, yc = naive("LSTM", x, w, r, b)
    outs = run_node("LSTM", [x, w, r, b], dict(hidden_size=3), ["", "yh", ""], opset=7)
    assert len(outs) == 3 and outs[0] is None and outs[2] is None
    np.testing.assert_allclose(outs[1], yh, rtol=1e-5, atol=1e-6)
    outs = run_node("LSTM", [x, w, r, b], dict(hidden_size=3), ["y"], opset=1)
    assert len(outs) == 1
    np.testing.assert_allclose(outs[0], y, rtol=1e-5, atol=1e-6)
    w, r, b = weights(rng, "GRU", 1, 3, 2)
    outs = run_node("GRU", [x, w, r, b], dict(hidden_size=3, linear_before_reset=1), ["y", "yh"], opset=1)
    # GRU-1 has no linear_before_reset: the attribute is not read
    np.testing.assert_allclose(outs[1], naive("GRU", x, w, r, b)[1], rtol=1e-5, atol=1e-6)


def test_stateless_across_calls():
    rng = np.random.default_rng(11)
    w, r, b = weights(rng, "LSTM", 2, 3, 2)
    x = rng.standard_normal((4, 2, 2)).astype(np.float32)
    node = Node("LSTM", ["x", "w", "r", "b"], ["y", "yh", "yc"], dict(hidden_size=3, direction="bidirectional"),
                name="n", id=0)
    kernel = lookup("", "LSTM", 22).factory(node, 22)
    x_copy, w_copy = x.copy(), w.copy()
    first = kernel(x, w, r, b)
    second = kernel(x, w, r, b)
    for a, c in zip(first, second):
        np.testing.assert_array_equal(a, c)
    np.testing.assert_array_equal(x, x_copy)
    np.testing.assert_array_equal(w, w_copy)


def test_errors():
    rng = np.random.default_rng(12)
    w, r, b = weights(rng, "RNN", 1, 3, 2)
    x = rng.standard_normal((4, 2, 2)).astype(np.float32)
    with pytest.raises(KernelError, match="unknown direction"):
        run_ours("RNN", [x, w, r], dict(direction="sideways"), opset=22, n_outputs=2)
    with pytest.raises(KernelError, match="input 'W' has shape"):
        run_ours("RNN", [x, w, r], dict(direction="bidirectional"), opset=22, n_outputs=2)
    with pytest.raises(KernelError, match=r"input 'W' has shape \(1, 3, 2\), expected \(1, 4, 2\)"):
        run_ours("RNN", [x, w, r], dict(hidden_size=4), opset=22, n_outputs=2)
    with pytest.raises(KernelError, match="input 'R' has shape"):
        run_ours("RNN", [x, w, r[:, :, :2]], dict(hidden_size=3), opset=22, n_outputs=2)
    with pytest.raises(KernelError, match="unsupported activation 'Swish'"):
        run_ours("RNN", [x, w, r], dict(activations=["Swish"]), opset=22, n_outputs=2)
    with pytest.raises(KernelError, match="expected 2 activations"):
        run_ours("GRU", [x, *weights(rng, "GRU", 1, 3, 2)], dict(activations=["Tanh"] * 3), opset=22,
                 n_outputs=2)
    with pytest.raises(KernelError, match="sequence_lens"):
        run_ours("RNN", [x, w, r, b, np.array([5, 1], np.int32)], {}, opset=22, n_outputs=2)
    with pytest.raises(KernelError, match="input 'initial_h' has shape"):
        run_ours("RNN", [x, w, r, b, None, np.zeros((1, 3, 3), np.float32)], {}, opset=22, n_outputs=2)
    with pytest.raises(KernelError, match="float tensor"):
        run_ours("RNN", [x.astype(np.int32), w, r], {}, opset=22, n_outputs=2)


def test_bfloat16_runs_in_float32():
    import ml_dtypes

    rng = np.random.default_rng(13)
    w, r, b = weights(rng, "LSTM", 1, 3, 4)
    x = rng.standard_normal((3, 2, 4)).astype(np.float32)
    bf = [v.astype(ml_dtypes.bfloat16) for v in (x, w, r, b)]
    ours = run_ours("LSTM", bf, dict(hidden_size=3), opset=22, n_outputs=3)
    assert all(o.dtype == ml_dtypes.bfloat16 for o in ours)
    expected = naive("LSTM", *[v.astype(np.float32) for v in bf])
    for a, e in zip(ours, expected):
        np.testing.assert_allclose(a.astype(np.float32), e, rtol=2e-2, atol=2e-2)
