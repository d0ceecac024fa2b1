"""CUDA streams and events in the shape of ort-core's Stream and Event protocols (``ort_core.memory.stream``).

A ``CudaStream`` is one non-blocking cudaStream_t; work enqueued on it (kernels, copies) keeps the Python
objects it reads and writes referenced (``keep``) until ``synchronize``, because the GPU still uses their
memory after the enqueuing call returned. ``CudaEvent`` wraps a cudaEvent_t with timing, so the profiler gets
device time through ``elapsed_ns``. Written for a GPU; nothing here runs without one.
"""

from __future__ import annotations

import threading
from typing import Any

from ort_core.memory import Device

from . import cuda_api as api
from .runtime import Runtime


class CudaEvent:
    """A point in a stream's work (cudaEventRecord); destroyed when no longer referenced."""

    __slots__ = ("_rt", "handle", "device")

    def __init__(self, rt: Runtime, device: Device) -> None:
        self._rt, self.device = rt, device
        out = rt.ffi.new("cudaEvent_t *")
        rt.check_cuda("cudaEventCreateWithFlags", rt.cudart.cudaEventCreateWithFlags(out, api.EVENT_DEFAULT))
        self.handle = rt.ffi.gc(out[0], _quiet(rt.cudart.cudaEventDestroy))

    def synchronize(self) -> None:
        self._rt.check_cuda("cudaEventSynchronize", self._rt.cudart.cudaEventSynchronize(self.handle))

    def elapsed_ns(self, start: CudaEvent) -> int:
        """Device time from ``start`` (an earlier event of the same stream) to this one, both completed."""
        ms = self._rt.ffi.new("float *")
        self._rt.check_cuda("cudaEventElapsedTime", self._rt.cudart.cudaEventElapsedTime(ms, start.handle, self.handle))
        return int(round(float(ms[0]) * 1e6))


class CudaStream:
    """One run's stream on ``device`` (the ort_core.memory.Stream protocol)."""

    def __init__(self, rt: Runtime, device: Device) -> None:
        self._rt, self.device = rt, device
        rt.set_device(device.id)
        out = rt.ffi.new("cudaStream_t *")
        rt.check_cuda("cudaStreamCreateWithFlags",
                      rt.cudart.cudaStreamCreateWithFlags(out, api.STREAM_NON_BLOCKING))
        # cudaStreamDestroy returns at once and releases the stream once its work is done
        self.handle = rt.ffi.gc(out[0], _quiet(rt.cudart.cudaStreamDestroy))
        self._kept: list[Any] = []
        self._lock = threading.Lock()
        self.pool: StreamPool | None = None  # where ``close`` gives it back

    def keep(self, *objects: Any) -> None:
        """Keep ``objects`` (buffers, arrays, tensors enqueued work uses) alive until the next synchronize."""
        with self._lock:
            self._kept.extend(objects)

    def record(self) -> CudaEvent:
        # CUDA's current device is per thread and the core records from any thread: an event must be made on
        # its stream's device
        self._rt.set_device(self.device.id)
        event = CudaEvent(self._rt, self.device)
        self._rt.check_cuda("cudaEventRecord", self._rt.cudart.cudaEventRecord(event.handle, self.handle))
        return event

    def wait(self, event: Any) -> None:
        """Later work on this stream waits for ``event``: on the GPU for a CUDA event, on the host for another
        provider's event (CUDA cannot wait for work it does not run)."""
        if isinstance(event, CudaEvent):
            status = self._rt.cudart.cudaStreamWaitEvent(self.handle, event.handle, 0)
            self._rt.check_cuda("cudaStreamWaitEvent", status)
            self.keep(event)
        else:
            event.synchronize()

    def synchronize(self) -> None:
        """Wait for all enqueued work; raises the error a kernel or copy hit (CUDA reports it here)."""
        status = self._rt.cudart.cudaStreamSynchronize(self.handle)
        with self._lock:
            self._kept.clear()
        self._rt.check_cuda(f"cudaStreamSynchronize (work on {self.device})", status)


    def close(self) -> None:
        """The run is over (the core calls this after synchronizing): back to the pool it came from, for the
        next run. A stream still holding queued work's objects (never synchronized) is not reused."""
        pool, self.pool = self.pool, None
        with self._lock:
            idle = not self._kept
        if pool is not None and idle:
            pool.give(self)


class StreamPool:
    """Idle streams of one provider on one device: ``take`` hands one out for a run (creating it when none
    is idle), ``CudaStream.close`` gives it back; at most ``keep`` idle streams are kept. Creating a stream
    per run would cost a cudaStreamCreate and a cudaStreamDestroy every run."""

    def __init__(self, rt: Runtime, device: Device, keep: int = 8) -> None:
        self._rt, self.device, self.keep = rt, device, keep
        self._idle: list[CudaStream] = []
        self._lock = threading.Lock()

    def take(self) -> CudaStream:
        with self._lock:
            stream = self._idle.pop() if self._idle else None
        if stream is None:
            stream = CudaStream(self._rt, self.device)
        stream.pool = self
        return stream

    def give(self, stream: CudaStream) -> None:
        with self._lock:
            if len(self._idle) < self.keep:
                self._idle.append(stream)

    def clear(self) -> None:
        with self._lock:
            self._idle.clear()


def _quiet(destroy):
    """A destructor for ffi.gc that never raises (it may run late in interpreter shutdown)."""
    def release(handle):
        try:
            destroy(handle)
        except Exception:  # noqa: BLE001 - nothing can be reported from a garbage-collector callback
            pass
    return release
