"""Execution plan: compiled kernels as a flat list of steps over integer value slots.

Built once per session: slots resolved, copies inserted where a value crosses devices, and
each intermediate released right after its last reader. ``run`` only walks the list; it is
re-entrant (every call gets its own frame) so many threads may run one plan at once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import InvalidGraph, KernelError, OrtError, RunTerminated
from .memory.device import HOST, Device


@dataclass(frozen=True)
class Step:
    kernel: Callable[..., Any]
    ins: tuple[int, ...]
    outs: tuple[int, ...]
    release: tuple[int, ...]
    label: str  # for errors: "node 'conv1' (Conv) on CPUExecutionProvider"


class ExecutionPlan:
    def __init__(self) -> None:
        self.slots: dict[tuple[str, Device], int] = {}
        self.template: list[Any] = []
        self.steps: list[Step] = []
        self.input_slots: dict[str, int] = {}
        self.output_slots: dict[str, int] = {}

    def slot(self, name: str, device: Device = HOST) -> int:
        key = (name, device)
        if key not in self.slots:
            self.slots[key] = len(self.template)
            self.template.append(None)
        return self.slots[key]

    def run(self, feeds: dict[int, Any], want: list[int], run_options=None) -> list[Any]:
        # IEEE special values are results, not errors (as in onnxruntime): no numpy warnings
        with np.errstate(all="ignore"):
            return self._run(feeds, want, run_options)

    def _run(self, feeds: dict[int, Any], want: list[int], run_options) -> list[Any]:
        frame = self.template.copy()
        for s, v in feeds.items():
            frame[s] = v
        for step in self.steps:
            if run_options is not None and run_options.terminate:
                raise RunTerminated("run() was terminated through RunOptions.terminate")
            try:
                results = step.kernel(*[frame[i] for i in step.ins])
            except OrtError as e:
                node, _, provider = step.label.rpartition(" on ")
                if step.label in str(e):
                    raise
                if node and node in str(e):  # the kernel named its node already: add the provider
                    raise type(e)(f"{e} (on {provider})") from e
                raise type(e)(f"{step.label}: {e}") from e
            except Exception as e:  # noqa: BLE001 - any kernel failure is reported against its node
                raise KernelError(f"{step.label} failed: {type(e).__name__}: {e}") from e
            for s, v in zip(step.outs, results):
                frame[s] = v
            for s in step.release:
                frame[s] = None
        return [frame[s] for s in want]


class PlanBuilder:
    """Accumulates steps in execution order, then computes release points."""

    def __init__(self) -> None:
        self.plan = ExecutionPlan()
        self.location: dict[str, Device] = {}  # where each value is first produced
        self.copies: dict[tuple[str, Device], int] = {}
        self.keep: set[int] = set()

    def define(self, name: str, device: Device = HOST, value: Any = None) -> int:
        self.location[name] = device
        s = self.plan.slot(name, device)
        if value is not None:
            self.plan.template[s] = value
        return s

    def read(self, name: str, device: Device, transfer=None, label: str = "") -> int:
        """Slot holding ``name`` on ``device``, inserting a copy step if it lives elsewhere."""
        if name not in self.location:
            raise InvalidGraph(f"{label}: reads '{name}', which no node, graph input or initializer defines")
        src = self.location[name]
        if src == device:
            return self.plan.slots[(name, src)]
        key = (name, device)
        if key not in self.copies:
            if transfer is None:
                raise InvalidGraph(f"{label}: no data transfer to move '{name}' from {src} to {device}")
            src_slot = self.plan.slots[(name, src)]
            dst_slot = self.plan.slot(name, device)
            self.add(lambda v, _t=transfer, _s=src, _d=device: (_t.copy(v, _s, _d),), (src_slot,), (dst_slot,),
                     f"copy of '{name}' {src} -> {device}")
            self.copies[key] = dst_slot
        return self.copies[key]

    def add(self, kernel, ins, outs, label: str) -> None:
        self.plan.steps.append(Step(kernel, tuple(ins), tuple(outs), (), label))

    def finish(self) -> ExecutionPlan:
        last_use: dict[int, int] = {}
        for k, step in enumerate(self.plan.steps):
            for s in (*step.ins, *step.outs):
                last_use[s] = k
        releases: dict[int, list[int]] = {}
        for s, k in last_use.items():
            if s not in self.keep:
                releases.setdefault(k, []).append(s)
        self.plan.steps = [Step(st.kernel, st.ins, st.outs, tuple(releases.get(k, ())), st.label)
                           for k, st in enumerate(self.plan.steps)]
        return self.plan


def checked_kernel(kernel, outputs: list[str], graph, label: str):
    """Wrap a kernel so each call checks its outputs against the graph's static types."""
    from .ir.types import np_dtype

    expected = []
    for name in outputs:
        t = graph.type_of(name)
        if t is None or t.kind != "tensor" or not t.elem_type:
            expected.append((name, None, None, None))
            continue
        try:
            dtype = np_dtype(t.elem_type)
        except (KeyError, TypeError, ValueError):
            dtype = None
        expected.append((name, dtype, t.shape, t.text))

    def run(*xs):
        results = kernel(*xs)
        if len(results) < len(outputs):
            raise KernelError(f"{label}: returned {len(results)} output(s), expected {len(outputs)} {outputs}")
        for (name, dtype, shape, text), value in zip(expected, results):
            got_dtype = getattr(value, "dtype", None)
            if dtype is not None and got_dtype is not None and np.dtype(got_dtype) != dtype:
                if not (dtype.kind == "O" and np.dtype(got_dtype).kind in "OUS"):
                    raise KernelError(f"{label}: output '{name}' has dtype {got_dtype}, declared {text}")
            got_shape = getattr(value, "shape", None)
            if shape is not None and got_shape is not None:
                got_shape = tuple(got_shape)
                if len(got_shape) != len(shape) or any(
                        isinstance(d, int) and d != g for d, g in zip(shape, got_shape)):
                    raise KernelError(f"{label}: output '{name}' has shape {list(got_shape)}, "
                                      f"declared {list(shape)}")
        return results

    return run
