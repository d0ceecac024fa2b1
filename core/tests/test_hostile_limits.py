"""Operators that allocate from data refuse, before allocating, outputs past the per-tensor size limit
(session config entry session.max_tensor_bytes); sizes within it still compute."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import ort_core as ort
from ort_core.limits import DEFAULT_MAX_TENSOR_BYTES, MAX_TENSOR_BYTES_KEY

from .conftest import make_model

F, I64 = TensorProto.FLOAT, TensorProto.INT64
LIMIT = 1 << 20  # 1 MiB in these tests


def _session(node, inputs, opset=18, limit=LIMIT, initializers=()):
    outs = [helper.make_empty_tensor_value_info(o) for o in node.output]
    model = make_model([node], [helper.make_tensor_value_info(n, t, None) for n, t in inputs], outs,
                       initializers, opset=opset)
    so = ort.SessionOptions()
    if limit is not None:
        so.add_session_config_entry(MAX_TENSOR_BYTES_KEY, str(limit))
    return ort.InferenceSession(model, so)


def _refused(sess, feed, node="n"):
    with pytest.raises(ort.KernelError, match=rf"node '{node}'.*more than the limit.*'{MAX_TENSOR_BYTES_KEY}'"):
        sess.run(None, feed)


def i64(*v):
    return np.array(v, np.int64)


def test_default_limit_is_sane():
    assert 1 << 30 <= DEFAULT_MAX_TENSOR_BYTES <= 16 << 30


def test_constant_of_shape():
    sess = _session(helper.make_node("ConstantOfShape", ["s"], ["y"], name="n"), [("s", I64)])
    _refused(sess, {"s": i64(1024, 1024)})
    _refused(sess, {"s": i64(2 ** 62, 2 ** 62)})  # the product overflows int64: computed exactly
    assert sess.run(None, {"s": i64(256, 256)})[0].shape == (256, 256)


def test_constant_of_shape_with_default_limit_and_absurd_shape():
    sess = _session(helper.make_node("ConstantOfShape", ["s"], ["y"], name="n"), [("s", I64)], limit=None)
    _refused(sess, {"s": i64(10 ** 9, 10 ** 9)})


def test_constant_of_shape_folded_at_creation_is_refused_at_run():
    # a constant shape input is folded at session creation: the refusal must not crash folding
    shape = numpy_helper.from_array(i64(10 ** 8, 10 ** 8), "s")
    model = make_model([helper.make_node("ConstantOfShape", ["s"], ["y"], name="n")], [],
                       [helper.make_tensor_value_info("y", F, None)], [shape])
    sess = ort.InferenceSession(model)
    _refused(sess, {})


def test_expand():
    sess = _session(helper.make_node("Expand", ["x", "s"], ["y"], name="n"), [("x", F), ("s", I64)])
    x = np.ones((1, 1), np.float32)
    _refused(sess, {"x": x, "s": i64(4096, 4096)})
    assert sess.run(None, {"x": x, "s": i64(16, 16)})[0].shape == (16, 16)


@pytest.mark.parametrize("opset", [5, 18])
def test_tile(opset):
    x = np.ones((2, 2), np.float32)
    if opset == 5:
        sess = _session(helper.make_node("Tile", ["x", "t", "a"], ["y"], name="n"), [("x", F), ("t", I64), ("a", I64)],
                        opset=5)
        _refused(sess, {"x": x, "t": i64(10 ** 9), "a": i64(0)})
        return
    sess = _session(helper.make_node("Tile", ["x", "r"], ["y"], name="n"), [("x", F), ("r", I64)])
    _refused(sess, {"x": x, "r": i64(10 ** 6, 10 ** 6)})
    assert sess.run(None, {"x": x, "r": i64(3, 4)})[0].shape == (6, 8)


def test_range():
    sess = _session(helper.make_node("Range", ["a", "b", "d"], ["y"], name="n"), [("a", F), ("b", F), ("d", F)])
    f = np.float32
    _refused(sess, {"a": f(0), "b": f(1e12), "d": f(1)})
    _refused(sess, {"a": f(0), "b": f(1), "d": f(1e-30)})
    with pytest.raises(ort.KernelError, match="no finite number of elements"):
        sess.run(None, {"a": f(0), "b": f(np.inf), "d": f(1)})
    sess = _session(helper.make_node("Range", ["a", "b", "d"], ["y"], name="n"), [("a", I64), ("b", I64), ("d", I64)])
    _refused(sess, {"a": i64(0)[0], "b": i64(2 ** 62)[0], "d": i64(1)[0]})
    assert sess.run(None, {"a": np.int64(0), "b": np.int64(10), "d": np.int64(3)})[0].tolist() == [0, 3, 6, 9]


def test_resize_with_huge_scales_and_sizes():
    sess = _session(helper.make_node("Resize", ["x", "", "s"], ["y"], name="n"), [("x", F), ("s", F)])
    x = np.ones((1, 1, 4, 4), np.float32)
    _refused(sess, {"x": x, "s": np.array([1, 1, 1e6, 1e6], np.float32)})
    with pytest.raises(ort.KernelError, match="'scales' must be finite"):
        sess.run(None, {"x": x, "s": np.array([1, 1, np.inf, 1], np.float32)})
    assert sess.run(None, {"x": x, "s": np.array([1, 1, 2, 2], np.float32)})[0].shape == (1, 1, 8, 8)
    sess = _session(helper.make_node("Resize", ["x", "", "", "z"], ["y"], name="n"), [("x", F), ("z", I64)])
    _refused(sess, {"x": x, "z": i64(1, 1, 10 ** 5, 10 ** 5)})


def test_resize_intermediate_is_bounded_too():
    # up on the first axis, down on the second: the final output is small, the first pass is not
    sess = _session(helper.make_node("Resize", ["x", "", "s"], ["y"], name="n", mode="linear"), [("x", F), ("s", F)])
    x = np.ones((1, 4096), np.float32)
    with pytest.raises(ort.KernelError, match="intermediate result.*more than the limit"):
        sess.run(None, {"x": x, "s": np.array([4096, 1 / 4096], np.float32)})


def test_upsample():
    sess = _session(helper.make_node("Upsample", ["x", "s"], ["y"], name="n"), [("x", F), ("s", F)], opset=9)
    _refused(sess, {"x": np.ones((1, 1, 2, 2), np.float32), "s": np.array([1, 1, 1e5, 1e5], np.float32)})


@pytest.mark.parametrize("mode", ["constant", "edge", "reflect"])
def test_pad(mode):
    sess = _session(helper.make_node("Pad", ["x", "p"], ["y"], name="n", mode=mode), [("x", F), ("p", I64)])
    x = np.ones((2, 2), np.float32)
    _refused(sess, {"x": x, "p": i64(0, 0, 10 ** 5, 10 ** 5)})
    assert sess.run(None, {"x": x, "p": i64(1, 1, 1, 1)})[0].shape == (4, 4)


def test_one_hot():
    sess = _session(helper.make_node("OneHot", ["i", "d", "v"], ["y"], name="n"), [("i", I64), ("d", I64), ("v", F)])
    v = np.array([0, 1], np.float32)
    _refused(sess, {"i": i64(1, 2, 3), "d": i64(10 ** 9), "v": v})
    assert sess.run(None, {"i": i64(1, 2), "d": i64(4), "v": v})[0].shape == (2, 4)


def test_center_crop_pad():
    sess = _session(helper.make_node("CenterCropPad", ["x", "s"], ["y"], name="n"), [("x", F), ("s", I64)])
    _refused(sess, {"x": np.ones((2, 2), np.float32), "s": i64(10 ** 5, 10 ** 5)})


def test_col2im():
    # one block, strided so far apart that the image it folds into is huge
    sess = _session(helper.make_node("Col2Im", ["x", "i", "b"], ["y"], name="n", strides=[10 ** 5] * 2),
                    [("x", F), ("i", I64), ("b", I64)])
    _refused(sess, {"x": np.ones((1, 1, 1), np.float32), "i": i64(10 ** 5, 10 ** 5), "b": i64(1, 1)})


def test_max_unpool_output_shape():
    sess = _session(helper.make_node("MaxUnpool", ["x", "i", "s"], ["y"], name="n", kernel_shape=[2, 2]),
                    [("x", F), ("i", I64), ("s", I64)])
    x = np.ones((1, 1, 1, 1), np.float32)
    _refused(sess, {"x": x, "i": np.zeros((1, 1, 1, 1), np.int64), "s": i64(1, 1, 10 ** 5, 10 ** 5)})


def test_window_and_dft_lengths():
    sess = _session(helper.make_node("HannWindow", ["s"], ["y"], name="n"), [("s", I64)])
    _refused(sess, {"s": i64(10 ** 12)[0]})
    sess = _session(helper.make_node("DFT", ["x", "l"], ["y"], name="n"), [("x", F), ("l", I64)], opset=17)
    _refused(sess, {"x": np.ones((1, 4, 1), np.float32), "l": i64(10 ** 9)[0]})


def test_random_normal_shape_attribute_is_refused_at_creation():
    node = helper.make_node("RandomNormal", [], ["y"], name="n", shape=[10 ** 6, 10 ** 6])
    model = make_model([node], [], [helper.make_tensor_value_info("y", F, None)])
    with pytest.raises(ort.KernelError, match="node 'n'.*more than the limit"):
        ort.InferenceSession(model)


def test_broadcasting_small_inputs_to_a_huge_result():
    sess = _session(helper.make_node("Add", ["a", "b"], ["y"], name="n"), [("a", F), ("b", F)])
    col, row = np.ones((100_000, 1), np.float32), np.ones((1, 100_000), np.float32)
    _refused(sess, {"a": col, "b": row})
    assert sess.run(None, {"a": col[:100], "b": row[:, :100]})[0].shape == (100, 100)
    sess = _session(helper.make_node("Where", ["c", "a", "b"], ["y"], name="n"),
                    [("c", TensorProto.BOOL), ("a", F), ("b", F)])
    _refused(sess, {"c": np.ones((1, 1, 1000), bool), "a": np.ones((1, 1000, 1), np.float32),
                    "b": np.ones((1000, 1, 1), np.float32)})
    sess = _session(helper.make_node("Sum", ["a", "b"], ["y"], name="n"), [("a", F), ("b", F)])
    _refused(sess, {"a": col, "b": row})


def test_matmul_outer_product():
    sess = _session(helper.make_node("MatMul", ["a", "b"], ["y"], name="n"), [("a", F), ("b", F)])
    _refused(sess, {"a": np.ones((100_000, 1), np.float32), "b": np.ones((1, 100_000), np.float32)})
    _refused(sess, {"a": np.ones((100_000, 0), np.float32), "b": np.ones((0, 100_000), np.float32)})
    assert sess.run(None, {"a": np.ones((3, 2), np.float32), "b": np.ones((2, 4), np.float32)})[0].shape == (3, 4)


def test_conv_with_huge_pads():
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="n", pads=[10 ** 5, 10 ** 5, 10 ** 5, 10 ** 5])
    sess = _session(node, [("x", F), ("w", F)])
    _refused(sess, {"x": np.ones((1, 1, 2, 2), np.float32), "w": np.ones((1, 1, 1, 1), np.float32)})
    node = helper.make_node("MaxPool", ["x"], ["y"], name="n", kernel_shape=[1, 1], pads=[10 ** 5] * 4)
    _refused(_session(node, [("x", F)]), {"x": np.ones((1, 1, 2, 2), np.float32)})


def test_conv_transpose_with_huge_strides():
    node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], name="n", strides=[10 ** 5, 10 ** 5])
    sess = _session(node, [("x", F), ("w", F)])
    _refused(sess, {"x": np.ones((1, 1, 3, 3), np.float32), "w": np.ones((1, 1, 1, 1), np.float32)})


def test_loop_scan_output_growth_is_bounded():
    one = numpy_helper.from_array(np.ones(1, np.float32))
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("ConstantOfShape", ["shape"], ["chunk"], value=one)],
        "body", [helper.make_tensor_value_info("i", I64, []),
                 helper.make_tensor_value_info("cond_in", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("chunk", F, None)])
    loop = helper.make_node("Loop", ["m", ""], ["scan"], name="n", body=body)
    shape = numpy_helper.from_array(i64(1024), "shape")
    sess = _session(loop, [("m", I64)], initializers=[shape])
    with pytest.raises(ort.KernelError, match="node 'n'.*scan output 0 grows past the limit"):
        sess.run(None, {"m": i64(10 ** 9)[0]})
    assert sess.run(None, {"m": i64(4)[0]})[0].shape == (4, 1024)


def test_limit_can_be_raised():
    sess = _session(helper.make_node("ConstantOfShape", ["s"], ["y"], name="n"), [("s", I64)], limit=64 << 20)
    assert sess.run(None, {"s": i64(1024, 1024)})[0].shape == (1024, 1024)


def test_chain_doubling_a_tensor_stops_at_the_limit():
    # no single Concat allocates much, but 40 of them double a 1 KiB tensor to 1 TiB
    nodes, prev = [], "x"
    for k in range(40):
        nodes.append(helper.make_node("Concat", [prev, prev], [f"c{k}"], name=f"concat{k}", axis=0))
        prev = f"c{k}"
    model = make_model(nodes, [helper.make_tensor_value_info("x", F, [256])],
                       [helper.make_tensor_value_info(prev, F, None)])
    so = ort.SessionOptions()
    so.add_session_config_entry(MAX_TENSOR_BYTES_KEY, str(LIMIT))
    sess = ort.InferenceSession(model, so)
    with pytest.raises(ort.KernelError, match=r"node 'concat10' \(Concat\).*produced a tensor of shape \[524288\].*"
                                              "more than the limit"):
        sess.run(None, {"x": np.ones(256, np.float32)})


def test_loop_doubling_its_state_stops_at_the_limit():
    body = helper.make_graph(
        [helper.make_node("Identity", ["c_in"], ["c_out"]),
         helper.make_node("Concat", ["v", "v"], ["v_out"], name="grow", axis=0)],
        "body", [helper.make_tensor_value_info("i", I64, []),
                 helper.make_tensor_value_info("c_in", TensorProto.BOOL, []),
                 helper.make_tensor_value_info("v", F, None)],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_out", F, None)])
    loop = helper.make_node("Loop", ["m", "", "x"], ["y"], name="n", body=body)
    sess = _session(loop, [("m", I64), ("x", F)])
    with pytest.raises(ort.KernelError, match=r"node 'n' \(Loop\).*node 'grow' \(Concat\).*more than the limit"):
        sess.run(None, {"m": i64(10 ** 6)[0], "x": np.ones(4, np.float32)})


def test_roi_align_with_huge_rois():
    sess = _session(helper.make_node("RoiAlign", ["x", "r", "b"], ["y"], name="n"), [("x", F), ("r", F), ("b", I64)],
                    opset=16)
    _refused(sess, {"x": np.ones((1, 1, 4, 4), np.float32), "r": np.array([[0, 0, 1e7, 1e7]], np.float32),
                    "b": i64(0)}, )


def test_tree_ensemble_target_count_attribute():
    node = helper.make_node("TreeEnsembleRegressor", ["x"], ["y"], name="n", domain="ai.onnx.ml",
                            n_targets=2 ** 40, nodes_treeids=[0], nodes_nodeids=[0], nodes_featureids=[0],
                            nodes_values=[0.0], nodes_modes=["LEAF"], nodes_truenodeids=[0], nodes_falsenodeids=[0],
                            target_treeids=[0], target_nodeids=[0], target_ids=[0], target_weights=[1.0])
    model = make_model([node], [helper.make_tensor_value_info("x", F, [1, 1])],
                       [helper.make_tensor_value_info("y", F, None)],
                       extra_opsets=[helper.make_opsetid("ai.onnx.ml", 3)])
    with pytest.raises(ort.KernelError, match=r"node 'n'.*leaf value table.*more than the limit"):
        ort.InferenceSession(model)


def test_gru_hidden_size_must_fit_its_weights():
    node = helper.make_node("GRU", ["x", "w", "r"], ["y"], name="n", hidden_size=2 ** 40)
    sess = _session(node, [("x", F), ("w", F), ("r", F)], limit=None)
    with pytest.raises(ort.KernelError, match=r"node 'n' \(GRU\).*does not fit hidden_size 1099511627776"):
        sess.run(None, {"x": np.ones((1, 1, 2), np.float32), "w": np.ones((1, 6, 2), np.float32),
                        "r": np.ones((1, 6, 2), np.float32)})


def test_constant_folding_of_a_doubling_chain_stops_at_the_limit():
    # every input constant: folding at session creation would double 40 times without the limit
    nodes, prev = [], "c"
    for k in range(40):
        nodes.append(helper.make_node("Concat", [prev, prev], [f"c{k}"], name=f"concat{k}", axis=0))
        prev = f"c{k}"
    model = make_model(nodes, [], [helper.make_tensor_value_info(prev, F, None)],
                       [numpy_helper.from_array(np.ones(256, np.float32), "c")])
    so = ort.SessionOptions()
    so.add_session_config_entry(MAX_TENSOR_BYTES_KEY, str(LIMIT))
    sess = ort.InferenceSession(model, so)  # folds up to the limit, leaves the rest to the run
    with pytest.raises(ort.KernelError, match=r"node 'concat10' \(Concat\).*more than the limit"):
        sess.run(None, {})


def test_lrn_with_a_huge_size_costs_neither_memory_nor_time():
    # size 2**31 - 1 used to pad the channels by that much (and loop that many times)
    x = np.random.default_rng(0).standard_normal((1, 3, 2, 2)).astype(np.float32)
    huge = _session(helper.make_node("LRN", ["x"], ["y"], name="n", size=2 ** 31 - 1), [("x", F)], opset=17)
    (y,) = huge.run(None, {"x": x})
    square_sum = (x.astype(np.float64) ** 2).sum(axis=1, keepdims=True)  # every window covers all channels
    expected = x / (1.0 + 1e-4 / (2 ** 31 - 1) * square_sum) ** 0.75
    np.testing.assert_allclose(y, expected, rtol=1e-5)
