"""The stateless kernel of a compiled subgraph: programs cached per input-shape signature, and the
per-call state (buffers, memory objects, exec-argument arrays) pooled so that threads never share it.

Python only dispatches: each call binds the feeds and fresh output arrays to prepared memory
objects and executes the prepared primitives in order. What the primitives are is ``lowering``'s job.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from . import enums as E
from . import primitives as P
from .library import Library
from .lowering import Builder, Program, Spec
from .options import Options

F32 = np.dtype(np.float32)


def plan_slots(program: Program) -> tuple[dict[int, int], list[int]]:
    """Share per-call scratch storage between internal buffers whose lifetimes (first to last step
    touching them) do not overlap: buffer id -> slot, and each slot's size in bytes."""
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    bufs: dict[int, Any] = {}
    for i, step in enumerate(program.steps):
        for _, mem in step.args:
            if mem.buf.kind == "internal":
                key = id(mem.buf)
                bufs[key] = mem.buf
                first.setdefault(key, i)
                last[key] = i
    ending: dict[int, list[int]] = {}
    for key, i in last.items():
        ending.setdefault(i, []).append(key)
    starting: dict[int, list[int]] = {}
    for key, i in first.items():
        starting.setdefault(i, []).append(key)
    slot_of: dict[int, int] = {}
    sizes: list[int] = []
    free: list[int] = []
    for i in range(len(program.steps)):
        for key in starting.get(i, []):
            need = bufs[key].nbytes
            fit = [s for s in free if sizes[s] >= need]
            if fit:
                s = min(fit, key=lambda s: sizes[s])
            elif free:
                s = max(free, key=lambda s: sizes[s])
                sizes[s] = need
            else:
                s = len(sizes)
                sizes.append(need)
            if s in free:
                free.remove(s)
            slot_of[key] = s
        for key in ending.get(i, []):
            free.append(slot_of[key])
    return slot_of, sizes


class Instance:
    """Everything one call needs of its own: scratch buffers, a stream, a dnnl_memory_t per Mem and
    the exec-argument arrays, built once and reused by later calls (one call at a time)."""

    def __init__(self, lib: Library, program: Program, slot_of: dict[int, int], sizes: list[int]) -> None:
        ffi = lib.ffi
        self.lib = lib
        self.slots = [P.aligned_bytes(max(n, 64)) for n in sizes]
        scratch = max((s.scratch.size for s in program.steps if s.scratch is not None), default=0)
        self.scratch = P.aligned_bytes(max(scratch, 64))
        self.stream = P.stream(lib)
        self._keep: list[Any] = []
        n_in = max((b.index for b in program.bufs if b.kind == "input"), default=-1) + 1
        self.in_binds: list[list[Any]] = [[] for _ in range(n_in)]
        self.out_binds: list[list[Any]] = [[] for _ in program.output_shapes]
        handles: dict[int, Any] = {}
        for mem in program.mems:
            buf = mem.buf
            if buf.kind == "const":
                data = buf.array
            elif buf.kind == "internal":
                data = self.slots[slot_of[id(buf)]] if id(buf) in slot_of else None
            else:
                data = None  # feeds and results: bound per call
            handle = P.memory(lib, mem.md, data)
            handles[id(mem)] = handle
            if buf.kind == "input":
                self.in_binds[buf.index].append(handle)
            elif buf.kind == "output":
                self.out_binds[buf.index].append(handle)
        self.calls: list[tuple[Any, int, Any]] = []
        for step in program.steps:
            pairs = [(arg, handles[id(mem)]) for arg, mem in step.args]
            if step.scratch is not None:
                handle = P.memory(lib, step.scratch, self.scratch)
                self._keep.append(handle)
                pairs.append((E.ARG_SCRATCHPAD, handle))
            self.calls.append((step.prim, len(pairs), ffi.new("dnnl_exec_arg_t[]", pairs)))
        self.handles = handles  # keeps the memory objects alive: the exec-argument arrays hold raw pointers
        self.labels = [s.label for s in program.steps]

    def run(self, xs: list[np.ndarray], out_shapes: list[tuple[int, ...]], out_dtypes: list[np.dtype]) \
            -> list[np.ndarray]:
        ffi, c = self.lib.ffi, self.lib.lib
        # ffi.from_buffer: the array's data pointer without numpy's ctypes object (~7x cheaper)
        from_buffer, set_handle = ffi.from_buffer, c.dnnl_memory_set_data_handle
        for x, mems in zip(xs, self.in_binds):
            if mems:
                ptr = from_buffer(x)
                for m in mems:
                    set_handle(m, ptr)
        outs = []
        for shape, dtype, mems in zip(out_shapes, out_dtypes, self.out_binds):
            arr = np.empty(shape, dtype)
            if mems:
                ptr = from_buffer(arr)
                for m in mems:
                    set_handle(m, ptr)
            outs.append(arr)
        execute, stream = c.dnnl_primitive_execute, self.stream
        for k, (prim, n, args) in enumerate(self.calls):
            status = execute(prim, stream, n, args)
            if status:
                self.lib.check(status, f"dnnl_primitive_execute({self.labels[k]})")
        status = c.dnnl_stream_wait(stream)
        if status:
            self.lib.check(status, "dnnl_stream_wait")
        return outs


SMALL_PROGRAM_BYTES = 256 << 10
"""Programs whose steps touch less memory than this run on one OpenMP thread: their primitives take
microseconds, less than waking a second thread costs, and a sleeping thread woken while another pool spins
on the cores (numpy's BLAS, or another runtime in the process) can take a millisecond to come."""


class Compiled:
    """A program for one signature and the pool of its per-call instances."""

    def __init__(self, lib: Library, program: Program) -> None:
        self.lib, self.program = lib, program
        self.slot_of, self.sizes = plan_slots(program)
        touched = {id(mem.buf): mem.buf.nbytes for step in program.steps for _, mem in step.args}
        self.small = sum(touched.values()) < SMALL_PROGRAM_BYTES
        self.out_shapes = list(program.output_shapes)
        self.out_dtypes = list(program.output_dtypes) or [F32] * len(self.out_shapes)
        self._free: list[Instance] = []
        self._lock = threading.Lock()

    def run(self, xs: list[np.ndarray]) -> list[np.ndarray]:
        with self._lock:
            inst = self._free.pop() if self._free else None
        if inst is None:
            inst = Instance(self.lib, self.program, self.slot_of, self.sizes)
        try:
            return inst.run(xs, self.out_shapes, self.out_dtypes)
        finally:
            with self._lock:
                self._free.append(inst)


class Kernel:
    """``kernel(*inputs)`` -> one array per subgraph output (float32, or a quantized type), computed by oneDNN
    primitives built for the inputs' shapes on first sight of each shape signature.

    ``defaults`` are initializers a feed may override (models that list their weights as graph
    inputs): while a call passes the initializer itself (the very array object), it is treated as a
    constant (weights reordered once, BatchNormalization folded); a fed replacement selects a
    program that reads it at run time.
    """

    def __init__(self, lib: Library, spec: Spec, options: Options, name: str = "",
                 defaults: dict[str, np.ndarray] | None = None) -> None:
        self.lib, self.spec, self.options, self.name = lib, spec, options, name
        self.bf16 = options.precision == "bf16"
        defaults = defaults or {}
        self.guards = [(k, n, defaults[n]) for k, n in enumerate(spec.inputs)
                       if n in defaults and n not in spec.constants]
        self.n_inputs = len(spec.inputs)
        self.in_dtypes = [np.dtype(spec.dtypes.get(n, F32)) for n in spec.inputs]
        self.variants: dict[tuple, tuple[Spec, list[int]]] = {}
        self.programs: dict[tuple, Compiled] = {}
        self._lock = threading.Lock()

    def variant(self, overridden: tuple) -> tuple[Spec, list[int]]:
        """The spec (defaults still in place count as constants) and the positions fed at run time."""
        found = self.variants.get(overridden)
        if found is None:
            constants = dict(self.spec.constants)
            for (_, name, arr), over in zip(self.guards, overridden):
                if not over:
                    constants[name] = arr
            spec = Spec(self.spec.nodes, self.spec.inputs, self.spec.outputs, constants, self.spec.opset,
                        self.spec.dtypes)
            found = (spec, [k for k, n in enumerate(spec.inputs) if n not in constants])
            self.variants[overridden] = found
        return found

    def compiled(self, key: tuple, spec: Spec, feeds: list[int], shapes: tuple) -> Compiled:
        prog = self.programs.get(key)
        if prog is not None:
            return prog
        with self._lock:
            prog = self.programs.get(key)
            if prog is None:
                self.lib.set_num_threads(self.options.num_threads)
                named = {spec.inputs[k]: s for k, s in zip(feeds, shapes)}
                program = Builder(self.lib, spec, named, bf16=self.bf16).build()
                prog = Compiled(self.lib, program)
                self.programs[key] = prog
        return prog

    def __call__(self, *xs: Any) -> list[np.ndarray]:
        if len(xs) != self.n_inputs:
            raise ValueError(f"{self.name}: expected {self.n_inputs} inputs {self.spec.inputs}, got {len(xs)}")
        overridden = tuple(xs[k] is not arr for k, _, arr in self.guards) if self.guards else ()
        spec, positions = self.variants.get(overridden) or self.variant(overridden)
        feeds = []
        for k in positions:
            x, dtype = xs[k], self.in_dtypes[k]
            if type(x) is not np.ndarray or x.dtype != dtype or not x.flags.c_contiguous:
                x = np.asarray(x, dtype=dtype, order="C")  # keeps 0-d values 0-d (ascontiguousarray would not)
            feeds.append(x)
        shapes = tuple([x.shape for x in feeds])
        prog = self.programs.get((overridden, shapes)) or self.compiled((overridden, shapes), spec, positions, shapes)
        if prog.small:
            self.lib.set_num_threads(1)
            try:
                return prog.run(feeds)
            finally:
                self.lib.set_num_threads(self.options.num_threads or self.lib.default_threads)
        if self.options.num_threads:
            self.lib.set_num_threads(self.options.num_threads)
        return prog.run(feeds)


def make_kernel(lib: Library, spec: Spec, options: Options, name: str = "",
                defaults: dict[str, np.ndarray] | None = None) -> Kernel:
    return Kernel(lib, spec, options, name, defaults)
