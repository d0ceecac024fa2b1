"""Device memory of CUDAExecutionProvider: the device, a stream-ordered pool allocator and the data transfer.

``CudaAllocator`` takes buffers from the device's default cudaMemPool (cudaMallocFromPoolAsync on the run's
stream, or on its own one when none is given; kept cached by a release threshold, so freed memory is reused
without going back to the driver) and counts bytes against ``gpu_mem_limit``; it falls back to cudaMalloc
where pools are unsupported.
``PinnedArena`` pools page-locked host buffers (cudaMallocHost): the provider's staging allocator, through which
the core copies host values up to the device and device values down for CPU kernels, asynchronously.
``CudaDataTransfer`` copies host <-> device and device <-> device with cudaMemcpyAsync on the run's stream
(``copy_into``) or on its own stream, complete on return (``copy``). Written for a GPU: nothing here runs
without one.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

import numpy as np

from ort_core.memory import Device, DeviceTensor, HostArena

from . import cuda_api as api
from .runtime import CudaError, Runtime, runtime
from .stream import CudaStream

ALIGNMENT = 256  # cudaMalloc and pool allocations are 256-byte aligned


def cuda_device(device_id: int) -> Device:
    # no vendor: the core finds devices named by users ("cuda", 0: OrtValue, IOBinding) by equality with the
    # declared ones, vendor included, and onnxruntime's API has no way to name a vendor
    return Device("cuda", int(device_id))


class CudaBuffer:
    """``nbytes`` of device memory at ``address``; freed (stream-ordered) when the last reference goes, or by
    ``CudaAllocator.free``. ``free_stream``: the stream whose order the free follows (None: the allocator's)."""

    __slots__ = ("ptr", "address", "nbytes", "free_stream", "__weakref__")

    def __init__(self, ptr: Any, address: int, nbytes: int) -> None:
        self.ptr, self.address, self.nbytes = ptr, address, nbytes
        self.free_stream: Any = None


class CudaAllocator:
    """Buffers on one GPU from its default memory pool, at most ``limit`` bytes in use (gpu_mem_limit).

    Stream-ordered (``stream_ordered``): ``allocate(nbytes, stream)`` takes the buffer in the order of
    ``stream``'s work (cudaMallocFromPoolAsync, no wait), usable on that stream at once and on others once it
    is synchronized; ``free(buffer, stream)`` gives it back in that stream's order. Without a stream, the
    allocation is ordered on the allocator's own stream, synchronized before the buffer is handed out (usable
    on any stream). A buffer nobody frees goes back when nothing references it, on the allocator's stream:
    every stream of this provider keeps what its work uses until it is synchronized, so no queued work still
    reads it then."""

    alignment = ALIGNMENT
    stream_ordered = True

    def __init__(self, rt: Runtime, device_id: int, limit: int = 2**64 - 1, use_pool: bool = True) -> None:
        self._rt, self.device, self.limit = rt, cuda_device(device_id), int(limit)
        self.in_use = 0
        # re-entrant: a buffer freed by the garbage collector while this thread holds the lock updates in_use
        self._lock = threading.RLock()
        self._stream = CudaStream(rt, self.device)
        self._pool = None
        if use_pool:
            pool = rt.ffi.new("cudaMemPool_t *")
            rt.check_cuda(f"cudaDeviceGetDefaultMemPool(device={device_id})",
                          rt.cudart.cudaDeviceGetDefaultMemPool(pool, device_id))
            threshold = rt.ffi.new("uint64_t *", 2**64 - 1)  # keep freed memory in the pool, as an arena does
            rt.check_cuda("cudaMemPoolSetAttribute(cudaMemPoolAttrReleaseThreshold)",
                          rt.cudart.cudaMemPoolSetAttribute(pool[0], api.MEMPOOL_ATTR_RELEASE_THRESHOLD, threshold))
            self._pool = pool[0]

    def allocate(self, nbytes: int, stream: CudaStream | None = None) -> CudaBuffer:
        nbytes = int(nbytes)
        if nbytes < 0:
            raise ValueError(f"cannot allocate a negative size ({nbytes} bytes)")
        size = max(nbytes, 1)  # a unique, aligned address for zero-size tensors too
        with self._lock:
            if self.in_use + size > self.limit:
                raise MemoryError(f"{self.device}: allocating {nbytes} bytes would exceed gpu_mem_limit={self.limit} "
                                  f"({self.in_use} bytes in use)")
            self.in_use += size
        rt = self._rt
        out = rt.ffi.new("void **")
        try:
            rt.set_device(self.device.id)
            if self._pool is not None:
                on = stream if isinstance(stream, CudaStream) else self._stream
                status = rt.cudart.cudaMallocFromPoolAsync(out, size, self._pool, on.handle)
                if status:  # the message is formatted only on failure: this runs for every allocation
                    rt.check_cuda(f"cudaMallocFromPoolAsync({nbytes} bytes on {self.device})", status)
                if on is self._stream:
                    rt.check_cuda("cudaStreamSynchronize (allocation stream)",
                                  rt.cudart.cudaStreamSynchronize(self._stream.handle))
            else:
                rt.check_cuda(f"cudaMalloc({nbytes} bytes on {self.device})", rt.cudart.cudaMalloc(out, size))
        except CudaError:
            with self._lock:
                self.in_use -= size
            raise
        buffer = CudaBuffer(None, int(rt.ffi.cast("uintptr_t", out[0])), nbytes)
        buffer.ptr = rt.ffi.gc(out[0], self._releaser(size, buffer), size=size)
        return buffer

    def _releaser(self, size: int, buffer: CudaBuffer):
        rt, own, pool = self._rt, self._stream, self._pool
        where = _weak_stream(buffer)

        def release(p) -> None:
            try:
                if pool is None:
                    rt.cudart.cudaFree(p)
                else:
                    rt.cudart.cudaFreeAsync(p, (where() or own).handle)
            except Exception:  # noqa: BLE001 - nothing can be reported from a garbage-collector callback
                pass
            with self._lock:
                self.in_use -= size
        return release

    def address(self, buffer: CudaBuffer) -> int:
        return buffer.address

    def free(self, buffer: CudaBuffer, stream: CudaStream | None = None) -> None:
        """Release now rather than at garbage collection: in ``stream``'s order (its queued work may still use
        the buffer), else at once (only once no queued work uses it)."""
        if buffer.ptr is not None:
            buffer.free_stream = stream if isinstance(stream, CudaStream) else None
            self._rt.ffi.release(buffer.ptr)
            buffer.ptr = None


def _weak_stream(buffer: CudaBuffer):
    """A callable giving ``buffer.free_stream`` while the buffer lives (the release runs as it is dropped)."""
    ref = weakref.ref(buffer)

    def where():
        b = ref()
        return None if b is None else b.free_stream
    return where


_allocators: dict[tuple[int, int], CudaAllocator] = {}
_allocators_lock = threading.Lock()


def allocator_for(device_id: int, limit: int = 2**64 - 1, use_pool: bool = True) -> CudaAllocator:
    """A process-wide allocator for ``device_id`` with ``limit``, for values made outside sessions (the data
    transfer's ``copy``); sessions have their own (gpu_mem_limit is per session). The pool beneath is the
    device's in every case."""
    with _allocators_lock:
        key = (int(device_id), int(limit))
        if key not in _allocators:
            _allocators[key] = CudaAllocator(runtime(), device_id, limit, use_pool)
        return _allocators[key]


class PinnedArena(HostArena):
    """Page-locked host buffers from cudaMallocHost, pooled by size class as the host arena pools (at most
    ``max_cached_bytes`` of free blocks kept); a block leaving the pool goes back through cudaFreeHost once nothing
    views it. The host side of asynchronous copies: the staging allocator of one provider instance."""

    device = Device("cpu", 0, memory="host_pinned")

    def __init__(self, rt: Runtime, max_cached_bytes: int = 64 << 20) -> None:
        super().__init__(max_cached_bytes)
        self._rt = rt

    def _raw(self, nbytes: int) -> np.ndarray:
        rt = self._rt
        out = rt.ffi.new("void **")
        rt.check_cuda(f"cudaMallocHost({nbytes} bytes)", rt.cudart.cudaMallocHost(out, nbytes))
        ptr = rt.ffi.gc(out[0], rt.cudart.cudaFreeHost, size=nbytes)
        return np.frombuffer(rt.ffi.buffer(ptr, nbytes), dtype=np.uint8)  # the buffer keeps ``ptr`` alive


def _is_cuda(device: Device) -> bool:
    return device.type == "cuda" and device.memory == "default"


class CudaDataTransfer:
    """Copies host <-> GPU and GPU <-> GPU (peer copies through unified addressing), bit-exact for every
    fixed-size dtype; strings raise TypeError. Device tensors must be C-contiguous."""

    def __init__(self, rt: Runtime, device_id: int, use_pool: bool = True) -> None:
        self._rt, self.device, self._use_pool = rt, cuda_device(device_id), use_pool
        self._stream: CudaStream | None = None
        self._lock = threading.Lock()

    def can_copy(self, src: Device, dst: Device) -> bool:
        return (_is_cuda(src) and (_is_cuda(dst) or dst.is_host)) or (src.is_host and _is_cuda(dst))

    def copy(self, value: Any, src: Device, dst: Device) -> Any:
        if not self.can_copy(src, dst):
            raise ValueError(f"the CUDA data transfer cannot copy {src} -> {dst}")
        if not isinstance(value, DeviceTensor):
            value = np.asarray(value)
        if dst.is_host:
            out = np.empty(tuple(value.shape), value.dtype)
        else:
            out = DeviceTensor.empty(allocator_for(dst.id, use_pool=self._use_pool), tuple(value.shape), value.dtype)
        self.copy_into(value, out, None)
        return out

    def copy_into(self, src_value: Any, dst_value: Any, stream: Any) -> None:
        """Copy ``src_value``'s bytes into ``dst_value`` (same shape and dtype): enqueued on ``stream`` (a
        CudaStream of this provider; both values are kept alive until it is synchronized), or complete on
        return when ``stream`` is None."""
        src_value = _checked(src_value, "source")
        _checked(dst_value, "destination", writable=True)
        if tuple(src_value.shape) != tuple(dst_value.shape) or np.dtype(src_value.dtype) != np.dtype(dst_value.dtype):
            raise ValueError(f"copy_into: source {src_value.dtype} {list(src_value.shape)} does not match the "
                             f"destination {dst_value.dtype} {list(dst_value.shape)}")
        if stream is not None and not isinstance(stream, CudaStream):
            raise TypeError(f"copy_into: expected a stream of CUDAExecutionProvider, got {type(stream).__name__}")
        nbytes = int(dst_value.nbytes)
        if nbytes == 0:
            return
        own = stream is None
        if own:
            stream = self._own_stream()
        rt = self._rt
        rt.set_device(stream.device.id)  # per thread in CUDA; the core copies from any thread
        rt.check_cuda(f"cudaMemcpyAsync({nbytes} bytes, {_where(src_value)} -> {_where(dst_value)})",
                      rt.cudart.cudaMemcpyAsync(rt.ffi.cast("void *", _address(dst_value)),
                                                rt.ffi.cast("void *", _address(src_value)), nbytes,
                                                api.MEMCPY_DEFAULT, stream.handle))
        stream.keep(src_value, dst_value)
        if own:
            stream.synchronize()

    def _own_stream(self) -> CudaStream:
        with self._lock:
            if self._stream is None:
                self._stream = CudaStream(self._rt, self.device)
            return self._stream


def _checked(value: Any, what: str, writable: bool = False) -> Any:
    if isinstance(value, DeviceTensor):
        if not _is_cuda(value.device):
            raise TypeError(f"copy_into: the {what} is on {value.device}, not a CUDA device")
        if not value.is_contiguous:
            raise ValueError(f"copy_into: the {what} is a strided tensor; only C-contiguous device tensors are copied")
        return value
    if isinstance(value, np.ndarray) or not writable:
        arr = np.asarray(value)
        if arr.dtype.kind in "OUS":
            raise TypeError(f"copy_into: {arr.dtype} tensors stay on the host; a GPU holds fixed-size numbers only")
        if writable and (not arr.flags.c_contiguous or not arr.flags.writeable):
            raise ValueError(f"copy_into: the host {what} must be a writable C-contiguous array")
        return arr if arr.flags.c_contiguous else arr.copy(order="C")  # keeps 0-d arrays 0-d
    raise TypeError(f"copy_into: the {what} is a {type(value).__name__}, not a numpy array or DeviceTensor")


def _address(value: Any) -> int:
    return value.ptr if isinstance(value, DeviceTensor) else value.ctypes.data


def _where(value: Any) -> str:
    return str(value.device) if isinstance(value, DeviceTensor) else "host"
