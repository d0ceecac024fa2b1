"""Recording a plan's device work for one input signature (``trace``): per step kind, the shapes, strides,
launch parameters and cuBLAS arguments computed from the inputs' shapes and written down as commands over
symbolic addresses. Pure: no CUDA call is made here, so all of it runs (and is tested) without a GPU.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ort_core.memory import Device, DeviceTensor

from . import codegen, rowops, selection, shapes, windows
from . import cuda_api as api
from .kernels import Concat, Copy, Elementwise, Gemm, MatMul, Plan, Row, Take, View, Window
from .runtime import DeviceInfo
from .trace import Alias, Launch, Memcpy, Memcpy2D, Memset, Recorder
from .trace import Gemm as GemmCommand


class StepRecorder:
    """Records the steps of plans for one GPU (its multiprocessor count sizes the grids) and math mode."""

    def __init__(self, info: DeviceInfo, use_tf32: bool, ffi: Any, device: Device) -> None:
        self.sm_count, self.max_threads = info.sm_count, info.max_threads_per_block
        self.use_tf32, self.ffi, self.device = use_tf32, ffi, device

    def record(self, plan: Plan, kernels: dict[str, Any], constants: dict[str, DeviceTensor],
               inputs: Sequence[DeviceTensor], may_view: Callable[[int], bool]) -> Recorder:
        """The plan's commands for these inputs' shapes (``Recorder.finish`` places the intermediates)."""
        rec = Recorder(len(plan.inputs), len(plan.outputs), self.device)
        env: dict[str, Any] = dict(constants)
        for k, (name, value) in enumerate(zip(plan.inputs, inputs)):
            env[name] = rec.input(k, value)
        out_index = {name: k for k, name in enumerate(plan.outputs)}
        written: set[str] = set()

        def buffer(name: str, shape: tuple[int, ...], dtype: Any) -> DeviceTensor:
            k = out_index.get(name)
            if k is not None and k not in plan.views:
                written.add(name)
                return rec.output(k, shape, dtype)
            return rec.scratch(shape, dtype)

        for step in plan.steps:
            if isinstance(step, Elementwise):
                self._elementwise(step, kernels[step.program.name], env, buffer, rec)
            elif isinstance(step, MatMul):
                self._matmul(step, env, buffer, rec)
            elif isinstance(step, Gemm):
                self._gemm(step, kernels, env, buffer, rec)
            elif isinstance(step, Row):
                self._row(step, kernels[step.program.name], env, buffer, rec)
            elif isinstance(step, Copy):
                self._copy(step, kernels[step.program.name], env, buffer, rec)
            elif isinstance(step, Window):
                self._window(step, kernels, env, buffer, rec)
            elif isinstance(step, Concat):
                self._concat(step, env, buffer, rec)
            elif isinstance(step, Take):
                self._take(step, env, buffer, rec)
            else:
                self._view(step, env)
        for k, name in enumerate(plan.outputs):
            if name in written:
                continue
            value = env[name]
            if k in plan.views and may_view(k):
                rec.add(Alias(k, value.ptr, value.shape, value.dtype, value.strides))
                continue
            dst = rec.output(k, value.shape, value.dtype)
            if value.nbytes:
                rec.add(Memcpy(dst.ptr, value.ptr, value.nbytes))
        return rec

    def _launch(self, kernel: Any, program: codegen.Program, pointers: list[int], shape: tuple[int, ...],
                strides: list[list[int]], rec: Recorder) -> None:
        n = int(np.prod(shape, dtype=np.int64))
        cfg = codegen.launch_config(n, self.sm_count, self.max_threads)
        if cfg is None:
            return
        words = codegen.pack_params(program, pointers, shape, strides)
        rec.add(Launch(kernel, cfg.grid, cfg.block, words, tuple(range(len(pointers))), program.name))

    def _elementwise(self, step: Elementwise, kernel: Any, env: dict, buffer, rec: Recorder) -> None:
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
        outs = [buffer(name, shape, np.dtype(program.result_dtype)) for name in step.outputs]
        index_shape = shape if shape else (1,)
        strides = [codegen.broadcast_strides(x.shape, x.strides, x.dtype.itemsize, index_shape) for x in xs]
        self._launch(kernel, program, [x.ptr for x in xs] + [o.ptr for o in outs], index_shape, strides, rec)
        env.update(zip(step.outputs, outs))

    def _row(self, step: Row, kernel: Any, env: dict, buffer, rec: Recorder) -> None:
        values = {role: env[name] for role, name in step.inputs.items()}
        x = values["x"]
        dtype = np.dtype(step.program.dtype)
        for role, v in values.items():
            if v.dtype != dtype:
                raise TypeError(f"{step.label}: input '{step.inputs[role]}' is {v.dtype}, expected {dtype}")
            if not v.is_contiguous:
                raise ValueError(f"{step.label}: strided inputs are not supported by the row kernels")
        if step.coerce_axis is not None:
            axis = step.coerce_axis % max(x.ndim, 1)
            rows, cols = int(np.prod(x.shape[:axis], dtype=np.int64)), int(np.prod(x.shape[axis:], dtype=np.int64))
        else:
            cols = x.shape[-1] if x.ndim else 1
            rows = int(np.prod(x.shape[:-1], dtype=np.int64))
        for role in ("gamma", "beta", "bias"):
            if role in values and values[role].shape != (cols,):
                raise ValueError(f"{step.label}: '{step.inputs[role]}' has shape {list(values[role].shape)}, expected "
                                 f"[{cols}]")
        if "skip" in values and values["skip"].shape != x.shape:
            raise ValueError(f"{step.label}: the skip input has shape {list(values['skip'].shape)}, not the input's "
                             f"{list(x.shape)}")
        shape = x.shape
        if step.program.reduces:  # one value per row: the reduced (trailing) axes kept as 1s or dropped
            kept = x.shape[:step.coerce_axis]
            shape = kept + (1,) * (x.ndim - len(kept)) if step.keepdims else kept
            if rows and not cols:
                raise ValueError(f"{step.label}: reducing an empty axis is not supported on the GPU")
        out = buffer(step.out, shape, dtype)
        total = buffer(step.total, x.shape, dtype) if step.total else None
        cfg = rowops.launch_config(rows, cols, self.sm_count, self.max_threads)
        if cfg is not None:
            words = rowops.pack(step.program, {role: v.ptr for role, v in values.items()}, out.ptr, rows, cols,
                                step.eps, None if total is None else total.ptr)
            n_ptr = len(step.program.inputs) + 1 + (total is not None)
            rec.add(Launch(kernel, cfg.grid, cfg.block, words, tuple(range(n_ptr)), step.program.name))
        env[step.out] = out
        if total is not None:
            env[step.total] = total

    def _concat(self, step: Concat, env: dict, buffer, rec: Recorder) -> None:
        """Each input is one 2-D copy: a row per index before the axis, into its slice of every output row."""
        xs = [env[n] for n in step.srcs]
        first = xs[0]
        def others(t: DeviceTensor) -> tuple[int, ...]:
            return t.shape[:step.axis] + t.shape[step.axis + 1:]

        for name, x in zip(step.srcs, xs):
            fits = x.ndim == first.ndim and others(x) == others(first)
            if x.dtype != np.dtype(step.dtype) or not x.is_contiguous or not fits:
                raise ValueError(f"{step.label}: input '{name}' ({x.dtype} {list(x.shape)}) does not concatenate with "
                                 f"{list(first.shape)} along axis {step.axis}")
        shape = first.shape[:step.axis] + (sum(x.shape[step.axis] for x in xs),) + first.shape[step.axis + 1:]
        out = buffer(step.out, shape, first.dtype)
        rows = int(np.prod(shape[:step.axis], dtype=np.int64))
        inner = int(np.prod(shape[step.axis + 1:], dtype=np.int64)) * first.dtype.itemsize
        start = 0
        for x in xs:
            width = x.shape[step.axis] * inner
            if width and rows:
                rec.add(Memcpy2D(out.ptr + start * inner, shape[step.axis] * inner, x.ptr, width, width, rows))
            start += x.shape[step.axis]
        env[step.out] = out

    def _take(self, step: Take, env: dict, buffer, rec: Recorder) -> None:
        """Gather at constant indices: each run of consecutive indices is one 2-D copy, a row per index before the
        axis."""
        x = env[step.src]
        if x.dtype != np.dtype(step.dtype) or not x.is_contiguous:
            raise TypeError(f"{step.label}: the input is {x.dtype}{'' if x.is_contiguous else ' (strided)'}, expected "
                            f"contiguous {step.dtype}")
        try:
            g = selection.gather_runs(x.shape, step.indices, step.axis)
        except ValueError as e:
            raise ValueError(f"{step.label}: {e}") from None
        out = buffer(step.out, g.shape, x.dtype)
        size = x.dtype.itemsize
        for run in g.runs if out.nbytes else ():
            width = run.count * g.inner * size
            rec.add(Memcpy2D(out.ptr + run.dst * g.inner * size, g.n * g.inner * size,
                             x.ptr + run.src * g.inner * size, g.dim * g.inner * size, width, g.rows))
        env[step.out] = out

    def _window(self, step: Window, kernels: dict, env: dict, buffer, rec: Recorder) -> None:
        """Conv (im2col into a scratch column buffer, then one cuBLAS product per image) and 2-D pooling."""
        x = env[step.src]
        dtype = np.dtype(step.program.dtype)
        if x.dtype != dtype or not x.is_contiguous or x.ndim != 4:
            raise TypeError(f"{step.label}: the input is {x.dtype} {list(x.shape)}, expected contiguous 4-D {dtype}")
        n, c, h, w_ = x.shape
        w = env[step.w] if step.w else None
        if step.op == "GlobalAveragePool":
            kh, kw = h, w_
        elif w is not None:
            if w.ndim != 4 or w.shape[1] * step.group != c:
                raise ValueError(f"{step.label}: weights {list(w.shape)} do not fit {c} input channels in "
                                 f"{step.group} group(s)")
            kh, kw = w.shape[2:]
            if step.kernel is not None and tuple(step.kernel) != (kh, kw):
                raise ValueError(f"{step.label}: kernel_shape {list(step.kernel)} is not the weights' {[kh, kw]}")
        else:
            kh, kw = step.kernel
        (pt, pl, pb, pr), (sh, sw), (dh, dw) = step.pads, step.strides, step.dilations
        oh = windows.out_size(h, kh, sh, pt, pb, dh)
        ow = windows.out_size(w_, kw, sw, pl, pr, dw)
        if oh < 1 or ow < 1:
            raise ValueError(f"{step.label}: a {kh}x{kw} window does not fit the padded {h}x{w_} input")
        if w is None:  # pooling: one thread per pooled value over the N*C planes
            out = buffer(step.out, (n, c, oh, ow), dtype)
            g = windows.Geometry(n * c, 1, h, w_, kh, kw, oh, ow, sh, sw, pt, pl, dh, dw)
            self._window_launch(kernels[step.program.name], step.program, x.ptr, out.ptr, g, rec)
            env[step.out] = out
            return
        cout, k, p = w.shape[0], c * kh * kw, oh * ow
        out = buffer(step.out, (n, cout, oh, ow), dtype)
        if (kh, kw, sh, sw, dh, dw) == (1, 1, 1, 1, 1, 1) and not any(step.pads):
            cols = x.reshaped((n, c, h * w_))  # a 1x1 convolution reads its input as the columns
        else:
            cols = rec.scratch((n, k, p), dtype)
            g = windows.Geometry(n, c, h, w_, kh, kw, oh, ow, sh, sw, pt, pl, dh, dw)
            self._window_launch(kernels[step.program.name], step.program, x.ptr, cols.ptr, g, rec)
        beta = 0.0
        if step.b and out.nbytes:
            bias = env[step.b]
            if bias.shape != (cout,):
                raise ValueError(f"{step.label}: bias {list(bias.shape)} is not [{cout}]")
            strides = [codegen.broadcast_strides((cout, 1, 1), None, dtype.itemsize, out.shape)]
            self._launch(kernels[step.broadcast.name], step.broadcast, [bias.ptr, out.ptr], out.shape, strides, rec)
            beta = 1.0
        if not (k and p):
            env[step.out] = out
            return
        if step.group == 1:
            weights = w.reshaped((cout, k))
            for call in shapes.matmul_calls(weights.shape, cols.shape):  # cuBLAS's A is the right operand
                self._gemm_ex(call, cols, weights, out.reshaped((n, cout, p)), 1.0, beta, rec, step.label)
        else:  # per image, one product per group, batched: out[g] (Cout/g x P) = W[g] (Cout/g x K/g) @ cols[g]
            cg, kg = cout // step.group, k // step.group
            single = shapes.gemm_call(cg, p, kg, False, False)
            for image in range(n):
                call = dataclasses.replace(single, count=step.group, stride_a=kg * p, stride_b=cg * kg,
                                           stride_c=cg * p, a_offset=image * k * p, c_offset=image * cout * p)
                self._gemm_ex(call, cols, w, out, 1.0, beta, rec, step.label)
        env[step.out] = out

    def _window_launch(self, kernel: Any, program: windows.WindowProgram, x: int, y: int, g: windows.Geometry,
                       rec: Recorder) -> None:
        cfg = codegen.launch_config(g.elements(program.kind), self.sm_count, self.max_threads)
        if cfg is not None:
            rec.add(Launch(kernel, cfg.grid, cfg.block, windows.pack(program, x, y, g), (0, 1), program.name))

    def _copy(self, step: Copy, kernel: Any, env: dict, buffer, rec: Recorder) -> None:
        """Transpose, Split and Slice: the Identity kernel reading ``src`` through permuted, offset or stepped
        strides."""
        src = env[step.src]
        if src.dtype != np.dtype(step.program.dtype) or not src.is_contiguous:
            raise TypeError(f"{step.label}: the input is {src.dtype}{'' if src.is_contiguous else ' (strided)'}, "
                            f"the kernel copies contiguous {step.program.dtype}")
        strides = codegen.broadcast_strides(src.shape, None, src.dtype.itemsize, src.shape)  # C order, in elements
        if step.op == "Transpose":
            if len(step.perm) != src.ndim:
                raise ValueError(f"{step.label}: perm {list(step.perm)} does not fit rank {src.ndim}")
            shape = tuple(src.shape[p] for p in step.perm)
            out = buffer(step.outs[0], shape, src.dtype)
            self._launch(kernel, step.program, [src.ptr, out.ptr], shape, [[strides[p] for p in step.perm]], rec)
            env[step.outs[0]] = out
            return
        if step.op == "Slice":
            try:
                view = selection.slice_view(src.shape, *step.bounds)
            except ValueError as e:
                raise ValueError(f"{step.label}: {e}") from None
            out = buffer(step.outs[0], view.shape, src.dtype)
            self._launch(kernel, step.program, [src.ptr + view.offset * src.dtype.itemsize, out.ptr], view.shape,
                         [list(view.strides)], rec)
            env[step.outs[0]] = out
            return
        dim, n = src.shape[step.axis], len(step.outs)
        sizes = step.sizes
        if sizes is None:
            chunk = -(-dim // n)
            sizes = (chunk,) * (n - 1) + (dim - chunk * (n - 1),)
        if len(sizes) != n or sum(sizes) != dim or min(sizes) < 0:
            raise ValueError(f"{step.label}: cannot split {dim} along axis {step.axis} into {list(sizes)} for {n} "
                             "outputs")
        start = 0
        for name, size in zip(step.outs, sizes):
            shape = src.shape[:step.axis] + (size,) + src.shape[step.axis + 1:]
            out = buffer(name, shape, src.dtype)
            offset = start * strides[step.axis] * src.dtype.itemsize
            self._launch(kernel, step.program, [src.ptr + offset, out.ptr], shape, [strides], rec)
            env[name] = out
            start += size

    def _gemm_ex(self, call: shapes.GemmCall, a: DeviceTensor, b: DeviceTensor, c: DeviceTensor, alpha: float,
                 beta: float, rec: Recorder, label: str) -> None:
        ffi = self.ffi
        dtype = c.dtype
        size = dtype.itemsize
        kind = api.CUDA_R_16F if dtype == np.float16 else api.CUDA_R_32F
        compute = api.CUBLAS_COMPUTE_32F_FAST_TF32 if self.use_tf32 and dtype == np.float32 else api.CUBLAS_COMPUTE_32F
        args = (int(call.trans_a), int(call.trans_b), call.m, call.n, call.k, ffi.new("float *", alpha),
                a.ptr + call.a_offset * size, kind, call.lda, call.stride_a,
                b.ptr + call.b_offset * size, kind, call.ldb, call.stride_b, ffi.new("float *", beta),
                c.ptr + call.c_offset * size, kind, call.ldc, call.stride_c, call.count, compute,
                api.CUBLAS_GEMM_DEFAULT)
        rec.add(GemmCommand(args, f"{label}: m={call.m} n={call.n} k={call.k} batch={call.count}"))

    def _zero(self, t: DeviceTensor, rec: Recorder) -> None:
        if t.nbytes:
            rec.add(Memset(t.ptr, t.nbytes))

    def _matrix_inputs(self, label: str, dtype: str, *xs: DeviceTensor) -> None:
        for x in xs:
            if x.dtype != np.dtype(dtype):
                raise TypeError(f"{label}: an input is {x.dtype}, expected {dtype}")
            if not x.is_contiguous:
                raise ValueError(f"{label}: strided inputs are not supported by the cuBLAS path")

    def _matmul(self, step: MatMul, env: dict, buffer, rec: Recorder) -> None:
        a, b = env[step.a], env[step.b]
        self._matrix_inputs(step.label, step.dtype, a, b)
        out = buffer(step.out, shapes.matmul_shape(a.shape, b.shape), a.dtype)
        k = a.shape[-1]
        if k == 0:
            self._zero(out, rec)
        for call in shapes.matmul_calls(a.shape, b.shape) if k else []:
            self._gemm_ex(call, b, a, out, 1.0, 0.0, rec, step.label)  # cuBLAS's A is the right operand
        env[step.out] = out

    def _gemm(self, step: Gemm, kernels: dict, env: dict, buffer, rec: Recorder) -> None:
        a, b = env[step.a], env[step.b]
        self._matrix_inputs(step.label, step.dtype, a, b)
        m, n, k = shapes.gemm_shape(a.shape, b.shape, step.trans_a, step.trans_b)
        out = buffer(step.out, (m, n), a.dtype)
        beta = 0.0
        if step.broadcast is not None and out.nbytes:
            c = env[step.c]
            strides = [codegen.broadcast_strides(c.shape, c.strides, c.dtype.itemsize, (m, n))]
            self._launch(kernels[step.broadcast.name], step.broadcast, [c.ptr, out.ptr], (m, n), strides, rec)
            beta = step.beta
        if m and n and k == 0:  # an empty product: Y = beta * C
            if beta == 0.0:
                self._zero(out, rec)
            elif beta != 1.0:
                raise ValueError(f"{step.label}: K=0 with beta={beta} (not 0 or 1) is not supported")
        elif m and n:
            call = shapes.gemm_call(m, n, k, step.trans_a, step.trans_b)
            self._gemm_ex(call, b, a, out, step.alpha, beta, rec, step.label)
        env[step.out] = out

    def _view(self, step: View, env: dict) -> None:
        src = env[step.src]
        if not src.is_contiguous:
            raise ValueError(f"{step.label}: a view of a strided tensor is not supported")
        env[step.out] = src.reshaped(step.shape_of(src.shape))
