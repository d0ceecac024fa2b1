"""In-memory IR: Node, Graph (with nested subgraphs and outer scope) and Model.

Plain Python objects built from (and back into) ONNX protobufs by ``ir.load``/``ir.save``.
The IR imports nothing else of ours; it neither executes nor optimizes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .types import ValueType


def is_onnx_domain(domain: str) -> bool:
    """Whether ``domain`` is ONNX's default operator domain, which models spell "" or "ai.onnx"."""
    return domain in ("", "ai.onnx")


def onnx_domain(domain: str) -> str:
    """The one spelling of a domain used as a key: "ai.onnx" becomes ""; any other domain is kept."""
    return "" if domain == "ai.onnx" else domain


class RawText(str):
    """A string attribute as text, keeping the exact bytes the model holds (``raw``): a binary payload
    such as an EPContext node's compiled context survives the round trip even when it is not UTF-8."""

    __slots__ = ("raw",)

    def __new__(cls, raw: bytes) -> RawText:
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            text = raw.decode("latin-1")
        self = super().__new__(cls, text)
        self.raw = bytes(raw)
        return self


@dataclass
class Node:
    """One operator application.

    ``inputs``/``outputs`` are value names; an empty string marks an omitted optional
    input or output, as in ONNX. ``attrs`` holds Python values: int, float, str, lists of
    those, numpy arrays for tensors and ``Graph`` objects for subgraph attributes.
    ``id`` is unique within its graph and stable for the session's lifetime.
    """

    op_type: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)
    domain: str = ""
    name: str = ""
    id: int = -1
    doc_string: str = ""
    # ONNX AttributeProto type codes, kept so empty lists round-trip with their type
    attr_types: dict[str, int] = field(default_factory=dict)

    def attr(self, name: str, default: Any = None) -> Any:
        return self.attrs.get(name, default)

    @property
    def label(self) -> str:
        """Human-readable identity used in error messages: name and op type."""
        op = self.op_type if is_onnx_domain(self.domain) else f"{self.domain}::{self.op_type}"
        return f"node '{self.name}' ({op})" if self.name else f"node #{self.id} ({op})"

    def copy(self, graph: Graph | None = None) -> Node:
        """A copy with its own lists and attributes; subgraph attributes are copied with ``graph``
        (the copy's owner) as their parent."""
        attrs = {}
        for k, v in self.attrs.items():
            if isinstance(v, Graph):
                v = v.copy(graph)
            elif isinstance(v, list) and v and isinstance(v[0], Graph):
                v = [b.copy(graph) for b in v]
            attrs[k] = v
        return Node(self.op_type, list(self.inputs), list(self.outputs), attrs, self.domain, self.name, self.id,
                    self.doc_string, dict(self.attr_types))

    def subgraphs(self) -> list[Graph]:
        out: list[Graph] = []
        for v in self.attrs.values():
            if isinstance(v, Graph):
                out.append(v)
            elif isinstance(v, list) and v and isinstance(v[0], Graph):
                out.extend(v)
        return out


@dataclass
class ValueInfo:
    name: str
    type: ValueType
    doc_string: str = ""


@dataclass
class Graph:
    """A graph: nodes in the order given, typed inputs/outputs and initializers.

    ``initializers`` maps names to numpy arrays. ``value_info`` holds the static types known
    for any value (from the model and from shape inference). ``parent`` links a subgraph
    (If/Loop/Scan body) to the graph whose values it may read from outer scope.
    """

    name: str
    nodes: list[Node]
    inputs: list[ValueInfo]
    outputs: list[ValueInfo]
    initializers: dict[str, np.ndarray] = field(default_factory=dict)
    value_info: dict[str, ValueInfo] = field(default_factory=dict)
    doc_string: str = ""
    parent: Graph | None = None
    # extra sparse initializers kept as protos for a faithful round trip
    sparse_initializers: list[Any] = field(default_factory=list)

    def copy(self, parent: Graph | None = None) -> Graph:
        """A structural copy that passes may rewrite without touching this graph: new nodes, lists
        and dicts (nested bodies copied too, re-parented); tensors and types are shared, as passes
        replace them rather than write into them."""
        g = Graph(self.name, [], list(self.inputs), list(self.outputs), dict(self.initializers),
                  dict(self.value_info), self.doc_string, parent if parent is not None else self.parent,
                  list(self.sparse_initializers))
        g.nodes = [n.copy(g) for n in self.nodes]
        return g

    def node_by_id(self, node_id: int) -> Node:
        """One node by id; looping callers should take ``nodes_by_id()`` once instead."""
        return self.nodes_by_id()[node_id]

    def nodes_by_id(self) -> dict[int, Node]:
        return {n.id: n for n in self.nodes}

    def type_of(self, name: str) -> ValueType | None:
        """Static type of a value visible in this graph (searching outer scopes too)."""
        g: Graph | None = self
        while g is not None:
            vi = g.value_info.get(name)
            if vi is not None:
                return vi.type
            for v in (*g.inputs, *g.outputs):
                if v.name == name:
                    return v.type
            if name in g.initializers:
                arr = g.initializers[name]
                from .types import elem_type_of

                return ValueType.tensor(elem_type_of(arr.dtype) or 0, arr.shape)
            g = g.parent
        return None

    def constant_initializers(self) -> dict[str, np.ndarray]:
        """Initializers no feed can override: those not also listed as graph inputs."""
        feedable = {v.name for v in self.inputs}
        return {k: v for k, v in self.initializers.items() if k not in feedable}

    def producers(self) -> dict[str, Node]:
        return {o: n for n in self.nodes for o in n.outputs if o}

    def consumers(self) -> dict[str, list[Node]]:
        """Value name -> nodes reading it, including reads from inside nested subgraphs."""
        out: dict[str, list[Node]] = {}
        for n in self.nodes:
            for name in set(n.inputs) | outer_scope_reads(n):
                if name:
                    out.setdefault(name, []).append(n)
        return out

    def topological_order(self) -> list[Node]:
        """Nodes ordered so that every producer precedes its consumers.

        Raises ValueError naming a node on a cycle. Values that no node produces are
        treated as available (graph inputs, initializers, outer scope).
        """
        producers = self.producers()
        if _in_order(self.nodes, producers):  # the usual case (the ONNX spec asks for it): one linear check
            return list(self.nodes)
        deps: dict[int, set[int]] = {}
        for n in self.nodes:
            reads = set(n.inputs) | outer_scope_reads(n)
            deps[n.id] = {producers[i].id for i in reads if i in producers and producers[i] is not n}
        order: list[Node] = []
        state: dict[int, int] = {}
        by_id = self.nodes_by_id()
        for root in self.nodes:
            if root.id in state:
                continue
            stack = [(root.id, iter(sorted(deps[root.id])))]
            state[root.id] = 1
            while stack:
                nid, it = stack[-1]
                nxt = next(it, None)
                if nxt is None:
                    stack.pop()
                    state[nid] = 2
                    order.append(by_id[nid])
                elif state.get(nxt) == 1:
                    raise ValueError(f"graph '{self.name}' has a cycle through {by_id[nxt].label}")
                elif nxt not in state:
                    state[nxt] = 1
                    stack.append((nxt, iter(sorted(deps[nxt]))))
        return order


def _in_order(nodes: list[Node], producers: dict[str, Node]) -> bool:
    """Whether every node comes after the producers of what it reads (its bodies' outer reads included);
    a node reading its own output makes the answer False (the full sort ignores such reads)."""
    made: set[str] = set()
    for n in nodes:
        for name in n.inputs:
            if name in producers and name not in made:
                return False
        if n.subgraphs() and any(name in producers and name not in made for name in outer_scope_reads(n)):
            return False
        made.update(n.outputs)
    return True


def outer_scope_reads(node: Node) -> set[str]:
    """Names a node's subgraphs read from enclosing scopes (not defined inside them)."""
    reads: set[str] = set()
    for g in node.subgraphs():
        defined = {v.name for v in g.inputs} | set(g.initializers)
        for n in g.nodes:
            defined.update(o for o in n.outputs if o)
        for n in g.nodes:
            for name in set(n.inputs) | outer_scope_reads(n):
                if name and name not in defined:
                    reads.add(name)
        for v in g.outputs:
            if v.name not in defined:
                reads.add(v.name)
    return reads


@dataclass
class Model:
    """A loaded model: main graph, opset imports per domain and metadata."""

    graph: Graph
    opset_imports: dict[str, int]
    ir_version: int = 0
    producer_name: str = ""
    producer_version: str = ""
    domain: str = ""
    model_version: int = 0
    doc_string: str = ""
    metadata_props: dict[str, str] = field(default_factory=dict)
    functions: list[Any] = field(default_factory=list)  # FunctionProtos, kept for round trip
    source: str = "<bytes>"  # file path or '<bytes>'/'<ModelProto>' for messages

    def copy(self) -> Model:
        """A copy whose graph passes may rewrite without touching this one (see Graph.copy)."""
        return Model(self.graph.copy(), dict(self.opset_imports), self.ir_version, self.producer_name,
                     self.producer_version, self.domain, self.model_version, self.doc_string,
                     dict(self.metadata_props), list(self.functions), self.source)

    def opset(self, domain: str = "") -> int:
        """Opset version imported for a domain ('' and 'ai.onnx' are the same domain)."""
        if is_onnx_domain(domain):
            return self.opset_imports.get("", self.opset_imports.get("ai.onnx", 0))
        return self.opset_imports.get(domain, 0)
