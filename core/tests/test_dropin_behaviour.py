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


def _run_async_and_wait(sess, output_names, feed, user_data):
    import threading

    done, calls = threading.Event(), []

    def callback(outputs, data, err):
        calls.append((outputs, data, err, threading.current_thread() is threading.main_thread()))
        done.set()

    assert sess.run_async(output_names, feed, callback, user_data) is None
    assert done.wait(10), "the callback was not called"
    return calls[0]


@pytest.mark.parametrize("rt", RUNTIMES)
def test_run_async_calls_back_with_outputs_user_data_and_an_empty_message(rt):
    outputs, data, err, on_main = _run_async_and_wait(_session(rt), None, {"x": np.array([-1, 0, 2], np.float32)},
                                                      "mine")
    assert data == "mine" and err == "" and not on_main
    assert isinstance(outputs, list) and [o.tolist() for o in outputs] == [[0, 0, 2], [1, 0, -2]]
    (n,), _, err, _ = _run_async_and_wait(_session(rt), ["n"], {"x": [1.0, 2.0, 3.0]}, None)
    assert err == "" and n.tolist() == [-1, -2, -3]


@pytest.mark.parametrize("rt", RUNTIMES)
@pytest.mark.parametrize("output_names, feed, words", [
    (None, {"x": np.ones(4, np.float32)}, "(?i)dimension"),
    (None, {"x": np.ones(3, np.float64)}, "(?i)type"),
    (["nope"], {"x": np.ones(3, np.float32)}, "nope"),
], ids=["bad-shape", "bad-dtype", "bad-output-name"])
def test_run_async_reports_a_failed_run_to_the_callback(rt, output_names, feed, words):
    import re

    outputs, data, err, _ = _run_async_and_wait(_session(rt), output_names, feed, 7)
    assert outputs == [] and data == 7 and re.search(words, err)


@pytest.mark.parametrize("rt", RUNTIMES)
def test_run_async_raises_at_once_for_a_missing_input(rt):
    with pytest.raises(ValueError, match=r"Required inputs \(\['x'\]\) are missing"):
        _session(rt).run_async(None, {}, lambda *args: None, None)


@pytest.mark.parametrize("rt", RUNTIMES)
def test_run_async_runs_beside_other_runs_of_the_session(rt):
    import threading

    sess, done, results = _session(rt), threading.Semaphore(0), {}

    def callback(outputs, k, err):
        results[k] = (outputs, err)
        done.release()

    for k in range(16):
        sess.run_async(["n"], {"x": np.full(3, k, np.float32)}, callback, k)
        assert sess.run(["r"], {"x": np.full(3, -k, np.float32)})[0].tolist() == [0, 0, 0]
    for _ in range(16):
        assert done.acquire(timeout=10)
    assert {k: (o[0].tolist(), e) for k, (o, e) in results.items()} == {k: ([-k] * 3, "") for k in range(16)}


@pytest.mark.parametrize("rt", RUNTIMES)
def test_memory_infos_of_a_cpu_session_say_cpu(rt):
    sess = _session(rt)
    (info,) = sess.get_input_memory_infos()
    assert (info.name, info.device_id) == ("Cpu", 0)
    assert [(i.name, i.device_id) for i in sess.get_output_memory_infos()] == [("Cpu", 0)] * 2


def _weighted_model():
    vi = helper.make_tensor_value_info
    return make_model([helper.make_node("Add", ["x", "w"], ["y"])], [vi("x", TensorProto.FLOAT, [3])],
                      [vi("y", TensorProto.FLOAT, [3])],
                      initializers=[helper.make_tensor("w", TensorProto.FLOAT, [3], [1, 2, 3])]).SerializeToString()


@pytest.mark.parametrize("rt", RUNTIMES)
def test_add_initializer_replaces_the_models_initializer(rt):
    so = rt.SessionOptions()
    weights = np.array([10, 20, 30], np.float32)
    value = rt.OrtValue.ortvalue_from_numpy(weights)  # onnxruntime needs it alive as long as the session
    so.add_initializer("w", value)
    weights[0] = 5  # before the session is made: both runtimes read it
    sess = rt.InferenceSession(_weighted_model(), so, providers=["CPUExecutionProvider"])
    assert sess.run(None, {"x": np.zeros(3, np.float32)})[0].tolist() == [5, 20, 30]
    with pytest.raises(Exception, match="already been added"):
        so.add_initializer("w", value)
    with pytest.raises(Exception, match="must be an OrtValue"):
        rt.SessionOptions().add_initializer("w", np.ones(3, np.float32))


def test_ort_core_copies_an_added_initializer_when_the_session_is_made():
    """onnxruntime reads the OrtValue's memory for the session's lifetime; ort-core takes a copy, so later
    writes do not reach the session (and folding or fusing can never see a half-changed weight)."""
    weights = np.array([10, 20, 30], np.float32)
    so = ort_core.SessionOptions()
    so.add_initializer("w", ort_core.OrtValue.ortvalue_from_numpy(weights))
    sess = ort_core.InferenceSession(_weighted_model(), so)
    weights[:] = 0
    assert sess.run(None, {"x": np.zeros(3, np.float32)})[0].tolist() == [10, 20, 30]


@pytest.mark.parametrize("name, value, words", [
    ("nope", np.ones(3, np.float32), "no initializer 'nope'"),
    ("w", np.ones(3, np.float64), r"given float64 \[3\], the model's initializer is float32 \[3\]"),
    ("w", np.ones(4, np.float32), r"given float32 \[4\]"),
], ids=["unknown-name", "dtype", "shape"])
def test_ort_core_refuses_an_added_initializer_that_does_not_fit(name, value, words):
    """onnxruntime ignores an unknown name, reinterprets the bytes of another dtype and fails in the run on
    another shape; ort-core refuses each when the session is made, naming the initializer."""
    so = ort_core.SessionOptions()
    so.add_initializer(name, ort_core.OrtValue.ortvalue_from_numpy(value))
    with pytest.raises(ort_core.InvalidArgument, match=words):
        ort_core.InferenceSession(_weighted_model(), so)


@pytest.mark.parametrize("rt", RUNTIMES)
def test_ortvalue_size_in_bytes_and_array_protocol(rt):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    value = rt.OrtValue.ortvalue_from_numpy(x)
    assert value.tensor_size_in_bytes() == 24
    assert rt.OrtValue.ortvalue_from_numpy(np.ones((0, 3), np.bool_)).tensor_size_in_bytes() == 0
    assert np.shares_memory(np.asarray(value), x) and np.asarray(value).dtype == np.float32
    assert np.asarray(value, dtype=np.float64).tolist() == x.tolist()
    assert not np.shares_memory(np.array(value, copy=True), x)


@pytest.mark.parametrize("rt", RUNTIMES)
def test_ortvalue_from_numpy_with_onnx_type_reinterprets_the_items(rt):
    bits = np.array([[0x3F80, 0x4000]], np.uint16)  # bfloat16 1.0 and 2.0
    value = rt.OrtValue.ortvalue_from_numpy_with_onnx_type(bits, TensorProto.BFLOAT16)
    assert (value.data_type(), value.element_type(), value.shape()) == ("tensor(bfloat16)", 16, [1, 2])
    assert value.tensor_size_in_bytes() == 4
    with pytest.raises(Exception, match="(?i)size"):
        rt.OrtValue.ortvalue_from_numpy_with_onnx_type(np.ones(2, np.float32), TensorProto.BFLOAT16)
    with pytest.raises(Exception, match="(?i)valid ONNX|ONNX element type"):
        rt.OrtValue.ortvalue_from_numpy_with_onnx_type(np.ones(2, np.float32), 999)


@pytest.mark.parametrize("rt", RUNTIMES)
@pytest.mark.parametrize("feed, expected", [
    (["a", "bé"], ["a", "bé"]),
    (np.array(["a", "bé"]), ["a", "bé"]),
    (np.array([b"a\x00b", b"cde"], dtype="V3"), ["a\x00b", "cde"]),  # raw items: their bytes as UTF-8
], ids=["list-of-str", "numpy-str", "numpy-void"])
def test_string_feeds_become_str_items(rt, feed, expected):
    sess = rt.InferenceSession(_identity_model(TensorProto.STRING, [2]), providers=["CPUExecutionProvider"])
    (y,) = sess.run(None, {"x": feed})
    assert y.dtype == object and y.tolist() == expected and all(type(s) is str for s in y)


@pytest.mark.parametrize("feed", [[b"a", b"b\xc3\xa9"], np.array([b"a", b"b\xc3\xa9"]),
                                  np.array([b"a", b"b\xc3\xa9"], dtype=object)], ids=["list", "numpy-S", "object"])
def test_ort_core_decodes_bytes_fed_for_a_string_input(feed):
    """onnxruntime turns a bytes item into its repr text ("b'a'") and fails on most 'S' arrays; ort-core
    decodes bytes as UTF-8."""
    sess = ort_core.InferenceSession(_identity_model(TensorProto.STRING, [2]))
    assert sess.run(None, {"x": feed})[0].tolist() == ["a", "bé"]


@pytest.mark.parametrize("feed, words", [
    (["a", 1], "element 1 of a tensor\\(string\\) feed is a int"),
    (["a", None], "element 1 of a tensor\\(string\\) feed is a NoneType"),
    ([b"\xff", b"a"], "string element 0 is not valid UTF-8"),
    (np.array([1, 2]), "expected tensor\\(string\\), got an array of int64"),
], ids=["int", "none", "bad-utf8", "int-array"])
def test_ort_core_refuses_string_feeds_of_other_items(feed, words):
    """onnxruntime feeds str(item) for a number or None ('1', 'None'); ort-core refuses, naming the input."""
    sess = ort_core.InferenceSession(_identity_model(TensorProto.STRING, [2]))
    with pytest.raises(ort_core.InvalidArgument, match="input 'x': " + words):
        sess.run(None, {"x": feed})
