"""Host arena: an Allocator that keeps freed 64-byte-aligned host buffers for reuse.

Buffers are grouped in power-of-two size classes; a block goes back to its free list on ``free`` or
when the last array viewing it is dropped, up to a cap on cached bytes. Device memory is not here.
"""

from __future__ import annotations

import threading
import weakref
from collections import deque
from typing import Any

import numpy as np

from .device import HOST

MIN_CLASS = 64
DEFAULT_MAX_CACHED = 256 << 20


class _Block:
    """Owner of one arena block: numpy arrays made from it keep it (and the raw memory) alive.

    Exposing ``__array_interface__`` makes this object the base of the arrays handed out, so a
    weakref finalizer on it tells when the last of them is gone.
    """

    __slots__ = ("raw", "size_class", "__array_interface__", "finalizer", "__weakref__")

    def __init__(self, raw: np.ndarray, size_class: int, nbytes: int, alignment: int) -> None:
        self.raw, self.size_class = raw, size_class
        address = raw.ctypes.data + (-raw.ctypes.data) % alignment
        self.__array_interface__ = {"data": (address, False), "shape": (nbytes,), "typestr": "|u1",
                                    "version": 3}
        self.finalizer = None


def size_class(nbytes: int) -> int:
    """The block size serving ``nbytes``: the next power of two, at least 64 bytes."""
    return max(MIN_CLASS, 1 << max(int(nbytes) - 1, 0).bit_length())


class HostArena:
    """Thread-safe pooling allocator of aligned host buffers (the CPU provider's allocator).

    ``allocate(nbytes)`` returns a writable uint8 array of exactly ``nbytes`` whose address is a
    multiple of ``alignment``, taken from the free list of its size class when one is cached.
    ``free(buffer)`` returns the block at once (the caller must not touch the buffer or its views
    afterwards, as with C's free); a block never freed returns by itself when its last view goes.
    At most ``max_cached_bytes`` of free blocks are kept; beyond that freed blocks are dropped.
    """

    device = HOST
    alignment = 64

    def __init__(self, max_cached_bytes: int = DEFAULT_MAX_CACHED) -> None:
        self.max_cached_bytes = int(max_cached_bytes)
        self._free: dict[int, list[np.ndarray]] = {}
        self._cached = 0
        self._lock = threading.Lock()
        # Finalizers may run in any thread, even one holding the lock: they only append here
        # (deque.append is atomic) and allocate/free drain it under the lock.
        self._returned: deque[tuple[np.ndarray, int]] = deque()
        self.hits = 0
        self.misses = 0

    # ------------------------------------------------------------------ Allocator
    def allocate(self, nbytes: int) -> np.ndarray:
        """A writable uint8 array of exactly ``nbytes``, ``alignment``-aligned, reused from the free list
        of its size class when one is cached."""
        nbytes = int(nbytes)
        if nbytes < 0:
            raise ValueError(f"cannot allocate a negative size ({nbytes} bytes)")
        cls = size_class(nbytes)
        raw = None
        with self._lock:
            self._drain()
            bucket = self._free.get(cls)
            if bucket:
                raw = bucket.pop()
                self._cached -= cls
                self.hits += 1
            else:
                self.misses += 1
        if raw is None:
            raw = self._raw(cls + self.alignment)
        block = _Block(raw, cls, nbytes, self.alignment)
        block.finalizer = weakref.finalize(block, self._returned.append, (raw, cls))
        block.finalizer.atexit = False
        return np.asarray(block)

    def _raw(self, nbytes: int) -> np.ndarray:
        """A new uint8 array of ``nbytes`` that blocks are cut from; subclasses draw it from elsewhere (page-locked
        memory), keeping whatever frees it alive as the array's base."""
        return np.empty(nbytes, dtype=np.uint8)

    def address(self, buffer: np.ndarray) -> int:
        """The address of a buffer's first byte."""
        return int(buffer.ctypes.data)

    def free(self, buffer: Any) -> None:
        """Give the block back now; freeing twice, or a buffer from elsewhere, does nothing."""
        block = _block_of(buffer)
        if block is None or block.finalizer is None:
            return
        item = block.finalizer.detach()
        if item is None:  # already returned
            return
        raw, cls = item[2][0]
        with self._lock:
            self._drain()
            self._keep(raw, cls)

    # -------------------------------------------------------------------- queries
    def cached_bytes(self) -> int:
        """Bytes held in free blocks, ready for reuse."""
        with self._lock:
            self._drain()
            return self._cached

    def stats(self) -> dict[str, int]:
        """Cached bytes, hits, misses and free blocks, for tests and profiling."""
        with self._lock:
            self._drain()
            return {"cached_bytes": self._cached, "hits": self.hits, "misses": self.misses,
                    "free_blocks": sum(len(b) for b in self._free.values())}

    def trim(self) -> None:
        """Drop every cached block."""
        with self._lock:
            self._drain()
            self._free.clear()
            self._cached = 0

    # ------------------------------------------------------------------- private
    def _drain(self) -> None:
        while self._returned:
            try:
                raw, cls = self._returned.popleft()
            except IndexError:  # emptied by another thread between the test and the pop
                break
            self._keep(raw, cls)

    def _keep(self, raw: np.ndarray, cls: int) -> None:
        if self._cached + cls <= self.max_cached_bytes:
            self._free.setdefault(cls, []).append(raw)
            self._cached += cls


def _block_of(buffer: Any) -> _Block | None:
    base = buffer
    while base is not None and not isinstance(base, _Block):
        base = getattr(base, "base", None)
    return base


_host_arena: HostArena | None = None
_host_arena_lock = threading.Lock()


def host_arena() -> HostArena:
    """The process-wide host arena, created on first use."""
    global _host_arena
    if _host_arena is None:
        with _host_arena_lock:
            if _host_arena is None:
                _host_arena = HostArena()
    return _host_arena
