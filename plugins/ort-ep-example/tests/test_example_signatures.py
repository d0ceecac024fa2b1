"""Device memory planned per input-shape signature with the example provider: values whose shape follows a
dynamic input dimension are allocated per call on the first run of a shape, then live in one pooled block
per signature (a bounded cache); and buffers a run allocated itself are freed, in stream order where the
allocator is stream-ordered."""

from __future__ import annotations

import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from onnx import TensorProto, helper
from ort_ep_example import memory

import ort_core as ort
from ort_core.memory.layouts import MAX_SIGNATURES, ArenaMemory
from ort_core.memory.planned import Lifetime

NAME, CPU = "ExampleExecutionProvider", "CPUExecutionProvider"
F32 = TensorProto.FLOAT
WIDTH = 64


def _chain(n):
    """x[N, 64] -> (Exp on the device -> Softmax on the CPU) x n -> y: 2n device values of shape [N, 64]."""
    nodes, prev = [], "x"
    for k in range(n):
        nodes += [helper.make_node("Exp", [prev], [f"e{k}"]),
                  helper.make_node("Softmax", [f"e{k}"], ["y" if k == n - 1 else f"s{k}"], axis=-1)]
        prev = f"s{k}"
    vi = helper.make_tensor_value_info
    model = helper.make_model(helper.make_graph(nodes, "g", [vi("x", F32, ["N", WIDTH])], [vi("y", F32, ["N", WIDTH])]),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def _session(model, providers=(NAME, CPU)):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ort.OrtWarning)
        return ort.InferenceSession(model, providers=list(providers))


def _feeds(n, seed=0):
    return {"x": np.random.default_rng(seed).standard_normal((n, WIDTH)).astype(np.float32)}


def _arena(sess):
    ((_, arena),) = sess._plan.arenas
    return arena


@pytest.fixture
def allocations(monkeypatch):
    counted = []
    real = memory.ExampleAllocator.allocate

    def allocate(self, nbytes, *stream):
        counted.append(nbytes)
        return real(self, nbytes)

    monkeypatch.setattr(memory.ExampleAllocator, "allocate", allocate)
    return counted


@pytest.fixture
def frees(monkeypatch):
    seen = []
    real = memory.ExampleAllocator.free

    def free(self, buffer, stream=None):
        seen.append((buffer, stream))
        return real(self, buffer, stream)

    monkeypatch.setattr(memory.ExampleAllocator, "free", free)
    return seen


def test_after_a_warm_up_run_runs_of_that_shape_allocate_nothing(allocations):
    model = _chain(6)
    sess, cpu = _session(model), _session(model, (CPU,))
    arena = _arena(sess)
    assert arena.dynamic and arena.pool.nbytes == 0  # nothing of static shape: sizes come from runs
    np.testing.assert_allclose(sess.run(None, _feeds(4))[0], cpu.run(None, _feeds(4))[0], rtol=1e-6)
    block = 2 * 4 * WIDTH * 4  # 12 values of [4, 64] float32, two alive at any step
    assert allocations[-1] == block and len(allocations) == 13  # per call on the first run, then the block
    assert arena.signatures() == [((4, WIDTH),)]
    assert arena.layout(((4, WIDTH),)).pool.nbytes == block
    warm = len(allocations)
    for seed in range(1, 4):
        np.testing.assert_allclose(sess.run(None, _feeds(4, seed))[0], cpu.run(None, _feeds(4, seed))[0], rtol=1e-6)
    assert len(allocations) == warm  # one pooled block for the signature: nothing per value, nothing per run


def test_two_alternating_shapes_both_reuse_their_blocks(allocations):
    model = _chain(3)
    sess, cpu = _session(model), _session(model, (CPU,))
    for n in (2, 8):
        sess.run(None, _feeds(n))
    warm = len(allocations)
    for k in range(6):
        n = (2, 8)[k % 2]
        np.testing.assert_allclose(sess.run(None, _feeds(n, k))[0], cpu.run(None, _feeds(n, k))[0], rtol=1e-6)
    assert len(allocations) == warm
    assert sorted(_arena(sess).signatures()) == [((2, WIDTH),), ((8, WIDTH),)]


def test_more_signatures_than_the_cache_holds_evict_the_least_recently_used(allocations, frees):
    model = _chain(2)
    sess, cpu = _session(model), _session(model, (CPU,))
    arena = _arena(sess)
    shapes = range(1, MAX_SIGNATURES + 3)
    first = None
    for n in shapes:
        np.testing.assert_allclose(sess.run(None, _feeds(n))[0], cpu.run(None, _feeds(n))[0], rtol=1e-6)
        if first is None:  # the block kept for the first signature
            pool = arena.layout(((n, WIDTH),)).pool
            first = pool.take()
            pool.give(first)
    assert arena.signatures() == [((n, WIDTH),) for n in shapes][-MAX_SIGNATURES:]
    assert first.ptr is None and (first, None) in frees  # its layout was evicted: its block went back
    assert len(allocations) == 5 * len(shapes)  # per shape: four values per call once, then one block
    before = len(allocations)
    sess.run(None, _feeds(1))  # evicted: allocated per call again, and learnt again
    assert len(allocations) == before + 5 and arena.signatures()[-1] == ((1, WIDTH),)
    assert len(arena.signatures()) == MAX_SIGNATURES


def test_concurrent_runs_of_mixed_shapes_agree_with_the_cpu_provider():
    model = _chain(4)
    sess, cpu = _session(model), _session(model, (CPU,))
    cases = [(n, seed) for n in (1, 3, 5, 16) for seed in range(3)]
    expected = {c: cpu.run(None, _feeds(*c))[0] for c in cases}
    with ThreadPoolExecutor(4) as workers:
        results = list(workers.map(lambda k: (cases[k % len(cases)], sess.run(None, _feeds(*cases[k % len(cases)]))[0]),
                                   range(96)))
    for case, got in results:
        np.testing.assert_allclose(got, expected[case], rtol=1e-6)
    arena = _arena(sess)
    assert sorted(arena.signatures()) == [((n, WIDTH),) for n in (1, 3, 5, 16)]
    for sig in arena.signatures():
        assert 1 <= arena.layout(sig).pool.allocations <= 4  # at most one block per thread running at once


def test_a_value_outgrowing_its_room_gets_its_own_buffer_and_widens_the_layout(allocations, frees):
    arena = ArenaMemory(memory.ALLOCATOR, [Lifetime(0, 0, 1), Lifetime(0, 1, 2)], 256, dynamic=True)
    run = arena.take("sig")
    a = run.value(0, (10,), np.float32)
    assert a.owner in run.own  # no layout for the signature yet: a buffer of its own
    arena.give(run)
    assert frees[-1] == (a.owner, None)  # freed when the run gave its memory back
    run = arena.take("sig")
    small, big = run.value(0, (10,), np.float32), run.value(1, (20,), np.float32)
    assert small.owner is run.block and big.owner is not run.block  # 20 floats do not fit value 1's room (0)
    arena.give(run)
    run = arena.take("sig")
    assert run.value(1, (20,), np.float32).owner is run.block and not run.own
    arena.give(run)


def test_a_stream_ordered_allocator_frees_a_runs_own_buffers_on_its_stream(monkeypatch, allocations, frees):
    monkeypatch.setattr(memory.ExampleAllocator, "stream_ordered", True, raising=False)
    model = _chain(3)
    sess, cpu = _session(model), _session(model, (CPU,))
    np.testing.assert_allclose(sess.run(None, _feeds(5))[0], cpu.run(None, _feeds(5))[0], rtol=1e-6)
    ordered = [(b, stream) for b, stream in frees if stream is not None]  # (the worker then frees each at once)
    assert len(ordered) == 6  # the first run of the shape: its six device values, allocated per call
    assert all(type(stream).__name__ == "RunStream" for _, stream in ordered)
    assert all(b.ptr is None for b, _ in ordered)  # released by the stream's worker before run() returned
    frees.clear()
    for seed in range(3):
        np.testing.assert_allclose(sess.run(None, _feeds(5, seed))[0], cpu.run(None, _feeds(5, seed))[0], rtol=1e-6)
    assert frees == []  # planned for the signature: nothing of its own to free


def test_other_allocators_free_a_runs_own_buffers_without_a_stream_after_it(frees):
    model = _chain(2)
    _session(model).run(None, _feeds(3))
    assert len(frees) == 4 and all(stream is None and b.ptr is None for b, stream in frees)
