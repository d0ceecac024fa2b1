"""Assign every node to a provider and cut the graph into subgraphs for ``compile``.

Providers are asked in priority order which unassigned nodes they take; fusing providers get
consecutive runs of their nodes (in topological order, hence acyclic) as one subgraph, others
one subgraph per node. Compiling and executing are the session's job, not this module's.
"""

from __future__ import annotations

import warnings
from collections import Counter
from dataclasses import dataclass, field

from ..errors import InvalidGraph, NotImplementedOp, OrtWarning, PluginError
from ..ir.graph import Graph, Node, outer_scope_reads
from ..plugins.types import FusedSubgraph, GraphView, constant_initializers


@dataclass
class Partition:
    """The result: subgraphs in execution order, plus who declined what and why."""

    subgraphs: list[tuple[str, FusedSubgraph]]  # (provider, subgraph)
    declined: dict[str, dict[int, str]] = field(default_factory=dict)  # provider -> id -> reason
    assignment: dict[int, str] = field(default_factory=dict)  # node id -> provider

    def summary(self, graph: Graph, providers: list[str]) -> list[str]:
        """One line per provider: how many nodes it took and which op types it declined."""
        total = len(graph.nodes)
        counts = Counter(self.assignment.values())
        lines = []
        for p in providers:
            declined_ops = Counter(graph.node_by_id(i).op_type for i in self.declined.get(p, {}))
            line = f"{p}: {counts.get(p, 0)}/{total} nodes"
            if declined_ops and p != providers[-1]:
                ops = ", ".join(f"{op} x{c}" for op, c in declined_ops.most_common(8))
                line += f"; declined: {ops}"
            lines.append(line)
        return lines


def partition(graph: Graph, opsets: dict[str, int], providers: list[str], registry,
              options: dict[str, dict]) -> Partition:
    """Assign nodes to ``providers`` (priority order) through the registry's hooks."""
    order = topological_order(graph)
    unassigned = [n.id for n in order]
    result = Partition([])
    fuse: dict[str, bool] = {}
    for p in providers:
        if not unassigned:
            break
        view = GraphView(graph, opsets, tuple(unassigned))
        try:
            cap = registry.get_capability(p, view, options.get(p, {}))
        except PluginError as e:
            warnings.warn(f"{e}; provider skipped", OrtWarning, stacklevel=4)
            continue
        fuse[p] = cap.fuse
        result.declined[p] = dict(cap.declined)
        taken = set(cap.claimed)
        for nid in cap.claimed:
            result.assignment[nid] = p
        unassigned = [i for i in unassigned if i not in taken]
    if unassigned:
        raise NotImplementedOp(_unassigned_message(graph, unassigned, result.declined))
    result.subgraphs = _cut(graph, opsets, order, result.assignment, fuse)
    return result


def topological_order(graph: Graph) -> list[Node]:
    try:
        return graph.topological_order()
    except ValueError as e:
        raise InvalidGraph(str(e)) from None


def _unassigned_message(graph: Graph, ids: list[int], declined: dict[str, dict[int, str]]) -> str:
    lines = []
    for nid in ids[:5]:
        node = graph.node_by_id(nid)
        reasons = "; ".join(f"{p}: {r[nid]}" for p, r in declined.items() if nid in r)
        lines.append(f"  {node.label}: {reasons or 'no provider was asked'}")
    more = f"\n  ... and {len(ids) - 5} more" if len(ids) > 5 else ""
    return f"no requested provider can run {len(ids)} node(s):\n" + "\n".join(lines) + more


def _cut(graph: Graph, opsets: dict[str, int], order: list[Node], assignment: dict[int, str],
         fuse: dict[str, bool]) -> list[tuple[str, FusedSubgraph]]:
    groups: list[tuple[str, list[Node]]] = []
    for node in order:
        p = assignment[node.id]
        if groups and groups[-1][0] == p and fuse.get(p, True):
            groups[-1][1].append(node)
        else:
            groups.append((p, [node]))
    consumers = graph.consumers()
    graph_outputs = {v.name for v in graph.outputs}
    constants = constant_initializers(graph)
    out = []
    for k, (p, nodes) in enumerate(groups):
        out.append((p, _subgraph(graph, opsets, f"{p}_{k}", nodes, consumers, graph_outputs, constants)))
    return out


def _subgraph(graph, opsets, name, nodes, consumers, graph_outputs, constants) -> FusedSubgraph:
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
    return FusedSubgraph(name, list(nodes), inputs, outputs,
                         {i: constants[i] for i in inputs if i in constants}, dict(opsets), graph)
