"""On a GPU: models run with the provider match the CPU provider (1e-4 relative in float32), device IOBinding,
the second session reusing compiled kernels, streams, events, the allocator and the data transfer.
Every test here skips with cudaGetDeviceCount's status where no GPU is usable."""

from __future__ import annotations

import gc

import numpy as np
import pytest
from cuda_helpers import F16, F32, NAME, make_model, needs_gpu
from onnx import helper

import ort_core as ort

pytestmark = needs_gpu

NO_TF32 = {"use_tf32": "0"}


def _sessions(model, options=None):
    data = model.SerializeToString()
    gpu = ort.InferenceSession(data, providers=[(NAME, options or NO_TF32), "CPUExecutionProvider"])
    cpu = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    return gpu, cpu


def _gpu_nodes(sess) -> int:
    return sum(len(a.node_names) for a in sess.get_provider_graph_assignment_info() if a.provider == NAME)


def _compare(model, feed, rtol=1e-4, atol=1e-5, all_on_gpu=True, options=None):
    gpu, cpu = _sessions(model, options)
    assert gpu.get_providers()[0] == NAME
    if all_on_gpu:  # every subgraph the session runs is this provider's (the optimizer may have fused nodes)
        assert {a.provider for a in gpu.get_provider_graph_assignment_info()} == {NAME}
    got, expected = gpu.run(None, feed), cpu.run(None, feed)
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype and g.shape == e.shape
        np.testing.assert_allclose(g.astype(np.float64), e.astype(np.float64), rtol=rtol, atol=atol)
    return gpu


def _gelu_model(elem, shape=(2, 16, 64)):
    dtype = np.float16 if elem == F16 else np.float32
    nodes = [helper.make_node("Add", ["x", "bias"], ["a"]), helper.make_node("Div", ["a", "s2"], ["d"]),
             helper.make_node("Erf", ["d"], ["e"]), helper.make_node("Add", ["e", "one"], ["p"]),
             helper.make_node("Mul", ["a", "p"], ["m"]), helper.make_node("Mul", ["m", "half"], ["y"])]
    inits = [("bias", np.linspace(-1, 1, shape[-1]).astype(dtype)), ("s2", np.array(1.4142135, dtype)),
             ("one", np.array(1, dtype)), ("half", np.array(0.5, dtype))]
    return make_model(nodes, [("x", elem, shape)], [("y", elem, shape)], inits)


@pytest.mark.parametrize("elem, rtol", [(F32, 1e-4), (F16, 2e-3)])
def test_fused_elementwise_chain_matches_the_cpu_provider(elem, rtol):
    dtype = np.float16 if elem == F16 else np.float32
    x = np.random.default_rng(0).standard_normal((2, 16, 64)).astype(dtype)
    _compare(_gelu_model(elem), {"x": x}, rtol=rtol, atol=rtol)


def test_every_elementwise_op_with_broadcasting_matches_the_cpu_provider():
    unary = ["Relu", "Sigmoid", "Tanh", "Exp", "Abs", "Neg", "Erf"]
    nodes = [helper.make_node("Mul", ["x", "col"], ["m"]), helper.make_node("Sub", ["m", "row"], ["s"])]
    last = "s"
    for i, op in enumerate(unary):
        nodes.append(helper.make_node(op, [last], [f"u{i}"]))
        last = f"u{i}"
    nodes += [helper.make_node("Abs", [last], ["ab"]), helper.make_node("Add", ["ab", "one"], ["p"]),
              helper.make_node("Log", ["p"], ["l"]), helper.make_node("Sqrt", ["p"], ["q"]),
              helper.make_node("Div", ["l", "q"], ["y"])]
    model = make_model(nodes, [("x", F32, (3, 5, 7)), ("col", F32, (5, 1)), ("row", F32, (7,))],
                       [("y", F32, (3, 5, 7))], [("one", np.array(1, np.float32))])
    rng = np.random.default_rng(1)
    feed = {"x": rng.standard_normal((3, 5, 7)).astype(np.float32),
            "col": rng.standard_normal((5, 1)).astype(np.float32), "row": rng.standard_normal(7).astype(np.float32)}
    _compare(model, feed)


@pytest.mark.parametrize("a_shape, b_shape", [((4, 8), (8, 5)), ((3, 4, 8), (8, 5)), ((2, 1, 4, 8), (3, 8, 5)),
                                              ((8,), (2, 8, 5)), ((3, 4, 8), (8,))])
@pytest.mark.parametrize("elem, rtol", [(F32, 1e-4), (F16, 2e-3)])
def test_matmul_matches_the_cpu_provider(a_shape, b_shape, elem, rtol):
    dtype = np.float16 if elem == F16 else np.float32
    out = np.matmul(np.zeros(a_shape), np.zeros(b_shape)).shape
    model = make_model([helper.make_node("MatMul", ["a", "b"], ["y"])], [("a", elem, a_shape), ("b", elem, b_shape)],
                       [("y", elem, out)])
    rng = np.random.default_rng(2)
    feed = {"a": rng.standard_normal(a_shape).astype(dtype), "b": rng.standard_normal(b_shape).astype(dtype)}
    _compare(model, feed, rtol=rtol, atol=rtol)


@pytest.mark.parametrize("trans_a, trans_b, c_shape, beta", [
    (0, 0, (5,), 1.0), (1, 0, (4, 5), 0.5), (0, 1, (4, 1), 2.0), (1, 1, None, 1.0), (0, 0, (5,), 0.0)])
def test_gemm_matches_the_cpu_provider(trans_a, trans_b, c_shape, beta):
    a_shape = (8, 4) if trans_a else (4, 8)
    b_shape = (5, 8) if trans_b else (8, 5)
    inputs = [("a", F32, a_shape), ("b", F32, b_shape)] + ([("c", F32, c_shape)] if c_shape else [])
    node = helper.make_node("Gemm", [n for n, _, _ in inputs], ["y"], transA=trans_a, transB=trans_b, alpha=0.75,
                            beta=beta)
    model = make_model([node], inputs, [("y", F32, (4, 5))], opset=13)
    rng = np.random.default_rng(3)
    _compare(model, {n: rng.standard_normal(s).astype(np.float32) for n, _, s in inputs})


def test_views_and_a_small_mlp_stay_on_the_gpu():
    rng = np.random.default_rng(4)
    nodes = [helper.make_node("Flatten", ["x"], ["f"], axis=1), helper.make_node("MatMul", ["f", "w1"], ["h"]),
             helper.make_node("Add", ["h", "b1"], ["hb"]), helper.make_node("Relu", ["hb"], ["r"]),
             helper.make_node("Gemm", ["r", "w2", "b2"], ["g"]), helper.make_node("Reshape", ["g", "shape"], ["rs"]),
             helper.make_node("Unsqueeze", ["rs", "axes"], ["u"]), helper.make_node("Squeeze", ["u", "axes"], ["y"])]
    def normal(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    inits = [("w1", normal(12, 16)), ("b1", normal(16)), ("w2", normal(16, 6)), ("b2", normal(6)),
             ("shape", np.array([-1, 3], np.int64)), ("axes", np.array([0], np.int64))]
    model = make_model(nodes, [("x", F32, (2, 3, 4))], [("y", F32, (4, 3))], inits)
    _compare(model, {"x": rng.standard_normal((2, 3, 4)).astype(np.float32)})


def test_scalars_stay_scalars():
    nodes = [helper.make_node("Mul", ["x", "k"], ["m"]), helper.make_node("Exp", ["m"], ["y"])]
    model = make_model(nodes, [("x", F32, ())], [("y", F32, ())], [("k", np.array(0.5, np.float32))])
    gpu = _compare(model, {"x": np.array(2.0, np.float32)})
    assert gpu.run(None, {"x": np.array(2.0, np.float32)})[0].shape == ()


def test_an_identity_of_an_input_is_a_separate_output():
    model = make_model([helper.make_node("Identity", ["x"], ["y"])], [("x", F32, (3,))], [("y", F32, (3,))])
    x = np.array([1, -2, 3], np.float32)
    gpu, _ = _sessions(model)
    y = gpu.run(None, {"x": x})[0]
    np.testing.assert_array_equal(y, x)
    y[0] = 7  # the output is the caller's own memory
    assert x[0] == 1


def test_unsupported_nodes_fall_back_to_the_cpu_between_gpu_nodes():
    nodes = [helper.make_node("Exp", ["x"], ["e"]), helper.make_node("Softmax", ["e"], ["s"], axis=0),
             helper.make_node("Sqrt", ["s"], ["y"])]
    model = make_model(nodes, [("x", F32, (2, 5))], [("y", F32, (2, 5))])
    gpu = _compare(model, {"x": np.random.default_rng(5).standard_normal((2, 5)).astype(np.float32)}, all_on_gpu=False)
    assert _gpu_nodes(gpu) == 2


def test_device_iobinding_keeps_values_on_the_gpu_and_writes_bound_outputs():
    model = _gelu_model(F32, (4, 64))
    gpu, cpu = _sessions(model)
    x = np.random.default_rng(6).standard_normal((4, 64)).astype(np.float32)
    x_dev = ort.OrtValue.ortvalue_from_numpy(x, "cuda", 0)
    assert x_dev.device_name().lower() == "cuda"
    binding = gpu.io_binding()
    binding.bind_ortvalue_input("x", x_dev)
    binding.bind_output("y", "cuda", 0)
    gpu.run_with_iobinding(binding)
    out = binding.get_outputs()[0]
    assert out.device_name().lower() == "cuda"
    np.testing.assert_allclose(out.numpy(), cpu.run(None, {"x": x})[0], rtol=1e-4, atol=1e-5)
    # a pre-allocated device output is written in place
    target = ort.OrtValue.ortvalue_from_numpy(np.zeros((4, 64), np.float32), "cuda", 0)
    binding.bind_output("y", "cuda", 0, np.float32, [4, 64], target.data_ptr())
    gpu.run_with_iobinding(binding)
    np.testing.assert_allclose(target.numpy(), cpu.run(None, {"x": x})[0], rtol=1e-4, atol=1e-5)


def test_a_second_session_does_not_compile_again(monkeypatch, tmp_path):
    from ort_ep_cuda import nvrtc

    monkeypatch.setenv("ORT_EP_CUDA_CACHE_DIR", str(tmp_path))
    model = _gelu_model(F32, (3, 7)).SerializeToString()
    before = nvrtc.compiles
    first = ort.InferenceSession(model, providers=[NAME])
    compiled = nvrtc.compiles - before
    assert compiled >= 1 and list(tmp_path.glob("*.cubin"))
    second = ort.InferenceSession(model, providers=[NAME])
    assert nvrtc.compiles - before == compiled
    x = np.ones((3, 7), np.float32)
    np.testing.assert_array_equal(first.run(None, {"x": x})[0], second.run(None, {"x": x})[0])


def test_streams_events_and_elapsed_time():
    from ort_ep_cuda.memory import CudaAllocator, CudaDataTransfer
    from ort_ep_cuda.runtime import runtime
    from ort_ep_cuda.stream import CudaEvent, CudaStream

    rt = runtime()
    transfer = CudaDataTransfer(rt, 0)
    s1, s2 = CudaStream(rt, transfer.device), CudaStream(rt, transfer.device)
    x = np.arange(1 << 20, dtype=np.float32)
    dev = ort.OrtValue.ortvalue_from_numpy(np.zeros_like(x), "cuda", 0).value
    start = s1.record()
    transfer.copy_into(x, dev, s1)
    end = s1.record()
    assert isinstance(end, CudaEvent)
    s2.wait(end)  # s2's copy back starts after s1's upload
    back = np.empty_like(x)
    transfer.copy_into(dev, back, s2)
    s2.synchronize()
    np.testing.assert_array_equal(back, x)
    end.synchronize()
    assert end.elapsed_ns(start) > 0
    alloc = CudaAllocator(rt, 0, limit=4096)
    buf = alloc.allocate(1000)
    assert alloc.address(buf) % alloc.alignment == 0 and alloc.in_use == 1000
    with pytest.raises(MemoryError, match="gpu_mem_limit=4096"):
        alloc.allocate(4000)
    del buf
    gc.collect()
    assert alloc.in_use == 0


@pytest.mark.parametrize("dtype", [np.bool_, np.uint8, np.int64, np.float16, np.float32, np.float64])
def test_data_transfer_round_trips_bit_exactly(dtype):
    from ort_ep_cuda.memory import CudaDataTransfer
    from ort_ep_cuda.runtime import runtime

    from ort_core.memory import HOST

    t = CudaDataTransfer(runtime(), 0)
    x = (np.random.default_rng(7).standard_normal((3, 5)) * 100).astype(dtype)
    dev = t.copy(x, HOST, t.device)
    dev2 = t.copy(dev, t.device, t.device)
    np.testing.assert_array_equal(t.copy(dev2, t.device, HOST), x)
    np.testing.assert_array_equal(t.copy(x[:, ::2], HOST, t.device).shape, (3, 3))  # strided host source


def test_a_device_id_that_does_not_exist_is_named():
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", F32, (2,))], [("y", F32, (2,))])
    with pytest.raises(Exception, match="device_id=99: no such GPU"):
        ort.InferenceSession(model.SerializeToString(), providers=[(NAME, {"device_id": "99"})])


def _mlp_model(batch="n", width=32):
    rng = np.random.default_rng(8)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Add", ["h", "b1"], ["hb"]),
             helper.make_node("Relu", ["hb"], ["r"]), helper.make_node("Gemm", ["r", "w2", "b2"], ["g"]),
             helper.make_node("Tanh", ["g"], ["y"])]
    inits = [("w1", rng.standard_normal((width, width)).astype(np.float32)),
             ("b1", rng.standard_normal(width).astype(np.float32)),
             ("w2", rng.standard_normal((width, 8)).astype(np.float32)),
             ("b2", rng.standard_normal(8).astype(np.float32))]
    return make_model(nodes, [("x", F32, (batch, width))], [("y", F32, (batch, 8))], inits)


@pytest.mark.parametrize("graphs", ["0", "1"])
def test_repeated_runs_with_new_inputs_and_new_shapes_match_the_cpu_provider(graphs):
    from ort_ep_cuda.graphs import CudaGraph

    gpu, cpu = _sessions(_mlp_model(), {"use_tf32": "0", "enable_cuda_graph": graphs})
    rng = np.random.default_rng(9)
    before = CudaGraph.launches
    for batch in (2, 2, 2, 5, 5, 2, 5):  # a recorded run (and graph) per input shape, replayed with new values
        x = rng.standard_normal((batch, 32)).astype(np.float32)
        np.testing.assert_allclose(gpu.run(None, {"x": x})[0], cpu.run(None, {"x": x})[0], rtol=1e-4, atol=1e-5)
    # graphs are captured from a signature's second run: batch 2 replays 3 times, batch 5 twice
    assert CudaGraph.launches - before == (5 if graphs == "1" else 0)


def test_concurrent_runs_through_one_cuda_graph_stay_apart():
    from concurrent.futures import ThreadPoolExecutor

    gpu, cpu = _sessions(_mlp_model(), {"use_tf32": "0", "enable_cuda_graph": "1"})
    xs = [np.random.default_rng(s).standard_normal((4, 32)).astype(np.float32) for s in range(24)]
    gpu.run(None, {"x": xs[0]})  # recorded; the graph is captured by the next run
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda x: gpu.run(None, {"x": x})[0], xs))
    for g, x in zip(got, xs):
        np.testing.assert_allclose(g, cpu.run(None, {"x": x})[0], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("elem, rtol", [(F32, 1e-4), (F16, 4e-3)])
def test_row_kernels_match_the_cpu_provider(elem, rtol):
    dtype = np.float16 if elem == F16 else np.float32
    rng = np.random.default_rng(10)
    shape = (2, 7, 300)  # rows longer than a block: every thread loops
    nodes = [helper.make_node("Softmax", ["x"], ["s"]),
             helper.make_node("LayerNormalization", ["s", "g", "b"], ["n"], epsilon=1e-3),
             helper.make_node("SkipLayerNormalization", ["n", "x", "g", "b", "bias"], ["k"], domain="com.microsoft"),
             helper.make_node("LayerNormalization", ["k", "g"], ["y"])]
    inits = [("g", rng.uniform(0.5, 1.5, 300).astype(dtype)), ("b", rng.standard_normal(300).astype(dtype)),
             ("bias", rng.standard_normal(300).astype(dtype))]
    # k is an output too: onnx's shape inference does not know com.microsoft ops, so its type is declared
    model = make_model(nodes, [("x", elem, shape)], [("y", elem, shape), ("s", elem, shape), ("k", elem, shape)],
                       inits, extra_opsets=[("com.microsoft", 1)])
    _compare(model, {"x": (rng.standard_normal(shape) * 3).astype(dtype)}, rtol=rtol, atol=rtol)


def test_softmax_before_opset_13_flattens_from_its_axis():
    model = make_model([helper.make_node("Softmax", ["x"], ["y"], axis=1)], [("x", F32, (3, 4, 5))],
                       [("y", F32, (3, 4, 5))], opset=11)
    _compare(model, {"x": np.random.default_rng(11).standard_normal((3, 4, 5)).astype(np.float32)})


def test_pow_runs_in_the_fused_kernel():
    nodes = [helper.make_node("Pow", ["x", "three"], ["c"]), helper.make_node("Pow", ["x", "two"], ["q"]),
             helper.make_node("Add", ["c", "q"], ["y"])]
    model = make_model(nodes, [("x", F32, (4, 33))], [("y", F32, (4, 33))],
                       [("three", np.array(3, np.float32)), ("two", np.array(2, np.float32))])
    _compare(model, {"x": np.random.default_rng(12).standard_normal((4, 33)).astype(np.float32)})


@pytest.mark.parametrize("elem", [F32, F16])
def test_transposes_splits_and_summed_skip_outputs_match_the_cpu_provider(elem):
    dtype = np.float16 if elem == F16 else np.float32
    rng = np.random.default_rng(13)
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 1, 3]),
             helper.make_node("Split", ["t", "sizes"], ["a", "b"], axis=3),
             helper.make_node("Reshape", ["x", "rows"], ["r"]),
             helper.make_node("Split", ["r"], ["c", "d"], axis=2),
             helper.make_node("SkipLayerNormalization", ["c", "d", "g"], ["n", "", "", "sum"], domain="com.microsoft")]
    model = make_model(nodes, [("x", elem, (2, 5, 3, 64))],
                       [("a", elem, (2, 3, 5, 40)), ("b", elem, (2, 3, 5, 24)), ("n", elem, (2, 15, 32)),
                        ("sum", elem, (2, 15, 32))],
                       [("sizes", np.array([40, 24], np.int64)), ("rows", np.array([2, 15, 64], np.int64)),
                        ("g", rng.standard_normal(32).astype(dtype))],
                       extra_opsets=[("com.microsoft", 1)])
    tol = 4e-3 if elem == F16 else 1e-4
    _compare(model, {"x": rng.standard_normal((2, 5, 3, 64)).astype(dtype)}, rtol=tol, atol=tol)


def test_a_causal_mask_where_matches_the_cpu_provider():
    mask = np.tril(np.ones((1, 1, 9, 9), bool))
    nodes = [helper.make_node("Where", ["mask", "x", "low"], ["w"]), helper.make_node("Softmax", ["w"], ["y"])]
    model = make_model(nodes, [("x", F32, (2, 3, 9, 9))], [("y", F32, (2, 3, 9, 9))],
                       [("mask", mask), ("low", np.array(-3.4e38, np.float32))])
    _compare(model, {"x": np.random.default_rng(14).standard_normal((2, 3, 9, 9)).astype(np.float32)})


@pytest.mark.parametrize("elem, tol", [(F32, 1e-4), (F16, 1e-2)])
def test_a_cnn_of_convolutions_pooling_batchnorm_concat_and_sum_stays_on_the_gpu(elem, tol):
    dtype = np.float16 if elem == F16 else np.float32
    rng = np.random.default_rng(15)

    def normal(*shape, scale=1.0):
        return (rng.standard_normal(shape) * scale).astype(dtype)

    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[3, 3, 3, 3], strides=[2, 2]),
             helper.make_node("BatchNormalization", ["c1", "s", "bb", "m", "v"], ["n1"]),
             helper.make_node("Relu", ["n1"], ["r1"]),
             helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Conv", ["p1", "w2"], ["c2"], group=8, pads=[1, 1, 1, 1], dilations=[1, 1]),
             helper.make_node("Conv", ["c2", "w3"], ["c3"], group=2),
             helper.make_node("Sum", ["c3", "p1", "c2"], ["s1"]),
             helper.make_node("Concat", ["s1", "p1"], ["cat"], axis=1),
             helper.make_node("AveragePool", ["cat"], ["a1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                              count_include_pad=1),
             helper.make_node("AveragePool", ["cat"], ["a2"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("GlobalAveragePool", ["a1"], ["g"]), helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Gemm", ["f", "w4", "b4"], ["y"], transB=1)]
    inits = [("w1", normal(8, 3, 7, 7, scale=0.1)), ("b1", normal(8)), ("s", normal(8)), ("bb", normal(8)),
             ("m", normal(8)), ("v", rng.uniform(0.5, 2, 8).astype(dtype)), ("w2", normal(8, 1, 3, 3, scale=0.3)),
             ("w3", normal(8, 4, 1, 1, scale=0.3)), ("w4", normal(10, 16, scale=0.3)), ("b4", normal(10))]
    model = make_model(nodes, [("x", elem, (2, 3, 33, 30))], [("y", elem, (2, 10)), ("a2", elem, None)], inits)
    _compare(model, {"x": normal(2, 3, 33, 30)}, rtol=tol, atol=tol)


@pytest.mark.parametrize("elem", [F32, F16])
def test_slices_gathers_and_casts_match_the_cpu_provider(elem):
    """Written without a GPU (the same plan is checked by the recorded-run emulation in test_cuda_trace)."""
    from onnx import TensorProto

    dtype = np.float16 if elem == F16 else np.float32
    other = TensorProto.FLOAT if elem == F16 else TensorProto.FLOAT16
    big = 2**63 - 1
    nodes = [helper.make_node("Slice", ["x", "s", "e", "a", "t"], ["sl"]),
             helper.make_node("Gather", ["sl", "idx"], ["g"], axis=1),
             helper.make_node("Cast", ["g"], ["c"], to=other),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Cast", ["r"], ["y"], to=elem)]
    model = make_model(nodes, [("x", elem, (6, 9, 5))], [("y", elem, None), ("sl", elem, None)],
                       [("s", np.array([5, -1], np.int64)), ("e", np.array([0, -big - 1], np.int64)),
                        ("a", np.array([0, 1], np.int64)), ("t", np.array([-2, -2], np.int64)),
                        ("idx", np.array([[4, 0], [1, 2]], np.int64))])
    x = np.random.default_rng(8).standard_normal((6, 9, 5)).astype(dtype)
    _compare(model, {"x": x}, rtol=0, atol=0)  # copies and exact conversions: bit for bit


@pytest.mark.parametrize("elem, tol", [(F32, 1e-5), (F16, 4e-3)])
def test_reductions_of_trailing_axes_match_the_cpu_provider(elem, tol):
    """Written without a GPU (the same plan is checked by the recorded-run emulation in test_cuda_trace)."""
    dtype = np.float16 if elem == F16 else np.float32
    nodes = [helper.make_node("ReduceMean", ["x", "hw"], ["mean"]),
             helper.make_node("ReduceSum", ["x", "last"], ["sum"], keepdims=0),
             helper.make_node("ReduceMax", ["x"], ["max"], keepdims=0),
             helper.make_node("ReduceMin", ["x", "last"], ["min"])]
    model = make_model(nodes, [("x", elem, (2, 3, 40, 50))],
                       [("mean", elem, None), ("sum", elem, None), ("max", elem, None), ("min", elem, None)],
                       [("hw", np.array([2, 3], np.int64)), ("last", np.array([-1], np.int64))], opset=18)
    x = np.random.default_rng(9).standard_normal((2, 3, 40, 50)).astype(dtype)
    x[1, 2, 7, 9] = np.nan
    _compare(model, {"x": x}, rtol=tol, atol=tol * 10)
