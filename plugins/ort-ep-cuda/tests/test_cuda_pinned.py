"""The pinned staging arena (``memory.PinnedArena``): its blocks come from cudaMallocHost and go back through
cudaFreeHost, pooled in between. Checked here against a stand-in runtime whose cudaMallocHost is libc's malloc (no
GPU needed), and for real where no driver is: the failure names the call."""

from __future__ import annotations

import gc

import cffi
import numpy as np
import pytest
from cuda_helpers import gpu_reason
from ort_ep_cuda import runtime
from ort_ep_cuda.memory import PinnedArena

from ort_core.memory import Device


class _HostOnlyRuntime:
    """cudaMallocHost / cudaFreeHost as malloc / free, counted; ``fail``: the status cudaMallocHost returns."""

    def __init__(self) -> None:
        self.ffi = cffi.FFI()
        self.ffi.cdef("void *malloc(size_t size); void free(void *ptr);")
        libc = self.ffi.dlopen(None)
        self.allocated: list[int] = []
        self.freed = 0
        self.fail = 0
        owner = self

        class Cudart:
            @staticmethod
            def cudaMallocHost(out, nbytes):
                if owner.fail:
                    return owner.fail
                out[0] = libc.malloc(nbytes)
                owner.allocated.append(nbytes)
                return 0

            @staticmethod
            def cudaFreeHost(ptr):
                owner.freed += 1
                libc.free(ptr)
                return 0

        self.cudart = Cudart()

    def check_cuda(self, call: str, status: int) -> None:
        if status:
            raise runtime.CudaError(f"{call} failed: status {status}", status)


def test_blocks_are_page_locked_pooled_and_freed_through_cuda():
    rt = _HostOnlyRuntime()
    arena = PinnedArena(rt, max_cached_bytes=1 << 20)
    assert arena.device == Device("cpu", 0, memory="host_pinned") and arena.device.is_host
    a = arena.allocate(1000)
    assert a.nbytes == 1000 and a.ctypes.data % arena.alignment == 0
    a[:] = np.arange(1000) % 251
    assert rt.allocated == [1024 + arena.alignment]  # one size class, plus room to align
    first = a.ctypes.data
    del a
    gc.collect()
    b = arena.allocate(900)  # the same size class: the block comes back from the pool, no new cudaMallocHost
    assert b.ctypes.data == first and len(rt.allocated) == 1 and rt.freed == 0
    arena.free(b)
    arena.trim()  # dropped from the pool: cudaFreeHost once nothing views the block
    del b
    gc.collect()
    assert rt.freed == 1
    rt.fail = 2
    with pytest.raises(runtime.CudaError, match=r"cudaMallocHost\(\d+ bytes\) failed: status 2"):
        arena.allocate(10)


@pytest.mark.skipif(not gpu_reason() or "cudaGetDeviceCount" not in gpu_reason(),
                    reason="a GPU (or no CUDA library) is here: the call would not fail")
def test_without_a_driver_the_failed_call_is_named():
    with pytest.raises(runtime.CudaError, match=r"cudaMallocHost\(\d+ bytes\) failed: cudaError\w+ \(\d+\)"):
        PinnedArena(runtime.runtime()).allocate(4096)
