"""Memory planning of an execution plan: device values placed in one block per device and stream, by
lifetime, so a run allocates one block per device instead of one buffer per value.

planning.py builds the steps; for every output it pre-allocates or lets a kernel allocate (a ContextKernel's
output, an asynchronous copy to a device) it asks for a ``Target`` here, and the PlanBuilder records which
stream each step works on. ``MemoryPlanner.finish`` then works out each value's lifetime over the final step
list and adds the steps that take an arena's memory (memory/layouts.py) at the start of a run and give it
back at the end (after run() synchronized its streams).

When memory is planned: at build time for values of static shape (packed greedy by size, memory/planned.py);
for values whose shape is known only at run time, per input-shape signature (the tuple of the feeds'
shapes): the first run of a signature allocates them per call and notes their sizes, and later runs of it
take one block of a layout made from those sizes (cached, least recently used signatures dropped).

A value is planned only where reusing its bytes is safe without events: it is written and read on one
stream (work on a stream runs in order) or only by synchronous steps, and it never leaves the run (graph
outputs, and values the caller may get through IOBinding, get buffers of their own). A declared view
(``ContextKernel.views``) is no value of its own: it extends the lifetime of the value it views. Values of a
``stable_addresses`` plan whose shape is known only at run time are allocated per call.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

import numpy as np

from .memory.device import HOST, Device
from .memory.layouts import ArenaMemory, RunMemory
from .memory.planned import Lifetime
from .plan import PlanBuilder, Step
from .plugins.kernel import allocate

_UNKNOWN = object()  # the stream key of steps this planner was not told about


class Target:
    """Where one output goes: ``index`` of its value in the arena's layouts once planned (None: a buffer of
    its own from the allocator, each call). ``shape`` None: known only at run time."""

    __slots__ = ("allocator", "shape", "dtype", "index")

    def __init__(self, allocator: Any, shape: tuple[int, ...] | None, dtype: Any) -> None:
        self.allocator, self.dtype, self.index = allocator, np.dtype(dtype), None
        self.shape = None if shape is None else tuple(shape)

    def make(self, memory: RunMemory | None, stream: Any = None, shape: tuple[int, ...] | None = None,
             dtype: Any = None) -> Any:
        """The value of ``shape``/``dtype`` (default: the static ones) in the run's ``memory`` when planned."""
        shape = self.shape if shape is None else tuple(int(d) for d in shape)
        dtype = self.dtype if dtype is None else dtype
        if self.index is None or memory is None:
            return allocate(self.allocator, shape, dtype, stream)
        return memory.value(self.index, shape, dtype, stream)

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize


class _Arena:
    def __init__(self, slot: int, device: Device, stream: Any, allocator: Any, label: str) -> None:
        self.slot, self.device, self.stream, self.allocator, self.label = slot, device, stream, allocator, label
        self.targets: list[tuple[int, Target]] = []  # (value slot, target)
        self.memory: ArenaMemory | None = None


class MemoryPlanner:
    """Collects the plannable outputs of a plan under construction (see the module's docstring).

    ``inputs``: the names of the values a run is fed (graph inputs, and a body's outer-scope values): their
    shapes are the signature that values of run-time shape are laid out by."""

    def __init__(self, b: PlanBuilder, leaving: Iterable[str], stable: bool = False,
                 inputs: Iterable[str] = ()) -> None:
        self.b = b
        self.leaving = set(leaving)  # names whose values may leave the run: never planned
        self.inputs = tuple(inputs)
        self.arenas: dict[tuple[Device, int | None], _Arena] = {}
        self.aliases: dict[int, int] = {}  # a view's slot -> the slot it views
        self.stable = stable  # a kernel needs stable addresses: one kept block, one run at a time

    def target(self, name: str, device: Device, stream: int | None, allocator: Any,
               typed: tuple[tuple[int, ...] | None, Any] | None) -> tuple[Target | None, int | None]:
        """The target of value ``name`` about to be written on ``device`` by work on ``stream`` (a stream
        slot, or None for synchronous work), and the arena slot the writing step must read (None when the
        value is not plannable: unknown type, strings, or it leaves the run). ``typed``: its static
        (shape, dtype), the shape None when known only at run time; None when its type is unknown."""
        if typed is None:
            return None, None
        t = Target(allocator, *typed)
        if name in self.leaving or t.dtype.kind in "OUSV":
            return (None if t.shape is None else t), None
        arena = self._arena(device, stream, allocator)
        arena.targets.append((self.b.plan.slots[(name, device)], t))
        return t, arena.slot

    def stays(self, name: str) -> bool:
        """Whether the value ``name`` stays inside the run (no caller ever holds it): only such values are
        planned, staged in pinned memory, or allowed to be views of other values."""
        return name not in self.leaving

    def alias(self, view_slot: int, of_slot: int) -> None:
        self.aliases[view_slot] = of_slot

    def _arena(self, device: Device, stream: int | None, allocator: Any) -> _Arena:
        key = (device, stream)
        if key not in self.arenas:
            label = f"memory of {device}" + ("" if stream is None else f" (stream {len(self.arenas)})")
            slot = self.b.plan.slot(f"\0{label}", HOST)
            self.arenas[key] = _Arena(slot, device, stream, allocator, label)
        return self.arenas[key]

    def finish(self) -> None:
        """Plan every arena over the steps added so far; add the steps taking the run's memory and, for a
        stream-ordered allocator, those freeing what a run allocated itself in its stream's order. Called
        before the plan's final synchronization is added; ``give_back`` adds the step after it."""
        if not self.arenas:
            return
        steps = self.b.plan.steps
        uses: dict[int, list[int]] = {}
        for k, st in enumerate(steps):
            for s in (*st.ins, *st.outs):
                uses.setdefault(self._root(s), []).append(k)
        signature = None
        for arena in self.arenas.values():
            values: list[Lifetime] = []
            for slot, t in arena.targets:
                at = uses.get(slot, [])
                if not at or any(self.b.stream_of.get(k, _UNKNOWN) != arena.stream for k in at):
                    continue
                if t.shape is None and self.stable:
                    continue
                t.index = len(values)
                values.append(Lifetime(0 if t.shape is None else t.nbytes, min(at), max(at)))
            dynamic = any(t.shape is None and t.index is not None for _, t in arena.targets)
            alignment = max(256, int(getattr(arena.allocator, "alignment", 1)))
            arena.memory = memory = ArenaMemory(arena.allocator, values, alignment, self.stable, arena.label,
                                                dynamic)
            ins: tuple[int, ...] = ()
            if memory.dynamic:
                if signature is None:
                    signature = self.b.plan.slot("\0input shapes", HOST)
                ins = (signature,)
            text = f"take {arena.label} ({memory.pool.nbytes} bytes, {len(values)} values" + \
                   (", sizes of run-time shapes per input-shape signature)" if memory.dynamic else ")")
            steps.insert(0, Step(lambda sig=None, _m=memory: (_m.take(sig),), ins, (arena.slot,), (), text))
            if arena.stream is not None and memory.dynamic and getattr(arena.allocator, "stream_ordered", False):
                steps.append(Step(_own_freer, (arena.slot, arena.stream), (), (),
                                  f"free what the run allocated itself of {arena.label}, in stream order"))
        if signature is not None:
            plan = self.b.plan
            plan.signature = (signature, tuple(plan.slots[(n, HOST)] for n in self.inputs
                                               if (n, HOST) in plan.slots))

    def give_back(self) -> None:
        """Add run()'s last step: every arena's memory goes back (the streams are synchronized by then)."""
        if not self.arenas:
            return
        arenas = tuple(self.arenas.values())
        memories = tuple(a.memory for a in arenas)
        self.b.plan.steps.append(Step(_giver(memories), tuple(a.slot for a in arenas), (), (),
                                      "give back the run's planned memory"))
        plan = self.b.plan
        plan.arenas = tuple(zip((a.slot for a in arenas), memories))
        if self.stable:
            plan.exclusive = threading.Lock()

    def _root(self, s: int) -> int:
        while s in self.aliases:
            s = self.aliases[s]
        return s


def _own_freer(run: RunMemory, stream: Any) -> tuple:
    run.free_own(stream)
    return ()


def _giver(memories: tuple[ArenaMemory, ...]):
    def give(*runs):
        for memory, run in zip(memories, runs):
            memory.give(run)
        return ()

    return give
