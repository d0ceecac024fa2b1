"""Device memory of the example provider: buffers from libc, reached through cffi in ABI mode.

Shows the pattern every vendor plugin follows with its C runtime (declare with ``ffi.cdef``,
``ffi.dlopen`` the library, own each pointer with ``ffi.gc``). The "device" is ordinary host
RAM; nothing here is faster than numpy, and no arena or pooling is attempted.
"""

from __future__ import annotations

import ctypes.util
import os
import sys
from typing import Any

import cffi
import numpy as np

from ort_core.memory import HOST, Device, DeviceTensor, HostArena
from ort_core.plugins import LoadOnce, missing_symbols

DEVICE = Device("example", 0)
ALIGNMENT = 64  # a cache line; also what ort-core's host allocator promises

LIBRARY_ENV = "ORT_EP_EXAMPLE_LIBRARY"
"""Environment variable naming the C library to load instead of libc (vendor plugins usually
offer the same escape hatch for a runtime installed outside the default search path)."""

# Only the declarations this plugin calls: ABI mode checks nothing against a header, so each
# signature must match the C library exactly (size_t, pointer types) or calls corrupt memory.
_CDEF = """
int posix_memalign(void **memptr, size_t alignment, size_t size);
void free(void *ptr);
void *memcpy(void *dest, const void *src, size_t n);
"""
_SYMBOLS = ("posix_memalign", "free", "memcpy")


class RuntimeUnavailable(RuntimeError):
    """The C library could not be loaded; the message says why, in words a user can act on."""


class Runtime:
    """The loaded C library: ``ffi`` for types and buffers, ``lib`` for the functions."""

    def __init__(self, ffi: cffi.FFI, lib: Any, library: str) -> None:
        self.ffi, self.lib, self.library = ffi, lib, library


def load_runtime(library: str | None = None) -> Runtime:
    """dlopen ``library`` (default: $ORT_EP_EXAMPLE_LIBRARY, else libc) and check its symbols.

    Raises RuntimeUnavailable naming what is missing; never any other error, so registration
    can turn it into an "unavailable" answer instead of a failed import.
    """
    library = library or os.environ.get(LIBRARY_ENV) or ctypes.util.find_library("c")
    ffi = cffi.FFI()
    ffi.cdef(_CDEF)
    try:
        # dlopen(None) is the C library the interpreter itself is linked against (POSIX only)
        lib = ffi.dlopen(library)
    except Exception as e:  # OSError on POSIX; other types on platforms without dlopen(None)
        where = library or "the process's C library"
        raise RuntimeUnavailable(f"cannot load {where} ({e}); set {LIBRARY_ENV} to the path of a C "
                                 "library providing posix_memalign, free and memcpy") from None
    # ABI mode resolves symbols lazily, on first attribute access: probe now, not mid-run
    missing = missing_symbols(lib, _SYMBOLS)
    if missing:
        platform = " (Windows has no posix_memalign)" if sys.platform == "win32" else ""
        raise RuntimeUnavailable(f"{library or 'the C library'} lacks {', '.join(missing)}{platform}; "
                                 f"set {LIBRARY_ENV} to a C library that provides them")
    return Runtime(ffi, lib, library or "<process>")


# kernels call runtime() on every run: once loaded that is an attribute read, no lock
runtime: LoadOnce[Runtime] = LoadOnce(load_runtime, RuntimeUnavailable)
"""``runtime()``: the process-wide runtime, loaded once; raises RuntimeUnavailable when it cannot be."""


def unavailable_reason() -> str:
    """Why the provider cannot run here, or "" when it can."""
    return runtime.reason()


class DeviceBuffer:
    """``nbytes`` of device memory starting at ``ptr`` (a ``char *`` owned through ``ffi.gc``).

    The memory is released when the last reference to ``ptr`` goes (a DeviceTensor holds its buffer as
    its owner), or earlier by ``ExampleAllocator.free``. Views made by ``view`` do not hold it: whoever
    uses a view keeps the tensor referenced meanwhile (queued work holds the tensors it reads and writes).
    """

    __slots__ = ("ptr", "nbytes")

    def __init__(self, ptr: Any, nbytes: int) -> None:
        self.ptr, self.nbytes = ptr, nbytes

    def __repr__(self) -> str:
        return f"DeviceBuffer({self.nbytes} bytes on {DEVICE})"


class ExampleAllocator:
    """Aligned device buffers from ``posix_memalign``; every size, zero included, is honoured."""

    device = DEVICE
    alignment = ALIGNMENT

    def allocate(self, nbytes: int) -> DeviceBuffer:
        nbytes = int(nbytes)
        if nbytes < 0:
            raise ValueError(f"cannot allocate a negative size ({nbytes} bytes)")
        rt = runtime()
        out = rt.ffi.new("void **")
        # size 0 may legally give NULL or a shared pointer; one byte gives a unique aligned address
        err = rt.lib.posix_memalign(out, self.alignment, max(nbytes, 1))
        if err != 0 or out[0] == rt.ffi.NULL:
            raise MemoryError(f"{DEVICE}: cannot allocate {nbytes} bytes (posix_memalign returned {err})")
        # size= tells Python's collector how much memory hides behind the small cdata object
        ptr = rt.ffi.gc(rt.ffi.cast("char *", out[0]), rt.lib.free, size=max(nbytes, 1))
        return DeviceBuffer(ptr, nbytes)

    def address(self, buffer: DeviceBuffer) -> int:
        return int(runtime().ffi.cast("uintptr_t", buffer.ptr))

    def free(self, buffer: DeviceBuffer, stream: Any = None) -> None:
        """Release now rather than at garbage collection; views of the buffer become invalid. With a stream
        (what ort-core passes to an allocator declaring ``stream_ordered``, as cudaFreeAsync takes one), once
        the work enqueued on it so far has run."""
        if stream is not None:
            stream.enqueue(lambda: self.free(buffer), "free a buffer")
            return
        if buffer.ptr is not None:
            runtime().ffi.release(buffer.ptr)
            buffer.ptr = None


ALLOCATOR = ExampleAllocator()


class StagingArena(HostArena):
    """Pooled host buffers declared as this device's pinned staging memory (ExampleProvider.staging_allocator):
    a real device would allocate them page-locked (cudaHostAlloc) so that its copies to them are asynchronous."""

    device = Device("cpu", 0, memory="host_pinned")


STAGING = StagingArena()


def new_tensor(shape: tuple[int, ...], dtype: Any) -> DeviceTensor:
    """An uninitialized tensor on the example device (ort-core's DeviceTensor, owning a DeviceBuffer)."""
    return DeviceTensor.empty(ALLOCATOR, shape, dtype)


def view(tensor: DeviceTensor, writable: bool = False) -> np.ndarray:
    """The device memory of ``tensor`` as a numpy array: possible only because this "device" is host RAM,
    and done only by this provider's kernels and copies, on its stream's worker thread. The core never
    reads a DeviceTensor as numpy (it refuses to). Read-only unless asked: kernels never modify inputs."""
    if tensor.device != DEVICE:
        raise TypeError(f"expected a tensor on {DEVICE}, got one on {tensor.device}")
    if getattr(tensor.owner, "ptr", 0) is None:
        raise ValueError("this tensor's buffer was freed")
    ffi = runtime().ffi
    raw = np.frombuffer(ffi.buffer(ffi.cast("char *", tensor.ptr), tensor.nbytes), dtype=np.uint8)
    if tensor.is_contiguous:
        arr = raw.view(tensor.dtype).reshape(tensor.shape)
    else:
        arr = np.lib.stride_tricks.as_strided(raw.view(tensor.dtype), tensor.shape, tensor.strides)
    arr.flags.writeable = writable
    return arr


class ExampleDataTransfer:
    """Copies host <-> example device and example device <-> example device with ``memcpy``.

    ``copy_into`` enqueues the copy on a stream of this provider (the plan's copies go this way, ordered with
    the kernels); ``copy`` makes a new value and returns when it is complete (one-off copies: OrtValue,
    constants crossing once at session creation). Bit-exact for every fixed-size dtype (bool, float16,
    bfloat16, float8, complex, ...): bytes move untouched and the dtype travels with the tensor. Strings
    raise TypeError.
    """

    def can_copy(self, src: Device, dst: Device) -> bool:
        if src == DEVICE:
            return dst == DEVICE or dst.is_host
        return dst == DEVICE and src.is_host

    def copy(self, value: Any, src: Device, dst: Device) -> Any:
        self._check(value, src, dst)
        if dst.is_host:
            out = np.empty(value.shape, value.dtype)
        else:
            out = new_tensor(np.shape(value) if src.is_host else value.shape, _dtype_of(value))
        self.copy_into(value, out, None)
        return out

    def copy_into(self, src_value: Any, dst_value: Any, stream: Any) -> None:
        """Copy ``src_value``'s bytes into ``dst_value`` (same shape and dtype): on ``stream`` when given (the
        arrays and tensors stay referenced by the queued work until it ran), else now."""
        src = DEVICE if isinstance(src_value, DeviceTensor) else HOST
        dst = DEVICE if isinstance(dst_value, DeviceTensor) else HOST
        self._check(src_value, src, dst)
        if src.is_host:
            src_value = np.asarray(src_value)
            if not src_value.flags.c_contiguous:  # memcpy needs one dense block; keeps 0-d arrays 0-d
                src_value = src_value.copy(order="C")
        if tuple(src_value.shape) != tuple(dst_value.shape) or np.dtype(src_value.dtype) != dst_value.dtype:
            raise ValueError(f"copy_into: source {src_value.dtype} {list(src_value.shape)} does not match the "
                             f"destination {dst_value.dtype} {list(dst_value.shape)}")

        def work(s=src_value, d=dst_value) -> None:
            _memcpy(_address(d), _address(s), d.nbytes)

        if stream is None:
            work()
        else:
            stream.enqueue(work, f"copy {src} -> {dst}")

    def _check(self, value: Any, src: Device, dst: Device) -> None:
        if not self.can_copy(src, dst):
            raise ValueError(f"the example data transfer cannot copy {src} -> {dst}")
        if src.is_host:
            if isinstance(value, DeviceTensor):
                raise TypeError(f"copy from {src} was given a DeviceTensor on {value.device}")
        elif not isinstance(value, DeviceTensor) or value.device != DEVICE:
            raise TypeError(f"copy from {src} expects a DeviceTensor on {DEVICE}, got {type(value).__name__}")


def _dtype_of(value: Any) -> np.dtype:
    return value.dtype if isinstance(value, DeviceTensor) else np.asarray(value).dtype


def _address(value: Any) -> int:
    return value.ptr if isinstance(value, DeviceTensor) else value.ctypes.data


def _memcpy(dst_address: int, src_address: int, nbytes: int) -> None:
    if nbytes:  # memcpy with size 0 is fine, but an empty array's address may be NULL-like
        rt = runtime()
        rt.lib.memcpy(rt.ffi.cast("void *", dst_address), rt.ffi.cast("void *", src_address), nbytes)


TRANSFER = ExampleDataTransfer()
