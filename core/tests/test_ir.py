"""IR loading and saving: sources, external data, opsets per domain, subgraphs, round trip."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import ort_core as ort
from ort_core.ir import load_model, model_to_proto
from ort_core.ir.graph import Graph, outer_scope_reads

from .conftest import make_model


def _if_model():
    then_g = helper.make_graph([helper.make_node("Add", ["x", "one"], ["t"])], "then", [],
                               [helper.make_tensor_value_info("t", TensorProto.FLOAT, [2])])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [],
                               [helper.make_tensor_value_info("e", TensorProto.FLOAT, [2])])
    one = numpy_helper.from_array(np.ones(2, np.float32), "one")
    return make_model([helper.make_node("If", ["c"], ["y"], name="branch", then_branch=then_g, else_branch=else_g)],
                      [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                       helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])], [one],
                      extra_opsets=[helper.make_opsetid("com.example", 3)])


def test_opsets_per_domain_and_subgraphs():
    m = load_model(_if_model())
    assert m.opset_imports == {"": 17, "com.example": 3}
    (node,) = m.graph.nodes
    then_g, else_g = node.attrs["then_branch"], node.attrs["else_branch"]
    assert isinstance(then_g, Graph) and then_g.parent is m.graph
    assert [n.op_type for n in then_g.nodes] == ["Add"] and [n.op_type for n in else_g.nodes] == ["Neg"]
    assert outer_scope_reads(node) == {"x", "one"}


def test_round_trip_keeps_graph():
    proto = _if_model()
    back = model_to_proto(load_model(proto))
    onnx.checker.check_model(back)
    assert [n.op_type for n in back.graph.node] == ["If"]
    assert back.graph.node[0].attribute[0].g.node[0].op_type in ("Add", "Neg")
    assert {o.domain: o.version for o in back.opset_import} == {"": 17, "com.example": 3}
    np.testing.assert_array_equal(numpy_helper.to_array(back.graph.initializer[0]), np.ones(2, np.float32))


def test_shape_inference_fills_value_info():
    model = make_model([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Relu", ["r"], ["y"])],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = load_model(model)
    t = m.graph.type_of("r")
    assert t is not None and t.shape == ("N", 3) and t.text == "tensor(float)"


def test_external_data_next_to_model(tmp_path):
    w = np.arange(4096, dtype=np.float32).reshape(64, 64)
    model = make_model([helper.make_node("MatMul", ["x", "w"], ["y"])],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])],
                       [numpy_helper.from_array(w, "w")])
    path = tmp_path / "ext.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, location="ext.bin", size_threshold=0)
    assert (tmp_path / "ext.bin").exists() and path.stat().st_size < w.nbytes
    x = np.ones((1, 64), np.float32)
    (y,) = ort.InferenceSession(str(path)).run(None, {"x": x})
    np.testing.assert_allclose(y, x @ w)


def test_missing_external_data_file_is_named(tmp_path):
    model = make_model([helper.make_node("Identity", ["w"], ["y"])], [],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [16])],
                       [numpy_helper.from_array(np.ones(16, np.float32), "w")])
    path = tmp_path / "m.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, location="weights.bin", size_threshold=0)
    (tmp_path / "weights.bin").unlink()
    with pytest.raises(ort.OrtError, match="weights.bin|external data"):
        ort.InferenceSession(str(path))


def test_topological_order_keeps_a_sorted_graph_and_sorts_an_unsorted_one():
    from onnx import TensorProto, helper

    from ort_core.ir import load_model

    vi = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2]) for n in ("x", "y")]
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="first"), helper.make_node("Neg", ["a"], ["b"], name="second"),
             helper.make_node("Abs", ["b"], ["y"], name="third")]
    for order, expected in ((nodes, ["first", "second", "third"]), (nodes[::-1], ["first", "second", "third"]),
                            ([nodes[1], nodes[0], nodes[2]], ["first", "second", "third"])):
        model = helper.make_model(helper.make_graph(order, "g", vi[:1], vi[1:]),
                                  opset_imports=[helper.make_opsetid("", 17)])
        graph = load_model(model.SerializeToString()).graph
        assert [n.name for n in graph.topological_order()] == expected
