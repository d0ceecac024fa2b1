"""SessionOptions.enable_profiling / end_profiling, and optimized_model_filepath."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

import ort_core as ort
from ort_core.cli import demo_input, demo_model_path

from .test_optimizer import conv_chain_model


def test_profile_has_one_event_per_node_per_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    so = ort.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = "prof_"
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC  # keep the nine nodes apart
    sess = ort.InferenceSession(demo_model_path(), so)
    for _ in range(2):
        sess.run(None, {"image": demo_input()})
    path = sess.end_profiling()
    assert path.startswith(str(tmp_path)) and path.endswith(".json")
    events = json.loads(open(path).read())
    nodes = [e for e in events if e["cat"] == "Node"]
    assert len(nodes) == 2 * 9  # the demo CNN's nine nodes, twice
    conv = next(e for e in nodes if e["args"]["op_name"] == "Conv")
    assert conv["ph"] == "X" and conv["dur"] > 0 and conv["args"]["provider"] == "CPUExecutionProvider"
    assert conv["args"]["input_type_shape"][0] == {"float": [1, 1, 28, 28]}  # onnxruntime's type names
    assert {e["name"] for e in events if e["cat"] == "Session"} == {"session_initialization", "model_run"}
    assert sess.get_profiling_start_time_ns() > 0
    assert sess.end_profiling() == ""  # already written


def test_no_profiling_by_default():
    sess = ort.InferenceSession(demo_model_path())
    assert sess.end_profiling() == ""


def test_optimized_model_file_round_trip(tmp_path):
    path = tmp_path / "opt.onnx"
    so = ort.SessionOptions()
    so.optimized_model_filepath = str(path)
    model = conv_chain_model()
    x = np.random.default_rng(3).standard_normal((1, 3, 8, 8)).astype(np.float32)
    (ref,) = ort.InferenceSession(model, so).run(None, {"x": x})
    saved = onnx.load(str(path))
    onnx.checker.check_model(saved)
    # saved after the CPU provider's fusions: onnxruntime's contrib op, its domain imported
    assert [(n.domain, n.op_type) for n in saved.graph.node] == [("com.microsoft", "FusedConv")]
    assert "com.microsoft" in {o.domain for o in saved.opset_import}
    off = ort.SessionOptions()
    off.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    (got,) = ort.InferenceSession(str(path), off).run(None, {"x": x})
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)
    onnxruntime = pytest.importorskip("onnxruntime")  # one vocabulary: onnxruntime loads it as it is
    (theirs,) = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_allclose(theirs, ref, rtol=1e-5, atol=1e-5)


def test_optimized_model_file_at_basic_level_keeps_standard_ops(tmp_path):
    path = tmp_path / "opt.onnx"
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    so.optimized_model_filepath = str(path)
    x = np.random.default_rng(3).standard_normal((1, 3, 8, 8)).astype(np.float32)
    (ref,) = ort.InferenceSession(conv_chain_model(), so).run(None, {"x": x})
    saved = onnx.load(str(path))
    onnx.checker.check_model(saved)
    assert [n.op_type for n in saved.graph.node] == ["Conv", "Relu"]
    onnxruntime = pytest.importorskip("onnxruntime")
    (theirs,) = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_allclose(theirs, ref, rtol=1e-5, atol=1e-5)


def test_work_on_a_device_stream_is_timed_by_its_events(tmp_path, monkeypatch):
    """The example device enqueues its work: the launch returns at once, the device takes longer. The
    profile must show the device time (from events on its stream), not the launch."""
    from onnx import TensorProto, helper

    from .conftest import make_model, slow_down_example_device

    slow_down_example_device(monkeypatch, 0.03)
    monkeypatch.chdir(tmp_path)
    so = ort.SessionOptions()
    so.enable_profiling = True
    model = make_model([helper.make_node("Relu", ["x"], ["y"], name="relu")],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    with pytest.warns(ort.OrtWarning):
        sess = ort.InferenceSession(model, so, providers=["ExampleExecutionProvider"])
    (y,) = sess.run(None, {"x": np.array([-1, 0, 1, 2], np.float32)})
    np.testing.assert_array_equal(y, [0, 0, 1, 2])
    events = json.loads(open(sess.end_profiling()).read())
    (relu,) = [e for e in events if e["cat"] == "Node" and e["args"]["op_name"] == "Relu"]
    assert relu["args"]["provider"] == "ExampleExecutionProvider" and relu["args"]["timed_by"] == "device events"
    assert relu["dur"] >= 30_000  # microseconds: the device's 30 ms
    assert relu["args"]["launch_us"] < 10_000  # while the launch itself returned at once
    assert relu["args"]["input_type_shape"] == [{"float": [4]}]  # the stream is no input of the node
