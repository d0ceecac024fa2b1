"""What the provider claims and why it declines, and the plans it compiles claimed subgraphs into (pure: no
GPU). The provider object needs a GPU, so capability is asked through the same rule its get_capability uses."""

from __future__ import annotations

import numpy as np
import pytest
from cuda_helpers import F16, F32, I64, graph_view, make_model, whole_subgraph
from onnx import TensorProto, helper
from ort_ep_cuda import capability
from ort_ep_cuda.kernels import Copy, Elementwise, Gemm, MatMul, Take, View, plan_subgraph

from ort_core.plugins import Capability


def _answers(model) -> dict[str, str | None]:
    view = graph_view(model)
    cap = Capability.from_reasons(view.nodes(), lambda n: capability.unsupported_reason(
        n, dict(view.opsets), view.type_of, view.constant))
    names = {n.id: n.name for n in view.nodes()}
    return {**{names[i]: None for i in cap.claimed}, **{names[i]: why for i, why in cap.declined.items()}}


def test_claims_elementwise_matmul_gemm_and_views_and_declines_the_rest_with_reasons():
    nodes = [helper.make_node("MatMul", ["x", "w"], ["mm"], name="mm"),
             helper.make_node("Gemm", ["mm", "w2", "bias"], ["g"], name="gemm", transB=1, alpha=0.5),
             helper.make_node("Relu", ["g"], ["r"], name="relu"),
             helper.make_node("Reshape", ["r", "shape"], ["rs"], name="reshape"),
             helper.make_node("Softmax", ["rs"], ["sm"], name="softmax", axis=0),
             helper.make_node("Reshape", ["sm", "dyn"], ["y"], name="reshape_dyn"),
             helper.make_node("Cast", ["x"], ["xi"], name="cast", to=TensorProto.INT64),
             helper.make_node("Add", ["xi", "xi"], ["z"], name="int_add")]
    model = make_model(nodes, [("x", F32, (2, 4)), ("dyn", I64, (2,))], [("y", F32, None), ("z", I64, (2, 4))],
                       [("w", np.ones((4, 3), np.float32)), ("w2", np.ones((5, 3), np.float32)),
                        ("bias", np.zeros(5, np.float32)), ("shape", np.array([5, 2], np.int64))])
    answers = _answers(model)
    assert {k for k, v in answers.items() if v is None} == {"mm", "gemm", "relu", "reshape"}
    assert answers["softmax"] == "only the last axis is supported"
    assert answers["reshape_dyn"] == "the target shape is not a constant initializer"
    assert answers["cast"] == "Cast to INT64: only float and float16 are supported"
    assert answers["int_add"] == \
        "types tensor(int64): only tensor(float) or tensor(float16), all the same, are supported"


def test_declines_legacy_opsets_unknown_ranks_mixed_types_and_other_domains():
    old = make_model([helper.make_node("Add", ["x", "x"], ["y"], name="add")], [("x", F32, (2,))], [("y", F32, (2,))],
                     opset=6)
    assert _answers(old) == {"add": "Add at opset 6 has legacy semantics (supported from opset 7)"}
    unknown = make_model([helper.make_node("Relu", ["x"], ["y"], name="relu")], [("x", F32, None)], [("y", F32, None)])
    assert _answers(unknown) == {"relu": "type or rank of 'x' is unknown"}
    ms = make_model([helper.make_node("FastGelu", ["x"], ["y"], name="fg", domain="com.microsoft"),
                     helper.make_node("Gelu", ["x"], ["z"], name="gelu", domain="com.microsoft")],
                    [("x", F16, (2,))], [("y", F16, (2,)), ("z", F16, (2,))], extra_opsets=[("com.microsoft", 1)])
    assert _answers(ms) == {"fg": "com.microsoft::FastGelu is not supported (of that domain only Gelu, "
                                  "SkipLayerNormalization are)",
                            "gelu": None}
    tanh_gelu = make_model([helper.make_node("Gelu", ["x"], ["y"], name="g", approximate="tanh")],
                           [("x", F32, (2,))], [("y", F32, (2,))], opset=20)
    assert _answers(tanh_gelu) == {"g": "Gelu approximate='tanh' is not supported (only the erf form)"}


def test_a_gelu_chain_with_broadcast_constants_is_one_kernel_and_a_matmul_splits_runs():
    nodes = [helper.make_node("Add", ["x", "b"], ["a"]), helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("MatMul", ["r", "w"], ["m"]), helper.make_node("Sigmoid", ["m"], ["s"]),
             helper.make_node("Mul", ["s", "m"], ["y"])]
    model = make_model(nodes, [("x", F32, ("N", 4))], [("y", F32, ("N", 3)), ("a", F32, ("N", 4))],
                       [("b", np.ones(4, np.float32)), ("w", np.ones((4, 3), np.float32))])
    sub = whole_subgraph(model)
    plan = plan_subgraph(sub)
    assert [type(s) for s in plan.steps] == [Elementwise, MatMul, Elementwise]
    first, _, last = plan.steps
    assert first.inputs == ["x", "b"] and first.outputs == ["a", "r"]  # 'a' leaves the subgraph, 'r' feeds MatMul
    assert [op for op, _ in first.program.steps] == ["Add", "Relu"] and first.program.rank == 2
    assert last.inputs == ["m"] and last.outputs == ["y"]
    assert last.program.steps == (("Sigmoid", (("in", 0),)), ("Mul", (("t", 0), ("in", 0))))
    assert plan.device_constants == ["b", "w"] and plan.inputs == ["x"] and plan.views == {}


def test_elementwise_nodes_of_another_shape_start_a_new_kernel():
    nodes = [helper.make_node("Exp", ["v"], ["e"]), helper.make_node("Add", ["e", "x"], ["y"])]
    model = make_model(nodes, [("v", F32, (4,)), ("x", F32, (3, 4))], [("y", F32, (3, 4))])
    plan = plan_subgraph(whole_subgraph(model))
    assert [s.outputs for s in plan.steps] == [["e"], ["y"]]
    assert [s.program.rank for s in plan.steps] == [1, 2]


def test_views_of_inputs_are_declared_and_their_shape_arguments_stay_on_the_host():
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["r"]), helper.make_node("Unsqueeze", ["r", "axes"], ["u"]),
             helper.make_node("Flatten", ["u"], ["y"], axis=2), helper.make_node("Neg", ["u"], ["z"])]
    model = make_model(nodes, [("x", F32, (2, 6))], [("y", F32, (3, 4)), ("z", F32, (3, 1, 4))],
                       [("shape", np.array([3, 4], np.int64)), ("axes", np.array([1], np.int64))])
    plan = plan_subgraph(whole_subgraph(model))
    assert [type(s) for s in plan.steps] == [View, View, View, Elementwise]
    assert plan.views == {0: 0}  # y is x's memory, seen through three views
    assert plan.device_constants == []
    assert [s.shape_of((2, 6)) for s in plan.steps[:1]] == [(3, 4)]
    assert plan.steps[1].shape_of((3, 4)) == (3, 1, 4) and plan.steps[2].shape_of((3, 1, 4)) == (3, 4)


def test_gemm_plan_broadcasts_c_first_when_beta_is_not_zero():
    def plan(beta):
        node = helper.make_node("Gemm", ["a", "b", "c"], ["y"], beta=beta, transA=1)
        model = make_model([node], [("a", F16, (4, 2)), ("b", F16, (4, 3)), ("c", F16, (3,))], [("y", F16, (2, 3))])
        return plan_subgraph(whole_subgraph(model)).steps[0]

    step = plan(2.0)
    assert isinstance(step, Gemm) and step.trans_a and not step.trans_b and step.beta == 2.0 and step.dtype == "float16"
    assert step.broadcast.steps == (("Identity", (("in", 0),)),) and step.broadcast.dtype == "float16"
    assert plan(0.0).broadcast is None


def test_planning_refuses_a_node_it_cannot_run():
    model = make_model([helper.make_node("Cos", ["x"], ["y"], name="cs")], [("x", F32, (2,))], [("y", F32, (2,))])
    with pytest.raises(ValueError, match=r"node 'cs' \(Cos\): Cos is not supported yet"):
        plan_subgraph(whole_subgraph(model))


def test_views_of_integer_tensors_stay_with_their_producers():
    nodes = [helper.make_node("Unsqueeze", ["ids", "axes"], ["u"], name="unsq")]
    model = make_model(nodes, [("ids", I64, (3,))], [("u", I64, (1, 3))], [("axes", np.array([0], np.int64))])
    assert _answers(model) == {"unsq": "'ids' is tensor(int64): views are taken of tensor(float) and tensor(float16) "
                                       "only"}


def test_nodes_of_another_element_type_never_share_a_kernel():
    nodes = [helper.make_node("Exp", ["h"], ["eh"]), helper.make_node("Exp", ["f"], ["ef"])]
    model = make_model(nodes, [("h", F16, (4,)), ("f", F32, (4,))], [("eh", F16, (4,)), ("ef", F32, (4,))])
    plan = plan_subgraph(whole_subgraph(model))
    assert [(s.program.dtype, s.outputs) for s in plan.steps] == [("float16", ["eh"]), ("float32", ["ef"])]


def test_slices_gathers_and_casts_are_claimed_with_constant_bounds_and_indices_only():
    nodes = [helper.make_node("Slice", ["x", "s", "e", "a", "t"], ["sl"], name="slice"),
             helper.make_node("Slice", ["x", "s", "dyn"], ["sd"], name="slice_dyn"),
             helper.make_node("Gather", ["x", "idx"], ["g"], name="gather", axis=1),
             helper.make_node("Gather", ["x", "ids"], ["gd"], name="gather_dyn"),
             helper.make_node("Gather", ["x", "far"], ["gf"], name="gather_far", axis=1),
             helper.make_node("Cast", ["x"], ["h"], name="to_half", to=TensorProto.FLOAT16),
             helper.make_node("Cast", ["h"], ["f"], name="to_float", to=TensorProto.FLOAT),
             helper.make_node("Cast", ["x"], ["d"], name="to_double", to=TensorProto.DOUBLE)]
    model = make_model(nodes, [("x", F32, (3, 5)), ("dyn", I64, (1,)), ("ids", I64, (2,))],
                       [("sl", F32, None), ("sd", F32, None), ("g", F32, None), ("gd", F32, None), ("gf", F32, None),
                        ("f", F32, (3, 5)), ("d", TensorProto.DOUBLE, (3, 5))],
                       [("s", np.array([4], np.int64)), ("e", np.array([-2**63], np.int64)),
                        ("a", np.array([1], np.int64)), ("t", np.array([-2], np.int64)),
                        ("idx", np.array([[4, 0], [1, 2]], np.int64)), ("far", np.array([5], np.int64))])
    answers = _answers(model)
    assert {k for k, v in answers.items() if v is None} == {"slice", "gather", "to_half", "to_float"}
    assert answers["slice_dyn"] == "'dyn' is not a constant initializer"
    assert answers["gather_dyn"] == "the indices are not a constant initializer (run-time indices are not supported)"
    assert answers["gather_far"] == "an index is out of range for the axis of size 5"
    assert answers["to_double"] == "Cast to DOUBLE: only float and float16 are supported"
    keep = [n for n in nodes if n.name in ("slice", "gather", "to_half", "to_float")]
    plan = plan_subgraph(whole_subgraph(make_model(
        keep, [("x", F32, (3, 5))], [("sl", F32, None), ("g", F32, None), ("f", F32, (3, 5))],
        [("s", np.array([4], np.int64)), ("e", np.array([-2**63], np.int64)), ("a", np.array([1], np.int64)),
         ("t", np.array([-2], np.int64)), ("idx", np.array([[4, 0], [1, 2]], np.int64))])))
    kinds = [type(s).__name__ for s in plan.steps]
    assert kinds == ["Copy", "Take", "Elementwise", "Elementwise"]
    sl, take, half, back = plan.steps
    assert isinstance(sl, Copy) and sl.op == "Slice" and sl.bounds == ((4,), (-2**63,), (1,), (-2,))
    assert isinstance(take, Take) and take.axis == 1 and take.indices.tolist() == [[4, 0], [1, 2]]
    assert isinstance(half, Elementwise) and (half.program.dtype, half.program.result_dtype) == ("float32", "float16")
    assert (back.program.dtype, back.program.result_dtype) == ("float16", "float32")
    assert plan.device_constants == []  # bounds and indices are read on the host only
