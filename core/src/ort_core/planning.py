"""From placed, compiled subgraphs to an ExecutionPlan: value slots per device, the copies between
devices, and for asynchronous providers their per-run streams, the waits between streams and the
synchronization at run()'s end.

Decides nothing about placement (the partitioner's job) and runs nothing (plan.py walks the steps).
Every copy goes through a provider's data transfer: on the consumer's stream when the transfer can
copy asynchronously (``copy_into``), followed by a synchronization when a host kernel reads the result.
Host values going up to such a stream pass through the provider's pinned staging memory when it offers
some (``staging_allocator``), so that the copy is asynchronous from the caller's pageable arrays too; the
staged buffer is held until run()'s closing synchronization.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .arenas import MemoryPlanner, Target
from .errors import InvalidGraph, KernelError, warn
from .ir.types import np_dtype
from .memory.device import HOST, Device
from .memory.planned import overlaps
from .memory.protocols import host_array
from .memory.stream import close_all, synchronize_all
from .memory.tensor import DeviceTensor
from .plan import ExecutionPlan, PlanBuilder, checked_kernel
from .plugins.kernel import ContextKernel, KernelContext, allocate
from .profiling import SYNC_LABEL
from .transfers import Transfers


@dataclass
class Placed:
    """One compiled subgraph ready to be planned: its provider instance, subgraph, kernel and label."""

    provider: Any  # a SessionProvider
    subgraph: Any  # a FusedSubgraph
    kernel: Any
    label: str  # "node 'x' (Relu) on CPUExecutionProvider"


def build_plan(graph, placed: Sequence[Placed], instances: dict[str, Any], check_outputs: bool,
               source: str, outer: Sequence[str] = ()) -> tuple[ExecutionPlan, dict[str, int]]:
    """The plan and the slot holding each graph output on the host. ``outer``: for a graph body, the
    outer-scope values it reads, fed on the host like its inputs."""
    b = PlanBuilder()
    inits = graph.initializers
    b.constants = set(graph.constant_initializers())
    for name, value in inits.items():
        b.define(name, HOST, value)
    for v in graph.inputs:
        b.define(v.name, HOST, inits.get(v.name))
    for name in outer:
        b.define(name, HOST)
    memory = MemoryPlanner(b, (v.name for v in graph.outputs),
                           stable=any(isinstance(p.kernel, ContextKernel) and p.kernel.stable_addresses
                                      for p in placed),
                           inputs=[*(v.name for v in graph.inputs), *outer])
    streams = _Streams(b, instances, {p.provider.name for p in placed}, memory, graph)
    transfer = Transfers(instances[name] for name in dict.fromkeys(p.provider.name for p in placed)).find
    for p in placed:
        ep, sub = p.provider, p.subgraph
        device, own = ep.device, streams.slot(ep.name)
        ins = [streams.read(n, device, own, transfer, p.label) for n in sub.inputs]
        outs = [b.define(n, device) for n in sub.outputs]
        kernel = p.kernel
        if isinstance(kernel, ContextKernel):
            kernel, arena = _context_step(kernel, ep, sub, graph, memory, own, ins, outs, p.label)
            if own is not None:
                ins.append(own)
            if arena is not None:
                ins.append(arena)
        if check_outputs:
            kernel = checked_kernel(kernel, sub.outputs, graph, p.label)
        b.add(kernel, ins, outs, p.label, stream=own)
        for s in outs:
            streams.written_on[s] = own
    output_slots = {}
    for v in graph.outputs:
        if v.name not in b.location:
            raise InvalidGraph(f"{source}: graph output '{v.name}' is produced by no node, input or initializer")
        slot = streams.read(v.name, HOST, None, transfer, f"graph output '{v.name}'")
        output_slots[v.name] = slot
        b.keep.add(slot)
    memory.finish()  # its frees in stream order go before the synchronization, its give-back after
    streams.finish()
    memory.give_back()
    b.plan.stream_slots = tuple(streams.slots.values())
    return b.finish(), output_slots


class _Streams:
    """The stream slots of a plan's asynchronous providers, which slot each value was written on, and the
    copy and wait steps that keep the order between streams and the host."""

    def __init__(self, b: PlanBuilder, instances: dict[str, Any], used: set[str], memory: MemoryPlanner,
                 graph) -> None:
        self.b, self.instances, self.memory, self.graph = b, instances, memory, graph
        self.slots: dict[str, int] = {}
        self.written_on: dict[int, int | None] = {}  # value slot -> stream slot of the work writing it
        self.staged: list[int] = []  # slots of pinned staging buffers, held until the closing synchronization
        for name in sorted(used):
            ep = instances[name]
            if ep.asynchronous:
                slot = self.slots[name] = b.plan.slot(f"\0stream of {name}", HOST)
                b.add(lambda _new=ep.ep.stream: (_new(),), (), (slot,), f"stream of {name}")

    def slot(self, provider: str) -> int | None:
        return self.slots.get(provider)

    def read(self, name: str, device: Device, consumer: int | None, transfer, label: str) -> int:
        """The slot holding ``name`` on ``device`` for a reader on stream slot ``consumer`` (None: the host
        or a synchronous provider), with a copy and a wait inserted where needed."""
        b = self.b
        if name not in b.location:
            raise InvalidGraph(f"{label}: reads '{name}', which no node, graph input or initializer defines")
        src = b.location[name]
        src_slot = b.plan.slots[(name, src)]
        if src == device:
            self._wait(self.written_on.get(src_slot), consumer, label)
            return src_slot
        key = (name, device)
        if key in b.copies:
            self._wait(self.written_on.get(b.copies[key]), consumer, label)
            return b.copies[key]
        t = transfer(src, device)
        if t is None:
            raise InvalidGraph(f"{label}: no data transfer to move '{name}' from {src} to {device}")
        producer = self.written_on.get(src_slot)
        to_host = device.is_host and producer is not None  # on the producer's stream, then the host waits
        if name in b.constants or not hasattr(t, "copy_into") or (consumer is None and not to_host):
            self._wait(producer, None, label)  # a synchronous copy reads what the producing stream wrote
            return b.read(name, device, t, label, stream=None)  # at build for constants, else one synchronous copy
        dst_slot = b.plan.slot(name, device)
        b.copies[key] = dst_slot
        text = f"copy of '{name}' {src} -> {device}"
        if to_host:
            # a value the host reads inside the run lands in the provider's pinned staging memory, if it has any
            staging = self._owner(src).staging_allocator() if self.memory.stays(name) else None
            b.add(_copy_to_host(t, staging), (src_slot, producer), (dst_slot,), text, copy=True, stream=producer)
            self.written_on[dst_slot] = None
            return dst_slot
        owner = self._owner(device)
        allocator = owner.allocator(device)  # the reader is on a stream: the copy goes there
        typed = _typed_outputs(self.graph, [name])[0]
        target, arena = self.memory.target(name, device, consumer, allocator, typed)
        extra = () if arena is None else (arena,)
        staging = owner.staging_allocator() if src == HOST and consumer is not None else None
        outs: tuple[int, ...] = (dst_slot,)
        if producer is not None and producer != consumer:  # another stream wrote it: an event first
            copy, ins = _copy_after(t, allocator, target), (src_slot, producer, consumer, *extra)
        elif staging is not None:  # pageable host memory: through pinned staging, held until the run's end
            outs = (dst_slot, b.plan.slot(f"\0staged {name} for {device}", HOST))
            self.staged.append(outs[1])
            copy, ins = _staged_copy_on(t, allocator, target, staging), (src_slot, consumer, *extra)
            text = f"copy of '{name}' {src} -> {device} through {staging.device}"
        else:
            copy, ins = _copy_on(t, allocator, target), (src_slot, consumer, *extra)
        b.add(copy, ins, outs, text, copy=True, stream=consumer)
        self.written_on[dst_slot] = consumer
        return dst_slot

    def _wait(self, producer: int | None, consumer: int | None, label: str) -> None:
        """Order a reader after the stream that wrote its input, when they differ."""
        if producer is None or producer == consumer:
            return
        if consumer is None:
            self.b.add(_host_waits, (producer,), (), f"wait for {label}'s input")
        else:
            self.b.add(_stream_waits, (producer, consumer), (), f"event before {label}")

    def _owner(self, device: Device):
        """The first provider instance of the plan computing on ``device``."""
        for ep in self.instances.values():
            if device in ep.devices:
                return ep
        raise InvalidGraph(f"no provider of this session allocates on {device}")

    def finish(self) -> None:
        """run() synchronizes every stream at its end: device values it hands out are complete."""
        if self.slots:
            slots, n = (*self.slots.values(), *self.staged), len(self.slots)
            self.b.add(lambda *xs: _finish_streams(*xs[:n]), slots, (), SYNC_LABEL)


def _finish_streams(*streams) -> tuple:
    """run()'s last step: wait for every stream, then give them back to their providers. (When a wait
    raises, the executor's failure path synchronizes and closes them all: ExecutionPlan._abandon.)"""
    synchronize_all(streams)
    try:
        close_all(streams)
    except Exception as e:  # noqa: BLE001 - the run's results are complete; a provider failed to recycle
        warn(f"closing a stream after the run failed: {type(e).__name__}: {e}")
    return ()


def _host_waits(producer) -> tuple:
    producer.synchronize()
    return ()


def _stream_waits(producer, consumer) -> tuple:
    consumer.wait(producer.record())
    return ()


def _copy_to_host(t, staging=None) -> Callable:
    def copy(value, stream):
        shape, dtype = tuple(value.shape), np.dtype(value.dtype)
        if staging is None:
            out = np.empty(shape, dtype)
        else:
            out = host_array(staging.allocate(int(np.prod(shape, dtype=np.int64)) * dtype.itemsize), shape, dtype)
        t.copy_into(value, out, stream)
        stream.synchronize()
        return (out,)

    return copy


def _like(allocator, target: Target | None, value: Any, memory: Any, stream: Any) -> Any:
    """The buffer a copy of ``value`` on ``stream`` writes: in the run's planned ``memory`` when planned."""
    if target is None or target.dtype != value.dtype:
        return allocate(allocator, tuple(value.shape), value.dtype, stream)
    return target.make(memory, stream, tuple(value.shape))


def _copy_on(t, allocator, target) -> Callable:
    def copy(value, stream, memory=None):
        out = _like(allocator, target, value, memory, stream)
        t.copy_into(value, out, stream)
        return (out,)

    return copy


def _staged_copy_on(t, allocator, target, staging) -> Callable:
    """Copy a host value into a staging buffer, then from there on ``stream``; the buffer is the second result,
    so that the plan holds it until the copy is certainly done."""
    plain = _copy_on(t, allocator, target)

    def copy(value, stream, memory=None):
        if not isinstance(value, np.ndarray) or value.dtype.hasobject:  # strings, sequences: copied as they are
            return (*plain(value, stream, memory), None)
        staged = host_array(staging.allocate(value.nbytes), value.shape, value.dtype)
        np.copyto(staged, value)
        return (*plain(staged, stream, memory), staged)

    return copy


def _copy_after(t, allocator, target) -> Callable:
    def copy(value, producer, consumer, memory=None):
        consumer.wait(producer.record())
        out = _like(allocator, target, value, memory, consumer)
        t.copy_into(value, out, consumer)
        return (out,)

    return copy


def _typed_outputs(graph, names: Sequence[str]) -> list[tuple[tuple[int, ...] | None, Any] | None]:
    """(shape, dtype) of each output whose static type is a tensor of known element type, the shape None
    unless it is fixed; None for the others."""
    out = []
    for name in names:
        t = graph.type_of(name)
        if t is None or t.kind != "tensor" or not t.elem_type:
            out.append(None)
            continue
        try:
            dtype = np_dtype(t.elem_type)
        except (KeyError, TypeError, ValueError):
            out.append(None)
            continue
        fixed = t.shape is not None and all(isinstance(d, int) and d >= 0 for d in t.shape)
        out.append((tuple(t.shape) if fixed else None, dtype))
    return out


def _context_step(kernel: ContextKernel, ep, sub, graph, memory: MemoryPlanner, own: int | None,
                  ins: list[int], outs: list[int], label: str) -> tuple[Callable, int | None]:
    """A plan step calling a ContextKernel, and the arena slot it reads (None: nothing planned).

    Outputs of known static shape are pre-allocated: in the run's planned memory when the memory planner
    takes them, else from the provider's allocator per call; the rest are allocated through the context
    (``ctx.output``), in the run's planned memory too when planned per input-shape signature. Declared
    views are allowed for values that stay inside the run. The step's inputs are the subgraph's, then the
    stream when the provider has one, then the run's memory of the arena when outputs are planned."""
    run, allocator = kernel.run, ep.allocator(ep.device)
    has_stream = ep.asynchronous
    views = {k: j for k, j in kernel.views.items()
             if 0 <= k < len(outs) and 0 <= j < len(ins) and memory.stays(sub.outputs[k])}
    for k, j in views.items():
        memory.alias(outs[k], ins[j])
    targets: list[Target | None] = []
    arena = None
    for k, (name, typed) in enumerate(zip(sub.outputs, _typed_outputs(graph, sub.outputs))):
        if k in views:
            targets.append(None)
            continue
        target, slot = memory.target(name, ep.device, own, allocator, typed)
        targets.append(target)
        arena = slot if slot is not None else arena
    planned = arena is not None
    dynamic = any(t is not None and t.shape is None for t in targets)
    n_in = len(ins)

    def step(*xs):
        run_memory = xs[-1] if planned else None
        stream = xs[n_in] if has_stream else None
        inputs = xs[:n_in]
        outputs = [None if t is None or t.shape is None else t.make(run_memory, stream) for t in targets]
        if dynamic:
            ctx = _PlannedContext(inputs, outputs, stream, allocator, views)
            ctx.planned = (targets, run_memory)
        else:
            ctx = KernelContext(inputs, outputs, stream, allocator, views)
        run(ctx)
        for k, o in enumerate(ctx.outputs):
            if o is None:
                missing = [k for k, o in enumerate(ctx.outputs) if o is None]
                raise KernelError(f"{label}: the kernel left output(s) {missing} unallocated")
            if type(o) is DeviceTensor:
                _check_not_shared(o, k, inputs, views, sub, label)
        return ctx.outputs

    return step, arena


class _PlannedContext(KernelContext):
    """A KernelContext whose ``output`` places outputs of run-time shape in the run's planned memory."""

    __slots__ = ("planned",)

    def output(self, index: int, shape: Sequence[int], dtype: Any) -> Any:
        targets, run_memory = self.planned
        target = targets[index]
        if target is None or target.shape is not None:
            return super().output(index, shape, dtype)
        shape, dtype = tuple(int(d) for d in shape), np.dtype(dtype)
        current = self.outputs[index]
        if current is not None and tuple(current.shape) == shape and current.dtype == dtype:
            return current
        value = self.outputs[index] = target.make(run_memory, self.stream, shape, dtype)
        return value


def _check_not_shared(o: DeviceTensor, k: int, inputs, views: dict[int, int], sub, label: str) -> None:
    """A kernel's output ``k`` shares no bytes with an input unless it is a view it may hand back."""
    for j, x in enumerate(inputs):
        if type(x) is DeviceTensor and x.owner is o.owner and views.get(k) != j and overlaps(x, o):
            raise KernelError(f"{label}: output '{sub.outputs[k]}' shares memory with input '{sub.inputs[j]}' "
                              "without being declared (and allowed) as a view of it (ContextKernel.views, "
                              "KernelContext.may_view)")
