"""Tests of the example provider: discovery, partitioning with copies at borders, results, memory.

Runs against the installed distribution (pip install -e plugins/ort-ep-example), the way the
core will find it; the conformance suite certifies the contract more broadly than this.
"""

from __future__ import annotations

import gc
import os
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from ort_conformance.unavailable import check_falls_back_when_unavailable
from ort_ep_example import kernels, memory, plugin
from ort_ep_example.memory import DEVICE

import ort_core as ort
from ort_core.ir import load_model
from ort_core.memory import HOST, Allocator, DataTransfer, Device, DeviceTensor
from ort_core.plugins import ContextKernel, FusedSubgraph, GraphView, KernelContext
from ort_core.plugins.manager import get_registry
from ort_core.session import CHECK_OUTPUTS_KEY

NAME = "ExampleExecutionProvider"
CPU = "CPUExecutionProvider"
F32 = TensorProto.FLOAT


def make_model(nodes, inputs, outputs, initializers=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def session(model, providers=(NAME,), **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ort.OrtWarning)  # the one-line assignment summary
        return ort.InferenceSession(model.SerializeToString(), providers=list(providers), **kwargs)


def providers_of(sess):
    return [a.provider for a in sess.get_provider_graph_assignment_info()]


# ------------------------------------------------------------------------------ discovery

def test_discovered_through_entry_point_and_available():
    entry = get_registry().providers[NAME]
    assert entry.plugin is plugin
    assert (entry.plugin_name, entry.distribution) == ("example", "ort-ep-example")
    assert entry.info.available and entry.info.reason == ""
    assert entry.info.devices == (Device("example", 0),)
    assert "EXAMPLE" in entry.info.description
    assert NAME in ort.get_available_providers()


def test_missing_library_makes_it_unavailable_with_a_reason():
    with pytest.raises(memory.RuntimeUnavailable, match=memory.LIBRARY_ENV):
        memory.load_runtime("/nonexistent/libort_example_missing.so")
    # in a fresh interpreter: registration reports the reason, sessions fall back to CPU
    check_falls_back_when_unavailable(NAME, {memory.LIBRARY_ENV: "/nonexistent/libort_example_missing.so"},
                                      memory.LIBRARY_ENV)


# ------------------------------------------------------------------- a mixed model

def mixed_model(dtype):
    """Example-provider ops with CPU-only Softmax and Transpose between them.

    x[2,3,4] -MatMul W-> -Add b-> a -Relu-> r (output) -Softmax-> s -Sigmoid-> g ; Tanh(a) -> t
    g - t -> d -Transpose-> tr -Exp-Neg-Abs-> e ; e / z -> y (output)
    """
    et = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 5)).astype(dtype), "W")
    b = numpy_helper.from_array(rng.standard_normal(5).astype(dtype), "b")
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["m"], name="matmul"),
        helper.make_node("Add", ["m", "b"], ["a"], name="add"),
        helper.make_node("Relu", ["a"], ["r"], name="relu"),
        helper.make_node("Softmax", ["r"], ["s"], name="softmax", axis=-1),
        helper.make_node("Sigmoid", ["s"], ["g"], name="sigmoid"),
        helper.make_node("Tanh", ["a"], ["t"], name="tanh"),
        helper.make_node("Sub", ["g", "t"], ["d"], name="sub"),
        helper.make_node("Transpose", ["d"], ["tr"], name="transpose", perm=[0, 2, 1]),
        helper.make_node("Exp", ["tr"], ["e1"], name="exp"),
        helper.make_node("Neg", ["e1"], ["e2"], name="neg"),
        helper.make_node("Abs", ["e2"], ["e3"], name="abs"),
        helper.make_node("Div", ["e3", "z"], ["y"], name="div"),
    ]
    inputs = [helper.make_tensor_value_info("x", et, [2, 3, 4]), helper.make_tensor_value_info("z", et, [5, 1])]
    outputs = [helper.make_tensor_value_info("y", et, [2, 5, 3]), helper.make_tensor_value_info("r", et, [2, 3, 5])]
    return make_model(nodes, inputs, outputs, [w, b]), numpy_helper.to_array(w), numpy_helper.to_array(b)


def numpy_reference(x, z, w, b):
    a = x @ w + b
    r = np.maximum(a, 0)
    s = np.exp(r - r.max(-1, keepdims=True))
    s /= s.sum(-1, keepdims=True)
    d = 1 / (1 + np.exp(-s)) - np.tanh(a)
    return np.abs(-np.exp(d.transpose(0, 2, 1))) / z, r


def feeds(dtype, seed=1):
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((2, 3, 4)).astype(dtype),
            "z": rng.uniform(0.5, 2.0, (5, 1)).astype(dtype)}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_mixed_model_partitions_and_matches_cpu_and_numpy(dtype):
    model, w, b = mixed_model(dtype)
    checked = ort.SessionOptions()  # every kernel's outputs checked against the model's types
    checked.add_session_config_entry(CHECK_OUTPUTS_KEY, "1")
    sess = session(model, sess_options=checked)
    info = sess.get_provider_graph_assignment_info()
    assert providers_of(sess) == [NAME, CPU, NAME, CPU, NAME]
    # Tanh only needs 'a', so the partitioner keeps it in the first group (longest runs)
    assert [a.op_types for a in info if a.provider == NAME] == [
        ("MatMul", "Add", "Relu", "Tanh"), ("Sigmoid", "Sub"), ("Exp", "Neg", "Abs", "Div")]
    feed = feeds(dtype)
    got = sess.run(None, feed)
    cpu = session(model, [CPU]).run(None, feed)
    ref = numpy_reference(feed["x"], feed["z"], w, b)
    tol = {"rtol": 1e-5, "atol": 1e-6} if dtype == np.float32 else {"rtol": 1e-12, "atol": 1e-12}
    for g, c, r in zip(got, cpu, ref):
        assert type(g) is np.ndarray and g.dtype == dtype  # copied back to the host, not a DeviceTensor
        np.testing.assert_allclose(g, c, **tol)
        np.testing.assert_allclose(g, r, **tol)


def test_values_crossing_borders_are_copied_through_the_plugin(monkeypatch):
    seen = []
    original = memory.ExampleDataTransfer.copy_into

    def counting(self, src_value, dst_value, stream):
        seen.append(tuple(DEVICE if isinstance(v, DeviceTensor) else HOST for v in (src_value, dst_value)))
        assert stream is not None  # the plan's copies are ordered on the run's stream
        return original(self, src_value, dst_value, stream)

    model, _, _ = mixed_model(np.float32)
    sess = session(model)  # constants cross once here, before counting starts
    monkeypatch.setattr(memory.ExampleDataTransfer, "copy_into", counting)
    y, r = sess.run(None, feeds(np.float32))
    assert isinstance(y, np.ndarray) and isinstance(r, np.ndarray)
    # device -> host: r (read by Softmax and returned: copied once), d (Transpose) and y
    assert seen.count((DEVICE, HOST)) == 3
    # host -> device: x, z, s and tr; the constants W and b crossed once, at session creation
    assert seen.count((HOST, DEVICE)) == 4
    assert set(seen) == {(DEVICE, HOST), (HOST, DEVICE)}


def test_empty_and_scalar_tensors_run():
    nodes = [helper.make_node("Mul", ["x", "s"], ["m"]), helper.make_node("Neg", ["m"], ["y"])]
    model = make_model(nodes, [helper.make_tensor_value_info("x", F32, ["N", 3]),
                               helper.make_tensor_value_info("s", F32, [])],
                       [helper.make_tensor_value_info("y", F32, ["N", 3])])
    sess = session(model)
    assert providers_of(sess) == [NAME]
    for n in (0, 1, 4):
        x = np.arange(n * 3, dtype=np.float32).reshape(n, 3)
        (y,) = sess.run(None, {"x": x, "s": np.float32(2)})
        np.testing.assert_array_equal(y, -(x * 2))


# ----------------------------------------------------------------- each op vs numpy

def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


UNARY = {"Relu": lambda x: np.maximum(x, 0), "Sigmoid": _sigmoid, "Tanh": np.tanh, "Exp": np.exp,
         "Neg": np.negative, "Abs": np.abs}
BINARY = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide, "MatMul": np.matmul}
SHAPES = {"Add": [((3, 4), (4,)), ((2, 1, 4), (3, 1)), ((), (2, 2))],
          "MatMul": [((3, 4), (4, 5)), ((4,), (4, 2)), ((2, 3), (3,)), ((4,), (4,)), ((2, 1, 3, 4), (5, 4, 2))]}


def _single_node_model(op, shapes, et):
    names = ["a", "b"][:len(shapes)]
    return make_model([helper.make_node(op, names, ["y"])],
                      [helper.make_tensor_value_info(n, et, s) for n, s in zip(names, shapes)],
                      [helper.make_tensor_value_info("y", et, None)])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("op", sorted(UNARY) + sorted(BINARY))
def test_each_op_matches_numpy(op, dtype):
    et = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    rng = np.random.default_rng(2)
    cases = [((2, 3),)] if op in UNARY else SHAPES.get(op, SHAPES["Add"])
    for shapes in cases:
        sess = session(_single_node_model(op, shapes, et))
        assert providers_of(sess) == [NAME], shapes
        xs = [rng.standard_normal(s).astype(dtype) for s in shapes]
        (y,) = sess.run(None, dict(zip("ab", xs)))
        expect = (UNARY.get(op) or BINARY[op])(*xs)
        assert y.dtype == dtype and y.shape == np.shape(expect)
        np.testing.assert_allclose(y, expect, rtol=1e-6 if dtype == np.float32 else 1e-13, atol=1e-7)


def test_special_values_follow_ieee():
    x = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 1000, -1000], np.float32)
    for op in ("Relu", "Sigmoid", "Tanh", "Exp", "Neg", "Abs"):
        (y,) = session(_single_node_model(op, [(7,)], F32)).run(None, {"a": x})
        cpu = session(_single_node_model(op, [(7,)], F32), [CPU]).run(None, {"a": x})[0]
        np.testing.assert_allclose(y, cpu, rtol=1e-6, err_msg=op)
    (y,) = session(_single_node_model("Div", [(3,), (3,)], F32)).run(
        None, {"a": np.array([1, -1, 0], np.float32), "b": np.zeros(3, np.float32)})
    assert y[0] == np.inf and y[1] == -np.inf and np.isnan(y[2])


# --------------------------------------------------------------------- declining

def _capability(model):
    ir = load_model(model.SerializeToString())
    view = GraphView(ir.graph, ir.opset_imports, tuple(n.id for n in ir.graph.topological_order()))
    cap = get_registry().get_capability(NAME, view, {})
    return cap, {n.id: n.name for n in ir.graph.nodes}


@pytest.mark.parametrize("et, text", [(TensorProto.FLOAT16, "tensor(float16)"), (TensorProto.INT32, "tensor(int32)")])
def test_unsupported_dtype_is_declined_with_reason_and_runs_on_cpu(et, text):
    nodes = [helper.make_node("Add", ["x", "x"], ["s"], name="add"), helper.make_node("Abs", ["s"], ["y"], name="abs")]
    model = make_model(nodes, [helper.make_tensor_value_info("x", et, [3])],
                       [helper.make_tensor_value_info("y", et, [3])])
    cap, names = _capability(model)
    assert cap.claimed == ()
    assert {names[i]: r for i, r in cap.declined.items()} == {
        "add": f"input 'x' is {text}; only tensor(float) and tensor(double) are supported",
        "abs": f"input 's' is {text}; only tensor(float) and tensor(double) are supported"}
    with pytest.warns(ort.OrtWarning, match=rf"{NAME}: 0/2 nodes; declined: Add x1, Abs x1"):
        sess = ort.InferenceSession(model.SerializeToString(), providers=[NAME])
    assert providers_of(sess) == [CPU, CPU]
    dtype = helper.tensor_dtype_to_np_dtype(et)
    (y,) = sess.run(None, {"x": np.array([-1, 2, -3], dtype)})
    np.testing.assert_array_equal(y, np.array([2, 4, 6], dtype))


def test_every_offered_node_gets_a_reason():
    nodes = [helper.make_node("Add", ["x", "x"], ["a"], name="old_add"),
             helper.make_node("Softmax", ["a"], ["s"], name="softmax"),
             helper.make_node("Relu", ["s"], ["y"], name="relu")]
    vi = [helper.make_tensor_value_info(n, F32, [2, 3]) for n in ("x", "y")]
    cap, names = _capability(make_model(nodes, vi[:1], vi[1:], opset=6))
    reasons = {names[i]: r for i, r in cap.declined.items()}
    assert [names[i] for i in cap.claimed] == ["relu"]
    assert "legacy semantics" in reasons["old_add"] and "Softmax is not one of" in reasons["softmax"]
    custom = helper.make_node("Relu", ["x"], ["y"], name="custom", domain="com.vendor")
    model = make_model([custom], vi[:1], vi[1:])
    model.opset_import.append(helper.make_opsetid("com.vendor", 1))
    cap, names = _capability(model)
    assert cap.declined and "domain 'com.vendor'" in next(iter(cap.declined.values()))


def test_unknown_provider_option_or_device_is_an_error():
    model = _single_node_model("Relu", [(2,)], F32)
    with pytest.raises(ort.InvalidArgument, match=r"unknown provider option\(s\) \['fast'\] for "
                                                  f"'{NAME}'; valid options: cache_dir, device_id"):
        ort.InferenceSession(model.SerializeToString(), providers=[(NAME, {"fast": "1"})])
    with pytest.raises(ort.InvalidArgument, match=f"provider '{NAME}': device_id='3': {NAME} has a single device"):
        ort.InferenceSession(model.SerializeToString(), providers=[(NAME, {"device_id": "3"})])
    assert providers_of(session(model, [(NAME, {"device_id": "0"})])) == [NAME]


# ---------------------------------------------------------------------- memory

DTYPES = [np.bool_, np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64,
          np.float16, np.float32, np.float64, np.complex64, np.complex128, ml_dtypes.bfloat16,
          ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e4m3fnuz, ml_dtypes.float8_e5m2, ml_dtypes.float8_e5m2fnuz,
          ml_dtypes.int4, ml_dtypes.uint4, ml_dtypes.float4_e2m1fn]


def _random_array(dtype, shape, rng):
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(np.bool_)
    # arbitrary bytes: NaN payloads, subnormals and negative zeros must survive too
    raw = rng.integers(0, 256, int(np.prod(shape)) * dtype.itemsize, dtype=np.uint8)
    return raw.view(dtype).reshape(shape)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_transfer_round_trips_every_dtype_bit_exactly(dtype):
    dt = get_registry().data_transfer(NAME)
    assert isinstance(dt, DataTransfer)
    rng = np.random.default_rng(3)
    big = _random_array(dtype, (4, 6, 5), rng)
    for host in (big, big[:, ::2, 1:].transpose(2, 0, 1), big[0, 0, 0].reshape(()), big[:0], big[:, :, 2]):
        dev = dt.copy(host, HOST, DEVICE)
        assert isinstance(dev, DeviceTensor) and dev.shape == host.shape and dev.dtype == host.dtype
        assert dev.device == DEVICE and dev.is_contiguous
        again = dt.copy(dev, DEVICE, DEVICE)
        assert again.ptr != dev.ptr
        back = dt.copy(again, DEVICE, HOST)
        assert type(back) is np.ndarray and back.shape == host.shape and back.dtype == host.dtype
        assert back.tobytes() == host.tobytes()


def test_transfer_pairs_and_strings():
    dt = memory.TRANSFER
    other = Device("cuda", 0)
    assert dt.can_copy(HOST, DEVICE) and dt.can_copy(DEVICE, HOST) and dt.can_copy(DEVICE, DEVICE)
    assert not dt.can_copy(HOST, HOST) and not dt.can_copy(DEVICE, other) and not dt.can_copy(other, DEVICE)
    with pytest.raises(TypeError, match="string"):
        dt.copy(np.array(["a", "bc"], dtype=object), HOST, DEVICE)
    with pytest.raises(TypeError, match="string"):
        dt.copy(np.array(["a", "bc"]), HOST, DEVICE)
    with pytest.raises(ValueError, match="cannot copy"):
        dt.copy(np.zeros(2), DEVICE, other)
    with pytest.raises(TypeError, match="expects a DeviceTensor on example:0"):
        dt.copy(np.zeros(2), DEVICE, HOST)
    dev = dt.copy(np.arange(3.0), HOST, DEVICE)
    with pytest.raises(TypeError, match="not host memory: copy it to the host first"):
        np.asarray(dev)  # the core and users never read device memory as numpy


def test_allocator_alignment_for_every_size():
    alloc = get_registry().allocator(NAME, DEVICE)
    assert isinstance(alloc, Allocator) and alloc.device == DEVICE and alloc.alignment >= 16
    buffers = [alloc.allocate(n) for n in (0, 1, 3, 4097, 1 << 20)]
    addresses = [alloc.address(b) for b in buffers]
    assert all(a % alloc.alignment == 0 for a in addresses)
    assert len(set(addresses)) == len(addresses)  # zero-size buffers included: all distinct
    assert [b.nbytes for b in buffers] == [0, 1, 3, 4097, 1 << 20]
    for b in buffers:
        alloc.free(b)
        alloc.free(b)  # freeing twice is harmless
    with pytest.raises(ValueError, match="negative"):
        alloc.allocate(-1)
    with pytest.raises(ValueError, match="allocates on example:0 only"):
        plugin.ExampleProvider(plugin._info()).allocator(HOST)


def _compiled(model):
    ir = load_model(model.SerializeToString())
    nodes = ir.graph.topological_order()
    outputs = [v.name for v in ir.graph.outputs]
    inputs = [v.name for v in ir.graph.inputs]
    sub = FusedSubgraph("example_0", nodes, inputs, outputs, {}, ir.opset_imports, ir.graph)
    ep = plugin.ExampleProvider(plugin._info())
    return ep, ep.compile_subgraph(sub)


def test_kernel_enqueues_on_the_stream_into_context_outputs_and_never_writes_inputs():
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Add", ["r", "x"], ["y"])]
    vi = [helper.make_tensor_value_info(n, F32, [5]) for n in ("x", "y")]
    ep, kernel = _compiled(make_model(nodes, vi[:1], vi[1:]))
    assert isinstance(kernel, ContextKernel)
    x = np.array([-2, -1, 0, 1, 2], np.float32)
    dev = memory.TRANSFER.copy(x, HOST, DEVICE)
    stream = ep.stream()
    gate = threading.Event()
    stream.enqueue(gate.wait, "hold the worker")  # nothing queued after this runs until the gate opens
    ctx = KernelContext([dev], [None], stream, memory.ALLOCATOR)
    kernel.run(ctx)
    (y,) = ctx.outputs
    assert isinstance(y, DeviceTensor) and y.shape == (5,) and y.dtype == np.float32 and y.device == DEVICE
    host = np.empty(5, np.float32)
    memory.TRANSFER.copy_into(y, host, stream)
    assert ep._worker.executed == 0  # all of it is still queued: the calls returned at once
    gate.set()
    stream.synchronize()
    np.testing.assert_array_equal(host, [-2, -1, 0, 2, 4])
    np.testing.assert_array_equal(memory.TRANSFER.copy(dev, DEVICE, HOST), x)  # input untouched
    assert not memory.view(dev).flags.writeable
    ep.close()
    assert threading.current_thread() is not ep and ep._worker is None


def test_a_failure_on_the_stream_is_raised_by_the_run_naming_the_work():
    model = _single_node_model("MatMul", [(2, 3), (3, 2)], F32)
    sess = session(model)
    x, w = np.ones((2, 3), np.float32), np.ones((3, 2), np.float32)
    np.testing.assert_array_equal(sess.run(None, {"a": x, "b": w})[0], np.full((2, 2), 3, np.float32))
    with pytest.raises(ort.InvalidArgument):  # caught on the host before anything is enqueued
        sess.run(None, {"a": x, "b": np.ones((4, 2), np.float32)})
    ep = sess._instances[NAME].ep
    original = memory._memcpy

    def failing(*args):
        raise OSError("simulated device fault")

    memory._memcpy = failing
    try:
        with pytest.raises(ort.KernelError, match="simulated device fault"):
            sess.run(None, {"a": x, "b": w})
    finally:
        memory._memcpy = original
    assert ep._worker.alive  # the stream survives a failed run; the session stays usable
    np.testing.assert_array_equal(sess.run(None, {"a": x, "b": w})[0], np.full((2, 2), 3, np.float32))


def test_session_gc_stops_the_stream_worker():
    sess = session(_single_node_model("Relu", [(3,)], F32))
    sess.run(None, {"a": np.ones(3, np.float32)})
    worker = sess._instances[NAME].ep._worker
    assert worker.alive
    del sess
    gc.collect()
    assert not worker.alive


def test_dropped_tensors_release_their_memory():
    statm = "/proc/self/statm"
    if not os.path.exists(statm):
        pytest.skip("resident-memory check reads /proc (Linux)")
    model = _single_node_model("Neg", [(1024, 1024)], F32)  # 4 MiB per device tensor
    sess = session(model)
    x = np.ones((1024, 1024), np.float32)
    page = os.sysconf("SC_PAGE_SIZE")

    def resident():
        with open(statm) as f:
            return int(f.read().split()[1]) * page

    for _ in range(5):
        sess.run(None, {"a": x})
    before = resident()
    for _ in range(100):  # two device tensors a run: 800 MiB if nothing were freed
        sess.run(None, {"a": x})
    assert resident() - before < 100 << 20


def test_concurrent_runs_agree():
    model, _, _ = mixed_model(np.float32)
    sess = session(model)
    cases = [feeds(np.float32, seed) for seed in range(16)]
    expected = [sess.run(None, f) for f in cases]

    def run(k):
        return k, sess.run(None, cases[k % len(cases)])

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(run, range(64)))
    for k, got in results:
        for g, e in zip(got, expected[k % len(cases)]):
            np.testing.assert_array_equal(g, e)



def test_the_tensor_size_limit_holds_for_device_values():
    from ort_core.limits import MAX_TENSOR_BYTES_KEY

    so = ort.SessionOptions()
    so.add_session_config_entry(MAX_TENSOR_BYTES_KEY, "256")
    sess = session(make_model([helper.make_node("Add", ["a", "b"], ["y"], name="outer_sum")],
                              [helper.make_tensor_value_info("a", F32, ["N", 1]),
                               helper.make_tensor_value_info("b", F32, [1, "N"])],
                              [helper.make_tensor_value_info("y", F32, ["N", "N"])]), sess_options=so)
    a = np.ones((8, 1), np.float32)
    np.testing.assert_array_equal(sess.run(None, {"a": a, "b": a.T})[0], np.full((8, 8), 2))  # 256 bytes
    a = np.ones((9, 1), np.float32)
    with pytest.raises(ort.KernelError, match=rf"node 'outer_sum' \(Add\) on {NAME}.*shape \[9, 9\].*more than"):
        sess.run(None, {"a": a, "b": a.T})  # the device output (324 bytes) is refused


# --------------------------------------------------------------- compiled contexts (EPContext)

def _context_session(model_path, embed, target):
    so = ort.SessionOptions()
    so.add_session_config_entry("ep.context_enable", "1")
    so.add_session_config_entry("ep.context_embed_mode", embed)
    so.add_session_config_entry("ep.context_file_path", str(target))
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC  # standard ops in the file
    return session_from_path(model_path, so)


def session_from_path(path, so=None, providers=(NAME,)):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ort.OrtWarning)
        return ort.InferenceSession(str(path), so, providers=list(providers))


@pytest.mark.parametrize("embed", ["0", "1"])
def test_compiled_subgraphs_are_saved_as_epcontext_nodes_and_load_without_compiling(tmp_path, embed, monkeypatch):
    import onnx

    model, _, _ = mixed_model(np.float32)
    src = tmp_path / "mixed.onnx"
    onnx.save(model, str(src))
    target = tmp_path / "out" / "mixed_ctx.onnx"
    target.parent.mkdir()
    first = _context_session(src, embed, target)
    saved = onnx.load(str(target))
    contexts = [n for n in saved.graph.node if n.op_type == "EPContext"]
    assert len(contexts) == 3 and all(n.domain == "com.microsoft" for n in contexts)  # one per example subgraph
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in contexts[0].attribute}
    assert attrs["source"] == NAME.encode() and attrs["embed_mode"] == int(embed) and attrs["main_context"] == 1
    assert {n.op_type for n in saved.graph.node} == {"EPContext", "Softmax", "Transpose"}
    bins = sorted(p.name for p in target.parent.glob("*.bin"))
    assert len(bins) == (3 if embed == "0" else 0)
    # loading the context model compiles nothing: no node goes through the capability rules again
    checked = []
    original = kernels.unsupported_reason
    monkeypatch.setattr(kernels, "unsupported_reason", lambda node, *a: checked.append(node.op_type)
                        or original(node, *a))
    again = session_from_path(target)
    assert [a.op_types for a in again.get_provider_graph_assignment_info() if a.provider == NAME] == \
        [("EPContext",)] * 3
    assert not set(checked) & {"MatMul", "Add", "Relu", "Sigmoid", "Tanh", "Sub", "Exp", "Neg", "Abs", "Div"}
    feed = feeds(np.float32)
    for g, e in zip(again.run(None, feed), first.run(None, feed)):
        np.testing.assert_array_equal(g, e)


def test_a_context_model_without_its_provider_says_which_provider_it_needs(tmp_path):
    import onnx

    model, _, _ = mixed_model(np.float32)
    src = tmp_path / "mixed.onnx"
    onnx.save(model, str(src))
    _context_session(src, "1", tmp_path / "ctx.onnx")
    with pytest.raises(ort.NotImplementedOp, match=f"EPContext.*a subgraph compiled for '{NAME}'"):
        session_from_path(tmp_path / "ctx.onnx", providers=[CPU])


def test_a_context_file_outside_the_model_folder_is_refused(tmp_path):
    import onnx

    model, _, _ = mixed_model(np.float32)
    src = tmp_path / "mixed.onnx"
    onnx.save(model, str(src))
    _context_session(src, "0", tmp_path / "ctx.onnx")
    saved = onnx.load(str(tmp_path / "ctx.onnx"))
    for n in saved.graph.node:
        for a in n.attribute:
            if a.name == "ep_cache_context":
                a.s = b"../../etc/passwd"
    onnx.save(saved, str(tmp_path / "hostile.onnx"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(ort.NotImplementedOp):  # the example refuses it; nothing else can run it
            ort.InferenceSession(str(tmp_path / "hostile.onnx"), providers=[NAME])
    assert any("outside the model's folder" in str(w.message) for w in caught)


def test_compiled_programs_are_cached_on_disk_by_subgraph_and_options(tmp_path, monkeypatch):
    compiled = []
    original = plugin.compile_program
    monkeypatch.setattr(plugin, "compile_program", lambda sub, path=None: compiled.append(sub.name)
                        or original(sub, path))
    model, _, _ = mixed_model(np.float32)
    options = {"cache_dir": str(tmp_path)}
    first = session(model, [(NAME, options)])
    assert len(compiled) == 3 and len(list(tmp_path.glob("*.blob"))) == 3
    second = session(model, [(NAME, options)])  # every program comes from the cache
    assert len(compiled) == 3
    session(mixed_model(np.float64)[0], [(NAME, options)])  # other dtypes: another subgraph, compiled anew
    assert len(compiled) == 6
    feed = feeds(np.float32)
    for g, e in zip(second.run(None, feed), first.run(None, feed)):
        np.testing.assert_array_equal(g, e)


def test_a_context_model_of_a_model_given_as_bytes_needs_a_file_path():
    so = ort.SessionOptions()
    so.add_session_config_entry("ep.context_enable", "1")
    with pytest.raises(ort.InvalidArgument, match="set the session config entry 'ep.context_file_path'"):
        session(mixed_model(np.float32)[0], sess_options=so)
