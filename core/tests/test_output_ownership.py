"""Outputs belong to the caller: never memory of a feed, a weight or a folded constant, and writable."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import ort_core as ort

from .conftest import make_model


def _vi(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def test_a_reshape_of_an_input_does_not_share_the_callers_memory():
    shape = numpy_helper.from_array(np.array([4], np.int64), "shape")
    model = make_model([helper.make_node("Reshape", ["x", "shape"], ["y"])], [_vi("x", [2, 2])], [_vi("y", [4])],
                       [shape])
    sess = ort.InferenceSession(model)
    x = np.arange(4, dtype=np.float32).reshape(2, 2)
    (y,) = sess.run(None, {"x": x})
    assert not np.shares_memory(y, x) and y.flags.writeable
    y[0] = 99
    assert x[0, 0] == 0


def test_an_input_returned_as_an_output_is_a_copy():
    model = make_model([helper.make_node("Identity", ["x"], ["y"])], [_vi("x", [3])], [_vi("y", [3])])
    x = np.ones(3, np.float32)
    (y,) = ort.InferenceSession(model).run(None, {"x": x})
    assert not np.shares_memory(y, x)


def test_a_weight_or_folded_constant_returned_is_writable_and_runs_do_not_see_the_callers_writes():
    w = numpy_helper.from_array(np.array([1, 2, 3], np.float32), "w")
    nodes = [helper.make_node("Identity", ["w"], ["weight"]),  # a weight as an output
             helper.make_node("Mul", ["w", "w"], ["square"]),  # folded into a constant at creation
             helper.make_node("Add", ["x", "w"], ["y"])]
    model = make_model(nodes, [_vi("x", [3])], [_vi("weight", [3]), _vi("square", [3]), _vi("y", [3])], [w])
    sess = ort.InferenceSession(model)
    x = np.zeros(3, np.float32)
    weight, square, y = sess.run(None, {"x": x})
    assert weight.flags.writeable and square.flags.writeable
    weight[:] = -1
    square[:] = -1
    weight2, square2, y2 = sess.run(None, {"x": x})
    np.testing.assert_array_equal(weight2, [1, 2, 3])
    np.testing.assert_array_equal(square2, [1, 4, 9])
    np.testing.assert_array_equal(y2, [1, 2, 3])


def test_a_fresh_result_is_handed_over_without_a_copy():
    """Only outputs the caller must not own are copied: a kernel's own new array goes out as it is."""
    model = make_model([helper.make_node("Add", ["x", "x"], ["y"])], [_vi("x", [4])], [_vi("y", [4])])
    plan = ort.InferenceSession(model)._plan
    x, fresh = np.ones(4, np.float32), np.full(4, 2, np.float32)
    view_of_fresh = fresh.reshape(2, 2)
    kept = plan._unshared([fresh, view_of_fresh, x, x[1:]], {0: x})
    assert kept[0] is fresh and kept[1] is view_of_fresh  # not copied
    assert kept[2] is not x and kept[3].base is None and not np.shares_memory(kept[3], x)  # copied
