"""Recorded runs without a GPU: a plan is recorded with symbolic addresses, its intermediates are placed in one
workspace, and the commands, resolved against an emulated device memory and executed by numpy models of the
kernel (its parameter struct decoded as the CUDA source reads it) and of cuBLAS, compute what the CPU provider
computes. This checks recording, placement (no live value is overwritten) and address resolution end to end."""

from __future__ import annotations

import numpy as np
from cuda_helpers import F32, cpu_outputs, make_model, whole_subgraph
from onnx import TensorProto, helper
from ort_ep_cuda import rowops, runtime, shapes, windows
from ort_ep_cuda.kernels import plan_subgraph
from ort_ep_cuda.launch import Compiled, Executor
from ort_ep_cuda.memory import cuda_device
from ort_ep_cuda.nvrtc import KernelCache
from ort_ep_cuda.trace import Alias, Gemm, Launch, Memcpy, Memcpy2D, Memset, Recorder, bases, resolve, symbol, tag_of
from test_cuda_codegen import _run_like_the_kernel

from ort_core.memory import DeviceTensor

DEVICE = cuda_device(0)
BASE = 1 << 30


class Memory:
    """A bump-allocated byte array standing in for device memory at address BASE."""

    def __init__(self, nbytes: int = 1 << 22) -> None:
        self.bytes = np.zeros(nbytes, np.uint8)
        self.top = 0

    def alloc(self, nbytes: int) -> int:
        address = BASE + self.top
        self.top += -(-max(nbytes, 1) // 256) * 256
        assert self.top <= len(self.bytes)
        return address

    def array(self, address: int, count: int, dtype) -> np.ndarray:
        start = address - BASE
        return self.bytes[start:start + count * np.dtype(dtype).itemsize].view(dtype)

    def put(self, x: np.ndarray) -> DeviceTensor:
        x = np.ascontiguousarray(x)
        address = self.alloc(x.nbytes)
        self.array(address, x.size, x.dtype)[:] = x.reshape(-1)
        return DeviceTensor(address, x.shape, x.dtype, DEVICE)


class Context:
    """The parts of ort_core's KernelContext a recorded run uses."""

    def __init__(self, memory: Memory, inputs: list[DeviceTensor], n_outputs: int, views=()) -> None:
        self.memory, self.inputs, self.outputs, self.views = memory, inputs, [None] * n_outputs, set(views)

    def may_view(self, k: int) -> bool:
        return k in self.views

    def output(self, k: int, shape, dtype) -> DeviceTensor:
        dtype = np.dtype(dtype)
        self.outputs[k] = DeviceTensor(self.memory.alloc(int(np.prod(shape)) * dtype.itemsize), shape, dtype, DEVICE)
        return self.outputs[k]


def _executor(tmp_path) -> Executor:
    info = runtime.DeviceInfo(0, "emulated", 9, 0, 4, 1024, True)
    return Executor(runtime.runtime(), info, None, None, KernelCache(str(tmp_path)), use_tf32=False)


def _emulate(trace, table, memory: Memory, programs: dict, ctx: Context) -> None:
    """Execute the resolved commands on ``memory`` with numpy."""
    ffi = runtime.runtime().ffi
    for c in trace.commands:
        if isinstance(c, Launch) and isinstance(programs[c.label], rowops.RowProgram):
            _run_like_the_row_kernel(programs[c.label], c, table, memory)
        elif isinstance(c, Launch) and isinstance(programs[c.label], windows.WindowProgram):
            _run_like_the_window_kernel(programs[c.label], c, table, memory)
        elif isinstance(c, Launch):
            program = programs[c.label]
            words = c.words.copy()
            for s in c.slots:
                words[s] = resolve(table, int(words[s]))
            n_ptr = program.n_inputs + len(program.outputs)
            views = {int(w): _At(memory, int(w), program.dtype if k < program.n_inputs else program.result_dtype)
                     for k, w in enumerate(words[:n_ptr])}
            _run_like_the_kernel(program, words, views)
        elif isinstance(c, Gemm):
            a = list(c.args)
            ta, tb, m, n, k, alpha, pa, _, lda, sa, pb, _, ldb, sb, beta, pc, _, ldc, sc, count = a[:20]
            call = shapes.GemmCall(bool(ta), bool(tb), m, n, k, lda, ldb, ldc, 0, 0, 0, sa, sb, sc, count)
            arrays = [memory.array(resolve(table, p), (len(memory.bytes) - (resolve(table, p) - BASE)) // 4,
                                   np.float32) for p in (pa, pb, pc)]
            shapes.emulate(call, *arrays, alpha=float(ffi.cast("float *", alpha)[0]),
                           beta=float(ffi.cast("float *", beta)[0]))
        elif isinstance(c, Memset):
            memory.array(resolve(table, c.address), c.nbytes, np.uint8)[:] = 0
        elif isinstance(c, Memcpy2D):
            for row in range(c.height):
                dst = memory.array(resolve(table, c.dst) + row * c.dpitch, c.width, np.uint8)
                dst[:] = memory.array(resolve(table, c.src) + row * c.spitch, c.width, np.uint8)
        elif isinstance(c, Memcpy):
            memory.array(resolve(table, c.dst), c.nbytes, np.uint8)[:] = memory.array(resolve(table, c.src), c.nbytes,
                                                                                      np.uint8)
        else:
            assert isinstance(c, Alias)
            ctx.outputs[c.index] = DeviceTensor(resolve(table, c.address), c.shape, c.dtype, DEVICE)


class _At:
    """Elements of ``dtype`` at ``address`` of the emulated memory, indexed by element offsets that may be negative
    (a backward Slice reads below its first element's address)."""

    def __init__(self, memory: Memory, address: int, dtype) -> None:
        self.dtype = np.dtype(dtype)
        self.all = memory.bytes.view(self.dtype)
        assert (address - BASE) % self.dtype.itemsize == 0
        self.first = (address - BASE) // self.dtype.itemsize

    def __getitem__(self, k: int):
        assert 0 <= self.first + k < len(self.all)
        return self.all[self.first + k]

    def __setitem__(self, k: int, value) -> None:
        assert 0 <= self.first + k < len(self.all)
        self.all[self.first + k] = value


def _run_like_the_row_kernel(program, c, table, memory: Memory) -> None:
    """The row kernel in numpy: its parameter words decoded as the CUDA struct reads them."""
    words = c.words.copy()
    for s in c.slots:
        words[s] = resolve(table, int(words[s]))
    n = len(program.inputs)
    tail = n + 1 + program.with_sum
    rows, cols, eps = int(words[tail]), int(words[tail + 1]), float(words[tail + 2:tail + 3].view(np.float64)[0])
    sizes = {"x": rows * cols, "skip": rows * cols, "gamma": cols, "beta": cols, "bias": cols}
    arrays = {name: memory.array(int(words[k]), sizes[name], np.float32).reshape(-1, cols)
              for k, name in enumerate(program.inputs)}
    arrays = {k: (v if k in ("x", "skip") else v[0]) for k, v in arrays.items()}
    out = rowops.reference(program, arrays, eps).reshape(-1)  # rows values for a reduction, rows * cols otherwise
    memory.array(int(words[n]), out.size, np.float32)[:] = out
    if program.with_sum:
        memory.array(int(words[n + 1]), rows * cols, np.float32)[:] = rowops.summed(arrays, "float32").reshape(-1)


def _run_like_the_window_kernel(program, c, table, memory: Memory) -> None:
    """The im2col / pooling kernel in numpy: its parameter words decoded as the CUDA struct reads them."""
    x, y = (resolve(table, int(c.words[k])) for k in (0, 1))
    g = windows.Geometry(*(int(v) for v in c.words[2:2 + len(windows.FIELDS)]))
    assert int(c.words[-1]) == g.elements(program.kind)
    source = memory.array(x, g.planes * g.channels * g.h * g.w, np.float32)
    out = windows.reference(program, source, g).reshape(-1)
    memory.array(y, out.size, np.float32)[:] = out


def _run_recorded(model, feeds: dict[str, np.ndarray], tmp_path, views=()) -> tuple[list[np.ndarray], object]:
    sub = whole_subgraph(model)
    plan = plan_subgraph(sub)
    memory = Memory()
    constants = {}
    for name in plan.device_constants:  # uploaded as the executor does: Where's conditions as the data's type
        value = np.asarray(plan.made[name] if name in plan.made else sub.constants[name])
        constants[name] = memory.put(value.astype(plan.casts.get(name, value.dtype)))
    executor = _executor(tmp_path)
    compiled = Compiled(plan, {p.name: None for p in plan.programs}, constants)
    ctx = Context(memory, [memory.put(feeds[name]) for name in plan.inputs], len(plan.outputs), views)
    trace = executor._record(compiled, ctx)
    outs = {k: ctx.output(k, shape, dtype) for k, (shape, dtype) in trace.outputs.items()}
    workspace = memory.alloc(trace.workspace)
    table = bases(trace, [x.ptr for x in ctx.inputs], {k: o.ptr for k, o in outs.items()}, workspace)
    _emulate(trace, table, memory, {p.name: p for p in plan.programs}, ctx)
    results = [memory.array(o.ptr, o.size, o.dtype).reshape(o.shape).copy() for o in ctx.outputs]
    return results, trace


def test_a_recorded_mlp_computes_what_the_cpu_provider_computes(tmp_path):
    rng = np.random.default_rng(0)

    def normal(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    nodes = [helper.make_node("Flatten", ["x"], ["f"], axis=1), helper.make_node("MatMul", ["f", "w1"], ["h"]),
             helper.make_node("Add", ["h", "b1"], ["hb"]), helper.make_node("Relu", ["hb"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["h2"]), helper.make_node("Tanh", ["h2"], ["t2"]),
             helper.make_node("Gemm", ["t2", "w3", "b3"], ["g"], beta=0.5),
             helper.make_node("Reshape", ["g", "shape"], ["y"])]
    inits = [("w1", normal(6, 8)), ("b1", normal(8)), ("w2", normal(8, 8)), ("w3", normal(8, 4)), ("b3", normal(4)),
             ("shape", np.array([-1, 2], np.int64))]
    model = make_model(nodes, [("x", F32, (3, 2, 3))], [("y", F32, (6, 2)), ("r", F32, (3, 8))], inits)
    feeds = {"x": normal(3, 2, 3)}
    got, trace = _run_recorded(model, feeds, tmp_path)
    for g, e in zip(got, cpu_outputs(model, feeds)):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5)
    # the three intermediates (h, h2 and t2's kernel output, g) live in one block, sharing bytes where they can
    assert len(trace.scratch) >= 3 and trace.workspace < sum(-(-n // 256) * 256 for n in trace.scratch)
    # "r" is read after it is written as an output: outputs are tagged as outputs, never placed in the workspace
    assert set(trace.outputs) == {0, 1}


def test_recorded_row_kernels_compute_what_the_cpu_provider_computes(tmp_path):
    rng = np.random.default_rng(1)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Softmax", ["m"], ["s"]),
             helper.make_node("LayerNormalization", ["s", "g", "b"], ["n"], epsilon=1e-3),
             helper.make_node("SkipLayerNormalization", ["n", "x", "g"], ["y"], domain="com.microsoft")]
    model = make_model(nodes, [("x", F32, (2, 3, 8))], [("y", F32, (2, 3, 8))],
                       [("w", rng.standard_normal((8, 8)).astype(np.float32)),
                        ("g", rng.standard_normal(8).astype(np.float32)),
                        ("b", rng.standard_normal(8).astype(np.float32))],
                       extra_opsets=[("com.microsoft", 1)])
    feeds = {"x": rng.standard_normal((2, 3, 8)).astype(np.float32)}
    got, trace = _run_recorded(model, feeds, tmp_path)
    np.testing.assert_allclose(got[0], cpu_outputs(model, feeds)[0], rtol=1e-4, atol=1e-4)
    assert [type(c).__name__ for c in trace.commands] == ["Gemm", "Launch", "Launch", "Launch"]


def test_recorded_transposes_splits_and_summed_skip_outputs_compute_what_the_cpu_provider_computes(tmp_path):
    rng = np.random.default_rng(2)
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[2, 0, 1]),
             helper.make_node("Split", ["t", "sizes"], ["a", "b"], axis=1),
             helper.make_node("Split", ["x"], ["c", "d"], axis=2),
             helper.make_node("Transpose", ["c"], ["e"]),
             helper.make_node("SkipLayerNormalization", ["c", "d", "g"], ["n", "", "", "sum"], domain="com.microsoft")]
    model = make_model(nodes, [("x", F32, (2, 3, 8))],
                       [("a", F32, (8, 1, 3)), ("b", F32, (8, 1, 3)), ("e", F32, (4, 3, 2)), ("n", F32, (2, 3, 4)),
                        ("sum", F32, (2, 3, 4))],
                       [("sizes", np.array([1, 1], np.int64)), ("g", rng.standard_normal(4).astype(np.float32))],
                       extra_opsets=[("com.microsoft", 1)])
    feeds = {"x": rng.standard_normal((2, 3, 8)).astype(np.float32)}
    got, trace = _run_recorded(model, feeds, tmp_path)
    for g, e in zip(got, cpu_outputs(model, feeds)):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5)


def test_a_recorded_causal_mask_where_computes_what_the_cpu_provider_computes(tmp_path):
    mask = np.tril(np.ones((4, 4), bool))
    nodes = [helper.make_node("Where", ["mask", "x", "low"], ["w"]), helper.make_node("Softmax", ["w"], ["y"])]
    model = make_model(nodes, [("x", F32, (2, 4, 4))], [("y", F32, (2, 4, 4))],
                       [("mask", mask), ("low", np.array(-1e4, np.float32))])
    feeds = {"x": np.random.default_rng(3).standard_normal((2, 4, 4)).astype(np.float32)}
    got, _ = _run_recorded(model, feeds, tmp_path)
    np.testing.assert_allclose(got[0], cpu_outputs(model, feeds)[0], rtol=1e-5, atol=1e-6)


def test_a_recorded_cnn_computes_what_the_cpu_provider_computes(tmp_path):
    rng = np.random.default_rng(4)

    def normal(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 2, 1, 0], strides=[2, 1], dilations=[1, 2]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Conv", ["p1", "w2"], ["c2"]),
             helper.make_node("AveragePool", ["c2"], ["p2"], kernel_shape=[2, 2], pads=[1, 1, 0, 0],
                              count_include_pad=1),
             helper.make_node("AveragePool", ["c2"], ["p3"], kernel_shape=[2, 3], pads=[0, 1, 1, 1]),
             helper.make_node("GlobalAveragePool", ["p2"], ["g"]), helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Gemm", ["f", "w3", "b3"], ["y"], transB=1)]
    model = make_model(nodes, [("x", F32, (2, 3, 9, 8))], [("y", F32, (2, 5)), ("p3", F32, None)],
                       [("w1", normal(4, 3, 3, 2)), ("b1", normal(4)), ("w2", normal(6, 4, 1, 1)),
                        ("w3", normal(5, 6)), ("b3", normal(5))])
    feeds = {"x": normal(2, 3, 9, 8)}
    got, trace = _run_recorded(model, feeds, tmp_path)
    for g, e in zip(got, cpu_outputs(model, feeds)):
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-5)
    launches = [c.label[:8] for c in trace.commands if isinstance(c, Launch)]
    assert launches.count("ort_win_") == 5  # one im2col (the 1x1 convolution reads its input), four poolings


def test_recorded_grouped_convolutions_batchnorm_concat_and_sum_compute_what_the_cpu_provider_computes(tmp_path):
    rng = np.random.default_rng(5)

    def normal(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], group=2, pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c1", "s", "bb", "m", "v"], ["n1"], epsilon=1e-3),
             helper.make_node("Relu", ["n1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], group=6, kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Concat", ["c2", "x", "r1"], ["cat"], axis=1),
             helper.make_node("Conv", ["cat", "w3"], ["c3"], group=4),
             helper.make_node("Sum", ["c3", "c3", "b4"], ["y"])]
    model = make_model(nodes, [("x", F32, (2, 4, 5, 6))], [("y", F32, (2, 8, 5, 6))],
                       [("w1", normal(6, 2, 3, 3)), ("b1", normal(6)), ("s", normal(6)), ("bb", normal(6)),
                        ("m", normal(6)), ("v", rng.uniform(0.5, 2, 6).astype(np.float32)), ("w2", normal(6, 1, 3, 3)),
                        ("w3", normal(8, 4, 1, 1)), ("b4", normal(8, 1, 1))])
    feeds = {"x": normal(2, 4, 5, 6)}
    got, trace = _run_recorded(model, feeds, tmp_path)
    np.testing.assert_allclose(got[0], cpu_outputs(model, feeds)[0], rtol=1e-4, atol=1e-4)
    assert sum(isinstance(c, Memcpy2D) for c in trace.commands) == 3


def test_an_output_that_is_a_view_of_an_input_is_handed_out_or_copied(tmp_path):
    model = make_model([helper.make_node("Reshape", ["x", "shape"], ["y"])], [("x", F32, (2, 3))], [("y", F32, (3, 2))],
                       [("shape", np.array([3, 2], np.int64))])
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    viewed, trace = _run_recorded(model, {"x": x}, tmp_path, views=(0,))
    assert [type(c) for c in trace.commands] == [Alias] and not trace.outputs
    copied, trace = _run_recorded(model, {"x": x}, tmp_path)
    assert [type(c) for c in trace.commands] == [Memcpy] and trace.outputs == {0: ((3, 2), np.dtype(np.float32))}
    np.testing.assert_array_equal(viewed[0], x.reshape(3, 2))
    np.testing.assert_array_equal(copied[0], x.reshape(3, 2))


def test_symbols_resolve_through_the_table_and_real_addresses_pass_through():
    rec = Recorder(2, 1, DEVICE)
    a = rec.input(1, DeviceTensor(0, (4,), np.float32, DEVICE))
    s = rec.scratch((8,), np.float32)
    rec.add(Memcpy(s.ptr + 16, a.ptr + 4, 12))
    rec.add(Memset(4096, 8))  # a real address (a constant)
    trace = rec.finish()
    table = bases(trace, [1000, 2000], {0: 3000}, 50000)
    assert tag_of(a.ptr) == 2 and resolve(table, a.ptr + 4) == 2004
    assert resolve(table, s.ptr + 16) == 50000 + trace.offsets[0] + 16
    assert resolve(table, 4096) == 4096
    assert symbol(3, 5) == (3 << 48) + 5


def test_recorded_slices_gathers_and_casts_compute_what_the_cpu_provider_computes(tmp_path):
    """A backward, stepped Slice (the Identity kernel reading below its first element), a Gather at constant
    indices (2-D copies, consecutive indices merged), float32 -> float16 -> float32 Casts around a float16 Relu."""
    big = 2**63 - 1
    nodes = [helper.make_node("Slice", ["x", "s", "e", "a", "t"], ["sl"]),
             helper.make_node("Gather", ["sl", "idx"], ["g"], axis=1),
             helper.make_node("Gather", ["x", "rows"], ["r"], axis=0),
             helper.make_node("Cast", ["g"], ["h"], to=TensorProto.FLOAT16),
             helper.make_node("Relu", ["h"], ["hr"]),
             helper.make_node("Cast", ["hr"], ["y"], to=TensorProto.FLOAT)]
    model = make_model(nodes, [("x", F32, (5, 7))], [("y", F32, (4, 2, 2)), ("r", F32, (3, 7)), ("sl", F32, (4, 3))],
                       [("s", np.array([4, -1], np.int64)), ("e", np.array([0, -big - 1], np.int64)),
                        ("a", np.array([0, 1], np.int64)), ("t", np.array([-1, -3], np.int64)),
                        ("idx", np.array([[2, 0], [1, -1]], np.int64)), ("rows", np.array([1, 2, 3], np.int64))])
    feeds = {"x": np.random.default_rng(7).standard_normal((5, 7)).astype(np.float32)}
    plan = plan_subgraph(whole_subgraph(model))
    got, trace = _run_recorded(model, feeds, tmp_path)
    want = cpu_outputs(model, feeds)
    for g, e in zip(got, want):
        assert g.shape == e.shape and g.dtype == e.dtype
        np.testing.assert_array_equal(g, e)
    copies = [c for c in trace.commands if isinstance(c, Memcpy2D)]
    assert len(copies) == 2 + 1  # g: [2], then [0, 1, -1 -> 2] (consecutive: one copy); r: rows 1..3 in one
    assert [type(s).__name__ for s in plan.steps] == ["Copy", "Take", "Take", "Elementwise", "Elementwise",
                                                      "Elementwise"]


def test_recorded_reductions_of_trailing_axes_compute_what_the_cpu_provider_computes(tmp_path):
    """ReduceMean over (H, W) kept as 1s, ReduceSum of the last axis dropped, ReduceMax of every axis (axes as an
    input, opset 18) and ReduceMin: one row kernel each, a value per row."""
    nodes = [helper.make_node("ReduceMean", ["x", "hw"], ["mean"]),
             helper.make_node("ReduceSum", ["x", "last"], ["sum"], keepdims=0),
             helper.make_node("ReduceMax", ["x"], ["max"], keepdims=0),
             helper.make_node("ReduceMin", ["x", "last"], ["min"])]
    model = make_model(nodes, [("x", F32, (2, 3, 4, 5))],
                       [("mean", F32, (2, 3, 1, 1)), ("sum", F32, (2, 3, 4)), ("max", F32, ()),
                        ("min", F32, (2, 3, 4, 1))],
                       [("hw", np.array([2, -1], np.int64)), ("last", np.array([-1], np.int64))], opset=18)
    feeds = {"x": np.random.default_rng(9).standard_normal((2, 3, 4, 5)).astype(np.float32)}
    plan = plan_subgraph(whole_subgraph(model))
    assert [(s.program.op, s.coerce_axis, s.keepdims) for s in plan.steps] == [
        ("ReduceMean", 2, True), ("ReduceSum", 3, False), ("ReduceMax", 0, False), ("ReduceMin", 3, True)]
    got, _ = _run_recorded(model, feeds, tmp_path)
    for g, e in zip(got, cpu_outputs(model, feeds)):
        assert g.shape == e.shape
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)
