"""Planned memory: values of known size and lifetime packed into one block, and the blocks runs take.

An execution plan knows, for every device value of static shape, the step that writes it and the last
step that reads it. ``assign_offsets`` packs such values into one block so that two values share bytes
only when their lifetimes do not overlap (greedy by size, as onnxruntime's and TFLite's planners do:
the largest value first, each at the lowest aligned offset free for its whole lifetime). A run takes
one block from a ``BlockPool`` at its start and gives it back at its end, so concurrent runs use
different blocks while one thread's consecutive runs reuse the same one (same addresses). A pool made
``stable`` holds exactly one block for the plan's whole life: what a provider replaying captured work
at fixed addresses (CUDA graphs) needs; its plan then runs one call at a time. Which layout a run uses
(the build-time one, or one per input-shape signature) is memory/layouts.py's business.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .device import Device
from .protocols import free_bytes, host_array
from .tensor import DeviceTensor

MIN_ALIGNMENT = 256
"""Offsets in a block are multiples of this (or of the allocator's alignment when larger): enough for
vectorized loads and for the alignment device libraries ask of their operands."""

MAX_CACHED_BLOCKS = 8


@dataclass(frozen=True)
class Lifetime:
    """One value to place: ``nbytes``, written at step ``first``, last read at step ``last``."""

    nbytes: int
    first: int
    last: int


def assign_offsets(values: Sequence[Lifetime], alignment: int = MIN_ALIGNMENT) -> tuple[list[int], int]:
    """The byte offset of each value in one block, and the block's size.

    Two values overlap in bytes only if their step intervals ``[first, last]`` are disjoint: a value
    written at the step where another is last read does not share its bytes (a kernel may read and write
    at once). Offsets are multiples of ``alignment``."""
    alignment = max(int(alignment), 1)
    sizes = [-(-v.nbytes // alignment) * alignment for v in values]
    order = sorted(range(len(values)), key=lambda i: (-sizes[i], values[i].first, i))
    offsets = [0] * len(values)
    placed: list[tuple[int, int, int, int]] = []  # offset, end, first, last
    total = 0
    for i in order:
        v, size = values[i], sizes[i]
        busy = sorted((o, e) for o, e, f, last in placed if f <= v.last and v.first <= last)
        offset = 0
        for o, e in busy:
            if offset + size <= o:
                break
            offset = max(offset, e)
        offsets[i] = offset
        placed.append((offset, offset + size, v.first, v.last))
        total = max(total, offset + size)
    return offsets, total


class BlockPool:
    """Blocks of ``nbytes`` from ``allocator`` for the runs of one plan (thread-safe).

    ``take()`` hands a cached block or a new one (None when ``nbytes`` is 0); ``give(block)`` returns it
    once every use of it is complete (the run synchronized its streams). At most ``MAX_CACHED_BLOCKS``
    are kept; device blocks beyond that, and every block of a ``close``d pool, are freed through the
    allocator (host blocks are left to the garbage collector, as numpy owns them). A ``stable`` pool keeps
    its first block for good and hands out that one every time: the plan using it must run one call at a
    time."""

    def __init__(self, allocator: Any, nbytes: int, stable: bool = False, label: str = "") -> None:
        self.allocator, self.nbytes, self.stable, self.label = allocator, int(nbytes), stable, label
        self.device: Device = allocator.device
        self._free: list[Any] = []
        self._lock = threading.Lock()
        self._kept: Any = None
        self._closed = False
        self.allocations = 0

    def take(self) -> Any:
        if self.nbytes == 0:
            return None
        if self.stable:
            if self._kept is None:
                self._kept = self._new()
            return self._kept
        with self._lock:
            if self._free:
                return self._free.pop()
        return self._new()

    def give(self, block: Any) -> None:
        if block is None or self.stable:
            return
        with self._lock:
            if not self._closed and len(self._free) < MAX_CACHED_BLOCKS:
                self._free.append(block)
                return
        self._drop(block)

    def close(self) -> None:
        """Free the cached blocks; blocks given back later are freed too (a layout no run will use again)."""
        with self._lock:
            self._closed, blocks, self._free = True, self._free, []
        for block in blocks:
            self._drop(block)

    def _drop(self, block: Any) -> None:
        if not self.device.is_host:
            free_bytes(self.allocator, block)

    def _new(self) -> Any:
        self.allocations += 1
        return self.allocator.allocate(self.nbytes)


def value_at(allocator: Any, block: Any, offset: int, shape: tuple[int, ...], dtype: np.dtype) -> Any:
    """The value of ``shape``/``dtype`` at ``offset`` in ``block`` (from ``allocator``): a numpy view on the
    host, else a DeviceTensor whose owner is the block (so it keeps the block alive)."""
    if allocator.device.is_host:
        return host_array(block[offset:], shape, dtype)
    return DeviceTensor(allocator.address(block) + offset, shape, dtype, allocator.device, block)


def overlaps(a: Any, b: Any) -> bool:
    """Whether two DeviceTensors of one owner share bytes (contiguous extents compared)."""
    return a.ptr < b.ptr + max(b.nbytes, 1) and b.ptr < a.ptr + max(a.nbytes, 1)
