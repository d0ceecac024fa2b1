"""What kernels keep between runs for a stateful model called once per frame (issue 24): Pad's plan per input
shape and pads, LSTM's loop set-up per direction count and batch size, If's condition read. A later run with
other shapes, pads, batch sizes, lengths or branch must get its own right result, never a stale one."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import ort_core

ort = pytest.importorskip("onnxruntime")

vi = helper.make_tensor_value_info


def _model(nodes, inputs, outputs, inits=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model.SerializeToString()


def _both(model):
    return (ort_core.InferenceSession(model, providers=["CPUExecutionProvider"]),
            ort.InferenceSession(model, providers=["CPUExecutionProvider"]))


def _same(ours, theirs, feeds, tol=2e-5):
    a, b = ours.run(None, feeds), theirs.run(None, feeds)
    for i, (x, y) in enumerate(zip(a, b)):
        assert x.dtype == y.dtype and x.shape == y.shape, f"output {i}: {x.shape} vs {y.shape}"
        np.testing.assert_allclose(x, y, rtol=tol, atol=tol, err_msg=f"output {i}")


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_pad_follows_new_shapes_and_pads(mode):
    ins = ["x", "p", "v"] if mode == "constant" else ["x", "p"]
    inputs = [vi("x", TensorProto.FLOAT, None), vi("p", TensorProto.INT64, [4])]
    if mode == "constant":
        inputs.append(vi("v", TensorProto.FLOAT, []))
    ours, theirs = _both(_model([helper.make_node("Pad", ins, ["y"], mode=mode)], inputs,
                                [vi("y", TensorProto.FLOAT, None)]))
    rng = np.random.default_rng(0)
    p = np.array([0, 3, 0, 2], np.int64)
    for shape, pads in (((1, 8), None), ((1, 8), None), ((2, 5), None), ((1, 8), (0, 2, 0, 1)), ((2, 5), (1, 2, 1, 1)),
                        ((3, 6), (0, -2, 1, 3)), ((1, 8), (0, 3, 0, 2))):
        if pads is not None:
            p[:] = pads  # the same fed array, new values
        feeds = {"x": rng.standard_normal(shape).astype(np.float32), "p": p}
        if mode == "constant":
            feeds["v"] = np.array(1.5, np.float32)
        _same(ours, theirs, feeds)


def test_pad_of_an_empty_input_is_refused_for_gather_modes_every_time():
    ours, _ = _both(_model([helper.make_node("Pad", ["x", "p"], ["y"], mode="reflect")],
                           [vi("x", TensorProto.FLOAT, None), vi("p", TensorProto.INT64, [2])],
                           [vi("y", TensorProto.FLOAT, None)]))
    for _ in range(2):
        with pytest.raises(ort_core.OrtError, match="cannot pad an empty input"):
            ours.run(None, {"x": np.zeros((0,), np.float32), "p": np.array([1, 1], np.int64)})
    np.testing.assert_array_equal(ours.run(None, {"x": np.array([1, 2, 3], np.float32),
                                                  "p": np.array([2, 1], np.int64)})[0], [3, 2, 1, 2, 3, 2])


def _lstm(direction: str, D: int, H: int, isz: int, extra: dict):
    rng = np.random.default_rng(1)
    w = (rng.standard_normal((D, 4 * H, isz)) * 0.5).astype(np.float32)
    r = (rng.standard_normal((D, 4 * H, H)) * 0.5).astype(np.float32)
    b = (rng.standard_normal((D, 8 * H)) * 0.5).astype(np.float32)
    inits = [numpy_helper.from_array(v, n) for n, v in (("W", w), ("R", r), ("B", b))]
    node = helper.make_node("LSTM", ["X", "W", "R", "B", "L", "H0", "C0"], ["Y", "Yh", "Yc"], hidden_size=H,
                            direction=direction, **extra)
    inputs = [vi("X", TensorProto.FLOAT, None), vi("L", TensorProto.INT32, None),
              vi("H0", TensorProto.FLOAT, None), vi("C0", TensorProto.FLOAT, None)]
    return _both(_model([node], inputs, [vi(o, TensorProto.FLOAT, None) for o in ("Y", "Yh", "Yc")], inits))


@pytest.mark.parametrize("direction,extra", [("forward", {}), ("bidirectional", {}),
                                             ("forward", {"clip": 0.5, "input_forget": 1}),
                                             ("reverse", {"activations": ["HardSigmoid", "Tanh", "Relu"]})])
def test_lstm_setup_kept_per_batch_follows_batch_length_and_state_changes(direction, extra):
    D, H, isz = (2 if direction == "bidirectional" else 1), 5, 3
    ours, theirs = _lstm(direction, D, H, isz, extra)
    rng = np.random.default_rng(2)
    h0 = rng.standard_normal((D, 1, H)).astype(np.float32)
    c0 = rng.standard_normal((D, 1, H)).astype(np.float32)
    # one frame per call as a stateful model runs it, then other batch sizes and lengths, then frames again
    for T, batch, lens in ((1, 1, None), (1, 1, None), (4, 3, [4, 2, 1]), (1, 1, None), (2, 2, [1, 2]),
                           (3, 3, None), (1, 1, None)):
        if batch != h0.shape[1]:
            h0 = rng.standard_normal((D, batch, H)).astype(np.float32)
            c0 = rng.standard_normal((D, batch, H)).astype(np.float32)
        feeds = {"X": rng.standard_normal((T, batch, isz)).astype(np.float32),
                 "L": np.array(lens if lens is not None else [T] * batch, np.int32), "H0": h0, "C0": c0}
        h0_before, c0_before = h0.copy(), c0.copy()
        _same(ours, theirs, feeds)
        # the initial states are read, never written (the loop may use them without a copy)
        np.testing.assert_array_equal(h0, h0_before)
        np.testing.assert_array_equal(c0, c0_before)
        y, yh, yc = ours.run(None, feeds)
        assert not np.shares_memory(yh, h0) and not np.shares_memory(yc, c0)
        h0, c0 = yh, yc  # the next frame starts from this one's states


def test_if_condition_shapes_and_branches_alternate():
    then_g = helper.make_graph([helper.make_node("Add", ["x", "x"], ["t"])], "then", [],
                               [vi("t", TensorProto.FLOAT, None)])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [],
                               [vi("e", TensorProto.FLOAT, None)])
    node = helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)
    ours = ort_core.InferenceSession(_model([node], [vi("c", TensorProto.BOOL, None), vi("x", TensorProto.FLOAT, None)],
                                            [vi("y", TensorProto.FLOAT, None)]))
    x = np.array([1.0, -2.0], np.float32)
    for c, expected in ((np.array(True), 2 * x), (np.array([False]), -x), (np.array([[True]]), 2 * x),
                        (np.array(False), -x)):
        np.testing.assert_array_equal(ours.run(None, {"c": c, "x": x})[0], expected)
    with pytest.raises(ort_core.OrtError, match="single element"):
        ours.run(None, {"c": np.array([True, False]), "x": x})
