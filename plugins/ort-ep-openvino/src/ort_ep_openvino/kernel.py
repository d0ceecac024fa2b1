"""A fused subgraph compiled by OpenVINO, and the stateless kernel that runs it.

Each call borrows an infer request from a thread-safe pool, points the inputs at the caller's
numpy buffers (no copy) and copies the outputs out; which nodes may be compiled is not decided here.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from ort_core.plugins import FusedSubgraph, constant_node_values

from . import runtime as rt
from .options import Options
from .qdq_fixes import dequantize_transposed_weights


class RequestPool:
    """Infer requests of one compiled model: one per concurrent call, reused afterwards.

    An infer request runs one inference at a time; a call takes a free one (or makes one), so
    threads never share a request, and gives it back when its outputs are copied out.
    """

    def __init__(self, compiled: rt.CompiledModel) -> None:
        self.compiled = compiled
        self._free = [compiled.create_infer_request()]
        self._lock = threading.Lock()

    def take(self) -> rt.InferRequest:
        with self._lock:
            if self._free:
                return self._free.pop()
        return self.compiled.create_infer_request()

    def give(self, request: rt.InferRequest) -> None:
        with self._lock:
            self._free.append(request)


class CompiledSubgraph:
    """The kernel: ``kernel(*inputs)`` -> one numpy array per subgraph output."""

    def __init__(self, subgraph: FusedSubgraph, options: Options, core: rt.Core) -> None:
        self.name = subgraph.name
        # values of Constant nodes outside the subgraph are as fixed as initializers: baked in
        # too, so that OpenVINO sees them as constants (a runtime axes input has no static rank)
        node_constants = constant_node_values(subgraph.graph)
        baked = {n: node_constants[n] for n in subgraph.inputs
                 if n not in subgraph.constants and n in node_constants}
        if baked:
            subgraph = FusedSubgraph(subgraph.name, subgraph.nodes, subgraph.inputs, subgraph.outputs,
                                     {**subgraph.constants, **baked}, subgraph.opsets, subgraph.graph)
        proto = subgraph.to_model_proto()
        if options.enable_qdq_optimizer:
            dequantize_transposed_weights(proto)
        compiled = rt.compile_bytes(core, proto.SerializeToString(), options.device_type, options.compile_properties())
        self.pool = RequestPool(compiled)
        fixed = set(subgraph.constants)
        feedable = [k for k, name in enumerate(subgraph.inputs) if name not in fixed]
        ov_inputs, ov_outputs = compiled.port_names()
        # OpenVINO drops parameters nothing reads (Dropout's ratio at inference, for one), so
        # inputs are matched by name; constants are baked into the model
        self.feed_positions = tuple(_match(ov_inputs, [subgraph.inputs[k] for k in feedable], feedable,
                                           f"{self.name} inputs"))
        self.output_order = tuple(_match(ov_outputs, list(subgraph.outputs), range(len(subgraph.outputs)),
                                         f"{self.name} outputs", reverse=True))
        self.n_inputs = len(subgraph.inputs)
        self.input_names = tuple(subgraph.inputs)
        self.out_dtypes = tuple(_declared_dtype(subgraph, name) for name in subgraph.outputs)

    def __call__(self, *xs: Any) -> list[np.ndarray]:
        if len(xs) != self.n_inputs:
            raise ValueError(f"{self.name}: expected {self.n_inputs} inputs {list(self.input_names)}, got {len(xs)}")
        feeds = []
        for k in self.feed_positions:
            x = xs[k]
            if not isinstance(x, np.ndarray):
                x = np.asarray(x)
            if not x.flags.c_contiguous or not x.dtype.isnative:
                x = x.astype(x.dtype.newbyteorder("="), order="C")  # keeps 0-d arrays 0-d
            et = rt.ov_element_type(x.dtype)
            if et is None:
                raise TypeError(f"{self.name}: input '{self.input_names[k]}' is {x.dtype}, which OpenVINO "
                                "does not take")
            feeds.append((x, et))
        request = self.pool.take()
        try:
            for i, (x, et) in enumerate(feeds):
                request.set_input(i, x, et)
            request.infer()
            outs = [request.output(i) for i in self.output_order]
        finally:
            self.pool.give(request)
        # OpenVINO may hand back a narrower type than the model declares (int64 computed as int32)
        return [o if dt is None or o.dtype == dt else o.astype(dt) for o, dt in zip(outs, self.out_dtypes)]


def _declared_dtype(subgraph: FusedSubgraph, name: str) -> np.dtype | None:
    t = subgraph.graph.type_of(name)
    if t is None or t.kind != "tensor" or not t.elem_type:
        return None
    from onnx import helper

    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(t.elem_type))
    except (KeyError, TypeError, ValueError):
        return None


def _match(ov_names: list[str], names: list[str], positions, what: str, reverse: bool = False) -> list[int]:
    """Pair OpenVINO's ports with ours: for each OpenVINO input the position of our value, or
    (``reverse``, outputs) for each of our outputs OpenVINO's index.

    OpenVINO keeps the ONNX order of inputs (dropping those nothing reads) and of outputs, but
    may report a port under another name of the same tensor (an Identity merges the names):
    ports are paired by name where it is ours, the rest in order.
    """
    positions = list(positions)
    if reverse:
        if len(ov_names) != len(names):
            raise rt.OpenVINOError(f"{what}: OpenVINO has {len(ov_names)} outputs {ov_names}, expected {names}")
        index = {n: i for i, n in enumerate(ov_names)}
        if all(n in index for n in names) and len(set(names)) == len(names):
            return [index[n] for n in names]
        return list(range(len(names)))
    if len(ov_names) > len(names):
        raise rt.OpenVINOError(f"{what}: OpenVINO has {len(ov_names)} inputs {ov_names}, more than {names}")
    ours = {n: k for k, n in enumerate(names)}
    named = {ours[n] for n in ov_names if n in ours}
    out, last = [], -1
    for n in ov_names:
        k = ours.get(n)
        if k is None:  # the next of ours that no OpenVINO port names
            k = next((j for j in range(last + 1, len(names)) if j not in named), None)
            if k is None:
                raise rt.OpenVINOError(f"{what}: cannot place OpenVINO's input '{n}' among {names}")
        out.append(positions[k])
        last = k
    return out


def compile_subgraph(subgraph: FusedSubgraph, options: Options, core: rt.Core) -> CompiledSubgraph:
    return CompiledSubgraph(subgraph, options, core)
