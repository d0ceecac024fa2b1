"""Behaviours code written for onnxruntime relies on, checked on ort-core and, where it is installed, on
onnxruntime itself: both runtimes must pass every case."""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from onnx import TensorProto, helper

import ort_core

from .conftest import make_model


def _runtimes():
    yield pytest.param(ort_core, id="ort_core")
    try:
        yield pytest.param(importlib.import_module("onnxruntime"), id="onnxruntime")
    except ImportError:  # pragma: no cover - the nox session installs it as the yardstick
        yield pytest.param(None, id="onnxruntime", marks=pytest.mark.skip(reason="onnxruntime is not installed"))


RUNTIMES = list(_runtimes())


def _two_outputs_model():
    vi = helper.make_tensor_value_info
    return make_model([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Neg", ["x"], ["n"])],
                      [vi("x", TensorProto.FLOAT, [3])],
                      [vi("r", TensorProto.FLOAT, [3]), vi("n", TensorProto.FLOAT, [3])])


def _session(rt):
    return rt.InferenceSession(_two_outputs_model().SerializeToString(), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("rt", RUNTIMES)
def test_an_empty_output_list_returns_every_output(rt):
    x = np.array([-1, 0, 2], np.float32)
    r, n = _session(rt).run([], {"x": x})
    np.testing.assert_array_equal(r, [0, 0, 2])
    np.testing.assert_array_equal(n, [1, 0, -2])


@pytest.mark.parametrize("rt", RUNTIMES)
@pytest.mark.filterwarnings("ignore:Specified provider:UserWarning")  # onnxruntime's own warning before it raises
def test_set_providers_with_an_unknown_provider_raises_naming_it(rt):
    sess = _session(rt)
    with pytest.raises(RuntimeError, match="Unknown Provider Type: NoSuchExecutionProvider"):
        sess.set_providers(["NoSuchExecutionProvider"])
    if rt is ort_core:  # ort-core keeps the session as it was (onnxruntime leaves it without providers)
        assert sess.get_providers() == ["CPUExecutionProvider"]
        assert sess.run(None, {"x": np.ones(3, np.float32)})[0].tolist() == [1, 1, 1]


@pytest.mark.parametrize("rt", RUNTIMES)
@pytest.mark.parametrize("cls, attr", [("SessionOptions", "intra_op_num_thread"),
                                       ("SessionOptions", "graph_opt_level"), ("RunOptions", "terminated")])
def test_setting_an_option_that_does_not_exist_raises(rt, cls, attr):
    options = getattr(rt, cls)()
    with pytest.raises(AttributeError, match=attr):
        setattr(options, attr, 1)


@pytest.mark.parametrize("rt", RUNTIMES)
def test_the_documented_options_can_be_set(rt):
    so = rt.SessionOptions()
    so.use_per_session_threads = False
    so.enable_mem_pattern = False
    so.log_severity_level = 3
    ro = rt.RunOptions()
    ro.only_execute_path_to_fetches = True
    ro.logid = "run-1"
    assert so.log_severity_level == 3 and ro.logid == "run-1"


@pytest.mark.parametrize("rt", RUNTIMES)
def test_a_model_of_a_newer_ir_version_is_refused(rt):
    model = _two_outputs_model()
    model.ir_version = 99
    with pytest.raises(Exception, match="(?i)unsupported model ir version.*99"):
        rt.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


@pytest.fixture
def process_seed_restored():
    from ort_core.providers.cpu.ops import random as random_ops

    yield
    random_ops._process_seed[0] = None  # later tests draw fresh entropy again


@pytest.mark.parametrize("rt", RUNTIMES)
def test_set_seed_makes_random_ops_without_a_seed_reproducible(rt, process_seed_restored):
    vi = helper.make_tensor_value_info
    model = make_model([helper.make_node("RandomNormal", [], ["y"], shape=[4], dtype=TensorProto.FLOAT)], [],
                       [vi("y", TensorProto.FLOAT, [4])])
    rt.set_seed(7)  # onnxruntime seeds a session's random kernels when it is made: seed first
    sess = rt.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    first = [sess.run(None, {})[0] for _ in range(3)]
    rt.set_seed(7)
    sess = rt.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    again = [sess.run(None, {})[0] for _ in range(3)]
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(first[0], first[1])  # a sequence, not one value repeated


@pytest.mark.parametrize("rt", RUNTIMES)
def test_module_level_calls_exist(rt):
    assert isinstance(rt.get_build_info(), str) and rt.get_build_info()
    rt.disable_telemetry_events()
    rt.set_default_logger_severity(3)
    rt.set_default_logger_severity(2)
    assert rt.get_device() in ("CPU", "GPU")
    assert "CPUExecutionProvider" in rt.get_available_providers()


def test_severity_three_silences_ort_cores_warnings():
    import warnings

    model = _two_outputs_model().SerializeToString()
    ort_core.set_default_logger_severity(3)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ort_core.InferenceSession(model, providers=["NoSuchExecutionProvider"])
        assert not [w for w in caught if issubclass(w.category, ort_core.OrtWarning)]
    finally:
        ort_core.set_default_logger_severity(2)
    so = ort_core.SessionOptions()
    so.log_severity_level = 3  # per session too
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ort_core.InferenceSession(model, so, providers=["NoSuchExecutionProvider"])
    assert not [w for w in caught if issubclass(w.category, ort_core.OrtWarning)]


def test_a_warning_points_at_the_callers_line():
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ort_core.InferenceSession(_two_outputs_model().SerializeToString(), providers=["NoSuchExecutionProvider"])
    (w,) = [w for w in caught if issubclass(w.category, ort_core.OrtWarning)]
    assert "NoSuchExecutionProvider" in str(w.message) and w.filename == __file__


def _identity_model(elem_type, shape):
    vi = helper.make_tensor_value_info
    return make_model([helper.make_node("Identity", ["x"], ["y"])], [vi("x", elem_type, shape)],
                      [vi("y", elem_type, shape)]).SerializeToString()


@pytest.mark.parametrize("rt", RUNTIMES)
@pytest.mark.parametrize("elem_type, shape, feed, dtype, expected", [
    (TensorProto.FLOAT, [2, 2], [[1, 2], [3, 4]], np.float32, [[1, 2], [3, 4]]),  # ints into float
    (TensorProto.FLOAT, [2], [1.5, 2.5], np.float32, [1.5, 2.5]),  # Python floats (double) into float
    (TensorProto.INT64, [2], [1.5, 2.5], np.int64, [1, 2]),  # truncated, as numpy casts
    (TensorProto.BOOL, [2], [True, False], np.bool_, [True, False]),
    (TensorProto.FLOAT, [2, 2], [np.ones(2), np.zeros(2)], np.float32, [[1, 1], [0, 0]]),  # a list of arrays
], ids=["nested-ints", "floats", "floats-to-int", "bools", "list-of-arrays"])
def test_a_python_list_feed_becomes_the_declared_type(rt, elem_type, shape, feed, dtype, expected):
    sess = rt.InferenceSession(_identity_model(elem_type, shape), providers=["CPUExecutionProvider"])
    (y,) = sess.run(None, {"x": feed})
    assert y.dtype == dtype
    np.testing.assert_array_equal(y, expected)


@pytest.mark.parametrize("rt", RUNTIMES)
@pytest.mark.parametrize("feed, shape", [(np.array([2.5], np.float32), (1,)), ([2.5], (1,)),
                                         (np.array([[2.5]], np.float32), (1, 1))])
def test_a_one_element_array_for_a_scalar_input_runs_as_given(rt, feed, shape):
    sess = rt.InferenceSession(_identity_model(TensorProto.FLOAT, []), providers=["CPUExecutionProvider"])
    (y,) = sess.run(None, {"x": feed})
    assert y.shape == shape and y.ravel()[0] == np.float32(2.5)


@pytest.mark.parametrize("rt", RUNTIMES)
@pytest.mark.parametrize("feed", [[[1.0], [2.0, 3.0]], [1.0, 2.0, 3.0], np.array([1.0, 2.0])])
def test_lists_and_arrays_that_do_not_fit_are_refused(rt, feed):
    """A ragged list, a list of the wrong length, an array of the wrong dtype: both runtimes refuse them."""
    sess = rt.InferenceSession(_identity_model(TensorProto.FLOAT, [2]), providers=["CPUExecutionProvider"])
    with pytest.raises(Exception, match="(?i)x|input|tensor"):
        sess.run(None, {"x": feed})


def test_ort_core_is_stricter_about_scalar_inputs_of_several_elements():
    """onnxruntime runs a two-element array for a rank-0 input; ort-core refuses it, naming the input."""
    sess = ort_core.InferenceSession(_identity_model(TensorProto.FLOAT, []))
    with pytest.raises(ort_core.InvalidArgument, match="input 'x': invalid rank 1"):
        sess.run(None, {"x": np.ones(2, np.float32)})


@pytest.mark.parametrize("rt", RUNTIMES)
def test_a_missing_input_is_reported_in_onnxruntimes_words_and_class(rt):
    state = importlib.import_module(f"{rt.__name__}.capi.onnxruntime_pybind11_state")
    vi = helper.make_tensor_value_info
    model = make_model([helper.make_node("Add", ["x", "z"], ["y"])],
                       [vi("x", TensorProto.FLOAT, [2]), vi("z", TensorProto.FLOAT, [2])],
                       [vi("y", TensorProto.FLOAT, [2])])
    sess = rt.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    with pytest.raises(ValueError, match=r"Required inputs \(\['x'\]\) are missing from input feed \(\['z'\]\)"):
        sess.run(None, {"z": np.ones(2, np.float32)})
    with pytest.raises((state.InvalidArgument, state.Fail)):  # an except clause written for onnxruntime catches it
        sess.run(None, {"x": np.ones(3, np.float32), "z": np.ones(2, np.float32)})
    with pytest.raises(state.NoSuchFile):
        rt.InferenceSession("/nonexistent/model.onnx", providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("rt", RUNTIMES)
def test_the_profile_file_is_named_and_laid_out_as_onnxruntimes(rt, tmp_path, monkeypatch):
    import json
    import os
    import re

    monkeypatch.chdir(tmp_path)
    so = rt.SessionOptions()
    so.enable_profiling = True
    vi = helper.make_tensor_value_info
    model = make_model([helper.make_node("Relu", ["x"], ["y"], name="relu")], [vi("x", TensorProto.FLOAT, [2])],
                       [vi("y", TensorProto.FLOAT, [2])])
    sess = rt.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    sess.run(None, {"x": np.ones(2, np.float32)})
    path = sess.end_profiling()
    assert re.fullmatch(r"onnxruntime_profile__\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d_\d{3}\.json", os.path.basename(path))
    with open(os.path.join(tmp_path, os.path.basename(path))) as f:
        lines = f.read().splitlines()
    assert lines[0] == "[" and lines[-1] == "]"
    events = [json.loads(line.rstrip(",")) for line in lines[1:-1]]  # one event per line
    (relu,) = [e for e in events if e["name"] == "relu_kernel_time"]
    assert relu["cat"] == "Node" and relu["args"]["op_name"] == "Relu"
    assert relu["args"]["provider"] == "CPUExecutionProvider" and relu["args"]["output_type_shape"] == [{"float": [2]}]
    assert {"session_initialization", "model_run"} <= {e["name"] for e in events if e["cat"] == "Session"}
