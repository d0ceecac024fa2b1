"""OrtValue on the host and on the example provider's device, and the host arena allocator.

Device cases use the example plugin (Device('example', 0), libc memory through cffi), installed
by ``nox -s tests``; every copy it makes is counted through its DataTransfer.
"""

from __future__ import annotations

import gc
import threading

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto, helper

import ort_core as ort
from ort_core.memory import HOST, Allocator, Device, HostArena, host_arena
from ort_core.memory.arena import size_class
from ort_core.plugins.manager import CPU, get_registry

from .conftest import import_test_plugins, make_model, record_copies

EXAMPLE = Device("example", 0)

DTYPES = {
    np.bool_: "bool", np.int8: "int8", np.uint8: "uint8", np.int16: "int16", np.uint16: "uint16",
    np.int32: "int32", np.uint32: "uint32", np.int64: "int64", np.uint64: "uint64", np.float16: "float16",
    np.float32: "float", np.float64: "double", np.complex64: "complex64", np.complex128: "complex128",
    ml_dtypes.bfloat16: "bfloat16", ml_dtypes.float8_e4m3fn: "float8e4m3fn", ml_dtypes.float8_e5m2: "float8e5m2",
    ml_dtypes.int4: "int4", ml_dtypes.uint4: "uint4",
}


@pytest.fixture
def example_copies(monkeypatch):
    """(src, dst) of every copy the example provider's data transfer makes."""
    (memory,) = import_test_plugins("ort_ep_example.memory")
    return record_copies(monkeypatch, memory.ExampleDataTransfer)


def _sample(dtype, shape=(2, 3)):
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return np.array([[True, False, True], [False, False, True]]).reshape(shape)
    raw = np.random.default_rng(0).integers(0, 256, int(np.prod(shape)) * dtype.itemsize, dtype=np.uint8)
    return raw.view(dtype).reshape(shape)


# ------------------------------------------------------------------------------ host

@pytest.mark.parametrize("dtype", list(DTYPES), ids=lambda d: np.dtype(d).name)
def test_from_numpy_on_host_aliases_and_describes(dtype):
    arr = _sample(dtype)
    v = ort.OrtValue.ortvalue_from_numpy(arr)
    assert v.device_name() == "cpu" and v.device == HOST
    assert v.shape() == [2, 3]
    assert v.data_type() == f"tensor({DTYPES[dtype]})"
    assert v.element_type() == getattr(TensorProto, DTYPES[dtype].upper())
    assert v.is_tensor() and v.has_value() and not v.is_tensor_sequence()
    assert v.numpy() is arr  # no copy on the host, as in onnxruntime
    assert v.data_ptr() == arr.ctypes.data


def test_from_numpy_host_details():
    arr = np.arange(12, dtype=np.float32).reshape(3, 4)
    v = ort.OrtValue.ortvalue_from_numpy(arr, "cpu", 0)
    arr[0, 0] = 42
    assert v.numpy()[0, 0] == 42  # shared memory
    strided = arr[:, ::2]
    w = ort.OrtValue.ortvalue_from_numpy(strided)
    assert w.numpy().flags.c_contiguous and not np.shares_memory(w.numpy(), arr)
    np.testing.assert_array_equal(w.numpy(), strided)
    scalar = ort.OrtValue.ortvalue_from_numpy(np.float64(2.5))
    assert scalar.shape() == [] and scalar.numpy() == 2.5 and scalar.data_type() == "tensor(double)"
    s = ort.OrtValue.ortvalue_from_numpy(np.array(["a", "bc"], dtype=object))
    assert s.data_type() == "tensor(string)" and s.element_type() == TensorProto.STRING
    assert ort.OrtValue.ortvalue_from_numpy(arr, "CPU", 3).device == HOST  # any cpu id is the host
    assert "tensor(float)" in repr(v) and "cpu:0" in repr(v)


@pytest.mark.parametrize("element_type", [np.float32, np.dtype(np.int64), "float16", TensorProto.DOUBLE,
                                          ml_dtypes.bfloat16, np.bool_])
def test_from_shape_and_type_on_host(element_type):
    v = ort.OrtValue.ortvalue_from_shape_and_type([3, 5], element_type)
    expected = np.dtype(np.float64) if element_type == TensorProto.DOUBLE else np.dtype(element_type)
    arr = v.numpy()
    assert v.shape() == [3, 5] and arr.dtype == expected and v.device_name() == "cpu"
    assert arr.ctypes.data % 64 == 0 and arr.flags.writeable and arr.flags.c_contiguous
    for shape in ([], [0], [0, 7]):
        e = ort.OrtValue.ortvalue_from_shape_and_type(shape, element_type)
        assert e.shape() == shape and e.numpy().ctypes.data % 64 == 0
    strings = ort.OrtValue.ortvalue_from_shape_and_type((2,), TensorProto.STRING)
    assert strings.data_type() == "tensor(string)" and strings.numpy().tolist() == ["", ""]


def test_update_inplace_on_host_writes_the_same_memory():
    arr = np.zeros((2, 2), np.float32)
    v = ort.OrtValue.ortvalue_from_numpy(arr)
    v.update_inplace(np.array([[1, 2], [3, 4]], np.float32))
    assert v.numpy() is arr and arr.tolist() == [[1, 2], [3, 4]]
    with pytest.raises(ort.InvalidArgument, match=r"update_inplace: given float64 \[2, 2\].*float32 \[2, 2\]"):
        v.update_inplace(np.zeros((2, 2)))
    with pytest.raises(ort.InvalidArgument, match=r"given float32 \[4\]"):
        v.update_inplace(np.zeros(4, np.float32))


def test_bad_arguments_are_named():
    with pytest.raises(ort.InvalidArgument, match=r"unknown device nosuch:0.*known devices: 'cpu' id 0"):
        ort.OrtValue.ortvalue_from_numpy(np.zeros(2), "nosuch", 0)
    with pytest.raises(ort.InvalidArgument, match="unknown device nosuch:1"):
        ort.OrtValue.ortvalue_from_shape_and_type([2], np.float32, "nosuch", 1)
    with pytest.raises(ort.InvalidArgument, match="negative dimension"):
        ort.OrtValue.ortvalue_from_shape_and_type([2, -1], np.float32)
    with pytest.raises(ort.InvalidArgument, match="unknown ONNX element type 9999"):
        ort.OrtValue.ortvalue_from_shape_and_type([2], 9999)
    with pytest.raises(ort.InvalidArgument, match="element_type must be"):
        ort.OrtValue.ortvalue_from_shape_and_type([2], object())
    empty = ort.OrtValue(None)
    assert not empty.has_value() and not empty.is_tensor() and empty.numpy() is None
    with pytest.raises(ort.InvalidArgument, match="shape\\(\\) needs a tensor OrtValue; this one holds no value"):
        empty.shape()
    seq = ort.OrtValue([np.zeros(2, np.int64)])
    assert seq.is_tensor_sequence() and seq.data_type() == "seq(tensor(int64))"


# ---------------------------------------------------------------------------- device

@pytest.mark.parametrize("dtype", list(DTYPES), ids=lambda d: np.dtype(d).name)
def test_from_numpy_on_device_round_trips_bit_exactly(dtype, example_copies):
    from ort_core.memory import DeviceTensor

    arr = _sample(dtype)
    v = ort.OrtValue.ortvalue_from_numpy(arr, "example", 0)
    assert example_copies == [("cpu:0", "example:0")]
    assert isinstance(v.value, DeviceTensor) and v.device == EXAMPLE and v.device_name() == "example"
    assert v.shape() == [2, 3] and v.data_type() == f"tensor({DTYPES[dtype]})"
    assert v.is_tensor() and v.has_value()
    back = v.numpy()
    assert type(back) is np.ndarray and back.dtype == arr.dtype and back.tobytes() == arr.tobytes()
    assert example_copies == [("cpu:0", "example:0"), ("example:0", "cpu:0")]
    arr[...] = arr[::-1]  # the device copy does not alias the host array
    assert v.numpy().tobytes() == back.tobytes()


def test_device_value_details(example_copies):
    v = ort.OrtValue.ortvalue_from_shape_and_type([4, 2], np.float64, "example", 0)
    assert v.device_name() == "example" and v.shape() == [4, 2] and v.data_type() == "tensor(double)"
    assert example_copies == [("cpu:0", "example:0")]  # a host buffer from the arena, copied over
    v.update_inplace(np.arange(8, dtype=np.float64).reshape(4, 2))
    assert v.numpy().tolist() == [[0, 1], [2, 3], [4, 5], [6, 7]]
    with pytest.raises(ort.InvalidArgument, match="update_inplace"):
        v.update_inplace(np.zeros((4, 2), np.float32))
    address = v.data_ptr()  # the device address of its DeviceTensor
    assert address == v.value.ptr and address % 64 == 0
    v.update_inplace(np.ones((4, 2)))  # written into the same device memory
    assert v.data_ptr() == address and v.numpy().tolist() == [[1, 1]] * 4
    with pytest.raises(ort.InvalidArgument, match="string tensors live on the host only"):
        ort.OrtValue.ortvalue_from_shape_and_type([2], TensorProto.STRING, "example", 0)
    with pytest.raises(ort.InvalidArgument, match="unknown device example:1.*'example' id 0"):
        ort.OrtValue.ortvalue_from_numpy(np.zeros(2), "example", 1)


def test_device_ortvalue_fed_to_run(example_copies):
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Softmax", ["r"], ["y"], axis=-1)]
    model = make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    with pytest.warns(ort.OrtWarning, match="provider assignment"):
        sess = ort.InferenceSession(model.SerializeToString(), providers=["ExampleExecutionProvider"])
    x = np.array([[-1, 0, 1], [2, -3, 4]], np.float32)
    dev = ort.OrtValue.ortvalue_from_numpy(x, "example", 0)
    (y,) = sess.run(None, {"x": dev})
    (expected,) = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    np.testing.assert_allclose(y, expected, rtol=1e-6)
    host = ort.OrtValue.ortvalue_from_numpy(x)
    np.testing.assert_allclose(sess.run(None, {"x": host})[0], expected, rtol=1e-6)


# ----------------------------------------------------------------------------- arena

def test_cpu_provider_allocator_is_one_process_wide_arena():
    a, b = get_registry().allocator(CPU, HOST), get_registry().allocator(CPU, HOST)
    assert a is b is host_arena() and isinstance(a, HostArena) and isinstance(a, Allocator)
    assert a.device == HOST and a.alignment == 64


def test_arena_alignment_and_sizes():
    arena = HostArena()
    for n in (0, 1, 63, 64, 65, 1 << 20):
        buf = arena.allocate(n)
        assert buf.dtype == np.uint8 and buf.shape == (n,) and buf.flags.writeable
        assert arena.address(buf) % 64 == 0, n
        buf[:] = 7
        arena.free(buf)
    assert [size_class(n) for n in (0, 1, 63, 64, 65, 1 << 20)] == [64, 64, 64, 64, 128, 1 << 20]
    with pytest.raises(ValueError, match="negative"):
        arena.allocate(-1)


def test_arena_reuses_freed_blocks_of_the_same_class():
    arena = HostArena()
    a = arena.allocate(100)
    address = arena.address(a)
    arena.free(a)
    assert arena.cached_bytes() == 128
    b = arena.allocate(120)  # same size class (128 bytes): the same block
    assert arena.address(b) == address and b.shape == (120,)
    assert arena.stats()["hits"] == 1 and arena.cached_bytes() == 0
    c = arena.allocate(100)  # b is still in use: a new block
    assert arena.address(c) != address
    arena.free(b)
    arena.free(b)  # twice: harmless, cached once
    arena.free(np.zeros(10, np.uint8))  # not the arena's: ignored
    assert arena.cached_bytes() == 128
    assert arena.address(arena.allocate(300)) != address  # another class


def test_arena_takes_back_blocks_whose_last_view_is_dropped():
    arena = HostArena()
    buf = arena.allocate(1000)
    address = arena.address(buf)
    view = buf[10:20].view(np.int16)
    del buf
    gc.collect()
    assert arena.cached_bytes() == 0  # a view still holds the block
    del view
    gc.collect()
    assert arena.cached_bytes() == 1024
    assert arena.address(arena.allocate(1024)) == address


def test_arena_caps_cached_bytes():
    arena = HostArena(max_cached_bytes=4096)
    bufs = [arena.allocate(1024) for _ in range(6)]
    for b in bufs:
        arena.free(b)
    assert arena.cached_bytes() == 4096 and arena.stats()["free_blocks"] == 4
    arena.free(arena.allocate(1 << 20))  # larger than the cap: never cached
    assert arena.cached_bytes() == 4096
    arena.trim()
    assert arena.cached_bytes() == 0


def test_arena_is_thread_safe():
    arena = HostArena(max_cached_bytes=1 << 20)
    errors = []
    start = threading.Barrier(8)

    def work(k):
        start.wait()
        try:
            for i in range(300):
                n = (i * 37 + k) % 700
                buf = arena.allocate(n)
                if arena.address(buf) % 64:
                    errors.append(f"unaligned {n}")
                buf[:] = k  # a block handed to two threads at once would show the other's mark
                if not (buf == k).all():
                    errors.append(f"thread {k}: block shared")
                if i % 3:
                    arena.free(buf)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]
    stats = arena.stats()
    assert stats["hits"] > 0 and stats["hits"] + stats["misses"] == 8 * 300


def test_ortvalue_from_numpy_with_onnx_type_views_the_array_as_that_type():
    bits = np.array([0x3F80, 0x4000], np.uint16)
    value = ort.OrtValue.ortvalue_from_numpy_with_onnx_type(bits, TensorProto.BFLOAT16)
    assert value.numpy().dtype == ml_dtypes.bfloat16 and value.numpy().tolist() == [1.0, 2.0]
    bits[0] = 0x4040  # aliased, as ortvalue_from_numpy aliases
    assert value.numpy()[0] == 3.0
    with pytest.raises(ort.InvalidArgument, match="string tensors"):
        ort.OrtValue.ortvalue_from_numpy_with_onnx_type(np.array(["a"], object), TensorProto.STRING)
    with pytest.raises(ort.InvalidArgument, match="numpy array"):
        ort.OrtValue.ortvalue_from_numpy_with_onnx_type([1, 2], TensorProto.FLOAT)


def test_tensor_size_in_bytes_of_a_string_tensor_is_refused():
    with pytest.raises(ort.InvalidArgument, match="string tensor"):
        ort.OrtValue.ortvalue_from_numpy(np.array(["a"], object)).tensor_size_in_bytes()


@pytest.mark.parametrize("runtime", ["ort_core", "onnxruntime"])
def test_dlpack_round_trip_shares_host_memory(runtime):
    """OrtValue.from_dlpack and np.from_dlpack(ortvalue) move a host tensor without a copy, on both runtimes;
    a capsule is taken as well as an exporting object, and booleans stay booleans."""
    rt = pytest.importorskip(runtime)
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    v = rt.OrtValue.from_dlpack(a)
    assert v.shape() == [2, 3] and v.data_type() == "tensor(float)"
    back = np.from_dlpack(v)
    assert back.ctypes.data == a.ctypes.data  # the same memory both ways
    np.testing.assert_array_equal(back, a)
    assert v.__dlpack_device__()[0] == 1  # kDLCPU
    np.testing.assert_array_equal(rt.OrtValue.from_dlpack(a.__dlpack__()).numpy(), a)  # a bare capsule
    assert rt.OrtValue.from_dlpack(np.array([True, False])).numpy().dtype == np.bool_
    if runtime == "ort_core":  # older onnxruntime releases' second argument: booleans sent as uint8
        assert rt.OrtValue.from_dlpack(np.array([1, 0, 1], np.uint8), True).numpy().dtype == np.bool_


def test_dlpack_round_trip_of_a_device_value_keeps_its_memory():
    """A value on the example device goes out as a DLPack capsule (kDLExtDev) and comes back as a device value
    at the same address, without a copy, whether given as the exporting object or as a bare capsule; numpy,
    which reads host memory only, refuses it rather than reading device memory."""
    import gc

    import_test_plugins("ort_ep_example.memory")
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    v = ort.OrtValue.ortvalue_from_numpy(data, "example", 0)
    assert v.__dlpack_device__() == (12, 0)
    back = ort.OrtValue.from_dlpack(v)
    assert back.device_name() == v.device_name() and back.data_ptr() == v.data_ptr()
    assert back.shape() == [2, 3] and back.data_type() == "tensor(float)"
    np.testing.assert_array_equal(back.numpy(), data)
    capsule = v.__dlpack__()
    again = ort.OrtValue.from_dlpack(capsule)
    assert again.data_ptr() == v.data_ptr()
    with pytest.raises(ort.InvalidArgument, match="DLPack"):
        ort.OrtValue.from_dlpack(capsule)  # consumed already
    flags = ort.OrtValue.from_dlpack(ort.OrtValue.ortvalue_from_numpy(np.array([1, 0], np.uint8), "example", 0),
                                     True)
    np.testing.assert_array_equal(flags.numpy(), [True, False])
    with pytest.raises((BufferError, RuntimeError, TypeError, ValueError)):
        np.from_dlpack(v)
    del v, capsule  # the imported values keep the memory: the exporter may go first
    gc.collect()
    np.testing.assert_array_equal(back.numpy(), data)
    np.testing.assert_array_equal(again.numpy(), data)
    from ort_core import dlpack

    held = len(dlpack._exported)
    del back, again, flags
    gc.collect()
    assert len(dlpack._exported) == held - 3  # the consumers' deleters ran: the exports are released
    with pytest.raises(ort.InvalidArgument, match="cannot read list as a tensor"):
        ort.OrtValue.from_dlpack([1, 2, 3])


def test_default_instances_are_made_only_for_a_copy_to_their_device(monkeypatch):
    """Values outside sessions copy through each installed provider's default instance. Making a session (a CPU
    one) makes none of them: an installed GPU provider's would wake its device in every process, and one that
    cannot be made would fail every session. The first copy to a device makes its provider's, once."""
    import_test_plugins("ort_ep_example")
    registry = get_registry()
    made = []
    create = type(registry).create

    def counting(self, provider, *args, **kwargs):
        made.append(provider)
        return create(self, provider, *args, **kwargs)

    monkeypatch.setattr(type(registry), "create", counting)
    monkeypatch.setattr(registry, "_defaults", {})
    monkeypatch.setattr(registry, "generation", registry.generation + 1)  # default_transfers made afresh
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [helper.make_tensor_value_info("x", 1, [2])],
                       [helper.make_tensor_value_info("y", 1, [2])])
    sess = ort.InferenceSession(model.SerializeToString(), providers=[CPU])
    assert sess.run(None, {"x": np.array([-1.0, 2.0], np.float32)})[0].tolist() == [0.0, 2.0]
    assert made == [CPU]  # the session's own instance only
    v = ort.OrtValue.ortvalue_from_numpy(np.arange(3, dtype=np.float32), "example", 0)
    w = ort.OrtValue.ortvalue_from_numpy(np.arange(2, dtype=np.float32), "example", 0)
    assert made == [CPU, "ExampleExecutionProvider"] and v.numpy().tolist() == [0.0, 1.0, 2.0]
    assert w.numpy().tolist() == [0.0, 1.0]
