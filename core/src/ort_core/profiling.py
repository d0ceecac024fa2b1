"""Session profiling: per-step timings written as a Chrome-trace JSON, like onnxruntime's.

Wraps the plan's step kernels when ``SessionOptions.enable_profiling`` is set (the plain run path
stays untouched otherwise) and collects events thread-safely; work an asynchronous provider enqueues
on a stream is timed with events on that stream (its device time), not by how long the launch took.
``InferenceSession.end_profiling`` writes the file (open it in chrome://tracing or Perfetto).
"""

from __future__ import annotations

import json
import os
import threading
import time

import numpy as np

from .ir.types import elem_type_name, elem_type_of


class Profiler:
    def __init__(self, prefix: str) -> None:
        self.prefix = prefix or "onnxruntime_profile_"
        self.start_ns = time.perf_counter_ns()
        self.wall_start_ns = time.time_ns()
        self.events: list[dict] = []
        self._lock = threading.Lock()
        self._local = threading.local()  # per run (thread): stream work awaiting its device time
        self.active = True

    def _us(self, t_ns: int) -> float:
        return (t_ns - self.start_ns) / 1000.0

    def record(self, cat: str, name: str, t0: int, t1: int, args: dict) -> None:
        if not self.active:
            return
        event = {"cat": cat, "pid": os.getpid(), "tid": threading.get_ident() % 1_000_000, "dur": (t1 - t0) / 1000.0,
                 "ts": self._us(t0), "ph": "X", "name": name, "args": args}
        with self._lock:
            self.events.append(event)

    def wrap_steps(self, steps: list) -> list:
        return [s._replace(kernel=self._timed(s)) for s in steps]

    def _timed(self, step):
        kernel, label = step.kernel, step.label
        node, _, provider = label.rpartition(" on ")
        op = node[node.rfind("(") + 1:-1] if node.endswith(")") else ("Copy" if label.startswith("copy") else "")
        name = _event_name(node or label)
        settles = label == SYNC_LABEL  # the step after which this run's device work is complete

        def run(*xs):
            # work enqueued on a stream is timed by events around it, read once the stream is synchronized
            streams = [x for x in xs if _is_stream(x)]
            starts = [s.record() for s in streams]
            t0 = time.perf_counter_ns()
            out = kernel(*xs)
            t1 = time.perf_counter_ns()
            args = {"op_name": op, "provider": provider or "copy",
                    "input_type_shape": [_type_shape(x) for x in xs if not _is_stream(x)],
                    "output_type_shape": [_type_shape(y) for y in out]}
            if streams:
                ends = [s.record() for s in streams]
                self._pending().append((f"{name}_kernel_time", t0, t1, args, starts, ends))
            else:
                self.record("Node", f"{name}_kernel_time", t0, t1, args)
            if settles:
                self._settle()
            return out

        return run

    def _pending(self) -> list:
        pending = getattr(self._local, "pending", None)
        if pending is None:
            pending = self._local.pending = []
        return pending

    def _settle(self) -> None:
        """Record this run's stream work with its device time (between the events around it), at the launch
        time; events without a clock of their own give the launch-to-completion time instead."""
        pending, self._local.pending = self._pending(), []
        for name, t0, t1, args, starts, ends in pending:
            device_ns = 0
            for start, end in zip(starts, ends):
                end.synchronize()
                elapsed = getattr(end, "elapsed_ns", None)
                device_ns += elapsed(start) if elapsed is not None else time.perf_counter_ns() - t0
            self.record("Node", name, t0, t0 + device_ns, {**args, "launch_us": (t1 - t0) / 1000.0,
                                                         "timed_by": "device events"})

    def write(self) -> str:
        self.active = False
        # onnxruntime's file name and layout, for tools that read its traces: '<prefix>_<date>_<time>_<ms>.json',
        # a JSON array with one event per line
        seconds, ns = divmod(self.wall_start_ns, 1_000_000_000)
        stamp = time.strftime("%Y-%m-%d_%H-%M-%S", time.localtime(seconds))
        path = os.path.abspath(f"{self.prefix}_{stamp}_{ns // 1_000_000:03d}.json")
        with self._lock:
            events = list(self.events)
        with open(path, "w", encoding="utf-8") as f:
            f.write("[\n" + ",\n".join(json.dumps(e) for e in events) + "\n]\n")
        return path


def _event_name(what: str) -> str:
    """The name onnxruntime gives a node's events: the node's own name ("node 'relu' (Relu)" -> "relu");
    other steps (unnamed nodes, subgraphs, copies) keep their label."""
    if what.startswith("node '") and "' (" in what:
        return what[len("node '"):what.rindex("' (")]
    return what


SYNC_LABEL = "synchronize streams"  # planning.py's last step of a plan with asynchronous providers


def _is_stream(x) -> bool:
    return hasattr(x, "record") and hasattr(x, "wait") and hasattr(x, "synchronize")


def _type_shape(x) -> dict:
    """{element type: shape}, the type named as onnxruntime names it ("float", "int64", ...)."""
    dtype, shape = getattr(x, "dtype", None), getattr(x, "shape", None)
    if dtype is None or shape is None:
        return {type(x).__name__: []}
    if isinstance(dtype, str):
        return {dtype: list(shape)}
    code = elem_type_of(np.dtype(dtype))
    return {elem_type_name(code) if code else str(np.dtype(dtype)): list(shape)}
