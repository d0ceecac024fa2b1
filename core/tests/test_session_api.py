"""The drop-in session API: NodeArg, metadata, providers, options, output selection."""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import ort_core as ort

from .conftest import make_model


def test_node_args_and_run(relu_add_model):
    sess = ort.InferenceSession(relu_add_model.SerializeToString())
    (inp,) = sess.get_inputs()
    (out,) = sess.get_outputs()
    assert (inp.name, inp.type, inp.shape) == ("x", "tensor(float)", ["N", 4])
    assert (out.name, out.type, out.shape) == ("y", "tensor(float)", ["N", 4])
    x = np.array([[-1, 2, -3, 4], [5, -6, 7, -8]], np.float32)
    (y,) = sess.run(None, {"x": x})
    np.testing.assert_array_equal(y, np.maximum(x, 0) + np.array([1, -2, 3, -4], np.float32))
    assert y.dtype == np.float32
    (y2,) = sess.run(["y"], {"x": x})
    np.testing.assert_array_equal(y, y2)


def test_model_sources_path_bytes_proto(relu_add_model, tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(relu_add_model, str(path))
    x = np.ones((1, 4), np.float32)
    results = [ort.InferenceSession(src).run(None, {"x": x})[0]
               for src in (str(path), path, path.read_bytes(), relu_add_model)]
    for r in results[1:]:
        np.testing.assert_array_equal(r, results[0])


def test_metadata(relu_add_model):
    relu_add_model.producer_name = "unit-test"
    relu_add_model.model_version = 7
    relu_add_model.doc_string = "a model"
    relu_add_model.metadata_props.add(key="author", value="me")
    meta = ort.InferenceSession(relu_add_model).get_modelmeta()
    assert meta.producer_name == "unit-test"
    assert meta.version == 7
    assert meta.description == "a model"
    assert meta.graph_name == "test_graph"
    assert meta.custom_metadata_map == {"author": "me"}


def test_provider_queries():
    assert ort.get_available_providers()[-1] == "CPUExecutionProvider"
    allp = ort.get_all_providers()
    assert "CUDAExecutionProvider" in allp and allp[-1] == "CPUExecutionProvider"
    assert ort.get_device() == "CPU"


def test_default_and_explicit_providers(relu_add_model):
    assert ort.InferenceSession(relu_add_model).get_providers() == ["CPUExecutionProvider"]
    s = ort.InferenceSession(relu_add_model, providers=[("CPUExecutionProvider", {"use_arena": "0"})])
    assert s.get_provider_options() == {"CPUExecutionProvider": {"use_arena": "0"}}


def test_unknown_provider_option_is_an_error_naming_the_valid_ones(relu_add_model):
    # stricter than onnxruntime, which ignores unknown CPU options: a typo must not pass silently
    with pytest.raises(ort.InvalidArgument, match=r"unknown provider option\(s\) \['use_arnea'\] for "
                                                  r"'CPUExecutionProvider'; valid options: use_arena"):
        ort.InferenceSession(relu_add_model, providers=[("CPUExecutionProvider", {"use_arnea": "0"})])
    with pytest.raises(ort.InvalidArgument, match="use_arena must be '0' or '1'"):
        ort.InferenceSession(relu_add_model, providers=[("CPUExecutionProvider", {"use_arena": "maybe"})])


def test_unknown_provider_warns_and_falls_back(relu_add_model):
    with pytest.warns(ort.OrtWarning, match="'NoSuchExecutionProvider' is not installed"):
        s = ort.InferenceSession(relu_add_model, providers=["NoSuchExecutionProvider", "CPUExecutionProvider"])
    assert s.get_providers() == ["CPUExecutionProvider"]
    (y,) = s.run(None, {"x": np.zeros((1, 4), np.float32)})
    np.testing.assert_array_equal(y, [[1, -2, 3, -4]])


def test_provider_options_length_mismatch(relu_add_model):
    with pytest.raises(ort.InvalidArgument, match="provider_options has 2 entries"):
        ort.InferenceSession(relu_add_model, providers=["CPUExecutionProvider"], provider_options=[{}, {}])


def test_overridable_initializer():
    w = onnx.numpy_helper.from_array(np.array([2.0], np.float32), "w")
    model = make_model([helper.make_node("Mul", ["x", "w"], ["y"])],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3]),
                        helper.make_tensor_value_info("w", TensorProto.FLOAT, [1])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])], [w])
    sess = ort.InferenceSession(model)
    assert [a.name for a in sess.get_inputs()] == ["x"]
    assert [a.name for a in sess.get_overridable_initializers()] == ["w"]
    x = np.array([1, 2, 3], np.float32)
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], x * 2)
    np.testing.assert_array_equal(sess.run(None, {"x": x, "w": np.array([5], np.float32)})[0], x * 5)


def test_graph_output_that_is_an_input():
    model = make_model([helper.make_node("Relu", ["x"], ["y"])],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2]),
                        helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])])
    y, x = ort.InferenceSession(model).run(None, {"x": np.array([-1, 1], np.float32)})
    np.testing.assert_array_equal(y, [0, 1])
    np.testing.assert_array_equal(x, [-1, 1])


def test_options_objects():
    so = ort.SessionOptions()
    assert so.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 2
    so.add_session_config_entry("session.x", "1")
    assert so.get_session_config_entry("session.x") == "1"
    ro = ort.RunOptions()
    ro.add_run_config_entry("k", "v")
    assert ro.get_run_config_entry("k") == "v" and ro.terminate is False


def test_parallel_options_warn_that_they_have_no_effect(relu_add_model):
    """Code written for onnxruntime sets these often; ort-core says what it does instead of staying silent
    (intra_op_num_threads is honoured: test_thread_budget.py)."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_PARALLEL
    with pytest.warns(ort.OrtWarning) as caught:
        sess = ort.InferenceSession(relu_add_model.SerializeToString(), so)
    texts = [str(w.message) for w in caught if "has no effect" in str(w.message)]
    assert len(texts) == 1, texts
    assert "execution_mode = ORT_PARALLEL" in texts[0] and "ORT_SEQUENTIAL" in texts[0]
    x = np.ones((1, 4), np.float32)
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], np.maximum(x, 0) + np.array([1, -2, 3, -4], np.float32))
    with warnings.catch_warnings():
        warnings.simplefilter("error", ort.OrtWarning)  # defaults: nothing to say
        ort.InferenceSession(relu_add_model.SerializeToString(), ort.SessionOptions())
        sequential = ort.SessionOptions()  # what a voice-activity library sets: one inter-op thread is sequential
        sequential.inter_op_num_threads = 1
        sequential.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        ort.InferenceSession(relu_add_model.SerializeToString(), sequential)


def test_run_options_terminate(relu_add_model):
    sess = ort.InferenceSession(relu_add_model)
    ro = ort.RunOptions()
    ro.terminate = True
    with pytest.raises(ort.RunTerminated):
        sess.run(None, {"x": np.zeros((1, 4), np.float32)}, ro)
    ro.terminate = False
    assert sess.run(None, {"x": np.zeros((1, 4), np.float32)}, ro)[0].shape == (1, 4)


def test_a_run_warns_of_no_ieee_special_value_and_leaves_numpys_error_state_as_it_was():
    """inf and NaN are results (as in onnxruntime): no RuntimeWarning from a run, even with warnings as errors,
    and the caller's numpy error settings are back afterwards."""
    g = helper.make_graph([helper.make_node("Div", ["x", "z"], ["y"]), helper.make_node("Log", ["y"], ["w"])], "g",
                          [helper.make_tensor_value_info("x", 1, [3]), helper.make_tensor_value_info("z", 1, [3])],
                          [helper.make_tensor_value_info("w", 1, [3])])
    sess = ort.InferenceSession(helper.make_model(g).SerializeToString(), providers=["CPUExecutionProvider"])
    with np.errstate(divide="raise", invalid="raise"), warnings.catch_warnings():
        warnings.simplefilter("error")
        (w,) = sess.run(None, {"x": np.array([1, 0, -1], np.float32), "z": np.zeros(3, np.float32)})
        assert np.geterr()["divide"] == "raise" and np.geterr()["invalid"] == "raise"
    assert w[0] == np.inf and np.isnan(w[1]) and np.isnan(w[2])
