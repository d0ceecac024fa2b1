"""Static types of custom-op outputs: filled into the graph at session creation and after a first run.

onnx's shape inference knows nothing of custom ops, so the session asks each op (its ``infer`` or
its declaration) and, failing that, the kernel's first run. Only gaps are filled: types the model
declares are never overwritten. This module neither runs kernels nor checks values.
"""

from __future__ import annotations

import threading

from ..ir.graph import Graph, ValueInfo, is_onnx_domain
from ..ir.types import ValueType, elem_type_of


def incomplete(t: ValueType | None) -> bool:
    """True when a tensor's element type or rank is unknown."""
    return t is None or t.kind == "unknown" or (t.kind == "tensor" and (not t.elem_type or t.shape is None))


def record_type(graph: Graph, name: str, t: ValueType) -> None:
    """Fill what ``graph`` does not know about ``name`` from ``t`` (value_info and graph outputs)."""
    old = graph.type_of(name)
    new = _merge(old, t)
    if new == old:
        return
    graph.value_info[name] = ValueInfo(name, new)
    for k, v in enumerate(graph.outputs):
        if v.name == name:
            graph.outputs[k] = ValueInfo(name, new, v.doc_string)


def _merge(old: ValueType | None, t: ValueType) -> ValueType:
    if old is None or old.kind == "unknown":
        return t
    if old.kind != "tensor" or t.kind != "tensor":
        return old
    shape = old.shape
    if shape is None:
        shape = t.shape
    elif t.shape is not None and len(t.shape) == len(shape):
        shape = tuple(n if o is None else o for o, n in zip(shape, t.shape))
    return ValueType.tensor(old.elem_type or t.elem_type, shape)


def infer_static_types(graph: Graph, opsets: dict[str, int], registry) -> None:
    """Give custom-op outputs static types, in topological order so inferred types flow to later custom ops."""
    if not registry:
        return
    for node in graph.topological_order():
        if is_onnx_domain(node.domain):
            continue
        op = registry.lookup(node.domain, node.op_type, opsets.get(node.domain, 0))
        if op is None:
            continue
        for name, t in zip(node.outputs, op.static_output_types(node, graph)):
            if name and t is not None:
                record_type(graph, name, t)


class FirstRunTypes:
    """Records a node's output element types and ranks from its first successful run, once.

    Dims are recorded as unknown: one run's sizes say nothing about the next one's.
    """

    def __init__(self, graph: Graph, names: list[str]) -> None:
        self.graph, self.names = graph, names
        self.done = False
        self._lock = threading.Lock()

    def record(self, results: list) -> None:
        with self._lock:
            if self.done:
                return
            for name, r in zip(self.names, results):
                code = elem_type_of(r.dtype) if name and r is not None else None
                if code:
                    record_type(self.graph, name, ValueType.tensor(code, (None,) * r.ndim))
            self.done = True
