"""Sequence kernels (SequenceConstruct ... SequenceMap) against the reference evaluator and numpy."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper
from onnx.reference import ReferenceEvaluator

import ort_core as ort
from ort_core.errors import KernelError

from .kernel_harness import run_ours

rng = np.random.default_rng(3)


def _seq_tp(elem=T.FLOAT):
    return helper.make_sequence_type_proto(helper.make_tensor_type_proto(elem, None))


def _type_of(x):
    if isinstance(x, list):
        return _seq_tp(helper.np_dtype_to_tensor_dtype(x[0].dtype) if x else T.FLOAT)
    return helper.make_tensor_type_proto(helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)


def reference(op_type, inputs, attrs=None, opset=17):
    """The reference evaluator's outputs for one node whose inputs may be sequences."""
    names = [f"x{i}" if x is not None else "" for i, x in enumerate(inputs)]
    node = helper.make_node(op_type, names, ["y"], **dict(attrs or {}))
    g_in = [helper.make_value_info(n, _type_of(x)) for n, x in zip(names, inputs) if x is not None]
    graph = helper.make_graph([node], "t", g_in, [helper.make_value_info("y", helper.TypeProto())])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return ReferenceEvaluator(model).run(None, {n: x for n, x in zip(names, inputs) if x is not None})[0]


def assert_same(ours, ref):
    if isinstance(ref, list):
        assert isinstance(ours, list) and len(ours) == len(ref)
        for a, b in zip(ours, ref):
            assert_same(a, b)
        return
    a, b = np.asarray(ours), np.asarray(ref)
    assert a.dtype == b.dtype and a.shape == b.shape
    np.testing.assert_array_equal(a, b)


def check(op_type, inputs, attrs=None, opset=17):
    (ours,) = run_ours(op_type, inputs, attrs, opset=opset)
    assert_same(ours, reference(op_type, inputs, attrs, opset))
    return ours


def seq(*shapes, dtype=np.float32):
    return [rng.standard_normal(s).astype(dtype) for s in shapes]


# ------------------------------------------------------------------------------ basic list ops

def test_construct_length_and_at():
    a, b, c = seq((2,), (3, 1), ())
    s = check("SequenceConstruct", [a, b, c], opset=11)
    assert s[0] is a and s[2] is c
    (n,) = run_ours("SequenceLength", [s], opset=11)
    assert n.dtype == np.int64 and n.shape == () and n == 3
    for p in (0, 2, -1, -3):
        for dt in (np.int32, np.int64):
            check("SequenceAt", [s, np.array(p, dt)], opset=11)


def test_construct_rejects_mixed_dtypes():
    with pytest.raises(KernelError, match="dtype"):
        run_ours("SequenceConstruct", [np.zeros(2, np.float32), np.zeros(2, np.int64)], opset=11)


def test_sequence_empty_and_length_zero():
    (s,) = run_ours("SequenceEmpty", [], {"dtype": T.INT64}, opset=11)
    assert s == []
    (n,) = run_ours("SequenceLength", [s], opset=11)
    assert n == 0
    with pytest.raises(KernelError, match="unsupported dtype"):
        run_ours("SequenceEmpty", [], {"dtype": 12345}, opset=11)


@pytest.mark.parametrize("position", [None, 0, 1, 3, -1, -3])
def test_insert(position):
    s = seq((2,), (2,), (2,))
    t = rng.standard_normal(2).astype(np.float32)
    pos = None if position is None else np.array(position, np.int64)
    before = list(s)
    if position == len(s):
        # position n means the back ([-n, n] is the valid range); the reference evaluator wraps it
        # to the front, onnxruntime appends
        (out,) = run_ours("SequenceInsert", [s, t, pos], opset=11)
        assert out[:3] == s and out[3] is t
    else:
        check("SequenceInsert", [s, t, pos], opset=11)
    assert s == before  # the input list is never modified


@pytest.mark.parametrize("position", [None, 0, 2, -1, -3])
def test_erase(position):
    s = seq((2,), (3,), (4,))
    pos = None if position is None else np.array(position, np.int32)
    out = check("SequenceErase", [s, pos], opset=11)
    assert len(out) == 2 and len(s) == 3


def test_position_errors():
    s = seq((2,), (2,))
    with pytest.raises(KernelError, match=r"position 3 is out of range \[-2, 2\]"):
        run_ours("SequenceInsert", [s, s[0], np.array(3)], opset=11)
    with pytest.raises(KernelError, match=r"out of range \[-2, 1\]"):
        run_ours("SequenceAt", [s, np.array(2)], opset=11)
    with pytest.raises(KernelError, match="empty sequence"):
        run_ours("SequenceErase", [[]], opset=11)
    with pytest.raises(KernelError, match="int32/int64"):
        run_ours("SequenceAt", [s, np.array(0.0)], opset=11)
    with pytest.raises(KernelError, match="does not match"):
        run_ours("SequenceInsert", [s, np.zeros(2, np.int64)], opset=11)
    with pytest.raises(KernelError, match="must be a sequence"):
        run_ours("SequenceLength", [np.zeros(2)], opset=11)


# ----------------------------------------------------------------------- split / concatenate

@pytest.mark.parametrize("split,axis,keepdims", [
    (None, 0, 1), (None, 1, 0), (None, -1, 1), (np.array(2, np.int64), 1, 1), (np.array(4, np.int32), 1, 0),
    (np.array([1, 2], np.int64), 0, 1), (np.array([2, 0, 3, 1], np.int64), 1, 1),
])
@pytest.mark.parametrize("opset", [11, 24])
def test_split_to_sequence(split, axis, keepdims, opset):
    x = np.arange(18, dtype=np.float32).reshape(3, 6)
    if split is not None and split.ndim == 1 and split.sum() != x.shape[axis]:
        pytest.skip("sizes for another axis")
    out = check("SplitToSequence", [x, split], {"axis": axis, "keepdims": keepdims}, opset=opset)
    joined = np.concatenate(out, axis=axis) if (keepdims or split is not None) else np.stack(out, axis=axis)
    np.testing.assert_array_equal(joined, x)


def test_split_to_sequence_errors():
    x = np.zeros((2, 3), np.float32)
    with pytest.raises(KernelError, match="sum to the axis length 3"):
        run_ours("SplitToSequence", [x, np.array([1, 1])], {"axis": 1}, opset=11)
    with pytest.raises(KernelError, match="must be positive"):
        run_ours("SplitToSequence", [x, np.array(0)], {"axis": 1}, opset=11)
    with pytest.raises(KernelError, match="axis 2 is out of range"):
        run_ours("SplitToSequence", [x], {"axis": 2}, opset=11)


@pytest.mark.parametrize("axis,new_axis", [(0, 0), (1, 0), (-1, 0), (0, 1), (2, 1), (-1, 1), (-3, 1)])
def test_concat_from_sequence(axis, new_axis):
    s = seq((2, 3), (2, 3), (2, 3))
    out = check("ConcatFromSequence", [s], {"axis": axis, "new_axis": new_axis}, opset=11)
    expected = np.stack(s, axis=axis) if new_axis else np.concatenate(s, axis=axis)
    np.testing.assert_array_equal(out, expected)


def test_concat_from_sequence_errors():
    with pytest.raises(KernelError, match="'axis' is required"):
        run_ours("ConcatFromSequence", [seq((2,))], {}, opset=11)
    with pytest.raises(KernelError, match="empty sequence"):
        run_ours("ConcatFromSequence", [[]], {"axis": 0}, opset=11)
    with pytest.raises(KernelError, match="axis 2 is out of range"):
        run_ours("ConcatFromSequence", [seq((2, 3))], {"axis": 2}, opset=11)
    with pytest.raises(KernelError, match="cannot be joined"):
        run_ours("ConcatFromSequence", [seq((2, 3), (3, 3))], {"axis": 1}, opset=11)


# ---------------------------------------------------------------------------------- SequenceMap

def _map_session(body, inputs, outputs, n_in):
    node = helper.make_node("SequenceMap", [f"i{k}" for k in range(n_in)], [f"o{k}" for k in range(len(outputs))],
                            body=body)
    graph = helper.make_graph([node], "g", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return ort.InferenceSession(model.SerializeToString())


def test_sequence_map_zips_sequences_repeats_tensors_and_reads_outer_scope():
    body = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["s"]), helper.make_node("Mul", ["s", "k"], ["p"]),
         helper.make_node("Shape", ["a"], ["shp"])],
        "body", [helper.make_tensor_value_info("a", T.FLOAT, None), helper.make_tensor_value_info("b", T.FLOAT, None)],
        [helper.make_tensor_value_info("p", T.FLOAT, None), helper.make_tensor_value_info("shp", T.INT64, None)])
    seq_in = helper.make_value_info("i0", _seq_tp())
    outs = [helper.make_value_info("o0", _seq_tp()), helper.make_value_info("o1", _seq_tp(T.INT64))]
    k_in = helper.make_tensor_value_info("k", T.FLOAT, [])
    sess = _map_session(body, [seq_in, helper.make_tensor_value_info("i1", T.FLOAT, None), k_in], outs, 2)
    xs = seq((2,), (3,), (1, 3))
    b = np.float32(1.5)
    p, shp = sess.run(None, {"i0": xs, "i1": b, "k": np.float32(2)})
    assert len(p) == 3 and len(shp) == 3
    for x, pi, si in zip(xs, p, shp):
        np.testing.assert_allclose(pi, (x + b) * 2)
        np.testing.assert_array_equal(si, x.shape)
    # a second sequence is zipped element by element
    sess = _map_session(body, [seq_in, helper.make_value_info("i1", _seq_tp()), k_in], outs, 2)
    ys = seq((2,), (3,), (1, 3))
    p, _ = sess.run(None, {"i0": xs, "i1": ys, "k": np.float32(1)})
    for x, y, pi in zip(xs, ys, p):
        np.testing.assert_allclose(pi, x + y)
    with pytest.raises(KernelError, match="input 1 has 2 elements, the first sequence has 3"):
        sess.run(None, {"i0": xs, "i1": ys[:2], "k": np.float32(1)})
    p, shp = sess.run(None, {"i0": [], "i1": [], "k": np.float32(1)})
    assert p == [] and shp == []


def test_sequence_map_body_arity_is_checked():
    body = helper.make_graph([helper.make_node("Identity", ["a"], ["b"])], "body",
                             [helper.make_tensor_value_info("a", T.FLOAT, None)],
                             [helper.make_tensor_value_info("b", T.FLOAT, None)])
    with pytest.raises(KernelError, match="body has 1 input"):
        _map_session(body, [helper.make_value_info("i0", _seq_tp()), helper.make_value_info("i1", _seq_tp())],
                     [helper.make_value_info("o0", _seq_tp())], 2)
