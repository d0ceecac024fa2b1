"""RNN, GRU and LSTM whole models against onnxruntime: weights prepared once when they are initializers
(and not stale on the next run), weights fed as graph inputs, bidirectional, batch > 1 (the per-row
product of large weights included), sequence_lens, initial states, GRU's linear_before_reset."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import ort_core
from ort_core.providers.cpu.ops import rnn

ort = pytest.importorskip("onnxruntime")

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def weight_sources(weights, as_inputs):
    """(graph inputs, initializers): X, then W, R, B as initializers, or as graph inputs when ``as_inputs``."""
    graph_inputs = [helper.make_tensor_value_info("X", TensorProto.FLOAT, None)]
    inits = []
    for name, value in zip(("W", "R", "B"), weights):
        if as_inputs:
            graph_inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, value.shape))
        else:
            inits.append(numpy_helper.from_array(value, name))
    return graph_inputs, inits


def build(op, dirs, hidden, isz, weights, as_inputs, extra=(), attrs=None, opset=17):
    """A one-node model X[, sequence_lens, initial_h, initial_c, P] -> Y, Y_h[, Y_c]; W, R, B are
    initializers, or graph inputs when ``as_inputs``."""
    names = ["X", "W", "R", "B", *extra]
    graph_inputs, inits = weight_sources(weights, as_inputs)
    for name in extra:
        if name:
            elem = TensorProto.INT32 if name == "L" else TensorProto.FLOAT
            graph_inputs.append(helper.make_tensor_value_info(name, elem, None))
    outs = ["Y", "Yh", "Yc"] if op == "LSTM" else ["Y", "Yh"]
    node = helper.make_node(op, names, outs, hidden_size=hidden, **dict(attrs or {}))
    graph = helper.make_graph([node], "g", graph_inputs, [helper.make_tensor_value_info(o, TensorProto.FLOAT, None)
                                                          for o in outs], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model.SerializeToString()


def weights(rng, op, dirs, hidden, isz, scale=0.5):
    g = GATES[op]
    return [(rng.standard_normal(shape) * scale).astype(np.float32)
            for shape in ((dirs, g * hidden, isz), (dirs, g * hidden, hidden), (dirs, 2 * g * hidden))]


def sessions(model):
    return (ort_core.InferenceSession(model, providers=["CPUExecutionProvider"]),
            ort.InferenceSession(model, providers=["CPUExecutionProvider"]))


def assert_same(ours, theirs, feeds, tol=2e-5):
    a, b = ours.run(None, feeds), theirs.run(None, feeds)
    assert len(a) == len(b)
    for i, (x, y) in enumerate(zip(a, b)):
        assert x.dtype == y.dtype and x.shape == y.shape, f"output {i}"
        np.testing.assert_allclose(x, y, rtol=tol, atol=tol, err_msg=f"output {i}")


class _Counting(rnn.RnnWeights):
    made = 0

    def __init__(self, *args, **kwargs):
        type(self).made += 1
        super().__init__(*args, **kwargs)


@pytest.fixture
def count_prepared(monkeypatch):
    _Counting.made = 0
    monkeypatch.setattr(rnn, "RnnWeights", _Counting)
    return _Counting


CASES = [(op, direction, batch) for op in GATES for direction in ("forward", "reverse", "bidirectional")
         for batch in (1, 3)]


@pytest.mark.parametrize("op,direction,batch", CASES)
def test_initializer_weights_prepared_once(op, direction, batch, count_prepared):
    rng = np.random.default_rng(0)
    D, H, isz, T = (2 if direction == "bidirectional" else 1), 5, 4, 6
    w = weights(rng, op, D, H, isz)
    attrs = dict(direction=direction, **({"linear_before_reset": 1} if op == "GRU" else {}))
    extra = ["", "H0"] + (["C0"] if op == "LSTM" else [])
    ours, theirs = sessions(build(op, D, H, isz, w, False, extra, attrs))
    assert count_prepared.made == 1  # at session creation
    for _ in range(3):  # new inputs every run: nothing from the previous run may leak in
        feeds = {"X": rng.standard_normal((T, batch, isz)).astype(np.float32),
                 "H0": rng.standard_normal((D, batch, H)).astype(np.float32)}
        if op == "LSTM":
            feeds["C0"] = rng.standard_normal((D, batch, H)).astype(np.float32)
        kept = {k: v.copy() for k, v in feeds.items()}
        assert_same(ours, theirs, feeds)
        for k, v in feeds.items():
            np.testing.assert_array_equal(v, kept[k])  # feeds are never written
    assert count_prepared.made == 1


@pytest.mark.parametrize("op", list(GATES))
def test_weights_fed_as_graph_inputs(op, count_prepared):
    rng = np.random.default_rng(1)
    D, H, isz, T, batch = 2, 4, 3, 5, 2
    ours, theirs = sessions(build(op, D, H, isz, weights(rng, op, D, H, isz), True,
                                  attrs=dict(direction="bidirectional")))
    for run in range(3):  # other weights every run
        w = weights(rng, op, D, H, isz)
        feeds = {"X": rng.standard_normal((T, batch, isz)).astype(np.float32), "W": w[0], "R": w[1], "B": w[2]}
        assert_same(ours, theirs, feeds)
        assert count_prepared.made == run + 1


@pytest.mark.parametrize("op", list(GATES))
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_sequence_lens(op, direction):
    rng = np.random.default_rng(2)
    D, H, isz, T = (2 if direction == "bidirectional" else 1), 6, 3, 7
    lens = np.array([7, 2, 5, 1], np.int32)
    extra = ["L", "H0"] + (["C0"] if op == "LSTM" else [])
    ours, theirs = sessions(build(op, D, H, isz, weights(rng, op, D, H, isz), False, extra,
                                  dict(direction=direction)))
    for _ in range(2):
        feeds = {"X": rng.standard_normal((T, 4, isz)).astype(np.float32), "L": lens,
                 "H0": rng.standard_normal((D, 4, H)).astype(np.float32)}
        if op == "LSTM":
            feeds["C0"] = rng.standard_normal((D, 4, H)).astype(np.float32)
        assert_same(ours, theirs, feeds)
        lens = lens[::-1].copy()


@pytest.mark.parametrize("lbr", [0, 1])
@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_gru_linear_before_reset(lbr, direction):
    rng = np.random.default_rng(3)
    D, H, isz = (2 if direction == "bidirectional" else 1), 8, 5
    ours, theirs = sessions(build("GRU", D, H, isz, weights(rng, "GRU", D, H, isz), False,
                                  attrs=dict(direction=direction, linear_before_reset=lbr)))
    for batch in (1, 4):
        assert_same(ours, theirs, {"X": rng.standard_normal((6, batch, isz)).astype(np.float32)})


@pytest.mark.parametrize("peepholes", [False, True])
@pytest.mark.parametrize("input_forget", [0, 1])
def test_lstm_peepholes_clip_input_forget_and_lens(peepholes, input_forget):
    rng = np.random.default_rng(4)
    D, H, isz, batch = 2, 4, 3, 3
    extra = ["L", "H0", "C0"] + (["P"] if peepholes else [])
    ours, theirs = sessions(build("LSTM", D, H, isz, weights(rng, "LSTM", D, H, isz), False, extra,
                                  dict(direction="bidirectional", clip=0.7, input_forget=input_forget)))
    feeds = {"X": (rng.standard_normal((5, batch, isz)) * 3).astype(np.float32),
             "L": np.array([5, 3, 1], np.int32),
             "H0": rng.standard_normal((D, batch, H)).astype(np.float32),
             "C0": rng.standard_normal((D, batch, H)).astype(np.float32)}
    if peepholes:
        feeds["P"] = rng.standard_normal((D, 3 * H)).astype(np.float32)
    assert_same(ours, theirs, feeds)


@pytest.mark.parametrize("op,hidden", [("LSTM", 512), ("GRU", 512), ("RNN", 1024)])
def test_large_weights_few_batch_rows(op, hidden):
    """Weights large enough for one vector product per batch row (rnn_prepared._ROWS_APART_BYTES)."""
    rng = np.random.default_rng(5)
    D, isz, batch = 2, 16, 3
    w = weights(rng, op, D, hidden, isz, scale=1 / np.sqrt(hidden))
    assert w[1][0].nbytes >= 2 << 20
    attrs = dict(direction="bidirectional", **({"linear_before_reset": 1} if op == "GRU" else {}))
    ours, theirs = sessions(build(op, D, hidden, isz, w, False, ["L"], attrs))
    for lens in ([4, 2, 3], [4, 4, 4]):
        feeds = {"X": rng.standard_normal((4, batch, isz)).astype(np.float32), "L": np.array(lens, np.int32)}
        assert_same(ours, theirs, feeds, tol=1e-4)



@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("dirs, layout", [(1, 0), (2, 0), (2, 1)])
def test_sequences_of_length_zero_end_with_zero_states_as_in_onnxruntime(op, dirs, layout):
    """onnxruntime runs no batch-major layout (layout=1): that case is checked against ort-core's own
    sequence-major run, transposed."""
    rng = np.random.default_rng(11)
    hidden, isz, batch, steps = 3, 2, 3, 4
    extra = ["L", "H0", "C0"] if op == "LSTM" else ["L", "H0"]
    model = build(op, dirs, hidden, isz, weights(rng, op, dirs, hidden, isz), False, extra,
                  {"direction": "bidirectional" if dirs == 2 else "forward", "layout": layout})
    x = rng.standard_normal((batch, steps, isz) if layout else (steps, batch, isz)).astype(np.float32)
    state = (batch, dirs, hidden) if layout else (dirs, batch, hidden)
    feeds = {"X": x, "L": np.array([0, steps, 2], np.int32), "H0": np.ones(state, np.float32)}
    if op == "LSTM":
        feeds["C0"] = np.full(state, 2.0, np.float32)
    ours = ort_core.InferenceSession(model, providers=["CPUExecutionProvider"])
    if layout:
        seq_major = build(op, dirs, hidden, isz, weights(np.random.default_rng(11), op, dirs, hidden, isz), False,
                          extra, {"direction": "bidirectional", "layout": 0})
        theirs = ort_core.InferenceSession(seq_major, providers=["CPUExecutionProvider"])
        moved = {k: (v.swapaxes(0, 1) if k != "L" else v) for k, v in feeds.items()}
        for i, (a, b) in enumerate(zip(ours.run(None, feeds), theirs.run(None, moved))):
            np.testing.assert_allclose(a, b.transpose(2, 0, 1, 3) if i == 0 else b.swapaxes(0, 1), rtol=1e-6)
    else:
        assert_same(ours, ort.InferenceSession(model, providers=["CPUExecutionProvider"]), feeds)
    final = ours.run(None, feeds)[1]
    assert not np.any(final[0] if layout else final[:, 0])  # the length-0 row: zeros, not its initial state


def lstm_model(hidden, isz, weights, as_inputs, outs=("Y", "Yh", "Yc"), attrs=None, initial=True):
    """LSTM X[, initial_h, initial_c] -> the ``outs`` wanted (others omitted: '')."""
    extra = ["", "H0", "C0"] if initial else []
    names = ["X", "W", "R", "B", *extra]
    graph_inputs, inits = weight_sources(weights, as_inputs)
    graph_inputs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in extra if n]
    node_outs = [o if o in outs else "" for o in ("Y", "Yh", "Yc")]
    while not node_outs[-1]:
        node_outs.pop()
    node = helper.make_node("LSTM", names, node_outs, hidden_size=hidden, **dict(attrs or {}))
    graph = helper.make_graph([node], "g", graph_inputs,
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


@pytest.fixture
def one_steps(monkeypatch):
    calls = []
    real = rnn.lstm_one_step

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(rnn, "lstm_one_step", counted)
    return calls


@pytest.mark.parametrize("as_inputs", [False, True])
@pytest.mark.parametrize("direction, clip", [("forward", None), ("reverse", None), ("forward", 0.6)])
def test_lstm_one_time_step_as_one_product(as_inputs, direction, clip, one_steps):
    """A stateful model's LSTM called with one time step per frame: the one-product path, against
    onnxruntime on frame after frame (states carried over), a batch of rows, then longer sequences
    (the time loop) and one step again on the same session."""
    rng = np.random.default_rng(7)
    hidden, isz = 16, 5
    w = weights(rng, "LSTM", 1, hidden, isz)
    attrs = {"direction": direction, **({"clip": clip} if clip is not None else {})}
    ours, theirs = sessions(lstm_model(hidden, isz, w, as_inputs, attrs=attrs))
    fed = dict(zip("WRB", w)) if as_inputs else {}
    for batch, steps in ((1, 1), (1, 1), (3, 1), (2, 4), (1, 1)):
        h = rng.standard_normal((1, batch, hidden)).astype(np.float32)
        c = rng.standard_normal((1, batch, hidden)).astype(np.float32)
        for _ in range(3):
            x = rng.standard_normal((steps, batch, isz)).astype(np.float32)
            feeds = {"X": x, "H0": h, "C0": c, **fed}
            assert_same(ours, theirs, feeds)
            _, h, c = ours.run(None, feeds)
    assert len(one_steps) == 2 * 3 * 4  # two runs per frame, four batches of one step
    y, yh, yc = ours.run(None, {"X": x[:1], "H0": h, "C0": c, **fed})
    assert not np.shares_memory(y, yh) and y.flags.writeable and yh.flags.writeable


@pytest.mark.parametrize("outs", [("Yh",), ("Y",), ("Yc", "Y"), ("Y", "Yh")])
def test_lstm_one_time_step_omitted_outputs_and_states(outs, one_steps):
    rng = np.random.default_rng(8)
    hidden, isz = 8, 3
    w = weights(rng, "LSTM", 1, hidden, isz)
    for initial in (True, False):
        ours, theirs = sessions(lstm_model(hidden, isz, w, False, outs=outs, initial=initial))
        for batch in (1, 2):
            feeds = {"X": rng.standard_normal((1, batch, isz)).astype(np.float32)}
            if initial:
                feeds.update(H0=rng.standard_normal((1, batch, hidden)).astype(np.float32),
                             C0=rng.standard_normal((1, batch, hidden)).astype(np.float32))
            assert_same(ours, theirs, feeds)
    assert one_steps


def test_lstm_one_time_step_batch_major_layout(one_steps):
    """layout=1 (onnxruntime runs none): against onnxruntime's layout-0 result, transposed."""
    rng = np.random.default_rng(9)
    hidden, isz, batch = 8, 4, 3
    w = weights(rng, "LSTM", 1, hidden, isz)
    ours = ort_core.InferenceSession(lstm_model(hidden, isz, w, False, attrs={"layout": 1}),
                                     providers=["CPUExecutionProvider"])
    theirs = ort.InferenceSession(lstm_model(hidden, isz, w, False), providers=["CPUExecutionProvider"])
    for _ in range(2):
        x = rng.standard_normal((1, batch, isz)).astype(np.float32)
        h, c = (rng.standard_normal((1, batch, hidden)).astype(np.float32) for _ in range(2))
        y, yh, yc = ours.run(None, {"X": x.swapaxes(0, 1), "H0": h.swapaxes(0, 1), "C0": c.swapaxes(0, 1)})
        ry, ryh, ryc = theirs.run(None, {"X": x, "H0": h, "C0": c})
        np.testing.assert_allclose(y, ry.transpose(2, 0, 1, 3), rtol=2e-5, atol=2e-5)
        np.testing.assert_allclose(yh, ryh.swapaxes(0, 1), rtol=2e-5, atol=2e-5)
        np.testing.assert_allclose(yc, ryc.swapaxes(0, 1), rtol=2e-5, atol=2e-5)
    assert len(one_steps) == 2
    with pytest.raises(Exception, match="initial_h"):
        ours.run(None, {"X": x.swapaxes(0, 1), "H0": h, "C0": c.swapaxes(0, 1)})
