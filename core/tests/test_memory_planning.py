"""Offsets of values planned by lifetime (memory/planned.py): packed, aligned, never overlapping in time and
bytes at once; and the pools runs take their blocks from."""

from __future__ import annotations

import numpy as np
import pytest

from ort_core.memory import HOST, DeviceTensor, HostArena
from ort_core.memory.planned import BlockPool, Lifetime, assign_offsets, value_at


def _clash(values, offsets, alignment):
    for i, a in enumerate(values):
        for j in range(i):
            b = values[j]
            live = a.first <= b.last and b.first <= a.last
            size_a = -(-a.nbytes // alignment) * alignment
            size_b = -(-b.nbytes // alignment) * alignment
            if live and offsets[i] < offsets[j] + size_b and offsets[j] < offsets[i] + size_a:
                return i, j
    return None


def test_values_alive_at_different_times_share_bytes():
    values = [Lifetime(1000, 0, 1), Lifetime(1000, 2, 3), Lifetime(1000, 4, 5)]
    offsets, total = assign_offsets(values, 256)
    assert offsets == [0, 0, 0] and total == 1024


def test_values_alive_together_do_not_overlap_and_the_step_of_handover_counts_as_both():
    # written at the step where the other is last read: a kernel reads and writes at once
    values = [Lifetime(512, 0, 2), Lifetime(512, 2, 4), Lifetime(100, 1, 1)]
    offsets, total = assign_offsets(values, 256)
    assert _clash(values, offsets, 256) is None
    assert offsets[0] != offsets[1] and offsets[2] == offsets[1]  # the short one fits before the second
    assert total == 1024


def test_a_chain_needs_two_buffers_not_one_per_value():
    chain = [Lifetime(4096, k, k + 1) for k in range(50)]
    offsets, total = assign_offsets(chain, 256)
    assert total == 2 * 4096 and set(offsets) == {0, 4096}


@pytest.mark.parametrize("seed", range(20))
def test_random_lifetimes_never_clash_and_are_aligned(seed):
    rng = np.random.default_rng(seed)
    values = []
    for _ in range(int(rng.integers(1, 60))):
        first = int(rng.integers(0, 40))
        values.append(Lifetime(int(rng.integers(0, 5000)), first, first + int(rng.integers(0, 10))))
    alignment = int(rng.choice([1, 64, 256]))
    offsets, total = assign_offsets(values, alignment)
    assert _clash(values, offsets, alignment) is None
    assert all(o % alignment == 0 for o in offsets)
    padded = [-(-v.nbytes // alignment) * alignment for v in values]
    assert max(o + p for o, p in zip(offsets, padded)) == total <= sum(padded)
    # never worse than the values alive at the busiest step would need if each had its own bytes twice
    busiest = max(sum(p for v, p in zip(values, padded) if v.first <= k <= v.last) for k in range(50))
    assert total >= busiest


def test_pool_hands_one_block_per_concurrent_taker_and_reuses_returned_ones():
    arena = HostArena()
    pool = BlockPool(arena, 4096)
    a, b = pool.take(), pool.take()
    assert a.ctypes.data != b.ctypes.data and pool.allocations == 2
    pool.give(a)
    assert pool.take() is a and pool.allocations == 2
    assert BlockPool(arena, 0).take() is None


def test_stable_pool_always_hands_the_same_block():
    pool = BlockPool(HostArena(), 1024, stable=True)
    first = pool.take()
    pool.give(first)
    assert pool.take() is first and pool.take() is first and pool.allocations == 1


def test_value_at_views_the_block_on_the_host_and_describes_it_elsewhere():
    arena = HostArena()
    block = arena.allocate(1024)
    v = value_at(arena, block, 256, (2, 3), np.float32)
    assert v.ctypes.data == block.ctypes.data + 256 and v.shape == (2, 3) and v.flags.writeable

    class DeviceAllocator:
        device = HOST.__class__("toy", 0)
        alignment = 256

        def address(self, buffer):
            return 4096

    t = value_at(DeviceAllocator(), "the block", 512, (4,), np.int64)
    assert isinstance(t, DeviceTensor) and t.ptr == 4096 + 512 and t.owner == "the block"
    assert t.device == DeviceAllocator.device and t.nbytes == 32
