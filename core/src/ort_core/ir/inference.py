"""Type inference of the main graph through onnx's schemas, node by node: onnx is asked only about nodes
that fit their schema and whose inputs are typed (its inference functions crash the interpreter on some
others). If/Loop/Scan bodies are walked here. Where it runs (by default a helper process) is ir.isolated's choice.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator

import onnx
from onnx import AttributeProto, TensorProto, TypeProto, defs, helper

from . import shape_values
from .external import MAX_SUBGRAPH_DEPTH
from .graph import is_onnx_domain, onnx_domain

CHILD_SECONDS = 60.0  # inference of a large model takes a second or two; a helper past this is stuck
DATA_ELEMENTS = 1024  # constants this small are shown to inference functions (Reshape's shape, ...)
_OPTIONAL = defs.OpSchema.FormalParameterOption.Optional


class _Scope:
    """Types and small constant values visible in a graph (its own and its enclosing graphs')."""

    def __init__(self, opsets: dict[str, int], outer: _Scope | None = None) -> None:
        self.opsets = opsets
        self.opset_protos = outer.opset_protos if outer else [helper.make_opsetid(d, v) for d, v in opsets.items()]
        self.types: dict[str, TypeProto] = dict(outer.types) if outer else {}
        self.data: dict[str, TensorProto] = dict(outer.data) if outer else {}
        self.values: dict = dict(outer.values) if outer else {}  # shape values (shape_values.py)


def infer_in_process(proto: onnx.ModelProto) -> dict[str, TypeProto]:
    """Inferred types of the main graph's values that the model does not declare, computed here."""
    inferred: dict[str, TypeProto] = {}
    _infer_main(proto, inferred.__setitem__)
    return inferred


def _infer_main(proto: onnx.ModelProto, sink: Callable[[str, TypeProto], None]) -> None:
    opsets: dict[str, int] = {}
    for op in proto.opset_import:
        domain = onnx_domain(op.domain)
        opsets[domain] = max(opsets.get(domain, 0), op.version)
    if proto.ir_version < 3:
        opsets.setdefault("", 1)
    _infer_graph(proto.graph, _Scope(opsets), {}, 0, sink)


def _infer_graph(graph: onnx.GraphProto, outer: _Scope, input_types: dict[str, TypeProto], depth: int,
                 sink: Callable[[str, TypeProto], None] | None = None) -> _Scope:
    """The scope of ``graph`` after inferring its nodes; ``input_types`` types the graph inputs it leaves
    untyped (a body's inputs come from its If/Loop/Scan node). New types also go to ``sink``."""
    scope = _Scope(outer.opsets, outer)
    for t in graph.initializer:
        dims = [int(d) for d in t.dims]
        scope.types[t.name] = helper.make_tensor_type_proto(t.data_type, dims if min(dims, default=0) >= 0 else None)
        if t.data_location != TensorProto.EXTERNAL and min(dims, default=0) >= 0 and _count(dims) <= DATA_ELEMENTS:
            scope.data[t.name] = t
    for v in graph.input:
        declared = v.type.WhichOneof("value") is not None
        if declared or v.name in input_types:
            scope.types[v.name] = _sane(v.type) if declared else input_types[v.name]
    for v in graph.value_info:
        if v.type.WhichOneof("value") is not None:
            scope.types[v.name] = _sane(v.type)
    known = set(scope.types)
    if depth > MAX_SUBGRAPH_DEPTH:
        return scope
    for node in _topological(graph):
        outs = _infer_node(node, scope, depth)
        reshaped = shape_values.step(node, scope.types, scope.data, scope.values)
        if reshaped and _unknown_dims(outs, reshaped):
            outs = {**(outs or {}), **reshaped}
        for name, t in (outs or {}).items():
            if name and name not in known and t.WhichOneof("value") is not None:
                scope.types[name] = t
                if sink is not None:
                    sink(name, t)
        if node.op_type == "Constant" and is_onnx_domain(node.domain) and len(node.output) == 1:
            for a in node.attribute:
                if a.name == "value" and a.type == AttributeProto.TENSOR and _count(a.t.dims) <= DATA_ELEMENTS:
                    scope.data[node.output[0]] = a.t
    return scope


def _infer_node(node: onnx.NodeProto, scope: _Scope, depth: int) -> dict[str, TypeProto] | None:
    """The node's output types, or None where asking onnx is unsafe (or it fails)."""
    domain = onnx_domain(node.domain)
    version = scope.opsets.get(domain, 0)
    names = [i for i in node.input if i]
    if version < 1 or any(i not in scope.types for i in names):
        return None
    if not _fits(node.op_type, domain, version, tuple(bool(i) for i in node.input), len(node.output),
                 tuple((a.name, a.type) for a in node.attribute)):
        return None
    if any(a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS) for a in node.attribute):
        return _control_flow(node, scope, depth) if domain == "" else None
    try:
        return onnx.shape_inference.infer_node_outputs(
            _schema(node.op_type, domain, version), node, {i: scope.types[i] for i in names},
            {i: scope.data[i] for i in names if i in scope.data}, opset_imports=scope.opset_protos)
    except Exception:  # noqa: BLE001 - inference is best effort; kernels check at run time
        return None


def _control_flow(node: onnx.NodeProto, scope: _Scope, depth: int) -> dict[str, TypeProto] | None:
    """Element types (shapes left unknown) of an If, Loop or Scan node's outputs, from its bodies."""
    graphs = {a.name: a.g for a in node.attribute if a.type == AttributeProto.GRAPH}
    ins = [scope.types.get(i) if i else None for i in node.input]
    if node.op_type == "If" and "then_branch" in graphs and "else_branch" in graphs:
        then = _yields(graphs["then_branch"], scope, [], depth, loose=False)
        other = _yields(graphs["else_branch"], scope, [], depth, loose=False)
        out = {}
        for name, a, b in zip(node.output, then, other):
            if _same(a, b) or _same(_loose(a), _loose(b)):  # shapes kept where both branches agree
                out[name] = a if _same(a, b) else _loose(a)
        return out
    if node.op_type == "Loop" and "body" in graphs and len(ins) >= 2:
        scalar = helper.make_tensor_type_proto
        body_in = [scalar(TensorProto.INT64, []), scalar(TensorProto.BOOL, []), *(_loose(t) for t in ins[2:])]
        body_out = _yields(graphs["body"], scope, body_in, depth)[1:]
        return {name: t for name, t in zip(node.output, body_out) if t is not None}
    if node.op_type == "Scan" and "body" in graphs and scope.opsets.get("", 0) >= 9:
        body_out = _yields(graphs["body"], scope, [_loose(t) for t in ins], depth)
        return {name: t for name, t in zip(node.output, body_out) if t is not None}
    return None


def _yields(body: onnx.GraphProto, scope: _Scope, input_types: list, depth: int,
            loose: bool = True) -> list[TypeProto | None]:
    """The types of a body's outputs (``loose``: without tensor shapes), its inputs typed by
    ``input_types`` where the body does not say."""
    given = {v.name: t for v, t in zip(body.input, input_types) if t is not None}
    inner = _infer_graph(body, scope, given, depth + 1)
    out = []
    for v in body.output:
        t = v.type if v.type.WhichOneof("value") is not None else inner.types.get(v.name)
        out.append(_loose(t) if loose else t)
    return out


def _unknown_dims(outs: dict[str, TypeProto] | None, better: dict[str, TypeProto]) -> bool:
    """Whether ``better`` knows more dims than onnx's ``outs`` for the same values."""
    def known(t: TypeProto | None) -> int:
        return -1 if t is None else sum(1 for d in _dims(t) if d.HasField("dim_value") or d.dim_param)
    return any(known(t) > known((outs or {}).get(name)) for name, t in better.items())


def _sane(t: TypeProto) -> TypeProto:
    """``t`` with negative dims made unknown: some inference functions index with a declared dim."""
    if not any(d.dim_value < 0 for d in _dims(t)):
        return t
    t = TypeProto.FromString(t.SerializeToString())
    for d in _dims(t):
        if d.dim_value < 0:
            d.Clear()
    return t


def _dims(t: TypeProto) -> Iterator:
    """Every dim of a type, inside sequences, optionals and maps too."""
    while t is not None:
        which = t.WhichOneof("value")
        if which in ("tensor_type", "sparse_tensor_type"):
            yield from getattr(t, which).shape.dim
            return
        if which == "sequence_type":
            t = t.sequence_type.elem_type
        elif which == "optional_type":
            t = t.optional_type.elem_type
        elif which == "map_type":
            t = t.map_type.value_type
        else:
            return


def _loose(t: TypeProto | None) -> TypeProto | None:
    """A tensor type without its shape (shapes change across iterations); other types as they are."""
    if t is None or t.WhichOneof("value") != "tensor_type":
        return t
    return helper.make_tensor_type_proto(t.tensor_type.elem_type, None)


def _same(a: TypeProto | None, b: TypeProto | None) -> bool:
    return a is not None and b is not None and a.SerializeToString() == b.SerializeToString()


def _count(dims) -> int:
    n = 1
    for d in dims:
        n *= max(int(d), 0)
    return n


def _topological(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    """Nodes whose producers come first (nodes on a cycle are left out: the session refuses those)."""
    producer: dict[str, int] = {}
    for k, node in enumerate(graph.node):
        for o in node.output:
            if o:
                producer.setdefault(o, k)
    waiting = [0] * len(graph.node)
    readers: dict[int, list[int]] = {}
    for k, node in enumerate(graph.node):
        reads = set(node.input)
        for a in node.attribute:  # a body reads values of this graph too: their producers come first
            for g in ([a.g] if a.type == AttributeProto.GRAPH else list(a.graphs)):
                reads |= _outer_reads(g, 0)
        for p in {producer[i] for i in reads if i in producer and producer[i] != k}:
            waiting[k] += 1
            readers.setdefault(p, []).append(k)
    ready = [k for k, w in enumerate(waiting) if w == 0]
    ready.reverse()
    while ready:
        k = ready.pop()
        yield graph.node[k]
        for r in readers.get(k, ()):
            waiting[r] -= 1
            if waiting[r] == 0:
                ready.append(r)


def _outer_reads(graph: onnx.GraphProto, depth: int) -> set[str]:
    """Names a subgraph (and the subgraphs inside it) reads from enclosing graphs."""
    if depth > MAX_SUBGRAPH_DEPTH:
        return set()
    defined = {v.name for v in graph.input} | {t.name for t in graph.initializer}
    defined.update(o for n in graph.node for o in n.output)
    reads = {v.name for v in graph.output}
    for n in graph.node:
        reads.update(i for i in n.input if i)
        for a in n.attribute:
            for g in ([a.g] if a.type == AttributeProto.GRAPH else list(a.graphs)):
                reads |= _outer_reads(g, depth + 1)
    return reads - defined


@functools.lru_cache(maxsize=1024)
def _schema(op_type: str, domain: str, version: int):
    try:
        return defs.get_schema(op_type, version, domain)
    except Exception:  # noqa: BLE001 - no schema (a custom op): nothing to infer
        return None


@functools.lru_cache(maxsize=4096)
def _fits(op_type: str, domain: str, version: int, inputs: tuple[bool, ...], n_outputs: int,
          attrs: tuple[tuple[str, int], ...]) -> bool:
    """Whether a node has an onnx schema and fits it; ``inputs`` tells for each input whether it is given."""
    schema = _schema(op_type, domain, version)
    if schema is None:
        return False
    if not schema.min_input <= len(inputs) <= schema.max_input:
        return False
    if not schema.min_output <= n_outputs <= schema.max_output:
        return False
    formal = list(schema.inputs)
    for k, present in enumerate(inputs):
        param = formal[min(k, len(formal) - 1)] if formal else None
        if not present and param is not None and param.option != _OPTIONAL:
            return False  # a required input left empty
    given = dict(attrs)
    if len(given) != len(attrs) or AttributeProto.UNDEFINED in given.values():
        return False
    for name, attr in schema.attributes.items():
        if name in given:
            if given[name] != int(attr.type.value):
                return False
        elif attr.required:
            return False
    return True
