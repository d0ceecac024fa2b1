"""Interfaces a provider implements for its device memory: Allocator and DataTransfer.

Structural protocols only; see host.py for the host implementations and plugins/hookspecs.py
for how providers hand them to the core.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np

from .device import Device


@runtime_checkable
class Allocator(Protocol):
    """Hands out device buffers.

    ``device``: the Device it allocates on. ``alignment``: the byte alignment every buffer
    it returns honours, zero-size requests included. ``allocate(nbytes)`` returns an opaque
    buffer object for that device (for the host: a writable uint8 numpy array of exactly
    ``nbytes``); ``address(buffer)`` its start address on the device (used to check
    alignment); ``free`` gives it back (a no-op where the garbage collector owns memory).

    Optional: ``stream_ordered = True`` declares ``allocate(nbytes, stream=None)`` and
    ``free(buffer, stream=None)``: the core then passes the run's stream of the provider for memory first
    used by work on that stream (kernel outputs, scratch, copies), as cudaMallocAsync takes one, and None
    where the memory outlives runs (planned blocks); and, when it gives back a buffer whose last use was
    work enqueued on a stream, that stream: the buffer is free once the work enqueued on it so far is
    done (cudaFreeAsync), not at once. ``free`` without a stream (or on an allocator that is not
    stream-ordered, which always gets the one-argument call) is only called when every use is complete.
    """

    device: Device
    alignment: int

    def allocate(self, nbytes: int) -> Any: ...

    def address(self, buffer: Any) -> int: ...

    def free(self, buffer: Any) -> None: ...


@runtime_checkable
class DataTransfer(Protocol):
    """Copies tensors between devices a provider knows.

    ``can_copy(src, dst)`` says whether this transfer handles the pair. ``copy(value, src,
    dst)`` returns a new value on ``dst`` holding the same bytes, shape and dtype, complete on
    return; host values are numpy arrays, device values ``DeviceTensor``s (or, for v1 plugins,
    the provider's own objects).

    Optional, for asynchronous devices: ``copy_into(src_value, dst_value, stream)`` writes the
    bytes of ``src_value`` into the existing ``dst_value`` (same shape and dtype, allocated by the
    core) and may return before they arrive, as work enqueued on ``stream`` (a Stream of this
    provider, or None: complete on return). Where present, execution plans copy through it on the
    consumer's stream and synchronize before a host reader; ``copy`` stays for one-off copies.
    """

    def can_copy(self, src: Device, dst: Device) -> bool: ...

    def copy(self, value: Any, src: Device, dst: Device) -> Any: ...


def allocate_bytes(allocator: Any, nbytes: int, stream: Any = None) -> Any:
    """``nbytes`` from ``allocator``, passing ``stream`` to a stream-ordered allocator (others get none)."""
    if stream is not None and getattr(allocator, "stream_ordered", False):
        return allocator.allocate(int(nbytes), stream)
    return allocator.allocate(int(nbytes))


def free_bytes(allocator: Any, buffer: Any, stream: Any = None) -> None:
    """Give ``buffer`` back to ``allocator``: in the order of ``stream``'s work for a stream-ordered allocator
    (others get no stream, and must only be called once the work using the buffer is complete)."""
    if stream is not None and getattr(allocator, "stream_ordered", False):
        allocator.free(buffer, stream)
    else:
        allocator.free(buffer)


def host_array(buffer: np.ndarray, shape: tuple, dtype: np.dtype) -> np.ndarray:
    """View a host buffer from an Allocator as an array of ``shape``/``dtype``."""
    dtype = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    return buffer[:n].view(dtype).reshape(shape)
