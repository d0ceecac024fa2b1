"""Planned memory at run time: the layouts of one arena (the build-time one, and one per input-shape
signature), the bounded cache of those, and what one run holds of an arena.

Values of static shape have their size at build time; values whose shape follows the inputs' get theirs
from a run: the first run of a signature (the tuple of its feeds' shapes) places static values in the
build-time layout and allocates the others per call, noting their sizes; its end packs every value into a
layout for that signature, kept in an LRU of ``MAX_SIGNATURES``, so later runs of the signature take one
block. A value asking for more than its room (a shape that depends on the data) gets a buffer of its own
and widens the signature's layout. Knows nothing of plans or steps: arenas.py decides what is planned.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from .planned import BlockPool, Lifetime, assign_offsets, value_at
from .protocols import free_bytes
from .tensor import DeviceTensor

MAX_SIGNATURES = 8
"""Layouts kept per arena: a model fed ever-changing shapes keeps this many, the least recently used go."""


def shape_signature(values: Iterable[Any]) -> tuple:
    """The key of a run's layout: the shape of each value (tensors), the shapes of a sequence's items, or
    the type's name of anything else."""
    return tuple(_shape_of(v) for v in values)


def _shape_of(v: Any) -> Any:
    shape = getattr(v, "shape", None)
    if shape is not None:
        return tuple(shape)
    if isinstance(v, (list, tuple)):
        return ("seq", tuple(_shape_of(x) for x in v))
    return type(v).__name__


class Layout:
    """Each planned value's ``offsets`` and ``rooms`` (bytes it may use there) in the blocks of ``pool``."""

    __slots__ = ("offsets", "rooms", "pool")

    def __init__(self, allocator: Any, values: Sequence[Lifetime], alignment: int, stable: bool,
                 label: str) -> None:
        self.offsets, total = assign_offsets(values, alignment)
        self.rooms = [v.nbytes for v in values]
        self.pool = BlockPool(allocator, total, stable=stable, label=label)


class ArenaMemory:
    """The planned memory of one arena (a device, and the stream its values are used on) for a plan.

    ``values``: the lifetime of each planned value, by index (size 0 where the shape is known only at run
    time). ``dynamic``: some sizes are unknown, so runs are laid out per input-shape signature (never for a
    ``stable`` arena: its one block holds the static values, the others are allocated per call)."""

    def __init__(self, allocator: Any, values: Sequence[Lifetime], alignment: int, stable: bool = False,
                 label: str = "", dynamic: bool = False) -> None:
        self.allocator, self.values, self.alignment, self.label = allocator, tuple(values), alignment, label
        self.static = Layout(allocator, self.values, alignment, stable, label)
        self.dynamic = dynamic and not stable
        self._layouts: OrderedDict[Any, Layout] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def pool(self) -> BlockPool:
        """The pool of the build-time layout (static shapes only)."""
        return self.static.pool

    def signatures(self) -> list:
        """The signatures with a layout of their own, least recently used first."""
        with self._lock:
            return list(self._layouts)

    def layout(self, signature: Any) -> Layout | None:
        with self._lock:
            return self._layouts.get(signature)

    def take(self, signature: Any = None) -> RunMemory:
        """A run's memory: a block of its signature's layout when there is one, else of the static one."""
        layout = None
        if self.dynamic and signature is not None:
            with self._lock:
                layout = self._layouts.get(signature)
                if layout is not None:
                    self._layouts.move_to_end(signature)
        return RunMemory(self, layout or self.static, signature)

    def give(self, run: RunMemory | None, complete: bool = True) -> None:
        """Take back a run's memory once every use of it is complete; a ``complete`` run's sizes are learnt."""
        if run is None:
            return
        run.free_own()
        run.layout.pool.give(run.block)
        run.block = None
        if complete and self.dynamic and run.signature is not None and run.asked:
            self._learn(run.signature, run.asked)

    def _learn(self, signature: Any, asked: dict[int, int]) -> None:
        """Make (or widen) the layout of ``signature`` so that every size a run asked for fits."""
        with self._lock:
            old = self._layouts.get(signature)
            rooms = list((old or self.static).rooms)
            if all(n <= rooms[i] for i, n in asked.items()):
                return  # another run of the signature learnt it meanwhile
            for i, n in asked.items():
                rooms[i] = max(rooms[i], n)
            values = [replace(v, nbytes=r) for v, r in zip(self.values, rooms)]
            new = self._layouts[signature] = Layout(self.allocator, values, self.alignment, False,
                                                    f"{self.label} for input shapes {signature}")
            self._layouts.move_to_end(signature)
            gone = [old] if old is not None else []
            while len(self._layouts) > MAX_SIGNATURES:
                gone.append(self._layouts.popitem(last=False)[1])
        for layout in gone:
            layout.pool.close()  # blocks runs still hold are freed when given back
        new.pool.give(new.pool.take())  # the next run of the signature allocates nothing


class RunMemory:
    """What one run holds of an arena: a block of the chosen ``layout``, and the buffers it allocated itself
    (values without room in the layout), freed when the run gives its memory back."""

    __slots__ = ("arena", "layout", "block", "signature", "asked", "own")

    def __init__(self, arena: ArenaMemory, layout: Layout, signature: Any) -> None:
        self.arena, self.layout, self.signature = arena, layout, signature
        self.block = layout.pool.take()
        self.asked: dict[int, int] = {}  # value index -> bytes it asked for beyond its room
        self.own: list[Any] = []  # buffers allocated for this run alone

    def value(self, index: int, shape: tuple[int, ...], dtype: Any, stream: Any = None) -> Any:
        """Planned value ``index`` with ``shape``/``dtype``: in the block when it fits its room, else a buffer
        of its own (allocated for ``stream``), whose size the arena learns at the run's end."""
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        allocator = self.arena.allocator
        if self.block is not None and nbytes <= self.layout.rooms[index]:
            return value_at(allocator, self.block, self.layout.offsets[index], shape, dtype)
        if nbytes > self.asked.get(index, 0):
            self.asked[index] = nbytes
        if allocator.device.is_host:
            return np.empty(shape, dtype)
        value = DeviceTensor.empty(allocator, shape, dtype, stream)
        self.own.append(value.owner)
        return value

    def free_own(self, stream: Any = None) -> None:
        """Free the buffers this run allocated itself: in ``stream``'s order (every use of them enqueued on it
        before), or, with None, once their work is complete."""
        own, self.own = self.own, []
        for buffer in own:
            free_bytes(self.arena.allocator, buffer, stream)
