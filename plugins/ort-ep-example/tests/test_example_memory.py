"""Planned device memory with the example provider: device values of static shape live in one block per run,
reused by lifetime; declared views; stable addresses for replaying kernels; failed runs give memory back."""

from __future__ import annotations

import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from onnx import TensorProto, helper
from ort_ep_example import memory, plugin

import ort_core as ort
from ort_core.errors import KernelError
from ort_core.plugins import ContextKernel

NAME, CPU = "ExampleExecutionProvider", "CPUExecutionProvider"
F32 = TensorProto.FLOAT
SHAPE = [4, 64]  # 1024 bytes of float32


def _model(nodes, outputs=("y",)):
    vi = [helper.make_tensor_value_info("x", F32, SHAPE)]
    outs = [helper.make_tensor_value_info(n, F32, SHAPE) for n in outputs]
    model = helper.make_model(helper.make_graph(nodes, "g", vi, outs),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def _chain(n):
    """x -> (Exp on the device -> Softmax on the CPU) x n -> y: every device value crosses back and forth."""
    nodes, prev = [], "x"
    for k in range(n):
        nodes += [helper.make_node("Exp", [prev], [f"e{k}"]),
                  helper.make_node("Softmax", [f"e{k}"], ["y" if k == n - 1 else f"s{k}"], axis=-1)]
        prev = f"s{k}"
    return _model(nodes)


def _session(model, providers=(NAME, CPU), level=None):
    options = ort.SessionOptions()
    if level is not None:
        options.graph_optimization_level = level
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ort.OrtWarning)
        return ort.InferenceSession(model, options, providers=list(providers))


def _feeds(seed=0):
    return {"x": np.random.default_rng(seed).standard_normal(SHAPE).astype(np.float32)}


@pytest.fixture
def allocations(monkeypatch):
    counted = []
    real = memory.ExampleAllocator.allocate

    def allocate(self, nbytes):
        counted.append(nbytes)
        return real(self, nbytes)

    monkeypatch.setattr(memory.ExampleAllocator, "allocate", allocate)
    return counted


def test_a_chain_of_device_values_lives_in_two_buffers_allocated_once(allocations):
    model = _chain(6)
    sess = _session(model)
    ((_, arena),) = sess._plan.arenas
    pool = arena.pool
    assert pool.device == memory.DEVICE
    assert pool.nbytes == 2 * 1024  # 12 device values (6 results, 6 copies in), two alive at any step
    expected = _session(model, (CPU,)).run(None, _feeds())[0]
    np.testing.assert_allclose(sess.run(None, _feeds())[0], expected, rtol=1e-6)
    assert allocations == [2048]  # the first run takes one block
    for seed in range(3):
        got = sess.run(None, _feeds(seed))[0]
        np.testing.assert_allclose(got, _session(model, (CPU,)).run(None, _feeds(seed))[0], rtol=1e-6)
    assert allocations == [2048]  # later runs reuse it: no device allocation per value, or per run


def test_concurrent_runs_use_different_blocks_and_agree():
    model = _chain(4)
    sess, cpu = _session(model), _session(model, (CPU,))
    cases = [_feeds(seed) for seed in range(8)]
    expected = [cpu.run(None, f)[0] for f in cases]
    with ThreadPoolExecutor(4) as workers:
        results = list(workers.map(lambda k: (k, sess.run(None, cases[k % 8])[0]), range(48)))
    for k, got in results:
        np.testing.assert_allclose(got, expected[k % 8], rtol=1e-6)
    ((_, arena),) = sess._plan.arenas
    pool = arena.pool
    assert 1 <= pool.allocations <= 4  # at most one block per thread running at once


def test_graph_outputs_on_the_device_are_never_planned_memory():
    model = _model([helper.make_node("Exp", ["x"], ["a"]), helper.make_node("Softmax", ["a"], ["b"]),
                    helper.make_node("Exp", ["b"], ["y"])])
    sess = _session(model)
    binding = sess.io_binding()
    binding.bind_cpu_input("x", _feeds()["x"])
    binding.bind_output("y", "example", 0)
    sess.run_with_iobinding(binding)
    first = binding.get_outputs()[0]
    sess.run_with_iobinding(binding)
    second = binding.get_outputs()[0]
    ((_, arena),) = sess._plan.arenas
    pool = arena.pool
    block = pool.take()
    start = memory.ALLOCATOR.address(block)
    for y in (first, second):
        assert not start <= y.data_ptr() < start + pool.nbytes
    assert first.data_ptr() != second.data_ptr()
    np.testing.assert_allclose(first.numpy(), _session(model, (CPU,)).run(None, _feeds())[0], rtol=1e-6)


def _spy(monkeypatch, wrap):
    seen = []
    real = plugin.compile_subgraph

    def compile_subgraph(sub, program):
        kernel = real(sub, program)
        return wrap(kernel, sub, seen)

    monkeypatch.setattr(plugin, "compile_subgraph", compile_subgraph)
    return seen


def _recording(kernel, sub, seen, **changes):
    def run(ctx):
        kernel.run(ctx)
        seen.append({"sub": tuple(sub.outputs), "may_view": {k: ctx.may_view(k) for k in kernel.views},
                     "ins": [x.ptr for x in ctx.inputs], "outs": [o.ptr for o in ctx.outputs]})

    fields = {"views": kernel.views, "stable_addresses": kernel.stable_addresses, **changes}
    return ContextKernel(run, **fields)


def test_identity_is_a_view_inside_the_run_and_a_copy_when_it_leaves():
    inside = _model([helper.make_node("Exp", ["x"], ["a"]), helper.make_node("Softmax", ["a"], ["b"]),
                     helper.make_node("Identity", ["b"], ["c"]), helper.make_node("Softmax", ["c"], ["y"])])
    leaving = _model([helper.make_node("Exp", ["x"], ["a"]), helper.make_node("Softmax", ["a"], ["b"]),
                      helper.make_node("Identity", ["b"], ["y"])])
    mp = pytest.MonkeyPatch()
    try:
        seen = _spy(mp, _recording)
        for model in (inside, leaving):
            got = _session(model, level=ort.GraphOptimizationLevel.ORT_DISABLE_ALL).run(None, _feeds())[0]
            expected = _session(model, (CPU,)).run(None, _feeds())[0]
            np.testing.assert_allclose(got, expected, rtol=1e-6)
    finally:
        mp.undo()
    (view,) = [s for s in seen if s["sub"] == ("c",)]
    assert view["may_view"] == {0: True} and view["outs"] == view["ins"]  # the input itself: no copy
    (copy,) = [s for s in seen if s["sub"] == ("y",)]
    assert copy["may_view"] == {0: False} and copy["outs"] != copy["ins"]


def test_a_view_on_the_device_is_never_the_callers_memory():
    model = _model([helper.make_node("Identity", ["x"], ["y"])])
    sess = _session(model, level=ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    x = ort.OrtValue.ortvalue_from_numpy(_feeds()["x"], "example", 0)
    binding = sess.io_binding()
    binding.bind_ortvalue_input("x", x)
    binding.bind_output("y", "example", 0)
    sess.run_with_iobinding(binding)
    y = binding.get_outputs()[0]
    assert y.data_ptr() != x.data_ptr()
    np.testing.assert_array_equal(y.numpy(), x.numpy())


def test_an_undeclared_view_fails_the_run_naming_the_values(monkeypatch):
    def undeclared(kernel, sub, seen):
        def run(ctx):
            ctx.outputs[0] = ctx.inputs[0]
        return ContextKernel(run)

    _spy(monkeypatch, undeclared)
    model = _model([helper.make_node("Exp", ["x"], ["a"]), helper.make_node("Softmax", ["a"], ["b"]),
                    helper.make_node("Identity", ["b"], ["c"]), helper.make_node("Softmax", ["c"], ["y"])])
    sess = _session(model, level=ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    with pytest.raises(KernelError, match="output '(a|c)' shares memory with input '(x|b)' without being declared"):
        sess.run(None, _feeds())


def test_stable_addresses_keep_every_planned_input_and_output_in_place_across_runs(monkeypatch, allocations):
    seen = _spy(monkeypatch, lambda kernel, sub, seen: _recording(kernel, sub, seen, stable_addresses=True))
    model = _chain(3)
    sess = _session(model)
    assert sess._plan.exclusive is not None  # one call at a time: the addresses are the session's
    cpu = _session(model, (CPU,))
    for seed in range(3):
        np.testing.assert_allclose(sess.run(None, _feeds(seed))[0], cpu.run(None, _feeds(seed))[0], rtol=1e-6)
    per_run = len(seen) // 3
    assert per_run == 3
    for k in range(per_run):
        calls = seen[k::per_run]
        assert calls[0]["ins"] == calls[1]["ins"] == calls[2]["ins"]
        assert calls[0]["outs"] == calls[1]["outs"] == calls[2]["outs"]
    assert allocations == [2048]
    with ThreadPoolExecutor(3) as workers:  # concurrent callers are served one after the other
        results = list(workers.map(lambda s: (s, sess.run(None, _feeds(s))[0]), range(9)))
    for s, got in results:
        np.testing.assert_allclose(got, cpu.run(None, _feeds(s))[0], rtol=1e-6)
    assert allocations == [2048]


def test_a_failed_run_gives_its_memory_back_after_its_streams_finish(monkeypatch, allocations):
    state = {"fail": True}

    def failing_once(kernel, sub, seen):
        def run(ctx):
            kernel.run(ctx)
            if sub.outputs == ["e1"] and state.pop("fail", False):
                raise RuntimeError("planted failure")
        return ContextKernel(run, kernel.views)

    _spy(monkeypatch, failing_once)
    model = _chain(3)
    sess = _session(model)
    with pytest.raises(KernelError, match="planted failure"):
        sess.run(None, _feeds())
    assert allocations == [2048]
    np.testing.assert_allclose(sess.run(None, _feeds())[0], _session(model, (CPU,)).run(None, _feeds())[0],
                               rtol=1e-6)
    assert allocations == [2048]  # the failed run's block came back and was reused


def test_each_runs_streams_are_closed_once_after_success_and_after_failure(monkeypatch):
    from ort_ep_example import stream as example_stream

    closed = []
    monkeypatch.setattr(example_stream.RunStream, "close", lambda self: closed.append(self), raising=False)
    model = _chain(2)
    sess = _session(model)
    for _ in range(3):
        sess.run(None, _feeds())
    assert len(closed) == 3 and len({id(s) for s in closed}) == 3  # one stream per run, closed once
    state = {"fail": True}

    def failing(kernel, sub, seen):
        def run(ctx):
            kernel.run(ctx)
            if state.pop("fail", False):
                raise RuntimeError("planted failure")
        return ContextKernel(run, kernel.views)

    _spy(monkeypatch, failing)
    failing_sess = _session(model)
    closed.clear()
    with pytest.raises(KernelError, match="planted failure"):
        failing_sess.run(None, _feeds())
    assert len(closed) == 1  # synchronized, then given back, even though the run failed
    failing_sess.run(None, _feeds())
    assert len(closed) == 2


def test_a_stream_ordered_allocator_gets_the_run_stream_for_per_call_memory(monkeypatch):
    seen = []
    real = memory.ExampleAllocator.allocate

    def allocate(self, nbytes, stream=None):
        seen.append(stream)
        return real(self, nbytes)

    monkeypatch.setattr(memory.ExampleAllocator, "allocate", allocate)
    monkeypatch.setattr(memory.ExampleAllocator, "stream_ordered", True, raising=False)
    model = _model([helper.make_node("Exp", ["x"], ["a"]), helper.make_node("Softmax", ["a"], ["b"]),
                    helper.make_node("Exp", ["b"], ["y"])])
    sess = _session(model)
    binding = sess.io_binding()
    binding.bind_cpu_input("x", _feeds()["x"])
    binding.bind_output("y", "example", 0)  # a graph output on the device: a buffer of its own, per call
    sess.run_with_iobinding(binding)
    np.testing.assert_allclose(binding.get_outputs()[0].numpy(), _session(model, (CPU,)).run(None, _feeds())[0],
                               rtol=1e-6)
    per_call = [s for s in seen if s is not None]
    assert per_call and all(type(s).__name__ == "RunStream" for s in per_call)
    assert None in seen  # the planned block outlives runs: allocated without a stream


def test_values_the_cpu_reads_inside_the_run_are_staged_in_the_providers_pinned_memory():
    """Device values copied to the host for a CPU kernel land in the provider's staging allocator (pinned
    memory on a real device); graph outputs never do, since the caller keeps them."""
    from ort_core.memory.arena import _block_of

    model = _chain(3)  # e0, e1, e2 go down to the CPU's Softmax nodes; y is made on the CPU
    sess = _session(model)
    before = memory.STAGING.stats()
    (y,) = sess.run(None, _feeds())
    after = memory.STAGING.stats()
    # three down (e0, e1, e2 for the Softmax nodes) and three up (x, s0, s1 for the Exp nodes)
    assert after["hits"] + after["misses"] - before["hits"] - before["misses"] == 6
    assert _block_of(y) is None  # the caller's result is ordinary memory
    np.testing.assert_allclose(y, _session(model, (CPU,)).run(None, _feeds())[0], rtol=1e-6)
    vi = helper.make_tensor_value_info
    out = helper.make_model(helper.make_graph([helper.make_node("Exp", ["x"], ["y"])], "g",
                                              [vi("x", F32, SHAPE)], [vi("y", F32, SHAPE)]),
                            opset_imports=[helper.make_opsetid("", 17)])
    out.ir_version = 8
    before = memory.STAGING.stats()
    (y,) = _session(out.SerializeToString()).run(None, _feeds())
    after = memory.STAGING.stats()
    assert after["hits"] + after["misses"] == before["hits"] + before["misses"] + 1  # x, going up; y is not staged
    assert _block_of(y) is None
    np.testing.assert_allclose(y, np.exp(_feeds()["x"]), rtol=1e-6)


def test_host_values_go_up_through_pinned_staging_held_until_the_runs_synchronization(monkeypatch):
    """Feeds and CPU results copied up to the device pass through the provider's staging memory (pinned on a real
    device, so that the copy is asynchronous), and each staged buffer lives until run()'s closing synchronization:
    the copy on the stream may still be reading it until then."""
    from ort_core.profiling import SYNC_LABEL

    model = _chain(2)  # x and s0 go up to the Exp nodes
    sess = _session(model)
    steps = sess._plan.steps
    ups = [k for k, st in enumerate(steps) if st.label.endswith(f"through {memory.STAGING.device}")]
    assert [steps[k].label.split("'")[1] for k in ups] == ["x", "s0"]
    sync = next(k for k, st in enumerate(steps) if st.label == SYNC_LABEL)
    for k in ups:
        staged = steps[k].outs[1]
        released_at = [j for j, st in enumerate(steps) if staged in st.release]
        assert released_at == [sync], (steps[k].label, released_at)
    sizes = []
    real = memory.StagingArena.allocate
    monkeypatch.setattr(memory.StagingArena, "allocate", lambda self, n: sizes.append(n) or real(self, n))
    x = np.asfortranarray(_feeds()["x"])  # a strided feed: staged contiguous
    (y,) = sess.run(None, {"x": x})
    assert sizes == [4 * 64 * 4] * 4  # x up, e0 down, s0 up, e1 down
    np.testing.assert_allclose(y, _session(model, (CPU,)).run(None, {"x": x})[0], rtol=1e-6)
    for _ in range(3):  # staged buffers go back to the pool after each run
        sess.run(None, {"x": x})
    assert memory.STAGING.stats()["cached_bytes"] > 0
