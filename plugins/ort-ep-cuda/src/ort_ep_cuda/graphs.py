"""CUDA graphs (``enable_cuda_graph=1``): one signature's recorded commands captured once and replayed.

A graph replays fixed addresses, so a ``CudaGraph`` owns buffers for the subgraph's inputs, outputs and
intermediates (allocated when it is captured, freed when it is closed). A run copies its inputs into the
fixed input buffers, launches the graph (one call instead of one per kernel), and copies the fixed outputs
into the run's outputs: device-to-device copies on the run's stream, cheap next to the launches they save.
Runs of one graph on different streams are ordered on the GPU through an event, as they share its buffers.

Captured from a signature's second run (the first one, run command by command, lets cuBLAS set itself up
outside a capture). Not capturable, and then run command by command: outputs handed out as views of inputs,
and strided inputs. Written for a GPU: nothing here runs without one.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from . import cuda_api as api
from .runtime import CudaError
from .stream import CudaEvent, CudaStream
from .trace import Trace, bases


class NotCapturable(Exception):
    """This signature's run cannot be a CUDA graph; the message says why."""


class CudaGraph:
    """One signature's run as an instantiated CUDA graph over buffers of its own."""

    launches = 0  # graph launches in this process (tests check that replays went through a graph)

    def __init__(self, executor: Any, trace: Trace, ctx: Any, stream: CudaStream) -> None:
        if trace.aliases:
            raise NotCapturable("an output of this subgraph is a view of its input (a graph would hand out "
                                "its own fixed buffer)")
        if any(not x.is_contiguous for x in ctx.inputs):
            raise NotCapturable("an input is a strided view")
        self._executor, self._rt = executor, executor.rt
        allocator = executor.allocator
        self._inputs = [allocator.allocate(max(x.nbytes, 1)) for x in ctx.inputs]
        self._input_bytes = [int(x.nbytes) for x in ctx.inputs]
        self._outputs = {k: (allocator.allocate(max(int(np.prod(shape, dtype=np.int64)) * dtype.itemsize, 1)),
                             shape, dtype) for k, (shape, dtype) in trace.outputs.items()}
        self._workspace = allocator.allocate(trace.workspace) if trace.workspace else None
        table = bases(trace, [b.address for b in self._inputs], {k: b.address for k, (b, _, _) in
                                                                  self._outputs.items()},
                      self._workspace.address if self._workspace is not None else 0)
        self._exec = self._capture(trace, table, stream)
        self._last: CudaEvent | None = None
        self._lock = threading.Lock()

    def _capture(self, trace: Trace, table: list[int], stream: CudaStream) -> Any:
        rt, ffi = self._rt, self._rt.ffi
        rt.check_cuda("cudaStreamBeginCapture",
                      rt.cudart.cudaStreamBeginCapture(stream.handle, api.CAPTURE_MODE_THREAD_LOCAL))
        failure: Exception | None = None
        try:
            self._executor.issue(trace, table, stream, None)
        except CudaError as e:
            failure = e
        graph = ffi.new("cudaGraph_t *")
        status = rt.cudart.cudaStreamEndCapture(stream.handle, graph)
        if failure is not None or status:
            rt.cudart.cudaGetLastError()  # a failed capture leaves a sticky-free error behind: clear it
            if graph[0] != ffi.NULL:
                rt.cudart.cudaGraphDestroy(graph[0])
            why = failure or CudaError(f"cudaStreamEndCapture failed: {rt.cuda_status_text(status)}", status)
            raise NotCapturable(f"capturing its kernels failed ({why})")
        exec_ = ffi.new("cudaGraphExec_t *")
        try:
            rt.check_cuda("cudaGraphInstantiate", rt.cudart.cudaGraphInstantiate(exec_, graph[0], 0))
        except CudaError as e:
            raise NotCapturable(str(e)) from None
        finally:
            rt.cudart.cudaGraphDestroy(graph[0])  # the executable graph is independent of it
        return exec_[0]

    def run(self, ctx: Any, stream: CudaStream) -> None:
        rt, ffi, handle = self._rt, self._rt.ffi, stream.handle
        copy = rt.cudart.cudaMemcpyAsync
        with self._lock:
            if self._exec is None:
                raise RuntimeError("CUDAExecutionProvider: the CUDA graph was closed with its session")
            if self._last is not None:
                stream.wait(self._last)  # the previous run (maybe on another stream) is done with the buffers
            for x, buf, n in zip(ctx.inputs, self._inputs, self._input_bytes):
                if n:
                    rt.check_cuda("cudaMemcpyAsync (graph input)", copy(
                        buf.ptr, ffi.cast("void *", x.ptr), n, api.MEMCPY_DEFAULT, handle))
            rt.check_cuda("cudaGraphLaunch", rt.cudart.cudaGraphLaunch(self._exec, handle))
            CudaGraph.launches += 1
            outs = []
            for k, (buf, shape, dtype) in self._outputs.items():
                out = ctx.output(k, shape, dtype)
                outs.append(out)
                if out.nbytes:
                    rt.check_cuda("cudaMemcpyAsync (graph output)", copy(
                        ffi.cast("void *", out.ptr), buf.ptr, out.nbytes,
                        api.MEMCPY_DEFAULT, handle))
            self._last = stream.record()
        stream.keep(*ctx.inputs, *outs)

    def close(self) -> None:
        with self._lock:
            exec_, self._exec = self._exec, None
            last, self._last = self._last, None
        if exec_ is not None:
            if last is not None:
                last.synchronize()  # no replay still reads the buffers freed below
            self._rt.cudart.cudaGraphExecDestroy(exec_)
        self._inputs, self._outputs, self._workspace = [], {}, None
