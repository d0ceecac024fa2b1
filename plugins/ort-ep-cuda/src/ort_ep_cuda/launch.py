"""Running a ``kernels.Plan`` on a GPU: CUBINs loaded as CUDA libraries, launches on the run's stream, cuBLAS.

``Executor`` belongs to one provider instance: it compiles (NVRTC, through the on-disk cache) and loads the
plans' kernels at session creation, uploads the constants they read once, and makes the ContextKernel that
enqueues a plan's steps on ``ctx.stream``. Written for a GPU: nothing here runs without one.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from ort_core.memory import DeviceTensor
from ort_core.plugins import ContextKernel, KernelContext, UnsupportedSubgraph

from . import codegen, shapes
from . import cuda_api as api
from .kernels import Elementwise, Gemm, MatMul, Plan, View
from .memory import CudaAllocator, CudaDataTransfer, cuda_device
from .nvrtc import KernelCache
from .runtime import DeviceInfo, Runtime
from .stream import CudaStream


class Executor:
    """One provider instance's GPU side: loaded kernels (by program name), the cuBLAS handle, constants."""

    def __init__(self, rt: Runtime, info: DeviceInfo, allocator: CudaAllocator, transfer: CudaDataTransfer,
                 cache: KernelCache, use_tf32: bool) -> None:
        self.rt, self.info, self.allocator, self.transfer, self.cache = rt, info, allocator, transfer, cache
        self.use_tf32 = use_tf32
        self.device = cuda_device(info.id)
        self._kernels: dict[str, Any] = {}
        self._libraries: list[Any] = []
        self._blas = None
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

    def kernel(self, program: codegen.Program) -> Any:
        """The loaded kernel of ``program`` (compiled or read from the cache, then loaded once)."""
        with self._lock:
            handle = self._kernels.get(program.name)
            if handle is not None:
                return handle
            rt, ffi = self.rt, self.rt.ffi
            cubin = self.cache.cubin(codegen.source(program), program.name, self.arch())
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
            value = np.asarray(constants[name])
            on_device[name] = DeviceTensor.empty(self.allocator, value.shape, value.dtype)
            self.transfer.copy_into(value, on_device[name], None)  # complete on return
        return ContextKernel(lambda ctx: self._run(plan, kernels, on_device, ctx), views=dict(plan.views))

    def close(self) -> None:
        with self._lock:
            libraries, self._libraries, self._kernels = self._libraries, [], {}
            blas, self._blas = self._blas, None
        if blas is not None:
            self.rt.cublas.cublasDestroy_v2(blas)
        for lib in libraries:
            self.rt.cudart.cudaLibraryUnload(lib)

    # --------------------------------------------------------------------------------------- run
    def _run(self, plan: Plan, kernels: dict, constants: dict, ctx: KernelContext) -> None:
        stream = ctx.stream
        if not isinstance(stream, CudaStream):
            raise TypeError(f"expected the run's CUDA stream, got {type(stream).__name__}")
        if len(ctx.inputs) != len(plan.inputs):
            raise ValueError(f"expected {len(plan.inputs)} inputs {plan.inputs}, got {len(ctx.inputs)}")
        self.rt.set_device(self.device.id)
        env: dict[str, Any] = dict(constants)
        for name, value in zip(plan.inputs, ctx.inputs):
            if not isinstance(value, DeviceTensor) or value.device != self.device:
                where = value.device if isinstance(value, DeviceTensor) else "the host"
                raise TypeError(f"input '{name}' is on {where}, expected {self.device}")
            env[name] = value
        out_index = {name: k for k, name in enumerate(plan.outputs)}
        written: set[str] = set()

        def buffer(name: str, shape: tuple[int, ...], dtype: Any) -> DeviceTensor:
            k = out_index.get(name)
            if k is not None and k not in plan.views:
                written.add(name)
                return ctx.output(k, shape, dtype)
            t = DeviceTensor.empty(self.allocator, shape, dtype)
            stream.keep(t)
            return t

        for step in plan.steps:
            if isinstance(step, Elementwise):
                self._elementwise(step, kernels[step.program.name], env, buffer, stream)
            elif isinstance(step, MatMul):
                self._matmul(step, env, buffer, stream)
            elif isinstance(step, Gemm):
                self._gemm(step, kernels, env, buffer, stream)
            else:
                self._view(step, env)
        for k, name in enumerate(plan.outputs):
            if name in written:
                continue
            value = env[name]
            if k in plan.views and ctx.may_view(k):
                ctx.outputs[k] = value
                continue
            dst = ctx.output(k, value.shape, value.dtype)
            if dst.ptr != value.ptr:
                self.transfer.copy_into(value, dst, stream)

    def _launch(self, kernel: Any, program: codegen.Program, pointers: list[int], shape: tuple[int, ...],
                strides: list[list[int]], stream: CudaStream) -> None:
        n = int(np.prod(shape, dtype=np.int64))
        cfg = codegen.launch_config(n, self.info.sm_count, self.info.max_threads_per_block)
        if cfg is None:
            return
        rt, ffi = self.rt, self.rt.ffi
        words = codegen.pack_params(program, pointers, shape, strides)
        params = ffi.from_buffer(words)
        args = ffi.new("void *[1]", [ffi.cast("void *", params)])
        grid = ffi.new("dim3 *", [cfg.grid, 1, 1])  # passed by value; the pointers own the memory meanwhile
        block = ffi.new("dim3 *", [cfg.block, 1, 1])
        # the parameter bytes are copied by the launch; nothing of ``words`` is needed after it returns
        rt.check_cuda(f"cudaLaunchKernel({program.name}, grid={cfg.grid}, block={cfg.block})",
                      rt.cudart.cudaLaunchKernel(kernel, grid[0], block[0], args, 0, stream.handle))

    def _elementwise(self, step: Elementwise, kernel: Any, env: dict, buffer, stream: CudaStream) -> None:
        program = step.program
        xs = [env[name] for name in step.inputs]
        dtype = np.dtype(program.dtype)
        for name, x in zip(step.inputs, xs):
            if x.dtype != dtype:
                raise TypeError(f"{step.labels[0]}: input '{name}' is {x.dtype}, the kernel was made for {dtype}")
        shape = tuple(np.broadcast_shapes(*[x.shape for x in xs]))
        # each step's own shape: every value written must have the kernel's index space as its shape
        temps: list[tuple[int, ...]] = []
        for _op, operands in program.steps:
            temps.append(tuple(np.broadcast_shapes(*[xs[k].shape if kind == "in" else temps[k]
                                                     for kind, k in operands])))
        for j, name in zip(program.outputs, step.outputs):
            if temps[j] != shape:
                raise ValueError(f"{step.labels[j]}: '{name}' has shape {list(temps[j])}, not the fused kernel's "
                                 f"{list(shape)}")
        outs = [buffer(name, shape, dtype) for name in step.outputs]
        index_shape = shape if shape else (1,)
        strides = [codegen.broadcast_strides(x.shape, x.strides, x.dtype.itemsize, index_shape) for x in xs]
        self._launch(kernel, program, [x.ptr for x in xs] + [o.ptr for o in outs], index_shape, strides, stream)
        stream.keep(*xs, *outs)
        env.update(zip(step.outputs, outs))

    def _blas_handle(self) -> Any:
        if self._blas is None:
            rt = self.rt
            h = rt.ffi.new("cublasHandle_t *")
            rt.check_cublas("cublasCreate", rt.cublas.cublasCreate_v2(h))
            mode = api.CUBLAS_TF32_TENSOR_OP_MATH if self.use_tf32 else api.CUBLAS_DEFAULT_MATH
            rt.check_cublas("cublasSetMathMode", rt.cublas.cublasSetMathMode(h[0], mode))
            self._blas = h[0]
        return self._blas

    def _gemm_ex(self, call: shapes.GemmCall, a: DeviceTensor, b: DeviceTensor, c: DeviceTensor, alpha: float,
                 beta: float, stream: CudaStream, label: str) -> None:
        rt, ffi = self.rt, self.rt.ffi
        dtype = c.dtype
        size = dtype.itemsize
        kind = api.CUDA_R_16F if dtype == np.float16 else api.CUDA_R_32F
        compute = api.CUBLAS_COMPUTE_32F_FAST_TF32 if self.use_tf32 and dtype == np.float32 else api.CUBLAS_COMPUTE_32F
        alpha_p, beta_p = ffi.new("float *", alpha), ffi.new("float *", beta)
        with self._blas_lock:  # one handle: its stream is set and used without another thread in between
            handle = self._blas_handle()
            rt.check_cublas("cublasSetStream", rt.cublas.cublasSetStream_v2(handle, stream.handle))
            rt.check_cublas(
                f"cublasGemmStridedBatchedEx ({label}: m={call.m} n={call.n} k={call.k} batch={call.count})",
                rt.cublas.cublasGemmStridedBatchedEx(
                    handle, int(call.trans_a), int(call.trans_b), call.m, call.n, call.k, alpha_p,
                    ffi.cast("void *", a.ptr + call.a_offset * size), kind, call.lda, call.stride_a,
                    ffi.cast("void *", b.ptr + call.b_offset * size), kind, call.ldb, call.stride_b, beta_p,
                    ffi.cast("void *", c.ptr + call.c_offset * size), kind, call.ldc, call.stride_c, call.count,
                    compute, api.CUBLAS_GEMM_DEFAULT))

    def _zero(self, t: DeviceTensor, stream: CudaStream) -> None:
        if t.nbytes:
            self.rt.check_cuda("cudaMemsetAsync", self.rt.cudart.cudaMemsetAsync(
                self.rt.ffi.cast("void *", t.ptr), 0, t.nbytes, stream.handle))

    def _matrix_inputs(self, label: str, dtype: str, *xs: DeviceTensor) -> None:
        for x in xs:
            if x.dtype != np.dtype(dtype):
                raise TypeError(f"{label}: an input is {x.dtype}, expected {dtype}")
            if not x.is_contiguous:
                raise ValueError(f"{label}: strided inputs are not supported by the cuBLAS path")

    def _matmul(self, step: MatMul, env: dict, buffer, stream: CudaStream) -> None:
        a, b = env[step.a], env[step.b]
        self._matrix_inputs(step.label, step.dtype, a, b)
        out = buffer(step.out, shapes.matmul_shape(a.shape, b.shape), a.dtype)
        k = a.shape[-1]
        if k == 0:
            self._zero(out, stream)
        for call in shapes.matmul_calls(a.shape, b.shape) if k else []:
            self._gemm_ex(call, b, a, out, 1.0, 0.0, stream, step.label)  # cuBLAS's A is the right operand
        stream.keep(a, b, out)
        env[step.out] = out

    def _gemm(self, step: Gemm, kernels: dict, env: dict, buffer, stream: CudaStream) -> None:
        a, b = env[step.a], env[step.b]
        self._matrix_inputs(step.label, step.dtype, a, b)
        m, n, k = shapes.gemm_shape(a.shape, b.shape, step.trans_a, step.trans_b)
        out = buffer(step.out, (m, n), a.dtype)
        beta = 0.0
        if step.broadcast is not None and out.nbytes:
            c = env[step.c]
            strides = [codegen.broadcast_strides(c.shape, c.strides, c.dtype.itemsize, (m, n))]
            self._launch(kernels[step.broadcast.name], step.broadcast, [c.ptr, out.ptr], (m, n), strides, stream)
            stream.keep(c)
            beta = step.beta
        if m and n and k == 0:  # an empty product: Y = beta * C
            if beta == 0.0:
                self._zero(out, stream)
            elif beta != 1.0:
                raise ValueError(f"{step.label}: K=0 with beta={beta} (not 0 or 1) is not supported")
        elif m and n:
            call = shapes.gemm_call(m, n, k, step.trans_a, step.trans_b)
            self._gemm_ex(call, b, a, out, step.alpha, beta, stream, step.label)
        stream.keep(a, b, out)
        env[step.out] = out

    def _view(self, step: View, env: dict) -> None:
        src = env[step.src]
        if not src.is_contiguous:
            raise ValueError(f"{step.label}: a view of a strided tensor is not supported")
        env[step.out] = src.reshaped(step.shape_of(src.shape))
