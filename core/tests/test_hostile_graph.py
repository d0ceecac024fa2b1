"""Malformed graphs are refused at session creation with the kind of problem and the node's name."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import ort_core as ort

from .conftest import make_model

F = TensorProto.FLOAT


def _vi(name, shape=(2,)):
    return helper.make_tensor_value_info(name, F, list(shape))


def test_value_produced_by_two_nodes():
    model = make_model([helper.make_node("Relu", ["x"], ["y"], name="first"),
                        helper.make_node("Neg", ["x"], ["y"], name="second")], [_vi("x")], [_vi("y")])
    with pytest.raises(ort.InvalidGraph, match=r"value 'y' is produced by node 'first' \(Relu\) and by "
                                               r"node 'second' \(Neg\)"):
        ort.InferenceSession(model)


def test_value_produced_twice_by_one_node():
    model = make_model([helper.make_node("Split", ["x"], ["y", "y"], name="split", axis=0, num_outputs=2)],
                       [_vi("x")], [_vi("y", (1,))], opset=18)
    with pytest.raises(ort.InvalidGraph, match="value 'y' is produced twice"):
        ort.InferenceSession(model)


def test_node_output_that_is_a_graph_input():
    model = make_model([helper.make_node("Relu", ["x"], ["x"], name="loopback")], [_vi("x")], [_vi("x")])
    with pytest.raises(ort.InvalidGraph, match=r"node 'loopback' \(Relu\) produces 'x', which is also a graph input"):
        ort.InferenceSession(model)


def test_node_output_that_is_an_initializer():
    w = numpy_helper.from_array(np.ones(2, np.float32), "w")
    model = make_model([helper.make_node("Relu", ["x"], ["w"], name="clobber"),
                        helper.make_node("Add", ["x", "w"], ["y"], name="add")], [_vi("x")], [_vi("y")], [w])
    with pytest.raises(ort.InvalidGraph, match=r"node 'clobber' \(Relu\) produces 'w', which is also an initializer"):
        ort.InferenceSession(model)


def test_initializer_defined_twice():
    w = numpy_helper.from_array(np.ones(2, np.float32), "w")
    model = make_model([helper.make_node("Add", ["x", "w"], ["y"], name="add")], [_vi("x")], [_vi("y")], [w, w])
    with pytest.raises(ort.InvalidGraph, match="initializer 'w' twice"):
        ort.InferenceSession(model)


def test_input_nothing_produces_names_the_node():
    model = make_model([helper.make_node("Add", ["x", "ghost"], ["y"], name="adder")], [_vi("x")], [_vi("y")])
    with pytest.raises(ort.InvalidGraph, match=r"node 'adder' \(Add\) reads 'ghost', which no node"):
        ort.InferenceSession(model)


def test_output_nothing_produces():
    model = make_model([helper.make_node("Relu", ["x"], ["y"], name="relu")], [_vi("x")], [_vi("nowhere")])
    with pytest.raises(ort.InvalidGraph, match="graph output 'nowhere' is produced by no node"):
        ort.InferenceSession(model)


def test_cycle_names_a_node():
    model = make_model([helper.make_node("Relu", ["b"], ["a"], name="n1"),
                        helper.make_node("Relu", ["a"], ["b"], name="n2")], [_vi("x")], [_vi("a")])
    with pytest.raises(ort.InvalidGraph, match=r"cycle through node 'n[12]' \(Relu\)"):
        ort.InferenceSession(model)


def test_self_loop_is_a_cycle():
    model = make_model([helper.make_node("Add", ["x", "y"], ["y"], name="selfish")], [_vi("x")], [_vi("y")])
    with pytest.raises(ort.InvalidGraph, match=r"cycle through node 'selfish'"):
        ort.InferenceSession(model)


def test_unknown_domain():
    model = make_model([helper.make_node("Mystery", ["x"], ["y"], name="odd", domain="com.nowhere")],
                       [_vi("x")], [_vi("y")])
    with pytest.raises(ort.InvalidGraph, match=r"node 'odd' \(com.nowhere::Mystery\) uses domain 'com.nowhere'.*"
                                               "unknown domain"):
        ort.InferenceSession(model)


def test_registered_custom_op_domain_needs_no_import():
    @ort.custom_op("com.mine", "Twice", inputs=[ort.CustomOpInput("X", "float")],
                   outputs=[ort.CustomOpOutput("Y", "float")])
    def twice(x):
        return x * 2

    model = make_model([helper.make_node("Twice", ["x"], ["y"], name="t", domain="com.mine")], [_vi("x")], [_vi("y")])
    so = ort.SessionOptions()
    so.register_custom_op(twice)
    (y,) = ort.InferenceSession(model, so).run(None, {"x": np.ones(2, np.float32)})
    assert y.tolist() == [2.0, 2.0]


@pytest.mark.parametrize("domain, version", [("", 999), ("ai.onnx.ml", 99)])
def test_unsupported_opset_version(domain, version):
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="relu")]
    extra = [helper.make_opsetid(domain, version)] if domain else []
    model = make_model(nodes, [_vi("x")], [_vi("y")], opset=version if not domain else 17, extra_opsets=extra)
    with pytest.raises(ort.InvalidGraph, match=rf"opset {version} of domain '{domain or 'ai.onnx'}.*unsupported opset"):
        ort.InferenceSession(model)


def test_nameless_graph_input_and_output():
    model = make_model([helper.make_node("Relu", ["x"], ["y"], name="relu")], [_vi("x"), _vi("")], [_vi("y")])
    with pytest.raises(ort.InvalidGraph, match="input without a name"):
        ort.InferenceSession(model)
    model = make_model([helper.make_node("Relu", ["x"], ["y"], name="relu")], [_vi("x")], [_vi("y"), _vi("")])
    with pytest.raises(ort.InvalidGraph, match="output without a name"):
        ort.InferenceSession(model)


def test_duplicate_graph_input():
    model = make_model([helper.make_node("Relu", ["x"], ["y"], name="relu")], [_vi("x"), _vi("x")], [_vi("y")])
    with pytest.raises(ort.InvalidGraph, match="lists input 'x' twice"):
        ort.InferenceSession(model)


def _if_model(then_nodes, then_outputs=("t",)):
    then = helper.make_graph(then_nodes, "then", [], [_vi(o) for o in then_outputs])
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["e"])], "else", [], [_vi("e")])
    return make_model([helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other, name="branch")],
                      [helper.make_tensor_value_info("c", TensorProto.BOOL, []), _vi("x")], [_vi("y")])


def test_subgraph_read_of_undefined_value_names_the_path():
    model = _if_model([helper.make_node("Add", ["x", "phantom"], ["t"], name="inner")])
    with pytest.raises(ort.InvalidGraph, match=r"node 'branch' \(If\) subgraph 'then': node 'inner' \(Add\) reads "
                                               "'phantom'"):
        ort.InferenceSession(model)


def test_subgraph_cycle_and_double_production():
    model = _if_model([helper.make_node("Relu", ["u"], ["t"], name="a"),
                       helper.make_node("Relu", ["t"], ["u"], name="b")])
    with pytest.raises(ort.InvalidGraph, match=r"subgraph 'then'.*cycle"):
        ort.InferenceSession(model)
    model = _if_model([helper.make_node("Relu", ["x"], ["t"], name="a"),
                       helper.make_node("Neg", ["x"], ["t"], name="b")])
    with pytest.raises(ort.InvalidGraph, match=r"subgraph 'then'.*value 't' is produced by node 'a'"):
        ort.InferenceSession(model)


def test_subgraph_reading_outer_values_is_fine():
    model = _if_model([helper.make_node("Neg", ["x"], ["t"], name="inner")])
    sess = ort.InferenceSession(model)
    x = np.array([1, -2], np.float32)
    assert sess.run(None, {"c": np.array(True), "x": x})[0].tolist() == [-1, 2]


def test_model_without_graph_and_ir3_without_opsets():
    with pytest.raises(ort.InvalidProtobuf, match="holds no graph"):
        ort.InferenceSession(onnx.ModelProto(ir_version=8).SerializeToString() + b"")


# ------------------------------------------------------------------ fuzz findings, kept as regressions

def test_inference_skips_a_required_input_left_empty():
    # onnx's whole-graph inference crashed the interpreter (SIGSEGV) on this TreeEnsemble node
    node = helper.make_node("TreeEnsemble", [""], ["y"], name="trees", domain="ai.onnx.ml", tree_roots=[0],
                            nodes_featureids=[0], nodes_splits=helper.make_tensor("s", F, [1], [0.5]),
                            nodes_modes=helper.make_tensor("m", TensorProto.UINT8, [1], [0]),
                            nodes_truenodeids=[0], nodes_falsenodeids=[0], nodes_trueleafs=[1],
                            nodes_falseleafs=[1], leaf_targetids=[0], leaf_weights=helper.make_tensor("w", F, [1], [1]))
    model = make_model([node], [_vi("x", (1, 1))], [_vi("y", (1, 1))],
                       extra_opsets=[helper.make_opsetid("ai.onnx.ml", 5)])
    with pytest.raises(ort.InvalidGraph, match=r"node 'trees' \(ai.onnx.ml::TreeEnsemble\) leaves its required "
                                               r"input 0 \('X' of TreeEnsemble-5\) empty"):
        ort.InferenceSession(model)


def test_inference_skips_nodes_whose_input_has_no_type():
    # LabelEncoder's inference dereferenced the missing type of an undefined input (SIGSEGV); the same
    # happens for a legitimate model whose input comes from a custom op onnx cannot type
    @ort.custom_op("com.mine", "Ints", inputs=[ort.CustomOpInput("X", "int64")],
                   outputs=[ort.CustomOpOutput("Y", "int64")])
    def ints(x):
        return x + 1

    model = make_model([helper.make_node("Ints", ["x"], ["i"], name="custom", domain="com.mine"),
                        helper.make_node("LabelEncoder", ["i"], ["y"], name="enc", domain="ai.onnx.ml",
                                         keys_int64s=[1, 2], values_strings=["a", "b"], default_string="_")],
                       [helper.make_tensor_value_info("x", TensorProto.INT64, [2])],
                       [helper.make_tensor_value_info("y", TensorProto.STRING, [2])],
                       extra_opsets=[helper.make_opsetid("ai.onnx.ml", 2), helper.make_opsetid("com.mine", 1)])
    so = ort.SessionOptions()
    so.register_custom_op(ints)
    (y,) = ort.InferenceSession(model, so).run(None, {"x": np.array([0, 1], np.int64)})
    assert y.tolist() == ["a", "b"]
    model.graph.node[1].input[0] = "undefined"
    with pytest.raises(ort.InvalidGraph, match=r"node 'enc'.*reads 'undefined'"):
        ort.InferenceSession(model, so)


def test_operator_arity_is_checked_against_its_schema():
    model = make_model([helper.make_node("Add", ["x"], ["y"], name="lonely")], [_vi("x")], [_vi("y")])
    with pytest.raises(ort.InvalidGraph, match=r"node 'lonely' \(Add\) has 1 input\(s\); Add-14 takes 2"):
        ort.InferenceSession(model)
    model = make_model([helper.make_node("Relu", ["x"], ["y", "z"], name="two")], [_vi("x")], [_vi("y")])
    with pytest.raises(ort.InvalidGraph, match=r"node 'two' \(Relu\) has 2 output\(s\); Relu-14 gives 1"):
        ort.InferenceSession(model)


def test_attribute_type_is_checked_against_its_schema():
    node = helper.make_node("LogSoftmax", ["x"], ["y"], name="ls", axis=[0, 1])  # axis must be an int
    model = make_model([node], [_vi("x")], [_vi("y")])
    with pytest.raises(ort.InvalidGraph, match=r"node 'ls' \(LogSoftmax\) has attribute 'axis' of type INTS; "
                                               "LogSoftmax-13 declares INT"):
        ort.InferenceSession(model)


def test_graph_input_of_unknown_element_type():
    model = make_model([helper.make_node("Relu", ["x"], ["y"], name="relu")],
                       [helper.make_tensor_value_info("x", 999, [2])], [_vi("y")])
    with pytest.raises(ort.InvalidGraph, match="graph input 'x' declares unknown element type 999"):
        ort.InferenceSession(model)


def test_kernel_factory_surprised_by_an_attribute_value_gives_kernel_error():
    # a value of the declared type that no factory check foresaw (here: a float too large for int())
    node = helper.make_node("Gelu", ["x"], ["y"], name="gelu", approximate="none")
    model = make_model([node], [_vi("x")], [_vi("y")], opset=20)
    from ort_core.providers.cpu import registry

    kd = registry.lookup("", "Gelu", 20)
    original = kd.factory

    def broken(node, opset):
        raise OverflowError("cannot convert float infinity to integer")

    object.__setattr__(kd, "factory", broken)
    try:
        with pytest.raises(ort.KernelError, match=r"node 'gelu' \(Gelu\): invalid attributes for Gelu-20: "
                                                  "OverflowError"):
            ort.InferenceSession(model)
    finally:
        object.__setattr__(kd, "factory", original)


def test_optimizer_failure_becomes_an_ort_error(monkeypatch):
    import ort_core.session as session_module

    def broken(model, level, evaluate, keep_qdq=False):
        raise ValueError("not enough values to unpack (expected 2, got 1)")

    monkeypatch.setattr(session_module, "optimize", broken)
    model = make_model([helper.make_node("Relu", ["x"], ["y"], name="relu")], [_vi("x")], [_vi("y")])
    with pytest.raises(ort.Fail, match="graph optimization failed: ValueError"):
        ort.InferenceSession(model)
