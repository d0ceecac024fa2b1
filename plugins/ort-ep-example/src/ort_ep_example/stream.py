"""The example device's asynchronous stream: one worker thread per provider instance runs queued work in
order, as a GPU runs a stream's kernels; each run gets its own ``RunStream`` handle on that queue.

What a vendor replaces with its runtime's streams and events (cudaStream_t, cudaEvent_t). Errors of queued
work are kept by the handle that queued it and raised by its ``synchronize``, as a device reports a
failed kernel at the next synchronization.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable

from .memory import DEVICE


class Worker:
    """The thread executing every RunStream's work of one provider instance, first in, first out."""

    def __init__(self, name: str) -> None:
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()
        self.executed = 0  # work items run so far (tests read it)

    def put(self, item: tuple[Callable[[], None], str, RunStream] | None) -> None:
        self._queue.put(item)

    def _loop(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            work, label, owner = item
            if owner.error is None:  # after a failure the rest of that run's work is skipped
                try:
                    work()
                except BaseException as e:  # noqa: BLE001 - reported at the owner's next synchronize
                    owner.error = RuntimeError(f"{label}: {type(e).__name__}: {e}")
            self.executed += 1

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def stop(self) -> None:
        """Finish what is queued, then end the thread."""
        self._queue.put(None)
        if threading.current_thread() is not self._thread:
            self._thread.join()


class WorkerEvent:
    """Set when the worker reaches the point where it was recorded, with the time it got there."""

    __slots__ = ("_done", "time_ns")

    def __init__(self) -> None:
        self._done = threading.Event()
        self.time_ns = 0

    def _reach(self) -> None:
        self.time_ns = time.perf_counter_ns()
        self._done.set()

    def synchronize(self) -> None:
        self._done.wait()

    def elapsed_ns(self, start: WorkerEvent) -> int:
        """Worker time from ``start`` to this event (both reached)."""
        return self.time_ns - start.time_ns


class RunStream:
    """One run's stream on the example device (the ort_core.memory.Stream protocol)."""

    device = DEVICE

    def __init__(self, worker: Worker) -> None:
        self._worker = worker
        self.error: BaseException | None = None

    def enqueue(self, work: Callable[[], None], label: str) -> None:
        """Run ``work`` on the device after everything enqueued before it; ``label`` names it in errors."""
        self._worker.put((work, label, self))

    def record(self) -> WorkerEvent:
        event = WorkerEvent()
        self._worker.put((event._reach, "event", _NEVER_FAILS))
        return event

    def wait(self, event) -> None:
        self._worker.put((event.synchronize, "wait for an event", _NEVER_FAILS))

    def synchronize(self) -> None:
        self.record().synchronize()
        if self.error is not None:
            error, self.error = self.error, None
            raise error


class _Untracked:
    error = None


_NEVER_FAILS = _Untracked()  # events run even after a failed kernel, so nobody waits forever
