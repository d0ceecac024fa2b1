"""Kernels of contract v2: the context a compiled kernel runs in, and the wrapper that asks for it.

A compiled kernel is either a plain callable ``kernel(*inputs) -> outputs`` (the "return arrays" form,
called directly: what host providers use, at no cost per call) or a ``ContextKernel``, called with a
``KernelContext`` that carries its inputs, the output buffers to fill, the run's stream and scratch
memory. The executor builds contexts; this module only defines them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..memory.tensor import DeviceTensor


@dataclass(frozen=True)
class ContextKernel:
    """A kernel called as ``run(ctx)`` with a KernelContext; it fills ``ctx.outputs``. (Declaring outputs as
    views of inputs, and stable output addresses for graph replay, are not part of the contract yet.)"""

    run: Callable[[KernelContext], None]


class KernelContext:
    """What one call of a ContextKernel sees.

    ``inputs``: one value per ``subgraph.inputs`` (numpy arrays on the host, DeviceTensors elsewhere).
    ``outputs``: one entry per ``subgraph.outputs``: a buffer already allocated on the provider's device
    where the output's static shape and type are known (write into it), else None until the kernel
    calls ``output(i, shape, dtype)``. ``stream``: the run's stream of the provider (None for
    synchronous providers). ``scratch(nbytes)``: temporary device memory, alive while referenced (work the
    kernel enqueues holds the buffer it uses).
    """

    __slots__ = ("inputs", "outputs", "stream", "allocator")

    def __init__(self, inputs: Sequence[Any], outputs: list[Any], stream: Any, allocator: Any) -> None:
        self.inputs, self.outputs, self.stream, self.allocator = tuple(inputs), outputs, stream, allocator

    def output(self, index: int, shape: Sequence[int], dtype: Any) -> Any:
        """The buffer for output ``index`` with ``shape``/``dtype``: the pre-allocated one when it matches,
        else a new one from the provider's allocator (a DeviceTensor, or a numpy array on the host)."""
        shape, dtype = tuple(int(d) for d in shape), np.dtype(dtype)
        current = self.outputs[index]
        if current is not None and tuple(current.shape) == shape and current.dtype == dtype:
            return current
        value = allocate(self.allocator, shape, dtype)
        self.outputs[index] = value
        return value

    def scratch(self, nbytes: int) -> Any:
        """A temporary buffer of ``nbytes`` from the provider's allocator (work enqueued with it keeps it)."""
        return self.allocator.allocate(int(nbytes))


def allocate(allocator: Any, shape: tuple[int, ...], dtype: np.dtype) -> Any:
    """An uninitialized value of ``shape``/``dtype`` on ``allocator``'s device."""
    if allocator.device.is_host:
        return np.empty(shape, dtype)
    return DeviceTensor.empty(allocator, shape, dtype)
