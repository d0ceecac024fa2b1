"""Streams and events: the ordering primitives of asynchronous providers.

Structural protocols only. A provider whose work is asynchronous hands the core one Stream per run
(``ExecutionProvider.stream()``): its kernels and copies enqueue work on it in order, and the core
synchronizes at run()'s borders, where a host consumer reads one of its values, and (through events)
where a consumer on another stream does. A provider without a stream (None) computes synchronously.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from .device import Device


@runtime_checkable
class Event(Protocol):
    """A point in a stream's work: ``synchronize()`` blocks the host until the work before it is done.

    Optional: ``elapsed_ns(start)``, the device time in nanoseconds between an earlier event ``start`` of
    the same stream and this one, both completed (as cudaEventElapsedTime); the profiler reports the
    device time of asynchronous work with it."""

    def synchronize(self) -> None: ...


@runtime_checkable
class Stream(Protocol):
    """An in-order queue of work on ``device``.

    ``record()`` returns an Event marking the work enqueued so far; ``wait(event)`` makes later work on this
    stream wait for an event of another stream; ``synchronize()`` blocks until all enqueued work is done
    and raises the first error that work raised (as a device reports a failed kernel at the next sync).

    Optional: ``close()``, called once when the run is over and the stream synchronized (after a failure
    too): the provider may recycle the stream (a CUDA stream reused by the next run, a captured graph
    replayed on it) or release it. A stream without ``close`` is simply dropped.
    """

    device: Device

    def record(self) -> Event: ...

    def wait(self, event: Event) -> None: ...

    def synchronize(self) -> None: ...


def synchronize_all(streams: Any) -> None:
    """Synchronize every stream of an iterable (Nones skipped)."""
    for s in streams:
        if s is not None:
            s.synchronize()


def close_all(streams: Any) -> None:
    """Give every stream of an iterable back to its provider (``close()`` where it has one; Nones skipped).
    Every stream is closed even when one of them raises; the first error is raised after."""
    first: BaseException | None = None
    for s in streams:
        close = getattr(s, "close", None)
        if close is not None:
            try:
                close()
            except Exception as e:  # noqa: BLE001 - close the others, then report
                first = first or e
    if first is not None:
        raise first
