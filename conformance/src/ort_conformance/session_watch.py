"""Watching one provider's kernel calls in a real session: what each call did to its inputs and what it
handed back, for the behaviour checks (contract_checks.py).

Reads the session's plan, partition and instances (``InferenceSession._plan``, ``_partition``,
``_instances``: ort-core internals, read here and nowhere else in the suite) and wraps the plan's steps
that run the provider's kernels. The wrapper synchronizes the provider's stream around each call so
that device values can be copied to the host and compared; it judges nothing about timing.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ort_core.memory import HOST, DeviceTensor


class Watch:
    """Wraps ``provider``'s kernel steps in ``sess``; set ``run`` before each run() (1, 2, ...).

    ``mutations``: kernels that wrote into an input; ``aliases``: outputs sharing memory with an input or
    another output; ``reused()``: graph outputs of run 1 changed by run 2 or sharing its memory."""

    def __init__(self, sess: Any, provider: str, model: Any) -> None:
        from ort_core.pipeline import describe

        try:
            plan, part, inst = sess._plan, sess._partition, sess._instances[provider]
        except (AttributeError, KeyError) as e:
            raise RuntimeError("ort-conformance watches kernel calls through InferenceSession._plan, _partition "
                               f"and _instances, which this ort-core does not have as expected ({e!r})") from e
        self.transfer = inst.data_transfer()
        self.run = 0
        self.mutations: list[str] = []
        self.aliases: list[str] = []  # also outputs handed back read-only
        self.handed: dict[int, list[tuple[str, str, Any, Any]]] = {}
        names = {s: n for (n, _), s in plan.slots.items()}  # "\0..." names: the core's own slots (streams, arenas)
        inits = {t.name for t in model.graph.initializer}
        self.kinds = {**{v.name: "a feed" for v in model.graph.input if v.name not in inits},
                      **{n: "a weight" for n in inits}}
        self.outputs = {v.name for v in model.graph.output}
        labels = {f"{describe(sub)} on {p}" for p, sub in part.subgraphs if p == provider}
        for k, st in enumerate(plan.steps):
            if st.label in labels and not st.copy:
                plan.steps[k] = st._replace(kernel=self._wrap(st.kernel, st.label,
                                                              [names.get(s, "?") for s in st.ins],
                                                              [names.get(s, "?") for s in st.outs]))

    def kind(self, name: str) -> str:
        return self.kinds.get(name, "an intermediate value")

    def snap(self, value: Any) -> np.ndarray | None:
        """A host copy of a tensor value (None for anything else: streams, sequences, strings)."""
        if isinstance(value, np.ndarray):
            return None if value.dtype.kind in "OUS" else np.array(value, copy=True)
        if isinstance(value, DeviceTensor):
            return np.asarray(self.transfer.copy(value, value.device, HOST))
        return None

    def _wrap(self, kernel, label: str, in_names: list[str], out_names: list[str]):
        def step(*xs):
            stream = next((x for x in xs if _is_stream(x)), None)
            if stream is not None:
                stream.synchronize()
            before = [None if n.startswith("\0") else self.snap(x) for n, x in zip(in_names, xs)]
            results = kernel(*xs)
            if stream is not None:
                stream.synchronize()
            for name, b, x in zip(in_names, before, xs):
                if b is not None and not name.startswith("\0") and not same(b, self.snap(x)):
                    self.mutations.append(f"{label} wrote into its input '{name}' ({self.kind(name)})")
            outs = list(results)
            for out, o_name in zip(outs, out_names):
                viewed = any(overlap(out, x) for name, x in zip(in_names, xs) if not name.startswith("\0"))
                if isinstance(out, np.ndarray) and out.size and not out.flags.writeable and not viewed:
                    self.aliases.append(f"{label} returned output '{o_name}' read-only (the core must copy it "
                                        "before handing it out; return memory the caller may write)")
            for i, (out, o_name) in enumerate(zip(outs, out_names)):
                for other, o2 in zip(out_names[:i], outs[:i]):
                    if overlap(out, o2):
                        self.aliases.append(f"{label} returned outputs '{other}' and '{o_name}' in the same memory")
                for name, x in zip(in_names, xs):
                    if not name.startswith("\0") and overlap(out, x):
                        self.aliases.append(f"{label} returned output '{o_name}' in the memory of its input "
                                            f"'{name}' ({self.kind(name)}), an undeclared view")
                if o_name in self.outputs:
                    self.handed.setdefault(self.run, []).append((label, o_name, out, self.snap(out)))
            return results

        return step

    def reused(self) -> list[str]:
        """Graph outputs of run 1 that run 2 changed, or wrote into the memory of (run 1's are still held)."""
        found = []
        second = self.handed.get(2, [])
        for label, name, value, snapshot in self.handed.get(1, []):
            if snapshot is not None and not same(snapshot, self.snap(value)):
                found.append(f"{label}: its output '{name}' of run 1 changed during run 2 (a buffer reused "
                             "across runs)")
            elif any(n2 == name and overlap(value, v2) for _, n2, v2, _ in second):
                found.append(f"{label}: run 2 returned '{name}' in the memory of run 1's, still referenced")
        return found


def _is_stream(x: Any) -> bool:
    return (not isinstance(x, (np.ndarray, DeviceTensor)) and callable(getattr(x, "synchronize", None))
            and callable(getattr(x, "record", None)))


def same(a: Any, b: Any) -> bool:
    """Bit-for-bit equality of two host arrays (NaN payloads included)."""
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def _extent(v: Any) -> tuple[str, int, int] | None:
    if isinstance(v, DeviceTensor) and v.nbytes:
        if v.is_contiguous:
            span = v.nbytes
        else:
            span = sum((d - 1) * abs(s) for d, s in zip(v.shape, v.strides)) + v.dtype.itemsize
        return str(v.device), v.ptr, v.ptr + span
    return None


def overlap(a: Any, b: Any) -> bool:
    """Whether two tensor values share memory (host arrays exactly; device tensors by address range)."""
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        return a.size > 0 and b.size > 0 and bool(np.shares_memory(a, b))
    ea, eb = _extent(a), _extent(b)
    return ea is not None and eb is not None and ea[0] == eb[0] and ea[1] < eb[2] and eb[1] < ea[2]
