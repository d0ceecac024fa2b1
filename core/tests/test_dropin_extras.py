"""More of onnxruntime's Python API, checked on ort-core and, where it is installed, on onnxruntime 1.32 itself:
external initializers supplied by the caller, an optimized model's initializers in an external file, session
options from the model's metadata, config entries, graph assignment info, sparse tensors, LoRA adapters, arena
settings and the session's option and profiling queries. Tests named ``test_ort_core_...`` cover where ort-core
is deliberately stricter or has no onnxruntime counterpart."""

from __future__ import annotations

import importlib
import os
import time
import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.external_data_helper import set_external_data

import ort_core

from .conftest import make_model
from .test_dropin_behaviour import RUNTIMES

vi = helper.make_tensor_value_info
LORA_FIXTURE = os.path.join(os.path.dirname(__file__), "fixtures", "lora", "adapter_v3.onnx_adapter")


def _state(rt):
    return importlib.import_module(f"{rt.__name__}.capi.onnxruntime_pybind11_state")


def _cpu(rt, model, so=None):
    data = model.SerializeToString() if isinstance(model, onnx.ModelProto) else model
    return rt.InferenceSession(data, so, providers=["CPUExecutionProvider"])


# ---------------------------------------------------------------- external initializers supplied by the caller

def _matmul_add(external: bool = True, offset: int | None = None, ir_version: int = 10) -> onnx.ModelProto:
    """y = x @ W + B, W (2x3, arange) stored as external data in 'w.bin' (not written anywhere)."""
    w = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "W")
    b = numpy_helper.from_array(np.array([10, 20, 30], np.float32), "B")
    if external:
        length = len(w.raw_data)
        set_external_data(w, "w.bin", offset=offset, length=length)
        w.ClearField("raw_data")
        w.data_location = TensorProto.EXTERNAL
    return make_model([helper.make_node("MatMul", ["x", "W"], ["m"]), helper.make_node("Add", ["m", "B"], ["y"])],
                      [vi("x", TensorProto.FLOAT, [1, 2])], [vi("y", TensorProto.FLOAT, [1, 3])], [w, b],
                      ir_version=ir_version)


X = np.array([[1, 2]], np.float32)


@pytest.mark.parametrize("rt", RUNTIMES)
def test_add_external_initializers_supplies_an_external_initializers_data(rt):
    so = rt.SessionOptions()
    ones = np.ones((2, 3), np.float32)  # onnxruntime reads this memory for the session's lifetime: keep it alive
    so.add_external_initializers(["W"], [rt.OrtValue.ortvalue_from_numpy(ones)])
    (y,) = _cpu(rt, _matmul_add(), so).run(None, {"x": X})
    np.testing.assert_array_equal(y, [[13, 23, 33]])
    assert ones.sum() == 6


@pytest.mark.parametrize("rt", RUNTIMES)
@pytest.mark.parametrize("external, name", [(False, "W"), (True, "Nope")])
def test_add_external_initializers_refuses_a_name_without_external_data(rt, external, name):
    so = rt.SessionOptions()
    so.add_external_initializers([name], [rt.OrtValue.ortvalue_from_numpy(np.ones((2, 3), np.float32))])
    with pytest.raises(_state(rt).Fail, match="non-external|not stored as external|find existing|no initializer"):
        _cpu(rt, _matmul_add(external), so)


@pytest.mark.parametrize("rt", RUNTIMES)
def test_add_external_initializers_refuses_lists_of_other_lengths_and_a_name_twice(rt):
    so = rt.SessionOptions()
    one = rt.OrtValue.ortvalue_from_numpy(np.ones((2, 3), np.float32))
    with pytest.raises((RuntimeError, ValueError), match="equal length"):
        so.add_external_initializers(["W", "B"], [one])
    so.add_external_initializers(["W"], [one])
    with pytest.raises((RuntimeError, ValueError), match="already been added: W"):
        so.add_external_initializers(["W"], [one])


@pytest.mark.parametrize("value, words", [
    (np.ones((3, 3), np.float32), r"given float32 \[3, 3\], the model's initializer is float32 \[2, 3\]"),
    (np.ones((2, 3), np.float64), r"given float64 \[2, 3\]"),
])
def test_ort_core_refuses_an_external_initializer_of_another_shape_or_type(value, words):
    so = ort_core.SessionOptions()
    so.add_external_initializers(["W"], [ort_core.OrtValue.ortvalue_from_numpy(value)])
    with pytest.raises(ort_core.InvalidArgument, match=words):
        _cpu(ort_core, _matmul_add(), so)


def test_ort_core_refuses_one_name_for_add_initializer_and_add_external_initializers():
    # onnxruntime 1.32 crashes the interpreter (segmentation fault) when a session is made with both
    so = ort_core.SessionOptions()
    so.add_initializer("W", ort_core.OrtValue.ortvalue_from_numpy(np.ones((2, 3), np.float32)))
    with pytest.raises(ort_core.InvalidArgument, match="given to add_initializer already"):
        so.add_external_initializers(["W"], [ort_core.OrtValue.ortvalue_from_numpy(np.ones((2, 3), np.float32))])


@pytest.mark.parametrize("rt", RUNTIMES)
@pytest.mark.parametrize("name, offset, as_array", [("w.bin", None, False), ("./w.bin", 8, True)])
def test_files_in_memory_supply_the_external_data_files(rt, name, offset, as_array):
    data = b"\0" * (offset or 0) + np.full((2, 3), 2, np.float32).tobytes()
    buffer = np.frombuffer(data, np.uint8) if as_array else data
    so = rt.SessionOptions()
    so.add_external_initializers_from_files_in_memory([name], [buffer], [len(data)])
    (y,) = _cpu(rt, _matmul_add(offset=offset), so).run(None, {"x": X})
    np.testing.assert_array_equal(y, [[16, 26, 36]])


@pytest.mark.parametrize("rt", RUNTIMES)
@pytest.mark.parametrize("name, size, words", [("other.bin", 24, "w.bin"), ("w.bin", 12, "24")])
def test_files_in_memory_refuse_a_missing_file_or_a_short_one(rt, name, size, words):
    data = np.full((2, 3), 2, np.float32).tobytes()[:size]
    so = rt.SessionOptions()
    so.add_external_initializers_from_files_in_memory([name], [data], [size])
    with pytest.raises(_state(rt).Fail, match=words):
        _cpu(rt, _matmul_add(), so)


@pytest.mark.parametrize("rt", RUNTIMES)
def test_a_supplied_initializer_wins_over_a_supplied_file(rt):
    data = np.full((2, 3), 2, np.float32).tobytes()
    so = rt.SessionOptions()
    so.add_external_initializers_from_files_in_memory(["w.bin"], [data], [len(data)])
    ones = np.ones((2, 3), np.float32)
    so.add_external_initializers(["W"], [rt.OrtValue.ortvalue_from_numpy(ones)])
    (y,) = _cpu(rt, _matmul_add(), so).run(None, {"x": X})
    np.testing.assert_array_equal(y, [[13, 23, 33]])
    assert ones.sum() == 6


def test_ort_core_refuses_a_length_past_the_buffer_and_does_not_change_a_given_model_proto():
    # onnxruntime accepts a length past its buffer (and then reads past it)
    so = ort_core.SessionOptions()
    with pytest.raises(ort_core.InvalidArgument, match="length 100 must be an int from 0 to the buffer's 24 bytes"):
        so.add_external_initializers_from_files_in_memory(["w.bin"], [b"\0" * 24], [100])
    model = _matmul_add()
    so.add_external_initializers_from_files_in_memory(["w.bin"], [np.ones((2, 3), np.float32).tobytes()], [24])
    (y,) = ort_core.InferenceSession(model, so).run(None, {"x": X})
    np.testing.assert_array_equal(y, [[13, 23, 33]])
    assert model.graph.initializer[0].data_location == TensorProto.EXTERNAL  # the caller's proto is left as it was


# ------------------------------------------------------------ the optimized model's initializers in a file

def _wide_model() -> onnx.ModelProto:
    """y = x @ W + B with W 2x300 (2400 bytes) and B 300 (1200 bytes)."""
    w = numpy_helper.from_array(np.arange(600, dtype=np.float32).reshape(2, 300), "W")
    b = numpy_helper.from_array(np.arange(300, dtype=np.float32), "B")
    return make_model([helper.make_node("MatMul", ["x", "W"], ["m"]), helper.make_node("Add", ["m", "B"], ["y"])],
                      [vi("x", TensorProto.FLOAT, [1, 2])], [vi("y", TensorProto.FLOAT, [1, 300])], [w, b],
                      ir_version=10)


@pytest.mark.parametrize("rt", RUNTIMES)
@pytest.mark.parametrize("min_size, external", [(None, {"W": 2400, "B": 1200}), ("2000", {"W": 2400})])
def test_the_optimized_models_initializers_go_to_the_named_file(rt, tmp_path, min_size, external):
    so = rt.SessionOptions()
    so.graph_optimization_level = rt.GraphOptimizationLevel.ORT_ENABLE_BASIC
    so.optimized_model_filepath = str(tmp_path / "opt.onnx")
    so.add_session_config_entry("session.optimized_model_external_initializers_file_name", "weights.bin")
    if min_size is not None:
        so.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes", min_size)
    expected = _cpu(rt, _wide_model(), so).run(None, {"x": X})[0]
    saved = onnx.load(str(tmp_path / "opt.onnx"), load_external_data=False)
    found = {t.name: {e.key: e.value for e in t.external_data} for t in saved.graph.initializer
             if t.data_location == TensorProto.EXTERNAL}
    assert {name: int(info["length"]) for name, info in found.items()} == external
    assert {info["location"] for info in found.values()} == {"weights.bin"}
    assert os.path.getsize(tmp_path / "weights.bin") == sum(external.values())
    (again,) = rt.InferenceSession(str(tmp_path / "opt.onnx"), providers=["CPUExecutionProvider"]).run(None, {"x": X})
    np.testing.assert_array_equal(again, expected)
    np.testing.assert_array_equal(expected[0, :3], [600, 604, 608])  # j + 2 * (300 + j) + j


@pytest.mark.parametrize("rt", RUNTIMES)
@pytest.mark.parametrize("size", ["abc", "-5"])
def test_a_minimum_size_that_is_not_a_number_of_bytes_is_refused(rt, tmp_path, size):
    so = rt.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "opt.onnx")
    so.add_session_config_entry("session.optimized_model_external_initializers_file_name", "weights.bin")
    so.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes", size)
    with pytest.raises(_state(rt).Fail):
        _cpu(rt, _wide_model(), so)


# ------------------------------------------------------------------ session options from the model's metadata

def _relu_with_config(config: str) -> onnx.ModelProto:
    model = make_model([helper.make_node("Relu", ["x"], ["y"], name="relu")], [vi("x", TensorProto.FLOAT, [3])],
                       [vi("y", TensorProto.FLOAT, [3])], ir_version=10)
    helper.set_model_props(model, {"ort_config": config})
    return model


CONFIG = '{"session_options": {"intra_op_num_threads": 2, "graph_optimization_level": 1, "enable_profiling": 1, ' \
         '"execution_mode": 0, "not_read": 3}}'


@pytest.mark.parametrize("rt", RUNTIMES)
def test_session_options_come_from_the_models_ort_config_when_the_variable_asks(rt, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    so = rt.SessionOptions()
    monkeypatch.setenv("ORT_LOAD_CONFIG_FROM_MODEL", "0")
    plain = _cpu(rt, _relu_with_config(CONFIG), so).get_session_options()
    assert (plain.intra_op_num_threads, plain.enable_profiling) == (0, False)
    monkeypatch.setenv("ORT_LOAD_CONFIG_FROM_MODEL", "1")
    sess = _cpu(rt, _relu_with_config(CONFIG), so)
    got = sess.get_session_options()
    assert (got.intra_op_num_threads, got.enable_profiling) == (2, True)
    assert got.graph_optimization_level == rt.GraphOptimizationLevel.ORT_ENABLE_BASIC
    assert sess.get_profiling_start_time_ns() > 0
    np.testing.assert_array_equal(sess.run(None, {"x": np.array([-1, 0, 2], np.float32)})[0], [0, 0, 2])
    assert os.path.exists(sess.end_profiling())
    assert (so.intra_op_num_threads, so.enable_profiling) == (0, False)  # the caller's options are left alone


@pytest.mark.parametrize("rt", RUNTIMES)
@pytest.mark.parametrize("flag, config, words", [
    ("2", CONFIG, "only supported values for the environment variable ORT_LOAD_CONFIG_FROM_MODEL are '0' and '1'"),
    ("1", "{bad", "Json stored in the `ort_config` key cannot be parsed"),
    ("1", '{"session_options": {"intra_op_num_threads": "2"}}', "intra_op_num_threads option in the model file "
                                                                "must be an integer"),
    ("1", '{"session_options": {"graph_optimization_level": 7}}', "Unsupported graph_optimization_level value"),
])
@pytest.mark.filterwarnings("ignore::UserWarning")  # onnxruntime retries on the CPU provider, warning first
def test_a_bad_ort_config_or_variable_is_refused_as_onnxruntime_refuses_it(rt, monkeypatch, flag, config, words):
    monkeypatch.setenv("ORT_LOAD_CONFIG_FROM_MODEL", flag)
    with pytest.raises(RuntimeError, match=words):
        _cpu(rt, _relu_with_config(config))


# ------------------------------------------------------------------------------------------ config entries

def _relu() -> onnx.ModelProto:
    return make_model([helper.make_node("Relu", ["x"], ["r"], name="relu"),
                       helper.make_node("Neg", ["r"], ["y"], name="neg")],
                      [vi("x", TensorProto.FLOAT, [3])], [vi("y", TensorProto.FLOAT, [3])], ir_version=10)


@pytest.mark.parametrize("rt", RUNTIMES)
def test_an_empty_config_key_and_a_missing_one_raise_runtime_errors(rt):
    so, ro = rt.SessionOptions(), rt.RunOptions()
    with pytest.raises(RuntimeError, match="Config key is empty"):
        so.add_session_config_entry("", "1")
    with pytest.raises(RuntimeError, match="Config key is empty"):
        ro.add_run_config_entry("", "1")
    with pytest.raises(RuntimeError, match="SessionOptions does not have configuration with key: nope"):
        so.get_session_config_entry("nope")
    with pytest.raises(RuntimeError, match="RunOptions does not have configuration with key: nope"):
        ro.get_run_config_entry("nope")
    so.add_session_config_entry("a.b", "1")
    so.add_session_config_entry("a.b", "2")
    assert so.get_session_config_entry("a.b") == "2"


def test_ort_core_missing_config_entries_are_key_errors_too():
    with pytest.raises(KeyError):
        ort_core.SessionOptions().get_session_config_entry("nope")


@pytest.mark.parametrize("rt", RUNTIMES)
@pytest.mark.parametrize("key, value", [("session.graph_optimizations_loop_level", "x"),
                                        ("session.dynamic_block_base", "x"),
                                        ("optimization.minimal_build_optimizations", "x")])
def test_config_entries_that_do_not_parse_fail_the_session(rt, key, value):
    so = rt.SessionOptions()
    so.add_session_config_entry(key, value)
    with pytest.raises(Exception) as caught:  # noqa: PT011 - onnxruntime raises a different class per key
        _cpu(rt, _relu(), so)
    if rt is ort_core:
        assert key in str(caught.value) and isinstance(caught.value, ort_core.OrtError)
    if key.startswith("optimization."):
        assert isinstance(caught.value, _state(rt).InvalidArgument)
        assert f"Invalid value for {key}: x" in str(caught.value)


# ------------------------------------------------------------------------------------- assignment info

@pytest.mark.parametrize("rt", RUNTIMES)
def test_graph_assignment_info_has_onnxruntimes_types_when_recorded(rt):
    so = rt.SessionOptions()
    so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    info = _cpu(rt, _relu(), so).get_provider_graph_assignment_info()
    assert isinstance(info, list) and {sg.ep_name for sg in info} == {"CPUExecutionProvider"}
    nodes = [(n.name, n.op_type, n.domain) for sg in info for n in sg.get_nodes()]
    assert nodes == [("relu", "Relu", ""), ("neg", "Neg", "")]


@pytest.mark.parametrize("rt", RUNTIMES)
def test_graph_assignment_info_raises_when_its_entry_is_not_one(rt):
    so = rt.SessionOptions()
    so.add_session_config_entry("session.record_ep_graph_assignment_info", "0")
    with pytest.raises(_state(rt).Fail, match="session.record_ep_graph_assignment_info' must be set to \"1\""):
        _cpu(rt, _relu(), so).get_provider_graph_assignment_info()


def test_ort_core_answers_graph_assignment_info_when_the_entry_is_not_set():
    # onnxruntime raises Fail until the entry is "1"; ort-core records it always (its tools read it)
    info = _cpu(ort_core, _relu()).get_provider_graph_assignment_info()
    assert {sg.ep_name for sg in info} == {sg.provider for sg in info} == {"CPUExecutionProvider"}
    assert [op for sg in info for op in sg.op_types] == ["Relu", "Neg"]


# -------------------------------------------------------------------------------------------- sparse tensors

VALS = np.array([1.5, 2.5, 3.5], np.float32)
DENSE = np.array([[1.5, 0, 0, 0], [0, 2.5, 0, 0], [0, 0, 0, 3.5]], np.float32)


@pytest.mark.parametrize("rt", RUNTIMES)
@pytest.mark.parametrize("indices", [np.array([0, 5, 11], np.int64), np.array([[0, 0], [1, 1], [2, 3]], np.int64)])
def test_a_coo_sparse_tensor(rt, indices):
    st = rt.SparseTensor.sparse_coo_from_numpy(np.array([3, 4], np.int64), VALS, indices, rt.OrtDevice.make("cpu", 0))
    assert st.format() == rt.OrtSparseFormat.ORT_SPARSE_COO and int(st.format()) == 1
    assert st.dense_shape() == [3, 4] and st.data_type() == "sparse_tensor(float)" and st.device_name() == "cpu"
    np.testing.assert_array_equal(st.values(), VALS)
    assert np.shares_memory(st.values(), VALS)  # numeric values are the caller's array, as in onnxruntime
    np.testing.assert_array_equal(st.as_coo_view().indices(), indices)
    with pytest.raises(RuntimeError, match="does not contain CSR"):
        st.as_csrc_view()
    with pytest.raises(RuntimeError):
        st.to_cuda(rt.OrtDevice.make("cuda", 0))


@pytest.mark.parametrize("rt", RUNTIMES)
def test_a_csr_sparse_tensor(rt):
    st = rt.SparseTensor.sparse_csr_from_numpy([3, 4], VALS, np.array([0, 1, 3], np.int64),
                                               np.array([0, 1, 2, 3], np.int64), rt.OrtDevice.make("cpu", 0))
    assert st.format() == rt.OrtSparseFormat.ORT_SPARSE_CSRC and st.dense_shape() == [3, 4]
    view = st.as_csrc_view()
    assert view.inner().tolist() == [0, 1, 3] and view.outer().tolist() == [0, 1, 2, 3]
    with pytest.raises(RuntimeError, match="does not contain COO"):
        st.as_coo_view()


@pytest.mark.parametrize("rt", RUNTIMES)
@pytest.mark.parametrize("make, words", [
    (lambda rt, d: rt.SparseTensor.sparse_coo_from_numpy([3, 4], VALS, np.array([0, 5], np.int64), d), "size|values"),
    (lambda rt, d: rt.SparseTensor.sparse_coo_from_numpy([3, 4], VALS.reshape(3, 1), np.array([0, 5, 11]), d),
     "1-D"),
    (lambda rt, d: rt.SparseTensor.sparse_csr_from_numpy([3, 4], VALS, np.array([0, 1, 3], np.int64),
                                                         np.array([0, 1, 3], np.int64), d), "rows \\+ 1"),
    (lambda rt, d: rt.SparseTensor.sparse_csr_from_numpy([2, 3, 4], VALS, np.array([0, 1, 3], np.int64),
                                                         np.array([0, 1, 2, 3], np.int64), d), "2-D"),
])
def test_malformed_sparse_tensors_are_refused(rt, make, words):
    with pytest.raises((RuntimeError, ValueError), match=words):
        make(rt, rt.OrtDevice.make("cpu", 0))


@pytest.mark.parametrize("rt", RUNTIMES)
def test_an_ortvalue_holds_a_sparse_tensor(rt):
    st = rt.SparseTensor.sparse_coo_from_numpy([3, 4], VALS, np.array([0, 5, 11], np.int64),
                                               rt.OrtDevice.make("cpu", 0))
    value = rt.OrtValue.ort_value_from_sparse_tensor(st)
    assert value.is_sparse_tensor() and not value.is_tensor() and value.has_value()
    assert value.data_type() == "sparse_tensor(float)" and value.shape() == [3, 4]
    np.testing.assert_array_equal(value.as_sparse_tensor().values(), VALS)
    with pytest.raises(RuntimeError, match="Tensors are convertible to Numpy"):
        value.numpy()
    with pytest.raises(RuntimeError, match="does not contain SparseTensor"):
        rt.OrtValue.ortvalue_from_numpy(VALS).as_sparse_tensor()


@pytest.mark.parametrize("indices, words", [(np.array([0, 5, 12]), "index 12 is out of range"),
                                            (np.array([[0, 0], [1, 1], [3, 0]]), r"index \[3, 0\] is out of range")])
def test_ort_core_refuses_sparse_indices_out_of_range(indices, words):
    # onnxruntime accepts them (and reads past the dense shape when they are used)
    with pytest.raises(ort_core.InvalidArgument, match=words):
        ort_core.SparseTensor.sparse_coo_from_numpy([3, 4], VALS, indices, ort_core.OrtDevice.make("cpu", 0))


def test_ort_core_densifies_sparse_tensors():
    coo = ort_core.SparseTensor.sparse_coo_from_numpy([3, 4], VALS, np.array([0, 5, 11]))
    csr = ort_core.SparseTensor.sparse_csr_from_numpy([3, 4], VALS, np.array([0, 1, 3]), np.array([0, 1, 2, 3]))
    np.testing.assert_array_equal(coo.to_dense(), DENSE)
    np.testing.assert_array_equal(csr.to_dense(), DENSE)


def _sparse_initializer_model(indices: np.ndarray) -> onnx.ModelProto:
    values = numpy_helper.from_array(VALS, "W")
    sparse = helper.make_sparse_tensor(values, numpy_helper.from_array(indices, "W_indices"), [3, 4])
    graph = helper.make_graph([helper.make_node("Add", ["x", "W"], ["y"])], "g", [vi("x", TensorProto.FLOAT, [3, 4])],
                              [vi("y", TensorProto.FLOAT, [3, 4])], sparse_initializer=[sparse])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("rt", RUNTIMES)
@pytest.mark.parametrize("indices", [np.array([0, 5, 11], np.int64), np.array([[0, 0], [1, 1], [2, 3]], np.int64)])
def test_a_sparse_initializer_loads_as_a_dense_constant(rt, indices):
    sess = _cpu(rt, _sparse_initializer_model(indices))
    assert [a.name for a in sess.get_inputs()] == ["x"] and sess.get_overridable_initializers() == []
    (y,) = sess.run(None, {"x": np.ones((3, 4), np.float32)})
    np.testing.assert_array_equal(y, DENSE + 1)


@pytest.mark.parametrize("rt", RUNTIMES)
def test_a_constant_with_a_sparse_value_is_dense(rt):
    sparse = helper.make_sparse_tensor(numpy_helper.from_array(np.array([1.5, 2.5], np.float32), "c"),
                                       numpy_helper.from_array(np.array([1, 4], np.int64), "c_indices"), [2, 3])
    model = make_model([helper.make_node("Constant", [], ["c"], sparse_value=sparse),
                        helper.make_node("Add", ["x", "c"], ["y"])],
                       [vi("x", TensorProto.FLOAT, [2, 3])], [vi("y", TensorProto.FLOAT, [2, 3])])
    (y,) = _cpu(rt, model).run(None, {"x": np.ones((2, 3), np.float32)})
    np.testing.assert_array_equal(y, [[1, 2.5, 1], [1, 3.5, 1]])


def test_ort_core_refuses_a_sparse_initializer_indexing_past_its_shape():
    with pytest.raises(ort_core.InvalidGraph, match="sparse tensor 'W': an index is out of range for dims"):
        _cpu(ort_core, _sparse_initializer_model(np.array([0, 5, 12], np.int64)))


# ------------------------------------------------------------------------------------------- LoRA adapters

def _lora_model(with_scale: bool = True) -> onnx.ModelProto:
    """y = x @ lora_A, s = float(lora_scale); both overridable initializers (zeros by default)."""
    inits = [numpy_helper.from_array(np.zeros((2, 3), np.float32), "lora_A")]
    inputs = [vi("x", TensorProto.FLOAT, [1, 2]), vi("lora_A", TensorProto.FLOAT, [2, 3])]
    nodes = [helper.make_node("MatMul", ["x", "lora_A"], ["y"])]
    outputs = [vi("y", TensorProto.FLOAT, [1, 3])]
    if with_scale:
        inits.append(numpy_helper.from_array(np.zeros(2, np.float16), "lora_scale"))
        inputs.append(vi("lora_scale", TensorProto.FLOAT16, [2]))
        nodes.append(helper.make_node("Cast", ["lora_scale"], ["s"], to=TensorProto.FLOAT))
        outputs.append(vi("s", TensorProto.FLOAT, [2]))
    return make_model(nodes, inputs, outputs, inits, ir_version=10)


def _adapter(rt):
    adapter = rt.LoraAdapter()
    adapter.Load(LORA_FIXTURE)  # written by onnxruntime.AdapterFormat.export_adapter
    return adapter


@pytest.mark.parametrize("rt", RUNTIMES)
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_an_active_adapter_feeds_its_parameters_for_that_run_only(rt):
    sess = _cpu(rt, _lora_model())
    ro = rt.RunOptions()
    adapter = _adapter(rt)  # onnxruntime's RunOptions does not keep the adapter alive: the caller must
    ro.add_active_adapter(adapter)
    x = np.array([[1, 1]], np.float32)
    y, s = sess.run(None, {"x": x}, ro)
    np.testing.assert_array_equal(y, [[3, 5, 7]])
    np.testing.assert_array_equal(s, [0.5, 2.0])
    y, s = sess.run(None, {"x": x})
    np.testing.assert_array_equal(y, [[0, 0, 0]])
    np.testing.assert_array_equal(s, [0, 0])


@pytest.mark.parametrize("rt", RUNTIMES)
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_an_adapter_parameter_the_model_has_no_input_for_is_refused(rt):
    ro = rt.RunOptions()
    adapter = _adapter(rt)
    ro.add_active_adapter(adapter)
    with pytest.raises(_state(rt).InvalidArgument, match="Invalid input name: lora_scale"):
        _cpu(rt, _lora_model(with_scale=False)).run(None, {"x": np.array([[1, 1]], np.float32)}, ro)
    assert adapter is not None


@pytest.mark.parametrize("rt", RUNTIMES)
def test_a_file_that_is_not_an_adapter_is_refused(rt, tmp_path):
    (tmp_path / "x.onnx_adapter").write_bytes(b"\x0c\0\0\0NOPE" + b"\0" * 24)
    with pytest.raises(RuntimeError, match="valid lora parameter format"):
        rt.LoraAdapter().Load(str(tmp_path / "x.onnx_adapter"))


def test_ort_core_reads_the_adapters_versions_and_parameters(tmp_path):
    adapter = _adapter(ort_core)
    assert adapter.versions == {"format_version": 1, "adapter_version": 3, "model_version": 5}
    params = adapter.parameters
    assert params["lora_A"].dtype == np.float32 and params["lora_A"].tolist() == [[0, 1, 2], [3, 4, 5]]
    assert params["lora_scale"].dtype == np.float16 and not params["lora_A"].flags.writeable
    with pytest.raises(ort_core.NoSuchFile, match="does not exist"):
        ort_core.LoraAdapter().Load(str(tmp_path / "missing.onnx_adapter"))
    data = open(LORA_FIXTURE, "rb").read()
    for cut in (12, 60, len(data) - 8):
        (tmp_path / "cut.onnx_adapter").write_bytes(data[:cut])
        with pytest.raises(ort_core.Fail, match="not a valid LoRA adapter file"):
            ort_core.LoraAdapter().Load(str(tmp_path / "cut.onnx_adapter"))


def test_ort_core_refuses_an_input_fed_and_given_by_an_adapter():
    # onnxruntime silently uses the adapter's value
    ro = ort_core.RunOptions()
    ro.add_active_adapter(_adapter(ort_core))
    sess = _cpu(ort_core, _lora_model())
    with pytest.raises(ort_core.InvalidArgument, match="'lora_A' is given in the feed and by an active LoRA adapter"):
        sess.run(None, {"x": np.ones((1, 2), np.float32), "lora_A": np.ones((2, 3), np.float32)}, ro)
    with pytest.raises(ort_core.InvalidArgument, match="expected an ort_core.LoraAdapter"):
        ro.add_active_adapter("adapter.onnx_adapter")
    (y, _) = sess.run_with_ort_values(None, {"x": ort_core.OrtValue.ortvalue_from_numpy(np.ones((1, 2), np.float32))},
                                      ro)
    np.testing.assert_array_equal(y.numpy(), [[3, 5, 7]])


def test_ort_core_applies_an_active_adapter_to_runs_with_iobinding():
    # onnxruntime warns that active adapters have no effect on run_with_iobinding, and runs without them
    rt = ort_core
    sess = _cpu(rt, _lora_model())
    ro = rt.RunOptions()
    adapter = _adapter(rt)
    ro.add_active_adapter(adapter)
    binding = sess.io_binding()
    binding.bind_cpu_input("x", np.array([[2, 0]], np.float32))
    binding.bind_output("y")
    binding.bind_output("s")
    sess.run_with_iobinding(binding, ro)
    y, s = binding.copy_outputs_to_cpu()
    np.testing.assert_array_equal(y, [[0, 2, 4]])
    np.testing.assert_array_equal(s, [0.5, 2.0])
    assert adapter is not None


# ------------------------------------------------------------------------- arena settings and allocators

@pytest.mark.parametrize("rt", RUNTIMES)
def test_arena_settings_and_a_registered_allocator_are_accepted(rt):
    cfg = rt.OrtArenaCfg(0, -1, -1, -1)
    assert (cfg.max_mem, cfg.arena_extend_strategy, cfg.initial_chunk_size_bytes, cfg.max_dead_bytes_per_chunk,
            cfg.initial_growth_chunk_size_bytes, cfg.max_power_of_two_extend_bytes) == (0, -1, -1, -1, -1, -1)
    cfg = rt.OrtArenaCfg({"max_mem": 1 << 20, "arena_extend_strategy": 1})
    assert (cfg.max_mem, cfg.arena_extend_strategy, cfg.initial_chunk_size_bytes) == (1 << 20, 1, -1)
    cfg.max_mem = 5
    assert cfg.max_mem == 5
    cfg.max_mem = 0  # registered below: onnxruntime would then refuse more than max_mem bytes to env-allocator users
    with pytest.raises(RuntimeError, match="Invalid OrtArenaCfg option: nope"):
        rt.OrtArenaCfg({"nope": 1})
    info = rt.OrtMemoryInfo("Cpu", rt.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, rt.OrtMemType.DEFAULT)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert rt.create_and_register_allocator(info, cfg) is None
    so = rt.SessionOptions()
    so.add_session_config_entry("session.use_env_allocators", "1")
    np.testing.assert_array_equal(_cpu(rt, _relu(), so).run(None, {"x": np.array([-1, 2, 0], np.float32)})[0],
                                  [0, -2, 0])


def test_ort_core_says_a_registered_allocator_has_no_effect(monkeypatch):
    from ort_core import arena_config

    monkeypatch.setattr(arena_config, "_registered", [])
    info = ort_core.OrtMemoryInfo("Cpu", ort_core.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort_core.OrtMemType.DEFAULT)
    with pytest.warns(ort_core.OrtWarning, match="has no effect in ort-core"):
        ort_core.create_and_register_allocator(info, ort_core.OrtArenaCfg(0, -1, -1, -1))
    assert arena_config.registered_allocators()[0][1] is info
    with pytest.raises(ort_core.InvalidArgument, match="mem_info must be an ort_core.OrtMemoryInfo"):
        ort_core.create_and_register_allocator("cpu", None)
    with pytest.raises(ort_core.InvalidArgument, match="max_mem is a size in bytes"):
        ort_core.OrtArenaCfg({"max_mem": -2})


# ----------------------------------------------------------------- options, profiling start and run tags

@pytest.mark.parametrize("rt", RUNTIMES)
def test_get_session_options_returns_the_sessions_settings(rt):
    so = rt.SessionOptions()
    so.intra_op_num_threads = 1
    so.graph_optimization_level = rt.GraphOptimizationLevel.ORT_ENABLE_BASIC
    so.add_session_config_entry("session.disable_prepacking", "1")
    got = _cpu(rt, _relu(), so).get_session_options()
    assert got.intra_op_num_threads == 1 and got.graph_optimization_level == rt.GraphOptimizationLevel.ORT_ENABLE_BASIC
    assert got.get_session_config_entry("session.disable_prepacking") == "1"


@pytest.mark.parametrize("rt", RUNTIMES)
def test_the_profiling_start_time_is_a_wall_clock_time_in_ns(rt, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert _cpu(rt, _relu()).get_profiling_start_time_ns() == 0
    so = rt.SessionOptions()
    so.enable_profiling = True
    before = time.time_ns()
    sess = _cpu(rt, _relu(), so)
    after = time.time_ns()
    assert before - 10**9 <= sess.get_profiling_start_time_ns() <= after
    sess.end_profiling()


@pytest.mark.parametrize("rt", RUNTIMES)
def test_run_options_carry_a_log_id_and_severity(rt):
    ro = rt.RunOptions()
    assert ro.logid == "" and ro.log_severity_level == -1 and ro.terminate is False  # -1: the default logger's
    assert rt.SessionOptions().log_severity_level == -1
    ro.logid = "request-17"
    ro.log_severity_level = 3
    ro.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
    assert ro.get_run_config_entry("memory.enable_memory_arena_shrinkage") == "cpu:0"
    np.testing.assert_array_equal(_cpu(rt, _relu()).run(None, {"x": np.array([1, -1, 0], np.float32)}, ro)[0],
                                  [-1, 0, 0])
    assert ro.logid == "request-17"


def test_ort_core_run_tag_is_the_log_id():
    # onnxruntime's Python RunOptions has no run_tag (its C API's RunOptionsSetRunTag sets what Python calls logid)
    ro = ort_core.RunOptions()
    ro.run_tag = "tagged"
    assert ro.logid == "tagged"
    ro.logid = "other"
    assert ro.run_tag == "other"
