"""Optimizer passes: each one fires where it should and never changes results.

Equivalence is checked against the same model run with ORT_DISABLE_ALL, on small targeted
graphs and on the onnx wheel's models.
"""

from __future__ import annotations

import glob
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import ort_core as ort

from .conftest import ONNX_DATA, make_model


def run_both(model, feeds):
    off = ort.SessionOptions()
    off.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    plain = ort.InferenceSession(model, off)
    opt = ort.InferenceSession(model)
    return plain.run(None, feeds), opt.run(None, feeds), opt


def conv_chain_model(with_bn=True):
    rng = np.random.default_rng(1)
    inits = [numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b"),
             numpy_helper.from_array(rng.uniform(0.5, 2, 4).astype(np.float32), "gamma"),
             numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "beta"),
             numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "mean"),
             numpy_helper.from_array(rng.uniform(0.5, 2, 4).astype(np.float32), "var"),
             numpy_helper.from_array(rng.standard_normal((4, 1, 1)).astype(np.float32), "scale"),
             numpy_helper.from_array(rng.standard_normal((1, 4, 1, 1)).astype(np.float32), "shift")]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "gamma", "beta", "mean", "var"], ["n"], name="bn",
                              epsilon=1e-3),
             helper.make_node("Mul", ["n", "scale"], ["m"], name="mul"),
             helper.make_node("Add", ["shift", "m"], ["a"], name="add"),
             helper.make_node("Identity", ["a"], ["i"], name="ident"),
             helper.make_node("Dropout", ["i"], ["d"], name="drop"),
             helper.make_node("Relu", ["d"], ["y"], name="relu")]
    return make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], inits)


def test_conv_bn_mul_add_identity_dropout_fold_to_conv_relu():
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
    (ref,), (got,), sess = run_both(conv_chain_model(), {"x": x})
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)
    ops = [op for a in sess.get_provider_graph_assignment_info() for op in a.op_types]
    assert ops == ["FusedConv"]  # level all: the CPU provider's Conv+Relu fusion too
    assert sess._optimizer_stats["conv_folding"] == 3 and sess._optimizer_stats["identity_removal"] == 2
    basic = ort.SessionOptions()
    basic.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    sess = ort.InferenceSession(conv_chain_model(), basic)
    assert [op for a in sess.get_provider_graph_assignment_info() for op in a.op_types] == ["Conv", "Relu"]
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], ref, rtol=1e-4, atol=1e-5)


def test_bn_mul_add_fold_into_batch_norm():
    """DenseNet's pattern: a BatchNormalization (no Conv before it) then per-channel Mul and Add."""
    model = conv_chain_model()
    model.graph.node[0].op_type = "MaxPool"  # the BN's input no longer comes from a Conv
    del model.graph.node[0].input[1:]
    model.graph.node[0].ClearField("attribute")
    model.graph.node[0].attribute.extend([helper.make_attribute("kernel_shape", [1, 1])])
    model.graph.node[1].input[0] = "c"
    model.graph.input[0].CopyFrom(helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8]))
    x = np.random.default_rng(0).standard_normal((1, 4, 8, 8)).astype(np.float32)
    (ref,), (got,), sess = run_both(model, {"x": x})
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)
    ops = [op for a in sess.get_provider_graph_assignment_info() for op in a.op_types]
    assert ops == ["MaxPool", "FusedBatchNormalization"]  # Mul, Add folded; the Relu fused (level all)
    assert sess._optimizer_stats["conv_folding"] == 2


def test_bn_with_a_non_channel_operand_is_not_folded():
    model = conv_chain_model()
    for init in model.graph.initializer:
        if init.name == "scale":  # one value per column: not per channel
            init.CopyFrom(numpy_helper.from_array(np.arange(1, 9, dtype=np.float32).reshape(1, 1, 8), "scale"))
    model.graph.node[0].op_type = "Relu"
    del model.graph.node[0].input[1:]
    model.graph.node[0].ClearField("attribute")
    model.graph.input[0].CopyFrom(helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8]))
    x = np.random.default_rng(0).standard_normal((1, 4, 8, 8)).astype(np.float32)
    (ref,), (got,), sess = run_both(model, {"x": x})
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)
    ops = [op for a in sess.get_provider_graph_assignment_info() for op in a.op_types]
    assert "Mul" in ops and "Add" in ops  # the Add follows the Mul, not the BN: nothing folds


def test_conv_output_read_twice_is_not_folded():
    model = conv_chain_model()
    model.graph.node.append(helper.make_node("Neg", ["c"], ["extra"], name="neg"))
    model.graph.output.append(helper.make_tensor_value_info("extra", TensorProto.FLOAT, [1, 4, 8, 8]))
    x = np.ones((1, 3, 8, 8), np.float32)
    ref, got, sess = run_both(model, {"x": x})
    for a, b in zip(ref, got):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5)
    assert [op for a in sess.get_provider_graph_assignment_info() for op in a.op_types] == [
        "Conv", "FusedBatchNormalization", "Neg"]  # the BN stays (its Mul and Add fold into it), Relu fused


def test_identity_that_is_a_graph_output_stays():
    model = make_model([helper.make_node("Identity", ["x"], ["y"])],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    (ref,), (got,), sess = run_both(model, {"x": np.array([1, 2], np.float32)})
    np.testing.assert_array_equal(got, ref)
    assert sess.get_outputs()[0].name == "y"


def test_training_dropout_is_kept():
    t = numpy_helper.from_array(np.array(True), "train")
    r = numpy_helper.from_array(np.array(0.5, np.float32), "ratio")
    model = make_model([helper.make_node("Dropout", ["x", "ratio", "train"], ["d"], seed=3),
                        helper.make_node("Relu", ["d"], ["y"])],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64])], [t, r])
    sess = ort.InferenceSession(model)
    assert sess._optimizer_stats["identity_removal"] == 0
    (y,) = sess.run(None, {"x": np.ones(64, np.float32)})
    assert set(np.unique(y)) <= {0.0, 2.0} and 0 < np.count_nonzero(y) < 64


MODELS = sorted(glob.glob(os.path.join(ONNX_DATA, "light", "*.onnx")))


@pytest.mark.parametrize("path", MODELS, ids=lambda p: os.path.basename(p)[6:-5])
def test_light_models_same_outputs_with_and_without_optimizations(path):
    model = onnx.load(path)
    sess = ort.InferenceSession(model)
    rng = np.random.default_rng(0)
    feeds = {a.name: rng.random([d if isinstance(d, int) else 1 for d in a.shape]).astype(np.float32)
             for a in sess.get_inputs()}
    ref, got, _ = run_both(model, feeds)
    for a, b in zip(ref, got):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-6)


def test_common_subexpressions_compute_once():
    nodes = [helper.make_node("Exp", ["x"], ["e1"]), helper.make_node("Exp", ["x"], ["e2"]),
             helper.make_node("Add", ["e1", "e2"], ["y"]),
             helper.make_node("RandomUniformLike", ["x"], ["r1"], seed=1.0),
             helper.make_node("RandomUniformLike", ["x"], ["r2"], seed=1.0),
             helper.make_node("Sub", ["r1", "r2"], ["z"])]
    model = make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [5]),
                        helper.make_tensor_value_info("z", TensorProto.FLOAT, [5])])
    x = np.linspace(-1, 1, 5, dtype=np.float32)
    ref, got, sess = run_both(model, {"x": x})
    np.testing.assert_allclose(got[0], ref[0], rtol=1e-6)
    assert sess._optimizer_stats["common_subexpressions"] == 1  # the Exps merge, the random ops do not


def test_transpose_and_reshape_chains():
    shape = numpy_helper.from_array(np.array([6, 4], np.int64), "s2")
    shape1 = numpy_helper.from_array(np.array([4, 6], np.int64), "s1")
    nodes = [helper.make_node("Transpose", ["x"], ["t1"], perm=[1, 0, 2]),
             helper.make_node("Transpose", ["t1"], ["t2"], perm=[1, 0, 2]),   # identity overall
             helper.make_node("Transpose", ["t2"], ["t3"], perm=[2, 0, 1]),
             helper.make_node("Transpose", ["t3"], ["t4"], perm=[0, 2, 1]),   # composes to one
             helper.make_node("Reshape", ["t4", "s1"], ["r1"]),
             helper.make_node("Reshape", ["r1", "s2"], ["r2"]),
             helper.make_node("Cast", ["r2"], ["y"], to=TensorProto.FLOAT)]
    model = make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [6, 4])], [shape, shape1])
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    (ref,), (got,), sess = run_both(model, {"x": x})
    np.testing.assert_array_equal(got, ref)
    ops = [op for a in sess.get_provider_graph_assignment_info() for op in a.op_types]
    assert ops == ["Transpose", "Reshape", "Cast"]  # the last Cast is a graph output: kept


@pytest.mark.parametrize("act, attrs, extra", [
    ("Relu", {}, []), ("LeakyRelu", {"alpha": 0.2}, []), ("Sigmoid", {}, []), ("Clip", {}, ["lo", "hi"])])
def test_cpu_fusions_match_unfused(act, attrs, extra):
    rng = np.random.default_rng(4)
    inits = [numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal((6, 5)).astype(np.float32), "m"),
             numpy_helper.from_array(rng.standard_normal(5).astype(np.float32), "bias"),
             numpy_helper.from_array(np.array(-0.5, np.float32), "lo"),
             numpy_helper.from_array(np.array(0.5, np.float32), "hi")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node(act, ["c", *extra], ["y"], **attrs),
             helper.make_node("MatMul", ["v", "m"], ["mm"]),
             helper.make_node("Add", ["bias", "mm"], ["z"])]
    model = make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 6]),
                               helper.make_tensor_value_info("v", TensorProto.FLOAT, [2, 3, 6])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
                        helper.make_tensor_value_info("z", TensorProto.FLOAT, None)], inits)
    feeds = {"x": rng.standard_normal((1, 3, 6, 6)).astype(np.float32),
             "v": rng.standard_normal((2, 3, 6)).astype(np.float32)}
    ref, got, sess = run_both(model, feeds)
    for a, b in zip(ref, got):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
    ops = sorted(op for a in sess.get_provider_graph_assignment_info() for op in a.op_types)
    assert ops == ["FusedConv", "MatMulBias"]


def test_cpu_fusion_leaves_other_providers_nodes_alone():
    pytest.importorskip("ort_ep_example")
    nodes = [helper.make_node("MatMul", ["v", "m"], ["mm"]), helper.make_node("Add", ["mm", "bias"], ["z"])]
    rng = np.random.default_rng(5)
    inits = [numpy_helper.from_array(rng.standard_normal((6, 5)).astype(np.float32), "m"),
             numpy_helper.from_array(rng.standard_normal(5).astype(np.float32), "bias")]
    model = make_model(nodes, [helper.make_tensor_value_info("v", TensorProto.FLOAT, [2, 6])],
                       [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 5])], inits)
    with pytest.warns(ort.OrtWarning):
        sess = ort.InferenceSession(model, providers=["ExampleExecutionProvider"])
    assert [a.op_types for a in sess.get_provider_graph_assignment_info()] == [("MatMul", "Add")]


def residual_model(add_op="Add", skip_shape=(1, 4, 8, 8), activation="Relu", swap=False):
    rng = np.random.default_rng(5)
    inits = [numpy_helper.from_array(rng.standard_normal((4, 4, 3, 3)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b")]
    operands = ["skip", "c"] if swap else ["c", "skip"]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node(add_op, operands, ["s"])]
    if activation:
        attrs = {"alpha": 0.2} if activation == "LeakyRelu" else {}
        nodes.append(helper.make_node(activation, ["s"], ["y"], **attrs))
    else:
        nodes[-1].output[0] = "y"
    return make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8]),
                              helper.make_tensor_value_info("skip", TensorProto.FLOAT, list(skip_shape))],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)


@pytest.mark.parametrize("add_op,activation,swap", [("Add", "Relu", False), ("Sum", "Relu", True),
                                                    ("Add", "LeakyRelu", True), ("Add", None, False)])
def test_conv_residual_add_activation_fuse(add_op, activation, swap):
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((1, 4, 8, 8)).astype(np.float32),
             "skip": rng.standard_normal((1, 4, 8, 8)).astype(np.float32)}
    skip = feeds["skip"].copy()
    (ref,), (got,), sess = run_both(residual_model(add_op, activation=activation, swap=swap), feeds)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    assert [op for a in sess.get_provider_graph_assignment_info() for op in a.op_types] == ["FusedConv"]
    np.testing.assert_array_equal(feeds["skip"], skip)  # the sum goes into the Conv's output, not the residual


def test_conv_add_with_broadcast_operand_is_not_a_residual_fusion():
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((1, 4, 8, 8)).astype(np.float32),
             "skip": rng.standard_normal((1, 4, 1, 1)).astype(np.float32)}
    (ref,), (got,), sess = run_both(residual_model(skip_shape=(1, 4, 1, 1)), feeds)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    assert [op for a in sess.get_provider_graph_assignment_info() for op in a.op_types] == ["Conv", "Add", "Relu"]


def test_bn_relu_fuse():
    rng = np.random.default_rng(2)
    inits = [numpy_helper.from_array(rng.uniform(0.5, 2, 4).astype(np.float32), n) for n in ("g", "v")]
    inits += [numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), n) for n in ("be", "m")]
    nodes = [helper.make_node("BatchNormalization", ["x", "g", "be", "m", "v"], ["n"], epsilon=1e-3),
             helper.make_node("Relu", ["n"], ["y"])]
    model = make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 5, 5])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 5, 5])], inits)
    x = rng.standard_normal((1, 4, 5, 5)).astype(np.float32)
    (ref,), (got,), sess = run_both(model, {"x": x})
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
    assert (ref == 0).any() and [op for a in sess.get_provider_graph_assignment_info()
                                 for op in a.op_types] == ["FusedBatchNormalization"]


def _loop_with_foldable_body():
    """A Loop whose body computes ``w2 = (w * 2) + 1`` from an outer constant and an inner Constant
    node (foldable once, not per iteration) and accumulates ``acc + x * w2``; an Identity too."""
    body = helper.make_graph(
        [helper.make_node("Constant", [], ["two"], value=numpy_helper.from_array(np.float32(2.0))),
         helper.make_node("Mul", ["w", "two"], ["w_twice"]),
         helper.make_node("Add", ["w_twice", "one"], ["w2"]),
         helper.make_node("Mul", ["x", "w2"], ["step"]),
         helper.make_node("Add", ["acc_in", "step"], ["acc_sum"]),
         helper.make_node("Identity", ["acc_sum"], ["acc_out"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_in", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, [3])])
    loop = helper.make_node("Loop", ["n", "", "acc0"], ["acc"], body=body)
    inits = [numpy_helper.from_array(np.array([0.5, -1.0, 2.0], np.float32), "w"),
             numpy_helper.from_array(np.float32(1.0), "one"), numpy_helper.from_array(np.int64(4), "n")]
    return make_model([loop], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3]),
                               helper.make_tensor_value_info("acc0", TensorProto.FLOAT, [3])],
                      [helper.make_tensor_value_info("acc", TensorProto.FLOAT, [3])], inits)


def test_loop_bodies_are_optimized_with_outer_constants():
    model = _loop_with_foldable_body()
    feeds = {"x": np.array([1.0, 2.0, 3.0], np.float32), "acc0": np.zeros(3, np.float32)}
    sess = ort.InferenceSession(model)
    stats = sess._optimizer_stats
    assert stats["constant_folding"] == 3  # Constant, w * 2 and + 1 read only constants of both scopes
    assert stats["identity_removal"] == 0  # the body's Identities make its outputs: kept
    assert stats["bodies"] == 3
    expected = feeds["x"] * (np.array([0.5, -1.0, 2.0], np.float32) * 2 + 1) * 4
    np.testing.assert_allclose(sess.run(None, feeds)[0], expected, rtol=1e-6)
    off = ort.SessionOptions()
    off.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    np.testing.assert_allclose(ort.InferenceSession(model, off).run(None, feeds)[0], expected, rtol=1e-6)


def test_a_body_value_shadowing_an_outer_constant_is_not_folded_with_it():
    """The body's own ``w`` (a loop-carried value) hides the outer initializer ``w``."""
    model = _loop_with_foldable_body()
    loop = model.graph.node[0]
    body = loop.attribute[0].g
    body.input[2].name = "w"  # the carried value is now called w: w * 2 + 1 changes every iteration
    for n in body.node:
        n.input[:] = ["w" if i == "acc_in" else i for i in n.input]
    feeds = {"x": np.array([1.0, 2.0, 3.0], np.float32), "acc0": np.zeros(3, np.float32)}
    sess = ort.InferenceSession(model)
    assert sess._optimizer_stats["constant_folding"] == 1  # only the inner Constant node
    acc = feeds["acc0"]
    for _ in range(4):
        acc = acc + feeds["x"] * (acc * 2 + 1)
    np.testing.assert_allclose(sess.run(None, feeds)[0], acc, rtol=1e-6)


@pytest.mark.parametrize("dims,collapsed", [(["N"], False), ([6], True)])
def test_reshape_chain_keeps_an_inner_reshape_that_could_refuse_the_input(dims, collapsed):
    """Reshape(x, [2, -1]) then Reshape(., [-1]): dropping the first would accept an odd-sized x that the
    model refuses, so it goes only when x's shape is static and fits."""
    nodes = [helper.make_node("Reshape", ["x", "pair"], ["r"]), helper.make_node("Reshape", ["r", "flat"], ["y"])]
    inits = [numpy_helper.from_array(np.array([2, -1], np.int64), "pair"),
             numpy_helper.from_array(np.array([-1], np.int64), "flat")]
    model = make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    sess = ort.InferenceSession(model)
    assert sess._optimizer_stats["chains"] == int(collapsed)
    np.testing.assert_array_equal(sess.run(None, {"x": np.arange(6, dtype=np.float32)})[0], np.arange(6))
    if not collapsed:
        with pytest.raises(ort.KernelError, match="Reshape"):
            sess.run(None, {"x": np.arange(5, dtype=np.float32)})


def test_graph_bodies_get_the_cpu_providers_fusions():
    """A Loop body's Conv + Relu becomes one FusedConv, as in the main graph, with the same results."""
    vi = helper.make_tensor_value_info
    rng = np.random.default_rng(3)
    body = helper.make_graph(
        [helper.make_node("Identity", ["c"], ["c_out"], name="keep_going"),
         helper.make_node("Conv", ["y_in", "w"], ["conv_out"], name="body_conv", pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["conv_out"], ["y_out"], name="body_relu")],
        "body", [vi("i", TensorProto.INT64, []), vi("c", TensorProto.BOOL, []),
                 vi("y_in", TensorProto.FLOAT, [1, 2, 5, 5])],
        [vi("c_out", TensorProto.BOOL, []), vi("y_out", TensorProto.FLOAT, [1, 2, 5, 5])])
    w = numpy_helper.from_array((0.5 * rng.standard_normal((2, 2, 3, 3))).astype(np.float32), "w")
    model = make_model([helper.make_node("Loop", ["M", "", "y0"], ["y"], body=body, name="loop")],
                       [vi("M", TensorProto.INT64, []), vi("y0", TensorProto.FLOAT, [1, 2, 5, 5])],
                       [vi("y", TensorProto.FLOAT, [1, 2, 5, 5])], [w])
    feeds = {"M": np.array(3, np.int64), "y0": rng.standard_normal((1, 2, 5, 5)).astype(np.float32)}
    (ref,), (got,), sess = run_both(model, feeds)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
    ((label, placed),) = sess._bodies.placements
    names = [name for _, nodes in placed for name in nodes]
    assert sorted(names) == ["body_conv", "keep_going"]  # the Relu went into the fused Conv
    assert not any(n.op_type == "FusedConv" for n in model.graph.node[0].attribute[0].g.node)  # the file's body
