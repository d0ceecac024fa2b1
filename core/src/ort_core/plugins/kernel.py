"""Kernels of contract v2: the context a compiled kernel runs in, and the wrapper that asks for it.

A compiled kernel is either a plain callable ``kernel(*inputs) -> outputs`` (the "return arrays" form,
called directly: what host providers use, at no cost per call) or a ``ContextKernel``, called with a
``KernelContext`` that carries its inputs, the output buffers to fill, the run's stream and scratch
memory. The executor builds contexts; this module only defines them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..memory.protocols import allocate_bytes
from ..memory.tensor import DeviceTensor


@dataclass(frozen=True)
class ContextKernel:
    """A kernel called as ``run(ctx)`` with a KernelContext; it fills ``ctx.outputs``.

    ``views``: output index -> input index, for outputs the kernel may hand back as a view of that input's
    memory (Reshape, Identity, Squeeze...) instead of writing them. The core decides per output whether it
    may (``ctx.may_view(k)``): never for a value that leaves the run, which gets a buffer of its own. A
    kernel that returns memory shared with an input without declaring it fails the run.

    ``stable_addresses``: the kernel needs its inputs and outputs at the same addresses on every run (to
    replay work captured once, as CUDA graphs do). The core then places every value of static shape it
    plans for this provider in one block kept for the session, and runs the session one call at a time.
    Values whose shape depends on the data, and device values fed by the caller, keep whatever address
    they have: a kernel must check (the ``ptr`` of each input) before replaying.
    """

    run: Callable[[KernelContext], None]
    views: Mapping[int, int] = field(default_factory=dict)
    stable_addresses: bool = False


class KernelContext:
    """What one call of a ContextKernel sees.

    ``inputs``: one value per ``subgraph.inputs`` (numpy arrays on the host, DeviceTensors elsewhere).
    ``outputs``: one entry per ``subgraph.outputs``: a buffer already allocated on the provider's device
    where the output's static shape and type are known (write into it), else None until the kernel
    calls ``output(i, shape, dtype)``, or, for an output that ``may_view``, until it stores a view of
    its input there. Pre-allocated buffers may be planned memory shared over time with other values: write
    them only through work ordered on ``stream``. ``stream``: the run's stream of the provider (None for
    synchronous providers). ``scratch(nbytes)``: temporary device memory, alive while referenced (work the
    kernel enqueues holds the buffer it uses).
    """

    __slots__ = ("inputs", "outputs", "stream", "allocator", "views")

    def __init__(self, inputs: Sequence[Any], outputs: list[Any], stream: Any, allocator: Any,
                 views: Mapping[int, int] | None = None) -> None:
        self.inputs, self.outputs, self.stream, self.allocator = tuple(inputs), outputs, stream, allocator
        self.views = views or {}

    def may_view(self, index: int) -> bool:
        """Whether output ``index`` may be handed back as a view of the input the kernel declared for it
        (``ContextKernel.views``); when False the kernel writes the output into a buffer of its own."""
        return index in self.views

    def output(self, index: int, shape: Sequence[int], dtype: Any) -> Any:
        """The buffer for output ``index`` with ``shape``/``dtype``: the pre-allocated one when it matches,
        else a new one from the provider's allocator (a DeviceTensor, or a numpy array on the host)."""
        shape, dtype = tuple(int(d) for d in shape), np.dtype(dtype)
        current = self.outputs[index]
        if current is not None and tuple(current.shape) == shape and current.dtype == dtype:
            return current
        value = allocate(self.allocator, shape, dtype, self.stream)
        self.outputs[index] = value
        return value

    def scratch(self, nbytes: int) -> Any:
        """A temporary buffer of ``nbytes`` from the provider's allocator (work enqueued with it keeps it;
        a stream-ordered allocator gets the run's stream)."""
        return allocate_bytes(self.allocator, nbytes, self.stream)


def allocate(allocator: Any, shape: tuple[int, ...], dtype: np.dtype, stream: Any = None) -> Any:
    """An uninitialized value of ``shape``/``dtype`` on ``allocator``'s device (``stream``: the stream that
    first uses it, passed on to a stream-ordered allocator)."""
    if allocator.device.is_host:
        return np.empty(shape, dtype)
    return DeviceTensor.empty(allocator, shape, dtype, stream)
