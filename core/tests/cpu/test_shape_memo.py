"""Slice, Squeeze and Unsqueeze keep what they derive from their small integer inputs between runs; a caller
refilling a fed array in place (the same object, new values) gets the new result, never a stale one."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

import ort_core as ort


def _session(nodes, inputs, outputs):
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return ort.InferenceSession(model.SerializeToString())


def test_slice_with_fed_bounds_refilled_in_place():
    vi = helper.make_tensor_value_info
    sess = _session([helper.make_node("Slice", ["x", "s", "e", "a"], ["y"])],
                    [vi("x", TensorProto.FLOAT, [4, 6]), vi("s", TensorProto.INT64, [1]),
                     vi("e", TensorProto.INT64, [1]), vi("a", TensorProto.INT64, [1])],
                    [vi("y", TensorProto.FLOAT, None)])
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    s, e, a = np.array([1]), np.array([3]), np.array([1])
    np.testing.assert_array_equal(sess.run(None, {"x": x, "s": s, "e": e, "a": a})[0], x[:, 1:3])
    np.testing.assert_array_equal(sess.run(None, {"x": x, "s": s, "e": e, "a": a})[0], x[:, 1:3])
    s[0], e[0], a[0] = 0, -1, 0  # the same arrays, new values
    np.testing.assert_array_equal(sess.run(None, {"x": x, "s": s, "e": e, "a": a})[0], x[0:-1, :])


def test_unsqueeze_and_squeeze_follow_new_shapes_and_axes():
    vi = helper.make_tensor_value_info
    sess = _session([helper.make_node("Unsqueeze", ["x", "a"], ["u"]), helper.make_node("Squeeze", ["u", "a"], ["y"])],
                    [vi("x", TensorProto.FLOAT, None), vi("a", TensorProto.INT64, [1])],
                    [vi("u", TensorProto.FLOAT, None), vi("y", TensorProto.FLOAT, None)])
    a = np.array([0])
    cases = (((2, 3), 0, (1, 2, 3)), ((2, 3), 0, (1, 2, 3)), ((5,), 0, (1, 5)), ((2, 3), -1, (2, 3, 1)))
    for shape, axis, expected in cases:
        a[0] = axis
        u, y = sess.run(None, {"x": np.ones(shape, np.float32), "a": a})
        assert u.shape == expected and y.shape == shape
