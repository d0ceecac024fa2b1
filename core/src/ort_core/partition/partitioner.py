"""Assign every node to a provider and cut the graph into subgraphs for ``compile``.

Providers are asked in priority order which unassigned nodes they take; fusing providers get
consecutive runs of their nodes (in topological order, hence acyclic) as one subgraph, others
one subgraph per node. Compiling and executing are the session's job, not this module's.
"""

from __future__ import annotations

import heapq
from collections import Counter
from dataclasses import dataclass, field

from ..errors import InvalidGraph, NotImplementedOp, PluginError, warn
from ..ir.graph import Graph, Node, is_onnx_domain, outer_scope_reads
from ..plugins.types import FusedSubgraph, GraphView


@dataclass
class Partition:
    """The result: subgraphs in execution order, plus who declined what and why."""

    subgraphs: list[tuple[str, FusedSubgraph]]  # (provider, subgraph)
    declined: dict[str, dict[int, str]] = field(default_factory=dict)  # provider -> id -> reason
    assignment: dict[int, str] = field(default_factory=dict)  # node id -> provider
    fused: dict[str, bool] = field(default_factory=dict)  # provider -> fuses its nodes
    failed: dict[str, str] = field(default_factory=dict)  # provider -> why its get_capability failed
    handed_back: dict[str, list[str]] = field(default_factory=dict)  # provider -> subgraphs its compile refused
    transformed: dict[str, int] = field(default_factory=dict)  # provider -> rewrites its transform made
    nodes: dict[int, Node] = field(default_factory=dict)  # every node placed, transforms' removals included

    def node(self, node_id: int) -> Node:
        """A node by id as it was placed (for messages: a transform may have removed it since)."""
        return self.nodes[node_id]

    def summary(self, graph: Graph, providers: list[str]) -> list[str]:
        """One line per provider: how many nodes it took and which op types it declined."""
        total = len(graph.nodes)
        counts = Counter(self.assignment.values())
        lines = []
        for p in providers:
            declined_ops = Counter(self.node(i).op_type for i in self.declined.get(p, {}))
            line = f"{p}: {counts.get(p, 0)}/{total} nodes"
            if declined_ops and p != providers[-1]:
                ops = ", ".join(f"{op} x{c}" for op, c in declined_ops.most_common(8))
                line += f"; declined: {ops}"
            back = self.handed_back.get(p)
            if back:
                more = "; ..." if len(back) > 1 else ""
                line += f"; handed back at compile: {len(back)} subgraph(s) ({back[0]}{more})"
            lines.append(line)
        return lines


def partition(graph: Graph, opsets: dict[str, int], providers: list, custom_ops=None, strict: bool = False,
              excluded: dict[str, set[int]] | None = None, baking: set[str] | frozenset = frozenset()) -> Partition:
    """Assign nodes to ``providers`` (the session's provider instances, priority order).

    ``custom_ops`` (a CustomOpRegistry) is shown to providers in the graph views and subgraphs.
    ``excluded``: provider name -> node ids not to offer it (subgraphs its compile handed back).
    A provider whose get_capability fails is left out (``Partition.failed``), or raises in strict mode.
    ``baking``: providers whose subgraphs take constants at compile time only (not as inputs).
    """
    order = topological_order(graph)
    unassigned = [n.id for n in order]
    result = Partition([], nodes={n.id: n for n in order})
    fuse: dict[str, bool] = {}
    excluded = excluded or {}
    for ep in providers:
        p = ep.name
        if not unassigned:
            break
        skip = excluded.get(p, set())
        offered = tuple(i for i in unassigned if i not in skip)
        view = GraphView(graph, opsets, offered, custom_ops)
        try:
            cap = ep.get_capability(view)
        except PluginError as e:
            if strict:
                raise
            warn(f"{e}; provider skipped")
            result.failed[p] = str(e)
            continue
        fuse[p] = cap.fuse
        result.declined[p] = dict(cap.declined)
        for nid in skip.intersection(unassigned):
            result.declined[p][nid] = "handed back by its compile"
        taken = set(cap.claimed)
        for nid in cap.claimed:
            result.assignment[nid] = p
        unassigned = [i for i in unassigned if i not in taken]
    if unassigned:
        raise NotImplementedOp(_unassigned_message(graph, unassigned, result.declined, opsets, custom_ops))
    result.fused = dict(fuse)
    result.subgraphs = _cut(graph, opsets, order, result.assignment, fuse, baking, custom_ops)
    return result


def recut(graph: Graph, opsets: dict[str, int], part: Partition, custom_ops=None,
          baking: set[str] | frozenset = frozenset()) -> Partition:
    """The same placement cut again after providers rewrote their own nodes (transforms): nodes still in the
    graph keep their provider, nodes a transform added belong to the provider whose nodes it rewrote (the
    caller records them in ``part.assignment``); no provider is asked again."""
    present = {n.id for n in graph.nodes}
    part.assignment = {i: p for i, p in part.assignment.items() if i in present}
    part.nodes.update((n.id, n) for n in graph.nodes)
    part.subgraphs = _cut(graph, opsets, topological_order(graph), part.assignment, part.fused, baking, custom_ops)
    return part


def topological_order(graph: Graph) -> list[Node]:
    try:
        return graph.topological_order()
    except ValueError as e:
        raise InvalidGraph(str(e)) from None


def _unassigned_message(graph: Graph, ids: list[int], declined: dict[str, dict[int, str]],
                        opsets: dict[str, int], custom_ops) -> str:
    lines = []
    by_id = graph.nodes_by_id()
    for nid in ids[:5]:
        node = by_id[nid]
        reasons = "; ".join(f"{p}: {r[nid]}" for p, r in declined.items() if nid in r)
        lines.append(f"  {node.label}: {reasons or 'no provider was asked'}")
        if not is_onnx_domain(node.domain):
            lines.append("    " + _custom_op_hint(node, opsets.get(node.domain, 0), custom_ops))
    more = f"\n  ... and {len(ids) - 5} more" if len(ids) > 5 else ""
    how = ""
    if any(not is_onnx_domain(by_id[i].domain) for i in ids):
        how = ("\nTo register a custom op: in Python, declare it with @ort_core.custom_op(domain, op_type, inputs=..., "
               "outputs=...) and register it with SessionOptions.register_custom_op(op) (one session) or "
               "ort_core.register_custom_op(op) (every session); in C, build a library against "
               "ort_core_custom_op.h and load it with SessionOptions.register_custom_ops_library(path).")
    return f"no requested provider can run {len(ids)} node(s):\n" + "\n".join(lines) + more + how


def _cut(graph: Graph, opsets: dict[str, int], order: list[Node], assignment: dict[int, str],
         fuse: dict[str, bool], baking: set[str] | frozenset, custom_ops=None) -> list[tuple[str, FusedSubgraph]]:
    groups = _group(graph, order, assignment, fuse)
    consumers = graph.consumers()
    graph_outputs = {v.name for v in graph.outputs}
    constants = graph.constant_initializers()
    out = []
    for k, (p, nodes) in enumerate(groups):
        sub = _subgraph(graph, opsets, f"{p}_{k}", nodes, consumers, graph_outputs, constants, p in baking)
        sub.custom_ops = custom_ops
        out.append((p, sub))
    return out


def _group(graph: Graph, order: list[Node], assignment: dict[int, str],
           fuse: dict[str, bool]) -> list[tuple[str, list[Node]]]:
    """Cut the assigned nodes into groups: runs of one provider in a topological order.

    Any run of consecutive nodes in a topological order is a valid fused subgraph (every path
    between two of its nodes stays inside it), so the order is built to make runs long: while a
    fusing provider's group is open, its ready nodes are taken first; otherwise ready nodes of
    non-fusing providers go first (running them unblocks more nodes for the next group), then the
    earliest ready node in the model's own order.
    """
    index = {n.id: k for k, n in enumerate(order)}
    producers = graph.producers()
    succs: dict[int, set[int]] = {n.id: set() for n in order}
    indeg: dict[int, int] = {}
    for n in order:
        preds = {producers[i].id for i in set(n.inputs) | outer_scope_reads(n)
                 if i in producers and producers[i] is not n}
        indeg[n.id] = len(preds)
        for p in preds:
            succs[p].add(n.id)
    ready: dict[str, list[tuple[int, int]]] = {}
    for n in order:
        if indeg[n.id] == 0:
            heapq.heappush(ready.setdefault(assignment[n.id], []), (index[n.id], n.id))
    by_id = {n.id: n for n in order}
    groups: list[tuple[str, list[Node]]] = []
    current: str | None = None
    for _ in range(len(order)):
        if current is not None and fuse.get(current, True) and ready.get(current):
            provider = current
        else:
            # non-fusing providers first (False sorts before True), then model order
            candidates = [(fuse.get(p, True), q[0][0], p) for p, q in ready.items() if q]
            provider = min(candidates)[2]
        _, nid = heapq.heappop(ready[provider])
        node = by_id[nid]
        if provider == current and fuse.get(provider, True) and groups:
            groups[-1][1].append(node)
        else:
            groups.append((provider, [node]))
        current = provider
        for s in succs[nid]:
            indeg[s] -= 1
            if indeg[s] == 0:
                heapq.heappush(ready.setdefault(assignment[s], []), (index[s], s))
    return groups


def _subgraph(graph, opsets, name, nodes, consumers, graph_outputs, constants, bake: bool) -> FusedSubgraph:
    ids = {n.id for n in nodes}
    produced: set[str] = set()
    inputs: list[str] = []
    for n in nodes:
        reads = [i for i in n.inputs if i] + sorted(outer_scope_reads(n))
        for name_ in reads:
            if name_ not in produced and name_ not in inputs:
                inputs.append(name_)
        produced.update(o for o in n.outputs if o)
    outputs = [o for n in nodes for o in n.outputs if o and (
        o in graph_outputs or any(c.id not in ids for c in consumers.get(o, ())))]
    used = {i: constants[i] for i in inputs if i in constants}
    if bake:  # the provider builds constants into its artifact: they are not inputs of its kernel
        inputs = [i for i in inputs if i not in used]
    return FusedSubgraph(name, list(nodes), inputs, outputs, used, dict(opsets), graph)


def _custom_op_hint(node: Node, opset: int, custom_ops) -> str:
    """Why a node outside the ONNX domain found no custom op: none registered, or not for its opset."""
    name = f"{node.domain}::{node.op_type}"
    versions = custom_ops.versions(node.domain, node.op_type) if custom_ops is not None else []
    if versions:
        ranges = ", ".join(op.opset_text() for op in versions)
        return (f"custom op {name} is registered for opset(s) {ranges} of domain '{node.domain}', but the model "
                f"imports version {opset or 1}")
    return f"custom op {name} (domain '{node.domain}', op type '{node.op_type}') is not registered"
