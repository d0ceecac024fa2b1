"""IOBinding, run_with_iobinding and run_with_ort_values, on the host and on devices.

Device cases use the example plugin (device 'example') and the recorder fixture's second-device
provider (device 'second'); every copy their data transfers make is recorded, so the tests assert
exactly which values crossed between devices.
"""

from __future__ import annotations

import ctypes
import threading

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import ort_core as ort

from .conftest import import_test_plugins, make_model, record_copies

EXAMPLE, SECOND, CPU = "ExampleExecutionProvider", "SecondDeviceExecutionProvider", "CPUExecutionProvider"
F32 = TensorProto.FLOAT
H2D, D2H = ("cpu:0", "example:0"), ("example:0", "cpu:0")


@pytest.fixture
def copies(monkeypatch):
    """(src, dst) of every copy made by the example's and the second device's transfers, in order."""
    memory, recorder = import_test_plugins("ort_ep_example.memory", "ort_ep_recorder.plugin")
    return record_copies(monkeypatch, memory.ExampleDataTransfer, recorder.SecondTransfer)


def model_and_reference():
    """x -MatMul W-> -Add b-> a -Relu-> r -Softmax(CPU)-> s (output) ; s * z -> y (output).

    With the example provider: MatMul, Add, Relu on 'example', Softmax on the CPU, Mul on
    'example' again. Outputs: y (produced on the device), s (produced on the host).
    """
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 5)).astype(np.float32)
    b = rng.standard_normal(5).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["m"], name="matmul"),
             helper.make_node("Add", ["m", "b"], ["a"], name="add"),
             helper.make_node("Relu", ["a"], ["r"], name="relu"),
             helper.make_node("Softmax", ["r"], ["s"], name="softmax", axis=-1),
             helper.make_node("Mul", ["s", "z"], ["y"], name="mul")]
    model = make_model(nodes, [helper.make_tensor_value_info("x", F32, ["N", 4]),
                               helper.make_tensor_value_info("z", F32, [5])],
                       [helper.make_tensor_value_info("y", F32, ["N", 5]),
                        helper.make_tensor_value_info("s", F32, ["N", 5])],
                       [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "b")])
    return model.SerializeToString()


def device_session(model, providers=(EXAMPLE,)):
    with pytest.warns(ort.OrtWarning, match="provider assignment"):
        return ort.InferenceSession(model, providers=list(providers))


def feed(n=3, seed=1):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, 4)).astype(np.float32), rng.uniform(0.5, 2, 5).astype(np.float32)


@pytest.fixture(scope="module")
def model():
    return model_and_reference()


@pytest.fixture(scope="module")
def cpu_session(model):
    return ort.InferenceSession(model)


def expected(cpu_session, x, z):
    y, s = cpu_session.run(None, {"x": x, "z": z})
    return y, s


# ------------------------------------------------------------------- device in and out

def test_device_input_and_output_stay_on_the_device(model, cpu_session, copies):
    from ort_core.memory import DeviceTensor

    sess = device_session(model)
    x, z = feed()
    x_dev = ort.OrtValue.ortvalue_from_numpy(x, "example", 0)
    copies.clear()
    binding = sess.io_binding()
    binding.bind_ortvalue_input("x", x_dev)
    binding.bind_cpu_input("z", z)
    binding.bind_output("y", "example", 0)
    sess.run_with_iobinding(binding)
    # r to the host for Softmax, s and z to the device for Mul; x is read where it is, and y
    # is not copied to the host (2 copies fewer than run())
    assert sorted(copies) == sorted([D2H, H2D, H2D])
    (y,) = binding.get_outputs()
    assert y.device_name() == "example" and isinstance(y.value, DeviceTensor)
    assert y.shape() == [3, 5] and y.data_type() == "tensor(float)"
    copies.clear()
    (y_host,) = binding.copy_outputs_to_cpu()
    assert copies == [D2H]
    np.testing.assert_allclose(y_host, expected(cpu_session, x, z)[0], rtol=1e-6)

    # the same through run(): x goes up and y comes down as well
    copies.clear()
    sess.run(["y"], {"x": x, "z": z})
    assert sorted(copies) == sorted([H2D, D2H, H2D, H2D, D2H])


def test_every_output_on_the_device_and_on_the_host(model, cpu_session, copies):
    sess = device_session(model)
    x, z = feed(n=2)
    binding = sess.io_binding()
    binding.bind_ortvalue_input("x", ort.OrtValue.ortvalue_from_numpy(x, "example", 0))
    binding.bind_ortvalue_input("z", ort.OrtValue.ortvalue_from_numpy(z, "example", 0))
    binding.bind_output("s", "example", 0)  # produced on the host: one copy up
    binding.bind_output("y", "cpu")  # produced on the device: one copy down
    copies.clear()
    sess.run_with_iobinding(binding)
    # r down for Softmax, s up for Mul (the same copy also serves the bound output), y down
    assert sorted(copies) == sorted([D2H, H2D, D2H])
    s, y = binding.get_outputs()
    assert (s.device_name(), y.device_name()) == ("example", "cpu")
    assert type(y.numpy()) is np.ndarray
    want_y, want_s = expected(cpu_session, x, z)
    got_s, got_y = binding.copy_outputs_to_cpu()
    np.testing.assert_allclose(got_y, want_y, rtol=1e-6)
    np.testing.assert_allclose(got_s, want_s, rtol=1e-6)


def host_inputs(sess, x, z):
    """An IOBinding of ``sess`` with x and z bound on the host."""
    binding = sess.io_binding()
    binding.bind_cpu_input("x", x)
    binding.bind_cpu_input("z", z)
    return binding


def test_output_bound_to_another_device_is_copied_through_the_host(model, cpu_session, copies):
    sess = device_session(model)
    x, z = feed()
    binding = host_inputs(sess, x, z)
    binding.bind_output("y", "second", 0)
    copies.clear()
    sess.run_with_iobinding(binding)
    # x, s, z up; r down; y example -> host -> second (no single transfer knows both devices)
    assert sorted(copies) == sorted([H2D, H2D, H2D, D2H, D2H, ("cpu:0", "second:0")])
    (y,) = binding.get_outputs()
    assert y.device_name() == "second" and type(y.value).__name__ == "SecondTensor"
    np.testing.assert_allclose(y.numpy(), expected(cpu_session, x, z)[0], rtol=1e-6)


def test_input_on_another_device_is_staged_and_host_consumers_get_a_copy(copies):
    # x feeds Relu on 'example' and Softmax on the CPU
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Softmax", ["x"], ["s"], name="softmax", axis=-1),
             helper.make_node("Add", ["r", "s"], ["y"], name="add")]
    model = make_model(nodes, [helper.make_tensor_value_info("x", F32, [2, 3])],
                       [helper.make_tensor_value_info("y", F32, [2, 3])]).SerializeToString()
    sess = device_session(model)
    x = np.array([[-1, 0, 1], [2, -3, 0.5]], np.float32)
    (want,) = ort.InferenceSession(model).run(None, {"x": x})
    for device in ("example", "second"):
        value = ort.OrtValue.ortvalue_from_numpy(x, device, 0)
        copies.clear()
        binding = sess.io_binding()
        binding.bind_ortvalue_input("x", value)
        binding.bind_output("y")
        sess.run_with_iobinding(binding)
        (got,) = binding.copy_outputs_to_cpu()
        np.testing.assert_allclose(got, want, rtol=1e-6)
        if device == "example":  # x down once for Softmax; Relu reads it where it is
            assert copies == [D2H, H2D, D2H]  # then s up for Add, y down
        else:  # x down once, serving Softmax and the copy up to Relu's device
            assert copies == [("second:0", "cpu:0"), H2D, H2D, D2H]


def test_preallocated_outputs(model, cpu_session, copies):
    sess = device_session(model)
    x, z = feed()
    want_y, want_s = expected(cpu_session, x, z)
    binding = host_inputs(sess, x, z)
    s_buffer = np.full((3, 5), -1, np.float32)
    binding.bind_output("s", "cpu", 0, np.float32, [3, 5], s_buffer.ctypes.data)
    y_target = ort.OrtValue.ortvalue_from_shape_and_type([3, 5], np.float32, "example", 0)
    y_address = y_target.data_ptr()
    binding.bind_ortvalue_output("y", y_target)
    copies.clear()
    sess.run_with_iobinding(binding)
    # x, r (for Softmax), s, z; y stays up, written into the bound device buffer by one device copy
    assert sorted(copies) == sorted([H2D, D2H, H2D, H2D, ("example:0", "example:0")])
    np.testing.assert_allclose(s_buffer, want_s, rtol=1e-6)  # written in place
    s, y = binding.get_outputs()
    assert np.shares_memory(s.numpy(), s_buffer)
    assert y is y_target and y.device_name() == "example" and y.data_ptr() == y_address  # in place
    np.testing.assert_allclose(y.numpy(), want_y, rtol=1e-6)

    host_target = ort.OrtValue.ortvalue_from_numpy(np.zeros((3, 5), np.float32))
    keep = host_target.numpy()
    binding.bind_ortvalue_output("y", host_target)
    copies.clear()
    sess.run_with_iobinding(binding)
    assert sorted(copies) == sorted([H2D, D2H, H2D, H2D, D2H])  # now y comes down, once
    assert binding.get_outputs()[1] is host_target and host_target.numpy() is keep
    np.testing.assert_allclose(keep, want_y, rtol=1e-6)

    x2, _ = feed(n=2)
    binding.bind_cpu_input("x", x2)  # outputs now [2, 5]: the [3, 5] buffers no longer fit
    with pytest.raises(ort.InvalidArgument, match=r"output 's': the bound buffer is float32 \[3, 5\], "
                                                  r"the model produced float32 \[2, 5\]"):
        sess.run_with_iobinding(binding)


# ------------------------------------------------------------------------- on the host

def test_host_binding_on_a_cpu_session(model, cpu_session):
    x, z = feed()
    binding = cpu_session.io_binding()
    binding.bind_cpu_input("x", x)
    binding.bind_cpu_input("z", z)
    binding.bind_output("y")
    binding.synchronize_inputs()
    cpu_session.run_with_iobinding(binding)
    binding.synchronize_outputs()
    (y,) = binding.get_outputs()
    assert isinstance(y, ort.OrtValue) and y.device_name() == "cpu"
    (y_np,) = binding.copy_outputs_to_cpu()
    assert type(y_np) is np.ndarray
    np.testing.assert_allclose(y_np, expected(cpu_session, x, z)[0], rtol=1e-6)
    # bound by reference: the next run sees the array's new contents
    x *= 2
    cpu_session.run_with_iobinding(binding)
    np.testing.assert_allclose(binding.copy_outputs_to_cpu()[0], expected(cpu_session, x, z)[0], rtol=1e-6)


def test_bind_input_from_a_host_pointer(model, cpu_session):
    x, z = feed()
    buf = (ctypes.c_float * x.size)(*x.ravel())
    binding = cpu_session.io_binding()
    binding.bind_input("x", "cpu", 0, np.float32, [3, 4], ctypes.addressof(buf))
    binding.bind_input("z", "cpu", 0, TensorProto.FLOAT, z.shape, z.ctypes.data)
    binding.bind_output("y")
    binding.bind_output("s")
    cpu_session.run_with_iobinding(binding)
    want_y, want_s = expected(cpu_session, x, z)
    y, s = binding.copy_outputs_to_cpu()
    np.testing.assert_allclose(y, want_y, rtol=1e-6)
    np.testing.assert_allclose(s, want_s, rtol=1e-6)
    buf[0] = 100.0  # no copy at bind time
    cpu_session.run_with_iobinding(binding)
    x[0, 0] = 100.0
    np.testing.assert_allclose(binding.copy_outputs_to_cpu()[0], expected(cpu_session, x, z)[0], rtol=1e-6)


def test_clear_bindings(model, cpu_session):
    x, z = feed()
    binding = cpu_session.io_binding()
    binding.bind_cpu_input("x", x)
    binding.bind_cpu_input("z", z)
    binding.bind_output("s")
    cpu_session.run_with_iobinding(binding)
    assert len(binding.get_outputs()) == 1
    binding.clear_binding_outputs()
    assert binding.get_outputs() == [] and binding.copy_outputs_to_cpu() == []
    with pytest.raises(ort.InvalidArgument, match="no output requested: bind at least one output"):
        cpu_session.run_with_iobinding(binding)
    binding.bind_output("y")
    binding.clear_binding_inputs()
    with pytest.raises(ort.InvalidArgument, match=r"Required inputs \(\['x', 'z'\]\) are missing from input feed"):
        cpu_session.run_with_iobinding(binding)
    binding.bind_cpu_input("x", x)
    with pytest.raises(ort.InvalidArgument, match=r"Required inputs \(\['z'\]\) are missing from input feed"):
        cpu_session.run_with_iobinding(binding)
    binding.bind_cpu_input("z", z)
    cpu_session.run_with_iobinding(binding)
    np.testing.assert_allclose(binding.copy_outputs_to_cpu()[0], expected(cpu_session, x, z)[0], rtol=1e-6)


def test_errors_name_the_input_or_output(model, cpu_session):
    sess = device_session(model)
    binding = sess.io_binding()
    with pytest.raises(ort.InvalidArgument, match=r"invalid input name 'q'; the model's inputs are \['x', 'z'\]"):
        binding.bind_cpu_input("q", np.zeros(2))
    with pytest.raises(ort.InvalidArgument, match=r"invalid output name 'q'; the model's outputs are \['y', 's'\]"):
        binding.bind_output("q")
    with pytest.raises(ort.InvalidArgument, match=r"input 'x': unexpected data type tensor\(double\), expected "
                                                  r"tensor\(float\)"):
        binding.bind_cpu_input("x", np.zeros((3, 4)))
    with pytest.raises(ort.InvalidArgument, match=r"input 'x': unexpected data type tensor\(double\)"):
        binding.bind_ortvalue_input("x", ort.OrtValue.ortvalue_from_numpy(np.zeros((3, 4)), "example", 0))
    with pytest.raises(ort.InvalidArgument, match=r"input 'x': invalid dimensions \[3, 5\].*dim 1: expected 4"):
        binding.bind_ortvalue_input("x", ort.OrtValue.ortvalue_from_numpy(np.zeros((3, 5), np.float32),
                                                                          "example", 0))
    with pytest.raises(ort.InvalidArgument, match=r"input 'z': invalid rank 2"):
        binding.bind_cpu_input("z", np.zeros((1, 5), np.float32))
    with pytest.raises(ort.InvalidArgument, match="expects an OrtValue"):
        binding.bind_ortvalue_input("x", np.zeros((3, 4), np.float32))
    with pytest.raises(ort.InvalidArgument, match=r"input 'x': invalid dimensions \[3, 5\]"):
        binding.bind_input("x", "example", 0, np.float32, [3, 5], 12345)  # checked as a device value
    with pytest.raises(ort.InvalidArgument, match="buffer_ptr is NULL"):
        binding.bind_output("y", "example", 0, np.float32, [3, 5], 0)
    with pytest.raises(ort.InvalidArgument, match="element_type and shape are needed"):
        binding.bind_output("y", "cpu", 0, None, None, 12345)
    with pytest.raises(ort.InvalidArgument, match="buffer_ptr is NULL"):
        binding.bind_input("x", "cpu", 0, np.float32, [3, 4], 0)
    with pytest.raises(ort.InvalidArgument, match="unknown device gpu:0"):
        binding.bind_output("y", "gpu", 0)
    with pytest.raises(ort.InvalidArgument, match="not made by this session"):
        cpu_session.run_with_iobinding(binding)
    # a device value whose dtype only shows at run: run() and run_with_ort_values check it too
    with pytest.raises(ort.InvalidArgument, match="input 'z'"):
        sess.run_with_ort_values(["y"], {"x": ort.OrtValue.ortvalue_from_numpy(np.zeros((3, 4), np.float32)),
                                         "z": ort.OrtValue.ortvalue_from_numpy(np.zeros(5, np.int64))})


# ------------------------------------------------------------------ run_with_ort_values

def test_run_with_ort_values(model, cpu_session, copies):
    sess = device_session(model)
    x, z = feed()
    want_y, want_s = expected(cpu_session, x, z)
    x_dev = ort.OrtValue.ortvalue_from_numpy(x, "example", 0)
    z_host = ort.OrtValue.ortvalue_from_numpy(z)
    copies.clear()
    y, s = sess.run_with_ort_values(["y", "s"], {"x": x_dev, "z": z_host})
    # x is used where it is; r down, s and z up, y down to the host
    assert sorted(copies) == sorted([D2H, H2D, H2D, D2H])
    assert isinstance(y, ort.OrtValue) and (y.device_name(), s.device_name()) == ("cpu", "cpu")
    np.testing.assert_allclose(y.numpy(), want_y, rtol=1e-6)
    np.testing.assert_allclose(s.numpy(), want_s, rtol=1e-6)
    everything = cpu_session.run_with_ort_values(None, {"x": ort.OrtValue.ortvalue_from_numpy(x), "z": z_host})
    assert [v.shape() for v in everything] == [[3, 5], [3, 5]]
    np.testing.assert_allclose(everything[0].numpy(), want_y, rtol=1e-6)
    with pytest.raises(ort.InvalidArgument, match=r"invalid output name\(s\) \['nope'\]"):
        sess.run_with_ort_values(["nope"], {"x": x_dev, "z": z_host})
    with pytest.raises(ort.InvalidArgument, match=r"Required inputs \(\['z'\]\) are missing from input feed"):
        sess.run_with_ort_values(["y"], {"x": x_dev})


def test_routes_are_planned_once_per_layout(model):
    sess = device_session(model)
    x, z = feed()
    binding = sess.io_binding()
    binding.bind_ortvalue_input("x", ort.OrtValue.ortvalue_from_numpy(x, "example", 0))
    binding.bind_cpu_input("z", z)
    binding.bind_output("y", "example", 0)
    for _ in range(3):
        sess.run_with_iobinding(binding)
    assert len(sess._plan._routes) == 1
    binding.bind_output("s")
    sess.run_with_iobinding(binding)
    assert len(sess._plan._routes) == 2


def test_concurrent_runs_with_bindings(model, cpu_session):
    sess = device_session(model)
    errors = []

    def work(k):
        try:
            for i in range(20):
                x, z = feed(n=1 + (k + i) % 4, seed=k * 100 + i)
                binding = sess.io_binding()
                binding.bind_ortvalue_input("x", ort.OrtValue.ortvalue_from_numpy(x, "example", 0))
                binding.bind_cpu_input("z", z)
                binding.bind_output("y", "example", 0)
                binding.bind_output("s")
                sess.run_with_iobinding(binding)
                y, s = binding.copy_outputs_to_cpu()
                want_y, want_s = expected(cpu_session, x, z)
                if not (np.allclose(y, want_y, rtol=1e-5) and np.allclose(s, want_s, rtol=1e-5)):
                    errors.append(f"thread {k} run {i}: wrong values")
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]


def test_run_with_a_device_ortvalue_feeds_it_without_a_host_round_trip(monkeypatch):
    from ort_ep_example import memory as example_memory

    copies = record_copies(monkeypatch, example_memory.ExampleDataTransfer)
    model = make_model([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Neg", ["r"], ["y"])],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    with pytest.warns(ort.OrtWarning):
        sess = ort.InferenceSession(model, providers=["ExampleExecutionProvider"])
    x = np.array([-1, 2, -3, 4], np.float32)
    dev = ort.OrtValue.ortvalue_from_numpy(x, "example", 0)
    copies.clear()
    (y,) = sess.run(None, {"x": dev})
    np.testing.assert_array_equal(y, -np.maximum(x, 0))
    assert copies == [("example:0", "cpu:0")]  # only the output comes down; x never moves


def test_a_device_output_outlives_its_session(model, cpu_session):
    """The session's provider instance is closed when the session goes; a device value it produced keeps
    its memory alive (the DeviceTensor's owner) and still reads back right."""
    import gc

    sess = device_session(model)
    x, z = feed()
    binding = host_inputs(sess, x, z)
    binding.bind_output("y", "example", 0)
    sess.run_with_iobinding(binding)
    (y,) = binding.get_outputs()
    ep = sess._instances["ExampleExecutionProvider"].ep
    del sess, binding
    gc.collect()
    assert ep.closed  # the instance was released with its session
    filler = [ort.OrtValue.ortvalue_from_numpy(np.full((3, 5), 7, np.float32), "example", 0) for _ in range(20)]
    np.testing.assert_allclose(y.numpy(), cpu_session.run(None, {"x": x, "z": z})[0], rtol=1e-6)
    assert len(filler) == 20



def test_device_pointers_bind_inputs_and_outputs_in_place(model, cpu_session):
    """onnxruntime's bind_input / bind_output with a device pointer: the memory is the caller's, read and
    written where it is."""
    sess = device_session(model)
    x, z = feed()
    want_y, _ = expected(cpu_session, x, z)
    x_dev = ort.OrtValue.ortvalue_from_numpy(x, "example", 0)  # the caller's device memory, kept alive by it
    y_dev = ort.OrtValue.ortvalue_from_shape_and_type([3, 5], np.float32, "example", 0)
    binding = sess.io_binding()
    binding.bind_input("x", "example", 0, np.float32, [3, 4], x_dev.data_ptr())
    binding.bind_cpu_input("z", z)
    binding.bind_output("y", "example", 0, np.float32, [3, 5], y_dev.data_ptr())
    sess.run_with_iobinding(binding)
    np.testing.assert_allclose(y_dev.numpy(), want_y, rtol=1e-6)  # written into the caller's buffer
    (y,) = [v for v in binding.get_outputs() if v.device_name() == "example"]
    assert y.data_ptr() == y_dev.data_ptr()
