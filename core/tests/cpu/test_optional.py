"""Optional kernels: Optional, OptionalHasElement and OptionalGetElement (None is the empty optional)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper

import ort_core as ort
from ort_core.errors import KernelError

from .kernel_harness import run_ours

TENSOR_TP = helper.make_tensor_type_proto(T.FLOAT, [2])


@pytest.mark.parametrize("opset", [15, 18, 28])
def test_optional_wraps_or_is_empty(opset):
    x = np.array([1, 2], np.float32)
    (y,) = run_ours("Optional", [x], opset=opset)
    assert y is x
    (y,) = run_ours("Optional", [None], {"type": TENSOR_TP}, opset=opset)
    assert y is None
    seq = [x, x]
    (y,) = run_ours("Optional", [seq], opset=opset)
    assert y is seq


def test_empty_optional_needs_type():
    with pytest.raises(KernelError, match="'type' attribute"):
        run_ours("Optional", [None], opset=15)


@pytest.mark.parametrize("opset", [15, 18, 28])
def test_has_element(opset):
    cases = [(np.zeros(2, np.float32), True), ([], True), ([np.zeros(1)], True)]
    if opset >= 18:  # an omitted input; an empty optional fed by name is tested through a session
        cases.append((None, False))
    for value, expected in cases:
        (y,) = run_ours("OptionalHasElement", [value], opset=opset)
        assert y.dtype == np.bool_ and y.shape == () and bool(y) is expected


def test_has_element_without_input():
    (y,) = run_ours("OptionalHasElement", [], opset=18)
    assert y.dtype == np.bool_ and not y
    with pytest.raises(KernelError, match="required before opset 18"):
        run_ours("OptionalHasElement", [], opset=15)


@pytest.mark.parametrize("opset", [15, 18, 28])
def test_get_element(opset):
    x = np.arange(3, dtype=np.int32)
    (y,) = run_ours("OptionalGetElement", [x], opset=opset)
    assert y is x
    (y,) = run_ours("OptionalGetElement", [[x]], opset=opset)
    assert y == [x]
    with pytest.raises(KernelError, match="optional input is empty"):
        run_ours("OptionalGetElement", [None], opset=opset)


def test_optional_round_trip_in_a_session():
    opt_tp = helper.make_optional_type_proto(TENSOR_TP)
    nodes = [helper.make_node("OptionalHasElement", ["o"], ["has"]),
             helper.make_node("OptionalGetElement", ["o"], ["v"])]
    graph = helper.make_graph(nodes, "g", [helper.make_value_info("o", opt_tp)],
                              [helper.make_tensor_value_info("has", T.BOOL, []),
                               helper.make_tensor_value_info("v", T.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    sess = ort.InferenceSession(model.SerializeToString())
    has, v = sess.run(None, {"o": np.array([3, 4], np.float32)})
    assert has and v.tolist() == [3, 4]
    with pytest.raises(KernelError, match=r"\(OptionalGetElement\): the optional input is empty"):
        sess.run(None, {"o": None})
    graph = helper.make_graph(nodes[:1], "g", [helper.make_value_info("o", opt_tp)],
                              [helper.make_tensor_value_info("has", T.BOOL, [])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    model.ir_version = 8
    (has,) = ort.InferenceSession(model.SerializeToString()).run(None, {"o": None})
    assert has.dtype == np.bool_ and not has
