"""Memory planning of an execution plan: device values of static shape placed in one block per device and
stream, by lifetime, so a run allocates one block per device instead of one buffer per value.

planning.py builds the steps; for every output it pre-allocates (a ContextKernel's output of known shape,
an asynchronous copy to a device) it asks for a ``Target`` here, and the PlanBuilder records which stream
each step works on. ``MemoryPlanner.finish`` then works out each value's lifetime over the final step list, packs the
values into blocks (memory/planned.py), and adds the steps that take a block from the plan's pool at the
start of a run and give it back at the end (after run() synchronized its streams).

A value is planned only where reusing its bytes is safe without events: it is written and read on one
stream (work on a stream runs in order) or only by synchronous steps, and it never leaves the run (graph
outputs, and values the caller may get through IOBinding, get buffers of their own). A declared view
(``ContextKernel.views``) is no value of its own: it extends the lifetime of the value it views. Shapes
known only at run time are allocated per call from the provider's allocator, as before.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

import numpy as np

from .memory.device import HOST, Device
from .memory.planned import BlockPool, Lifetime, assign_offsets, value_at
from .plan import PlanBuilder, Step
from .plugins.kernel import allocate

_UNKNOWN = object()  # the stream key of steps this planner was not told about


class Target:
    """Where one pre-allocated output goes: ``offset`` in the run's block of its arena once planned (None:
    a buffer of its own from the allocator, each call)."""

    __slots__ = ("allocator", "shape", "dtype", "offset")

    def __init__(self, allocator: Any, shape: tuple[int, ...], dtype: Any) -> None:
        self.allocator, self.shape, self.dtype, self.offset = allocator, tuple(shape), np.dtype(dtype), None

    def make(self, block: Any, stream: Any = None) -> Any:
        if self.offset is None or block is None:
            return allocate(self.allocator, self.shape, self.dtype, stream)
        return value_at(self.allocator, block, self.offset, self.shape, self.dtype)

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize


class _Arena:
    def __init__(self, slot: int, device: Device, stream: Any, allocator: Any, label: str) -> None:
        self.slot, self.device, self.stream, self.allocator, self.label = slot, device, stream, allocator, label
        self.targets: list[tuple[int, Target]] = []  # (value slot, target)
        self.pool: BlockPool | None = None


class MemoryPlanner:
    """Collects the plannable outputs of a plan under construction (see the module's docstring)."""

    def __init__(self, b: PlanBuilder, leaving: Iterable[str], stable: bool = False) -> None:
        self.b = b
        self.leaving = set(leaving)  # names whose values may leave the run: never planned
        self.arenas: dict[tuple[Device, int | None], _Arena] = {}
        self.aliases: dict[int, int] = {}  # a view's slot -> the slot it views
        self.stable = stable  # a kernel needs stable addresses: one kept block, one run at a time

    def target(self, name: str, device: Device, stream: int | None, allocator: Any,
               static: tuple[tuple[int, ...], Any] | None) -> tuple[Target | None, int | None]:
        """The target of value ``name`` about to be written on ``device`` by work on ``stream`` (a stream
        slot, or None for synchronous work), and the arena slot the writing step must read (None when the
        value is not plannable: unknown shape, or it leaves the run)."""
        if static is None:
            return None, None
        t = Target(allocator, *static)
        if name in self.leaving or t.dtype.kind in "OUSV":
            return t, None
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
        """Plan every arena over the steps added so far, and add the steps taking and giving back blocks."""
        if not self.arenas:
            return
        steps = self.b.plan.steps
        uses: dict[int, list[int]] = {}
        for k, st in enumerate(steps):
            for s in (*st.ins, *st.outs):
                uses.setdefault(self._root(s), []).append(k)
        pools = []
        for arena in self.arenas.values():
            chosen: list[tuple[Target, Lifetime]] = []
            for slot, t in arena.targets:
                at = uses.get(slot, [])
                if at and all(self.b.stream_of.get(k, _UNKNOWN) == arena.stream for k in at):
                    chosen.append((t, Lifetime(t.nbytes, min(at), max(at))))
            alignment = max(256, int(getattr(arena.allocator, "alignment", 1)))
            offsets, total = assign_offsets([life for _, life in chosen], alignment)
            for (t, _), offset in zip(chosen, offsets):
                t.offset = offset
            arena.pool = BlockPool(arena.allocator, total, stable=self.stable, label=arena.label)
            pools.append(arena.pool)
            steps.insert(0, Step(lambda _p=arena.pool: (_p.take(),), (), (arena.slot,), (),
                                 f"take {arena.label} ({total} bytes, {len(chosen)} values)"))
        slots = tuple(a.slot for a in self.arenas.values())
        steps.append(Step(_giver(tuple(pools)), slots, (), (), "give back the run's planned memory"))
        plan = self.b.plan
        plan.arenas = tuple((a.slot, a.pool) for a in self.arenas.values())
        if self.stable:
            plan.exclusive = threading.Lock()

    def _root(self, s: int) -> int:
        while s in self.aliases:
            s = self.aliases[s]
        return s


def _giver(pools: tuple[BlockPool, ...]):
    def give(*blocks):
        for pool, block in zip(pools, blocks):
            pool.give(block)
        return ()

    return give
