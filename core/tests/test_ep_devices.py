"""onnxruntime's plugin-EP user API: device discovery (get_ep_devices), provider selection through SessionOptions
(add_provider_for_devices, policies, delegates), copy_tensors and streams, OrtMemoryInfo and OrtDevice.

Checked on ort-core and, where onnxruntime has the same behaviour on a machine without accelerators, on
onnxruntime too. Device cases use the example plugin (device 'example', an NPU to onnxruntime's API).
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from onnx import TensorProto, helper

import ort_core
from ort_core.errors import Fail, InvalidArgument

from .conftest import import_test_plugins, make_model, record_copies


def _runtimes():
    yield pytest.param(ort_core, id="ort_core")
    try:
        yield pytest.param(importlib.import_module("onnxruntime"), id="onnxruntime")
    except ImportError:  # pragma: no cover - the nox session installs it as the yardstick
        yield pytest.param(None, id="onnxruntime", marks=pytest.mark.skip(reason="onnxruntime is not installed"))


RUNTIMES = list(_runtimes())
pytestmark = pytest.mark.filterwarnings("ignore:provider assignment")
CPU, EXAMPLE = "CPUExecutionProvider", "ExampleExecutionProvider"
X = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)


def _model_bytes() -> bytes:
    """y = Relu(x) + Relu(x): both ops run on the example device."""
    vi = helper.make_tensor_value_info
    return make_model([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Add", ["r", "r"], ["y"])],
                      [vi("x", TensorProto.FLOAT, [2, 3])], [vi("y", TensorProto.FLOAT, [2, 3])]).SerializeToString()


def _expected(x=X):
    return 2 * np.maximum(x, 0)


def _device(rt, ep_name):
    (found,) = [d for d in rt.get_ep_devices() if d.ep_name == ep_name]
    return found


def _policy_session(rt, policy, config=None):
    so = rt.SessionOptions()
    for key, value in (config or {}).items():
        so.add_session_config_entry(key, value)
    so.set_provider_selection_policy(policy)
    return rt.InferenceSession(_model_bytes(), so)


# --------------------------------------------------------------------------------- discovery

@pytest.mark.parametrize("rt", RUNTIMES)
def test_the_cpu_provider_is_one_ep_device_on_a_cpu(rt):
    cpu = _device(rt, CPU)
    assert isinstance(cpu, rt.OrtEpDevice)
    assert cpu.device.type == rt.OrtHardwareDeviceType.CPU
    assert isinstance(cpu.device, rt.OrtHardwareDevice)
    assert cpu.device.device_id == 0
    assert isinstance(cpu.device.vendor, str) and isinstance(cpu.device.vendor_id, int)
    assert isinstance(cpu.ep_vendor, str) and cpu.ep_vendor
    assert isinstance(cpu.ep_metadata, dict) and isinstance(cpu.ep_options, dict)
    assert isinstance(cpu.device.metadata, dict)
    assert cpu.memory_info(rt.OrtDeviceMemoryType.DEFAULT) is None  # host memory: no device memory info


@pytest.mark.parametrize("rt", RUNTIMES)
def test_a_cpu_device_has_no_sync_stream(rt):
    with pytest.raises(RuntimeError, match="non-CPU device"):
        _device(rt, CPU).create_sync_stream()


@pytest.mark.parametrize("rt", RUNTIMES)
@pytest.mark.parametrize("enum_name, members", [
    ("OrtExecutionProviderDevicePolicy", {"DEFAULT": 0, "PREFER_CPU": 1, "PREFER_NPU": 2, "PREFER_GPU": 3,
                                          "MAX_PERFORMANCE": 4, "MAX_EFFICIENCY": 5, "MIN_OVERALL_POWER": 6}),
    ("OrtHardwareDeviceType", {"CPU": 0, "GPU": 1, "NPU": 2}),
    ("OrtDeviceMemoryType", {"DEFAULT": 0, "HOST_ACCESSIBLE": 5}),
    ("OrtMemType", {"CPU_INPUT": -2, "CPU_OUTPUT": -1, "CPU": -1, "DEFAULT": 0}),
    ("OrtAllocatorType", {"INVALID": -1, "ORT_DEVICE_ALLOCATOR": 0, "ORT_ARENA_ALLOCATOR": 1}),
    ("OrtMemoryInfoDeviceType", {"CPU": 0, "GPU": 1, "FPGA": 2, "NPU": 3}),
    ("OrtCompileApiFlags", {"NONE": 0, "ERROR_IF_NO_NODES_COMPILED": 1, "ERROR_IF_OUTPUT_FILE_EXISTS": 2}),
])
def test_enums_have_onnxruntimes_names_and_values(rt, enum_name, members):
    enum = getattr(rt, enum_name)
    assert {name: int(value) for name, value in enum.__members__.items()} == members


def test_the_example_provider_is_an_npu_device_with_its_memory_and_options():
    ex = _device(ort_core, EXAMPLE)
    assert ex.device.type == ort_core.OrtHardwareDeviceType.NPU
    assert (ex.device.device_id, ex.ep_vendor, ex.ep_metadata["version"]) == (0, "ort-ep-example", "0.1.0")
    assert ex.ep_options == {"device_id": "0", "cache_dir": ""}
    assert ex.device.metadata == {"ort_core.device": "example:0"}
    info = ex.memory_info(ort_core.OrtDeviceMemoryType.DEFAULT)
    assert (info.name, info.device_id, info.allocator_type) == ("example", 0,
                                                                ort_core.OrtAllocatorType.ORT_DEVICE_ALLOCATOR)
    assert str(info.device) == "example:0"
    assert ex.memory_info(ort_core.OrtDeviceMemoryType.HOST_ACCESSIBLE) is None  # it declares no pinned memory
    with pytest.raises(InvalidArgument, match="memory_type must be an ort_core.OrtDeviceMemoryType"):
        ex.memory_info("DEFAULT")


def test_ep_devices_are_equal_across_calls_and_skip_unavailable_providers():
    first, second = ort_core.get_ep_devices(), ort_core.get_ep_devices()
    assert first == second and first[0].ep_name == CPU
    names = {d.ep_name for d in first}
    assert "AbsentExecutionProvider" not in names  # the recorder fixture's unavailable provider
    assert set(ort_core.get_available_providers()) == names


# ------------------------------------------------------------------ add_provider_for_devices

@pytest.mark.parametrize("rt", RUNTIMES)
def test_add_provider_for_devices_with_the_cpu_device(rt):
    so = rt.SessionOptions()
    assert not so.has_providers()
    so.add_provider_for_devices([_device(rt, CPU)], {})
    assert so.has_providers()
    sess = rt.InferenceSession(_model_bytes(), so)
    assert sess.get_providers() == [CPU]
    np.testing.assert_array_equal(sess.run(None, {"x": X})[0], _expected())


@pytest.mark.parametrize("rt", RUNTIMES)
def test_providers_given_to_the_session_win_over_the_options_with_a_warning(rt):
    so = rt.SessionOptions()
    so.add_provider_for_devices([_device(rt, CPU)], {})
    with pytest.warns(UserWarning, match="SessionOptions has already been configured with providers"):
        sess = rt.InferenceSession(_model_bytes(), so, providers=[CPU])
    assert sess.get_providers() == [CPU]


@pytest.mark.parametrize("rt", RUNTIMES)
def test_add_provider_for_devices_refuses_an_empty_list_and_non_devices(rt):
    so = rt.SessionOptions()
    with pytest.raises(Exception, match="(?i)one or more OrtEpDevice"):
        so.add_provider_for_devices([], {})
    with pytest.raises((TypeError, ValueError)):
        so.add_provider_for_devices(["CPUExecutionProvider"], {})
    assert not so.has_providers()


def test_add_provider_for_devices_places_the_model_on_the_example_device():
    so = ort_core.SessionOptions()
    so.add_provider_for_devices([_device(ort_core, EXAMPLE)], {})
    sess = ort_core.InferenceSession(_model_bytes(), so)
    assert sess.get_providers() == [EXAMPLE, CPU]
    assert sess.get_provider_options()[EXAMPLE] == {"device_id": "0"}  # from the device
    assert [(a.provider, a.op_types) for a in sess.get_provider_graph_assignment_info()] == \
        [(EXAMPLE, ("Relu", "Add"))]
    assert [i.name for i in sess.get_output_memory_infos()] == ["example"]
    np.testing.assert_array_equal(sess.run(None, {"x": X})[0], _expected())


def test_a_value_bound_on_the_example_device_stays_there_across_two_runs(monkeypatch):
    so = ort_core.SessionOptions()
    so.set_provider_selection_policy(ort_core.OrtExecutionProviderDevicePolicy.PREFER_NPU)
    sess = ort_core.InferenceSession(_model_bytes(), so)
    assert sess.get_providers() == [EXAMPLE, CPU]
    x_dev = ort_core.OrtValue.ortvalue_from_numpy(X, "example", 0)
    y_dev = ort_core.OrtValue.ortvalue_from_shape_and_type([2, 3], np.float32, "example", 0)
    y_ptr = y_dev.data_ptr()
    copies = record_copies(monkeypatch, import_test_plugins("ort_ep_example.memory")[0].ExampleDataTransfer)
    binding = sess.io_binding()
    binding.bind_ortvalue_input("x", x_dev)
    binding.bind_ortvalue_output("y", y_dev)
    for _ in range(2):
        sess.run_with_iobinding(binding)
        (y,) = binding.get_outputs()
        assert y.device_name() == "example" and y.data_ptr() == y_ptr  # written in place, on the device
    assert copies and all(pair == ("example:0", "example:0") for pair in copies)  # no host copy in either run
    np.testing.assert_array_equal(y_dev.numpy(), _expected())
    assert copies[-1] == ("example:0", "cpu:0")  # only the read-back above


def test_add_provider_for_devices_refuses_devices_of_two_providers_and_bad_options():
    so = ort_core.SessionOptions()
    with pytest.raises(InvalidArgument, match=r"one provider, got \['CPUExecutionProvider', 'ExampleExecution"):
        so.add_provider_for_devices([_device(ort_core, CPU), _device(ort_core, EXAMPLE)], {})
    with pytest.raises(InvalidArgument, match="provider_options must be a dict"):
        so.add_provider_for_devices([_device(ort_core, EXAMPLE)], ["device_id", "0"])
    so.add_provider_for_devices([_device(ort_core, EXAMPLE)], {"no_such_option": "1"})
    with pytest.raises(InvalidArgument, match=r"unknown provider option\(s\) \['no_such_option'\] for 'Example"):
        ort_core.InferenceSession(_model_bytes(), so)


def test_add_provider_by_name_is_used_in_order():
    so = ort_core.SessionOptions()
    so.add_provider(EXAMPLE, {})
    so.set_provider_selection_policy(ort_core.OrtExecutionProviderDevicePolicy.PREFER_CPU)  # added ones win
    sess = ort_core.InferenceSession(_model_bytes(), so)
    assert sess.get_providers() == [EXAMPLE, CPU]
    with pytest.raises(InvalidArgument, match="provider_name must be a provider's name"):
        so.add_provider(None, {})


def test_set_providers_without_a_list_goes_back_to_the_options_choice():
    so = ort_core.SessionOptions()
    so.set_provider_selection_policy(ort_core.OrtExecutionProviderDevicePolicy.PREFER_NPU)
    sess = ort_core.InferenceSession(_model_bytes(), so)
    with pytest.warns(UserWarning, match="InferenceSession will only use the providers passed"):
        sess.set_providers([CPU])
    assert sess.get_providers() == [CPU]
    sess.set_providers()
    assert sess.get_providers() == [EXAMPLE, CPU]


# --------------------------------------------------------------------------------- policies

@pytest.mark.parametrize("rt", RUNTIMES)
@pytest.mark.parametrize("policy", ["DEFAULT", "PREFER_CPU", "PREFER_GPU", "MAX_PERFORMANCE"])
def test_policies_without_a_gpu_use_the_cpu_provider(rt, policy):
    sess = _policy_session(rt, getattr(rt.OrtExecutionProviderDevicePolicy, policy))
    assert sess.get_providers() == [CPU]
    np.testing.assert_array_equal(sess.run(None, {"x": X})[0], _expected())


@pytest.mark.parametrize("rt", RUNTIMES)
def test_a_policy_is_not_an_int(rt):
    so = rt.SessionOptions()
    with pytest.raises((TypeError, ValueError)):
        so.set_provider_selection_policy(2)
    with pytest.raises((TypeError, ValueError)):
        so.set_provider_selection_policy_delegate(5)
    assert not so.has_providers()


@pytest.mark.parametrize("policy", ["PREFER_NPU", "MAX_EFFICIENCY", "MIN_OVERALL_POWER"])
def test_npu_style_policies_place_the_model_on_the_example_device(policy):
    sess = _policy_session(ort_core, getattr(ort_core.OrtExecutionProviderDevicePolicy, policy))
    assert sess.get_providers() == [EXAMPLE, CPU]
    assert [a.provider for a in sess.get_provider_graph_assignment_info()] == [EXAMPLE]
    np.testing.assert_array_equal(sess.run(None, {"x": X})[0], _expected())


@pytest.mark.parametrize("rt", RUNTIMES)
def test_without_cpu_fallback_a_policy_leaves_the_cpu_provider_out(rt):
    with pytest.raises(Exception, match="(?i)fall.*back to CPU"):
        _policy_session(rt, rt.OrtExecutionProviderDevicePolicy.PREFER_CPU,
                        {"session.disable_cpu_ep_fallback": "1"})


def test_without_cpu_fallback_prefer_npu_runs_on_the_example_device_alone():
    sess = _policy_session(ort_core, ort_core.OrtExecutionProviderDevicePolicy.PREFER_NPU,
                           {"session.disable_cpu_ep_fallback": "1"})
    assert [a.provider for a in sess.get_provider_graph_assignment_info()] == [EXAMPLE]


# --------------------------------------------------------------------------------- delegates

@pytest.mark.parametrize("rt", RUNTIMES)
def test_a_delegate_gets_the_devices_the_model_metadata_and_the_limit(rt):
    calls = []

    def delegate(ep_devices, model_metadata, runtime_metadata, max_selections):
        calls.append((list(ep_devices), dict(model_metadata), dict(runtime_metadata), max_selections))
        return [d for d in ep_devices if d.ep_name == CPU]

    so = rt.SessionOptions()
    so.set_provider_selection_policy_delegate(delegate)
    assert so.has_providers()
    sess = rt.InferenceSession(_model_bytes(), so)
    assert sess.get_providers() == [CPU]
    ((devices, meta, runtime, limit),) = calls
    assert CPU in [d.ep_name for d in devices]
    kinds = [d.device.type for d in devices]  # NPUs, then GPUs, then CPUs: the order policies take them in
    assert kinds == sorted(kinds, key=lambda k: {rt.OrtHardwareDeviceType.NPU: 0, rt.OrtHardwareDeviceType.GPU: 1,
                                                 rt.OrtHardwareDeviceType.CPU: 2}[k])
    assert meta["graph_name"] == "test_graph" and {"producer_name", "model_version", "domain"} <= set(meta)
    assert (runtime, limit) == ({}, 8)


@pytest.mark.parametrize("rt", RUNTIMES)
def test_a_delegate_that_selects_nothing_or_raises_fails_the_session(rt):
    so = rt.SessionOptions()
    so.set_provider_selection_policy_delegate(lambda devices, meta, runtime, limit: [])
    with pytest.raises(Exception, match="EP selection delegate did not select anything"):
        rt.InferenceSession(_model_bytes(), so)

    def broken(devices, meta, runtime, limit):
        raise KeyError("boom")

    so.set_provider_selection_policy_delegate(broken)
    with pytest.raises(Exception, match="EP selection delegate failed: KeyError: 'boom'"):
        rt.InferenceSession(_model_bytes(), so)


def test_a_delegate_picks_the_example_device_first():
    so = ort_core.SessionOptions()
    so.set_provider_selection_policy_delegate(
        lambda devices, meta, runtime, limit: sorted((d for d in devices if d.ep_name in (CPU, EXAMPLE)),
                                                     key=lambda d: d.ep_name != EXAMPLE))
    assert ort_core.InferenceSession(_model_bytes(), so).get_providers() == [EXAMPLE, CPU]


def test_a_delegate_returning_something_else_than_offered_devices_is_named():
    so = ort_core.SessionOptions()
    so.set_provider_selection_policy_delegate(lambda devices, meta, runtime, limit: ["CPUExecutionProvider"])
    with pytest.raises(Fail, match=r"returned 'CPUExecutionProvider' at \[0\], which is not one of the OrtEpDevices"):
        ort_core.InferenceSession(_model_bytes(), so)
    so.set_provider_selection_policy_delegate(lambda devices, meta, runtime, limit: list(devices) * 9)
    with pytest.raises(Fail, match="selected too many EP devices"):
        ort_core.InferenceSession(_model_bytes(), so)


# ------------------------------------------------------------------- copy_tensors and streams

def test_copy_tensors_between_host_and_device_writes_into_the_destinations():
    ex = _device(ort_core, EXAMPLE)
    stream = ex.create_sync_stream()
    assert isinstance(stream, ort_core.OrtSyncStream) and stream.get_handle() != 0
    src = [ort_core.OrtValue.ortvalue_from_numpy(X), ort_core.OrtValue.ortvalue_from_numpy(np.arange(4.0))]
    dev = [ort_core.OrtValue.ortvalue_from_shape_and_type([2, 3], np.float32, "example", 0),
           ort_core.OrtValue.ortvalue_from_shape_and_type([4], np.float64, "example", 0)]
    ptrs = [v.data_ptr() for v in dev]
    ort_core.copy_tensors(src, dev, stream)
    assert [v.data_ptr() for v in dev] == ptrs and [v.device_name() for v in dev] == ["example", "example"]
    back = [ort_core.OrtValue.ortvalue_from_shape_and_type([2, 3], np.float32),
            ort_core.OrtValue.ortvalue_from_shape_and_type([4], np.float64)]
    host_ptrs = [v.data_ptr() for v in back]
    ort_core.copy_tensors(dev, back, None)
    assert [v.data_ptr() for v in back] == host_ptrs
    np.testing.assert_array_equal(back[0].numpy(), X)
    np.testing.assert_array_equal(back[1].numpy(), np.arange(4.0))
    other = ort_core.OrtValue.ortvalue_from_shape_and_type([2, 3], np.float32)
    ort_core.copy_tensors([back[0]], [other])  # host to host too (onnxruntime has no transfer for it)
    np.testing.assert_array_equal(other.numpy(), X)


def test_copy_tensors_refuses_mismatches_naming_the_pair():
    a = ort_core.OrtValue.ortvalue_from_numpy(X)
    with pytest.raises(InvalidArgument, match=r"src\[0\] is tensor\(float\) \[2, 3\] but dst\[0\] is tensor\(int32\)"):
        ort_core.copy_tensors([a], [ort_core.OrtValue.ortvalue_from_shape_and_type([2, 3], np.int32)])
    with pytest.raises(InvalidArgument, match="same, non-zero length; got 1 and 2"):
        ort_core.copy_tensors([a], [a, a])
    with pytest.raises(InvalidArgument, match="same, non-zero length; got 0 and 0"):
        ort_core.copy_tensors([], [])
    with pytest.raises(InvalidArgument, match=r"dst\[0\] must be a tensor OrtValue, got ndarray"):
        ort_core.copy_tensors([a], [np.zeros((2, 3), np.float32)])
    with pytest.raises(InvalidArgument, match="stream must be an OrtSyncStream"):
        ort_core.copy_tensors([a], [a], 5)
    with pytest.raises(InvalidArgument, match="src must be a list of OrtValue"):
        ort_core.copy_tensors(a, [a])


# ------------------------------------------------------------------- OrtMemoryInfo and OrtDevice

@pytest.mark.parametrize("rt", RUNTIMES)
def test_memory_info_constructors_and_attributes(rt):
    cpu = rt.OrtMemoryInfo("Cpu", rt.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, rt.OrtMemType.DEFAULT)
    assert (cpu.name, cpu.device_id, cpu.mem_type, cpu.allocator_type, cpu.device_mem_type, cpu.device_vendor_id) == \
        ("Cpu", 0, rt.OrtMemType.DEFAULT, rt.OrtAllocatorType.ORT_ARENA_ALLOCATOR, rt.OrtDeviceMemoryType.DEFAULT, 0)
    cuda = rt.OrtMemoryInfo("Cuda", rt.OrtAllocatorType.ORT_DEVICE_ALLOCATOR, 1, rt.OrtMemType.DEFAULT)
    assert (cuda.name, cuda.device_id, cuda.device_vendor_id) == ("Cuda", 1, 0x10DE)
    pinned = rt.OrtMemoryInfo("CudaPinned", rt.OrtAllocatorType.ORT_DEVICE_ALLOCATOR, 0, rt.OrtMemType.DEFAULT)
    assert pinned.device_mem_type == rt.OrtDeviceMemoryType.HOST_ACCESSIBLE
    v2 = rt.OrtMemoryInfo.create_v2("example", rt.OrtMemoryInfoDeviceType.NPU, 0x5143, 0,
                                    rt.OrtDeviceMemoryType.DEFAULT, 0, rt.OrtAllocatorType.ORT_DEVICE_ALLOCATOR)
    assert (v2.name, v2.device_id, v2.device_vendor_id, v2.mem_type) == ("example", 0, 0x5143, rt.OrtMemType.DEFAULT)
    with pytest.raises(Exception, match="(?i)not supported|unknown device"):
        rt.OrtMemoryInfo("NoSuchDevice", rt.OrtAllocatorType.ORT_DEVICE_ALLOCATOR, 0, rt.OrtMemType.DEFAULT)


@pytest.mark.parametrize("rt", RUNTIMES)
def test_a_sessions_memory_infos_are_ort_memory_infos(rt):
    sess = rt.InferenceSession(_model_bytes(), providers=[CPU])
    (info,) = sess.get_input_memory_infos()
    assert isinstance(info, rt.OrtMemoryInfo)
    assert (info.name, info.device_id, info.device_mem_type) == ("Cpu", 0, rt.OrtDeviceMemoryType.DEFAULT)


def test_a_sessions_memory_infos_name_the_example_device():
    so = ort_core.SessionOptions()
    so.add_provider_for_devices([_device(ort_core, EXAMPLE)], {})
    (info,) = ort_core.InferenceSession(_model_bytes(), so).get_output_memory_infos()
    assert info == _device(ort_core, EXAMPLE).memory_info(ort_core.OrtDeviceMemoryType.DEFAULT)


def test_memory_info_names_the_devices_ort_core_knows():
    info = ort_core.OrtMemoryInfo("example", ort_core.OrtAllocatorType.ORT_DEVICE_ALLOCATOR, 0,
                                  ort_core.OrtMemType.DEFAULT)
    assert info == ort_core.OrtMemoryInfo.of(info.device) and str(info.device) == "example:0"
    with pytest.raises(InvalidArgument, match=r"unknown device 'example' id 3.*known: \[.*'example'"):
        ort_core.OrtMemoryInfo("example", ort_core.OrtAllocatorType.ORT_DEVICE_ALLOCATOR, 3,
                               ort_core.OrtMemType.DEFAULT)
    with pytest.raises(InvalidArgument, match="allocator_type must be an ort_core.OrtAllocatorType"):
        ort_core.OrtMemoryInfo("Cpu", "arena", 0, ort_core.OrtMemType.DEFAULT)


@pytest.mark.parametrize("rt", RUNTIMES)
@pytest.mark.parametrize("args, expected", [(("cpu", 0), (0, 0, 0, 0)), (("cuda", 1), (1, 1, 0x10DE, 0)),
                                            (("npu", 0, 0x5143), (0, 3, 0x5143, 0)), (("gpu", 1), (1, 1, 0, 0))])
def test_ort_device_make(rt, args, expected):
    d = rt.OrtDevice.make(*args)
    assert (d.device_id(), d.device_type(), d.device_vendor_id(), d.device_mem_type()) == expected


def test_ort_device_make_knows_ort_cores_devices_and_names_unknown_ones():
    d = ort_core.OrtDevice.make("example", 0)
    assert (d.device_id(), d.device_type(), str(d.device)) == (0, 3, "example:0")
    with pytest.raises(InvalidArgument, match=r"unsupported device type 'tpu' id 0 \(known: \["):
        ort_core.OrtDevice.make("tpu", 0)


def test_the_names_are_where_onnxruntime_code_imports_them_from():
    from ort_core.capi import onnxruntime_inference_collection as collection
    from ort_core.capi import onnxruntime_pybind11_state as state

    assert state.get_ep_devices is ort_core.get_ep_devices and state.OrtEpDevice is ort_core.OrtEpDevice
    assert state.OrtExecutionProviderDevicePolicy is ort_core.OrtExecutionProviderDevicePolicy
    assert state.register_execution_provider_library is ort_core.register_execution_provider_library
    assert collection.ModelCompiler is ort_core.ModelCompiler and collection.OrtDevice is ort_core.OrtDevice
    assert collection.copy_tensors is ort_core.copy_tensors
