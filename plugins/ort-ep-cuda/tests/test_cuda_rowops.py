"""Row kernels without a GPU: every Softmax / LayerNormalization / SkipLayerNormalization variant compiles with
NVRTC, its parameter block is what ``rowops.pack`` lays out, the numpy references match the CPU provider, and
what capability and planning make of these nodes."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from cuda_helpers import F16, F32, I64, cpu_outputs, make_model, whole_subgraph
from onnx import TensorProto, helper
from ort_ep_cuda import nvrtc, rowops
from ort_ep_cuda.capability import unsupported_reason
from ort_ep_cuda.kernels import Row, plan_subgraph
from test_cuda_capability import _answers
from test_cuda_codegen import _param_bytes

PROGRAMS = [rowops.RowProgram(op, dtype, present)
            for op in rowops.KINDS for dtype in ("float32", "float16")
            for k in range(len(rowops.OPTIONAL[op]) + 1)
            for present in itertools.combinations(rowops.OPTIONAL[op], k)]


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: f"{p.op}-{p.dtype}-{'-'.join(p.present) or 'plain'}")
def test_every_row_kernel_compiles_and_takes_the_packed_parameters(program):
    cubin = nvrtc.compile_cubin(program.cuda(), program.name, 90)
    words = rowops.pack(program, dict.fromkeys(program.inputs, 1024), 2048, 3, 5, 1e-5)
    assert _param_bytes(cubin, program.name) == words.nbytes == 8 * (len(program.inputs) + 4)
    assert words[len(program.inputs) + 1:len(program.inputs) + 3].tolist() == [3, 5]
    assert words[-1:].view(np.float64)[0] == 1e-5


def test_programs_refuse_what_they_cannot_compute():
    with pytest.raises(ValueError, match="row op 'Mean'"):
        rowops.RowProgram("Mean", "float32")
    with pytest.raises(ValueError, match="takes no optional input"):
        rowops.RowProgram("Softmax", "float32", ("beta",))
    with pytest.raises(ValueError, match=r"no pointer for \['gamma'\]"):
        rowops.pack(rowops.RowProgram("LayerNormalization", "float32"), {"x": 8}, 16, 1, 1, 0.0)


@pytest.mark.parametrize("rows, cols, expected", [(0, 8, None), (4, 0, None), (4, 8, (4, 32)), (3, 768, (3, 256)),
                                                  (100000, 100, (132 * 8, 128))])
def test_row_launch_config(rows, cols, expected):
    cfg = rowops.launch_config(rows, cols, 132)
    assert (cfg if cfg is None else (cfg.grid, cfg.block)) == expected


@pytest.mark.parametrize("elem", [F32, F16])
def test_references_match_the_cpu_provider(elem):
    dtype = np.float16 if elem == F16 else np.float32
    rng = np.random.default_rng(0)
    x, skip = rng.standard_normal((2, 3, 16)).astype(dtype), rng.standard_normal((2, 3, 16)).astype(dtype)
    gamma, beta, bias = (rng.standard_normal(16).astype(dtype) for _ in range(3))
    tol = 2e-3 if elem == F16 else 1e-5
    sm = make_model([helper.make_node("Softmax", ["x"], ["y"])], [("x", elem, x.shape)], [("y", elem, x.shape)])
    np.testing.assert_allclose(rowops.reference(rowops.RowProgram("Softmax", dtype.__name__), {"x": x}),
                               cpu_outputs(sm, {"x": x})[0], rtol=tol, atol=tol)
    ln = make_model([helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], epsilon=1e-3)],
                    [("x", elem, x.shape), ("g", elem, (16,)), ("b", elem, (16,))], [("y", elem, x.shape)])
    np.testing.assert_allclose(
        rowops.reference(rowops.RowProgram("LayerNormalization", dtype.__name__, ("beta",)),
                         {"x": x, "gamma": gamma, "beta": beta}, eps=1e-3),
        cpu_outputs(ln, {"x": x, "g": gamma, "b": beta})[0], rtol=tol * 5, atol=tol * 5)
    skl = make_model([helper.make_node("SkipLayerNormalization", ["x", "s", "g", "b", "bias"], ["y"],
                                       domain="com.microsoft", epsilon=1e-5)],
                     [("x", elem, x.shape), ("s", elem, x.shape), ("g", elem, (16,)), ("b", elem, (16,)),
                      ("bias", elem, (16,))], [("y", elem, x.shape)], extra_opsets=[("com.microsoft", 1)])
    np.testing.assert_allclose(
        rowops.reference(rowops.RowProgram("SkipLayerNormalization", dtype.__name__, ("beta", "bias")),
                         {"x": x, "skip": skip, "gamma": gamma, "beta": beta, "bias": bias}),
        cpu_outputs(skl, {"x": x, "s": skip, "g": gamma, "b": beta, "bias": bias})[0], rtol=tol * 5, atol=tol * 5)


def test_capability_takes_last_axis_rows_and_declines_the_rest_with_reasons():
    nodes = [helper.make_node("LayerNormalization", ["x", "g"], ["ln"], name="ln"),
             helper.make_node("LayerNormalization", ["x", "g"], ["ln2", "mean"], name="ln_mean"),
             helper.make_node("LayerNormalization", ["x", "g3"], ["ln3"], name="ln_axis", axis=1),
             helper.make_node("Softmax", ["x"], ["sm"], name="sm"),
             helper.make_node("Softmax", ["x"], ["sm1"], name="sm_axis1", axis=1),
             helper.make_node("SkipLayerNormalization", ["x", "x", "g"], ["skl"], name="skl", domain="com.microsoft")]
    model = make_model(nodes, [("x", F32, (2, 3, 4)), ("g", F32, (4,)), ("g3", F32, (3, 4))],
                       [("ln", F32, None), ("ln2", F32, None), ("mean", F32, None), ("ln3", F32, None),
                        ("sm", F32, None), ("sm1", F32, None), ("skl", F32, None)],
                       extra_opsets=[("com.microsoft", 1)])
    assert _answers(model) == {
        "ln": None, "sm": None, "skl": None,
        "ln_mean": "only the first output is computed (Mean and InvStdDev are not)",
        "ln_axis": "only the last axis is normalized (axis=-1)", "sm_axis1": "only the last axis is supported"}
    legacy = make_model([helper.make_node("Softmax", ["x"], ["y"], axis=1)], [("x", F32, (2, 3, 4))],
                        [("y", F32, (2, 3, 4))], opset=11)
    sub = whole_subgraph(legacy)
    (step,) = plan_subgraph(sub).steps
    assert isinstance(step, Row) and step.coerce_axis == 1  # before opset 13: rows of the flattened 3 x 4
    assert unsupported_reason(sub.nodes[0], {"": 11}, sub.graph.type_of, lambda n: None) is None


def test_a_bert_block_plans_rows_between_products():
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Softmax", ["m"], ["s"]),
             helper.make_node("SkipLayerNormalization", ["s", "x", "g", "b"], ["y"], domain="com.microsoft",
                              epsilon=1e-6)]
    rng = np.random.default_rng(1)
    model = make_model(nodes, [("x", F32, (2, 8))], [("y", F32, (2, 8))],
                       [("w", rng.standard_normal((8, 8)).astype(np.float32)), ("g", np.ones(8, np.float32)),
                        ("b", np.zeros(8, np.float32))], extra_opsets=[("com.microsoft", 1)])
    plan = plan_subgraph(whole_subgraph(model))
    assert [type(s).__name__ for s in plan.steps] == ["MatMul", "Row", "Row"]
    skl = plan.steps[2]
    assert skl.inputs == {"x": "s", "skip": "x", "gamma": "g", "beta": "b"} and skl.eps == pytest.approx(1e-6)
    assert skl.program.present == ("beta",) and plan.device_constants == ["b", "g", "w"]


def test_transpose_and_split_are_claimed_as_strided_copies():
    nodes = [helper.make_node("Transpose", ["x"], ["t"], name="t", perm=[1, 0, 2]),
             helper.make_node("Transpose", ["x"], ["t2"], name="bad_perm", perm=[0, 0, 1]),
             helper.make_node("Split", ["x", "sizes"], ["a", "b"], name="split", axis=-1),
             helper.make_node("Split", ["x", "dyn"], ["c", "d"], name="dyn_split", axis=-1),
             helper.make_node("Transpose", ["ids"], ["ti"], name="int_t")]
    model = make_model(nodes, [("x", F32, (2, 3, 4)), ("dyn", I64, (2,)), ("ids", I64, (2, 3))],
                       [(n, F32, None) for n in ("t", "t2", "a", "b", "c", "d")] + [("ti", I64, None)],
                       [("sizes", np.array([1, 3], np.int64))])
    answers = _answers(model)
    assert answers["t"] is None and answers["split"] is None
    assert answers["bad_perm"] == "perm [0, 0, 1] is not a permutation of 3 axes"
    assert answers["dyn_split"] == "the split sizes are not a constant initializer"
    assert answers["int_t"].startswith("types tensor(int64)")


def test_where_takes_a_constant_condition_only():
    nodes = [helper.make_node("Where", ["mask", "x", "x"], ["a"], name="const"),
             helper.make_node("Where", ["cond", "x", "x"], ["b"], name="computed")]
    model = make_model(nodes, [("x", F32, (2, 2)), ("cond", TensorProto.BOOL, (2, 2))], [("a", F32, None),
                                                                                         ("b", F32, None)],
                       [("mask", np.eye(2, dtype=bool))])
    assert _answers(model) == {"const": None,
                               "computed": "the condition is not a constant tensor(bool) initializer"}
    plan = plan_subgraph(whole_subgraph(make_model(nodes[:1], [("x", F32, (2, 2))], [("a", F32, (2, 2))],
                                                   [("mask", np.eye(2, dtype=bool))])))
    assert plan.casts == {"mask": "float32"} and plan.device_constants == ["mask"]


@pytest.mark.parametrize("elem", [F32, F16])
@pytest.mark.parametrize("op", rowops.REDUCTIONS)
def test_reduction_references_match_the_cpu_provider_nan_included(op, elem):
    dtype = np.float16 if elem == F16 else np.float32
    x = np.random.default_rng(2).standard_normal((3, 4, 6)).astype(dtype)
    x[1, 2, 3] = np.nan  # ReduceMax and ReduceMin propagate it, as numpy's max and min do
    model = make_model([helper.make_node(op, ["x", "axes"], ["y"])], [("x", elem, x.shape)],
                       [("y", elem, (3, 4, 1))], [("axes", np.array([-1], np.int64))], opset=18)
    want = cpu_outputs(model, {"x": x})[0]
    got = rowops.reference(rowops.RowProgram(op, dtype.__name__), {"x": x}).reshape(want.shape)
    tol = 4e-3 if elem == F16 else 1e-5
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol)
    assert np.isnan(got[1, 2, 0]) and np.isnan(want[1, 2, 0])


def test_reductions_are_claimed_over_trailing_constant_axes_only():
    x = ("x", F32, (2, 3, 4, 5))
    nodes = [helper.make_node("ReduceMean", ["x", "hw"], ["a"], name="hw"),
             helper.make_node("ReduceSum", ["x"], ["b"], name="all", keepdims=0),
             helper.make_node("ReduceMax", ["x", "mid"], ["c"], name="mid"),
             helper.make_node("ReduceMin", ["x", "dyn"], ["d"], name="dyn"),
             helper.make_node("ReduceSum", ["x"], ["e"], name="noop", noop_with_empty_axes=1),
             helper.make_node("ReduceMean", ["ids", "hw"], ["f"], name="ints")]
    model = make_model(nodes, [x, ("dyn", I64, (1,)), ("ids", I64, (2, 3, 4, 5))],
                       [(n, F32, None) for n in "abcde"] + [("f", I64, None)],
                       [("hw", np.array([3, 2], np.int64)), ("mid", np.array([1], np.int64))], opset=18)
    assert _answers(model) == {
        "hw": None, "all": None,
        "mid": "axes [1]: only trailing axes are reduced (the last, or the last few together)",
        "dyn": "the axes are not a constant initializer",
        "noop": "noop_with_empty_axes=1 with no axes (an identity) is not supported",
        "ints": "types tensor(int64): only tensor(float) or tensor(float16), all the same, are supported"}
    legacy = make_model([helper.make_node("ReduceMean", ["x"], ["y"], name="attr", axes=[-1], keepdims=0),
                         helper.make_node("ReduceMean", ["x"], ["z"], name="attr_mid", axes=[0])],
                        [x], [("y", F32, None), ("z", F32, None)], opset=13)  # axes an attribute before 18
    assert _answers(legacy) == {"attr": None, "attr_mid": "axes [0]: only trailing axes are reduced (the last, or "
                                                          "the last few together)"}
    step = plan_subgraph(whole_subgraph(make_model(legacy.graph.node[:1], [x], [("y", F32, None)],
                                                   opset=13))).steps[0]
    assert isinstance(step, Row) and (step.program.op, step.coerce_axis, step.keepdims) == ("ReduceMean", 3, False)
