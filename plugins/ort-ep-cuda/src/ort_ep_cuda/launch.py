"""Running a ``kernels.Plan`` on a GPU: CUBINs loaded as CUDA libraries, launches on the run's stream, cuBLAS.

``Executor`` belongs to one provider instance: it compiles (NVRTC, through the on-disk cache) and loads the
plans' kernels at session creation, uploads the constants they read once, and makes the ContextKernel that
runs a plan. A run records the plan's device work once per input signature (``record`` computes every
shape, stride and cuBLAS argument then; ``trace`` holds the commands) and afterwards only resolves addresses
and enqueues the recorded commands on ``ctx.stream``, or replays them as a CUDA graph (``graphs``, with
``enable_cuda_graph``). Written for a GPU: nothing here runs without one.
"""

from __future__ import annotations

import threading
import warnings
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ort_core.memory import DeviceTensor
from ort_core.plugins import ContextKernel, KernelContext, UnsupportedSubgraph

from . import codegen, rowops, windows
from . import cuda_api as api
from .graphs import CudaGraph, NotCapturable
from .kernels import Plan
from .memory import CudaAllocator, CudaDataTransfer, cuda_device
from .nvrtc import KernelCache
from .record import StepRecorder
from .runtime import DeviceInfo, Runtime
from .stream import CudaStream
from .trace import Gemm as GemmCommand
from .trace import Launch, Memcpy, Memcpy2D, Memset, Recorder, Trace, addresses, bases, check_real, resolve, tag_of

BLAS_WORKSPACE = 32 << 20  # cuBLAS's recommendation for Hopper; less suffices on older GPUs
MAX_SIGNATURES = 16  # recorded runs (and CUDA graphs) kept per compiled subgraph, least recently used dropped


@dataclass
class NativeLaunch:
    """A recorded launch's cffi objects, made once: the parameter words (address slots rewritten per run),
    the argument array pointing at them, grid and block, and the slots' symbolic addresses."""

    params: Any
    args: Any
    grid: Any
    block: Any
    addresses: tuple[int, ...]


class Compiled:
    """One compiled subgraph: its plan, loaded kernels, constants on the GPU, and per input signature the
    recorded run and (with ``enable_cuda_graph``) its CUDA graph."""

    def __init__(self, plan: Plan, kernels: dict[str, Any], constants: dict[str, DeviceTensor]) -> None:
        self.plan, self.kernels, self.constants = plan, kernels, constants
        self._traces: OrderedDict[Any, Trace] = OrderedDict()
        self._graphs: OrderedDict[Any, CudaGraph | None] = OrderedDict()
        self._lock = threading.Lock()

    def trace(self, key: Any, record: Callable[[], Trace]) -> Trace:
        with self._lock:
            trace = self._traces.get(key)
            if trace is not None:
                self._traces.move_to_end(key)
                return trace
        trace = record()  # outside the lock: recording computes, it enqueues nothing
        with self._lock:
            self._traces[key] = trace
            while len(self._traces) > MAX_SIGNATURES:
                self._traces.popitem(last=False)
        return trace

    def graph(self, key: Any, capture: Callable[[], CudaGraph]) -> CudaGraph | None:
        """The signature's CUDA graph, captured on first need; None when it cannot be (said once, in a
        warning naming the reason), then that signature runs its commands one by one."""
        with self._lock:
            if key in self._graphs:
                self._graphs.move_to_end(key)
                return self._graphs[key]
        try:
            graph = capture()
        except NotCapturable as e:
            warnings.warn(f"CUDAExecutionProvider: enable_cuda_graph=1 but {e}; this subgraph runs without a "
                          "CUDA graph for these input shapes", stacklevel=2)
            graph = None
        with self._lock:
            self._graphs[key] = graph
            while len(self._graphs) > MAX_SIGNATURES:
                _, dropped = self._graphs.popitem(last=False)
                if dropped is not None:
                    dropped.close()
        return graph

    def close(self) -> None:
        with self._lock:
            graphs, self._graphs = list(self._graphs.values()), OrderedDict()
            self._traces.clear()
        for g in graphs:
            if g is not None:
                g.close()


class Executor:
    """One provider instance's GPU side: loaded kernels (by program name), the cuBLAS handle, constants."""

    def __init__(self, rt: Runtime, info: DeviceInfo, allocator: CudaAllocator, transfer: CudaDataTransfer,
                 cache: KernelCache, use_tf32: bool, use_graphs: bool = False) -> None:
        self.rt, self.info, self.allocator, self.transfer, self.cache = rt, info, allocator, transfer, cache
        self.use_tf32, self.use_graphs = use_tf32, use_graphs
        self.device = cuda_device(info.id)
        self._kernels: dict[str, Any] = {}
        self._libraries: list[Any] = []
        self._compiled: list[Compiled] = []
        self._blas = None
        self._blas_stream: CudaStream | None = None
        self._blas_workspace: Any = None
        self._blas_lock = threading.Lock()
        self._lock = threading.Lock()

    # ----------------------------------------------------------------------------------- compile
    def arch(self) -> int:
        archs = self.rt.nvrtc_archs()
        if self.info.arch not in archs:
            major, minor = self.rt.nvrtc_version()
            raise UnsupportedSubgraph(f"NVRTC {major}.{minor} cannot compile for sm_{self.info.arch} (it knows "
                                      f"{', '.join(f'sm_{a}' for a in archs)}); install a newer nvidia-cuda-nvrtc")
        return self.info.arch

    def kernel(self, program: codegen.Program | rowops.RowProgram | windows.WindowProgram) -> Any:
        """The loaded kernel of ``program`` (compiled or read from the cache, then loaded once)."""
        with self._lock:
            handle = self._kernels.get(program.name)
            if handle is not None:
                return handle
            rt, ffi = self.rt, self.rt.ffi
            cubin = self.cache.cubin(program.cuda(), program.name, self.arch())
            rt.set_device(self.device.id)
            lib = ffi.new("cudaLibrary_t *")
            code = ffi.from_buffer(cubin)
            rt.check_cuda(f"cudaLibraryLoadData({program.name})",
                          rt.cudart.cudaLibraryLoadData(lib, code, ffi.NULL, ffi.NULL, 0, ffi.NULL, ffi.NULL, 0))
            self._libraries.append(lib[0])
            kern = ffi.new("cudaKernel_t *")
            rt.check_cuda(f"cudaLibraryGetKernel({program.name})",
                          rt.cudart.cudaLibraryGetKernel(kern, lib[0], program.name.encode()))
            self._kernels[program.name] = kern[0]
            return kern[0]

    def compile(self, plan: Plan, constants: dict[str, np.ndarray]) -> ContextKernel:
        kernels = {p.name: self.kernel(p) for p in plan.programs}
        on_device = {}
        for name in plan.device_constants:  # in this session's allocator: they count against gpu_mem_limit
            value = np.asarray(plan.made[name] if name in plan.made else constants[name])
            if name in plan.casts:
                value = value.astype(plan.casts[name])
            on_device[name] = DeviceTensor.empty(self.allocator, value.shape, value.dtype)
            check_real(on_device[name].ptr, f"constant '{name}'")
            self.transfer.copy_into(value, on_device[name], None)  # complete on return
        compiled = Compiled(plan, kernels, on_device)
        with self._lock:
            self._compiled.append(compiled)
        return ContextKernel(lambda ctx: self._run(compiled, ctx), views=dict(plan.views))

    def close(self) -> None:
        with self._lock:
            libraries, self._libraries, self._kernels = self._libraries, [], {}
            compiled, self._compiled = self._compiled, []
            blas, self._blas = self._blas, None
            self._blas_workspace = self._blas_stream = None
        for c in compiled:
            c.close()
        if blas is not None:
            self.rt.cublas.cublasDestroy_v2(blas)
        for lib in libraries:
            self.rt.cudart.cudaLibraryUnload(lib)

    # --------------------------------------------------------------------------------------- run
    def _run(self, compiled: Compiled, ctx: KernelContext) -> None:
        stream = ctx.stream
        if not isinstance(stream, CudaStream):
            raise TypeError(f"expected the run's CUDA stream, got {type(stream).__name__}")
        plan = compiled.plan
        if len(ctx.inputs) != len(plan.inputs):
            raise ValueError(f"expected {len(plan.inputs)} inputs {plan.inputs}, got {len(ctx.inputs)}")
        for name, value in zip(plan.inputs, ctx.inputs):
            if not isinstance(value, DeviceTensor) or value.device != self.device:
                where = value.device if isinstance(value, DeviceTensor) else "the host"
                raise TypeError(f"input '{name}' is on {where}, expected {self.device}")
        key = (tuple((x.shape, x.dtype, x.strides) for x in ctx.inputs), tuple(ctx.may_view(k) for k in plan.views))
        trace = compiled.trace(key, lambda: self._record(compiled, ctx))
        self.rt.set_device(self.device.id)
        if self.use_graphs and trace.runs:
            graph = compiled.graph(key, lambda: CudaGraph(self, trace, ctx, stream))
            if graph is not None:
                trace.runs += 1
                graph.run(ctx, stream)
                return
        trace.runs += 1
        self._replay(trace, ctx, stream)

    def _replay(self, trace: Trace, ctx: KernelContext, stream: CudaStream) -> None:
        outs = {k: ctx.output(k, shape, dtype) for k, (shape, dtype) in trace.outputs.items()}
        block = self.allocator.allocate(trace.workspace, stream) if trace.workspace else None
        table = bases(trace, [x.ptr for x in ctx.inputs], {k: o.ptr for k, o in outs.items()},
                      block.address if block is not None else 0)
        self.issue(trace, table, stream, ctx)
        stream.keep(*ctx.inputs, *outs.values())
        if block is not None:
            self.allocator.free(block, stream)  # back to the pool once the work queued before it is done

    def issue(self, trace: Trace, table: list[int], stream: CudaStream, ctx: KernelContext | None) -> None:
        """Enqueue ``trace``'s commands on ``stream`` with the tags resolved through ``table``."""
        rt, ffi = self.rt, self.rt.ffi
        cudart, handle = rt.cudart, stream.handle
        with trace.lock:
            for c in trace.commands:
                kind = type(c)
                if kind is Launch:
                    native = c.native
                    params = native.params
                    for slot, address in zip(c.slots, native.addresses):
                        params[slot] = resolve(table, address)
                    status = cudart.cudaLaunchKernel(c.kernel, native.grid[0], native.block[0], native.args, 0, handle)
                    if status:
                        rt.check_cuda(f"cudaLaunchKernel({c.label}, grid={c.grid}, block={c.block})", status)
                elif kind is GemmCommand:
                    args = list(c.args)
                    for i in GemmCommand.ADDRESSES:
                        args[i] = ffi.cast("void *", resolve(table, args[i]))
                    self._blas_call(c.label, args, stream)
                elif kind is Memset:
                    status = cudart.cudaMemsetAsync(ffi.cast("void *", resolve(table, c.address)), 0, c.nbytes, handle)
                    if status:
                        rt.check_cuda("cudaMemsetAsync", status)
                elif kind is Memcpy2D:
                    status = cudart.cudaMemcpy2DAsync(
                        ffi.cast("void *", resolve(table, c.dst)), c.dpitch, ffi.cast("void *", resolve(table, c.src)),
                        c.spitch, c.width, c.height, api.MEMCPY_DEFAULT, handle)
                    if status:  # the message is made only for a failure: this loop is every run's
                        rt.check_cuda(f"cudaMemcpy2DAsync({c.height} rows of {c.width} bytes)", status)
                elif kind is Memcpy:
                    status = cudart.cudaMemcpyAsync(ffi.cast("void *", resolve(table, c.dst)),
                                                    ffi.cast("void *", resolve(table, c.src)), c.nbytes,
                                                    api.MEMCPY_DEFAULT, handle)
                    if status:
                        rt.check_cuda(f"cudaMemcpyAsync({c.nbytes} bytes, device -> device)", status)
                else:  # Alias: an output handed out as a view of an input
                    source = ctx.inputs[tag_of(c.address) - 1]
                    ctx.outputs[c.index] = DeviceTensor(resolve(table, c.address), c.shape, c.dtype, self.device,
                                                        owner=source.owner or source, strides=c.strides)

    # ------------------------------------------------------------------------------------ record
    def _record(self, compiled: Compiled, ctx: KernelContext) -> Trace:
        """Walk the plan with symbolic tensors (``record``): every shape and argument is computed here, once."""
        steps = StepRecorder(self.info, self.use_tf32, self.rt.ffi, self.device)
        return self.finish(steps.record(compiled.plan, compiled.kernels, compiled.constants, ctx.inputs,
                                        ctx.may_view))

    def finish(self, rec: Recorder) -> Trace:
        """The recorded trace, its intermediates placed and its launches' cffi objects made."""
        trace = rec.finish()
        for c in trace.commands:
            if isinstance(c, Launch):
                c.native = self._native_launch(c)
        return trace

    def _native_launch(self, c: Launch) -> NativeLaunch:
        ffi = self.rt.ffi
        params = ffi.new("int64_t[]", [int(w) for w in c.words])
        return NativeLaunch(params, ffi.new("void *[1]", [ffi.cast("void *", params)]),
                            ffi.new("dim3 *", [c.grid, 1, 1]), ffi.new("dim3 *", [c.block, 1, 1]),
                            tuple(addresses(c)))

    def _blas_handle(self) -> Any:
        if self._blas is None:
            rt = self.rt
            h = rt.ffi.new("cublasHandle_t *")
            rt.check_cublas("cublasCreate", rt.cublas.cublasCreate_v2(h))
            mode = api.CUBLAS_TF32_TENSOR_OP_MATH if self.use_tf32 else api.CUBLAS_DEFAULT_MATH
            rt.check_cublas("cublasSetMathMode", rt.cublas.cublasSetMathMode(h[0], mode))
            # a workspace of its own: cuBLAS then allocates nothing while a CUDA graph is captured
            self._blas_workspace = self.allocator.allocate(BLAS_WORKSPACE)
            self._blas = h[0]
        return self._blas

    def _blas_call(self, label: str, args: list, stream: CudaStream) -> None:
        rt = self.rt
        with self._blas_lock:  # one handle: its stream is set and used without another thread in between
            handle = self._blas_handle()
            if self._blas_stream is not stream:
                rt.check_cublas("cublasSetStream", rt.cublas.cublasSetStream_v2(handle, stream.handle))
                # setting the stream resets the workspace to cuBLAS's own
                rt.check_cublas("cublasSetWorkspace", rt.cublas.cublasSetWorkspace_v2(
                    handle, rt.ffi.cast("void *", self._blas_workspace.address), BLAS_WORKSPACE))
                self._blas_stream = stream
            status = rt.cublas.cublasGemmStridedBatchedEx(handle, *args)
            if status:
                rt.check_cublas(f"cublasGemmStridedBatchedEx ({label})", status)
