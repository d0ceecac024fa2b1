"""Dead-code elimination: drop nodes none of whose outputs is used, and unused initializers.

Graph outputs and values read from nested subgraphs count as used. Overridable initializers
(also listed as graph inputs) are kept: a caller may feed them.
"""

from __future__ import annotations

from ..ir.graph import Graph, outer_scope_reads


def eliminate_dead_code(graph: Graph) -> int:
    """Remove dead nodes and initializers in place; returns the number of nodes removed."""
    used = {v.name for v in graph.outputs}
    live = []
    for node in reversed(graph.topological_order()):
        if any(o in used for o in node.outputs if o):
            live.append(node)
            used.update(i for i in node.inputs if i)
            used.update(outer_scope_reads(node))
            used.update(_named_by_attributes(node))
    removed = len(graph.nodes) - len(live)
    keep = set(id(n) for n in live)
    graph.nodes = [n for n in graph.nodes if id(n) in keep]
    inputs = {v.name for v in graph.inputs}
    for name in [k for k in graph.initializers if k not in used and k not in inputs]:
        del graph.initializers[name]
    return removed


def _named_by_attributes(node) -> set[str]:
    """Values a node reaches by name through attributes (Gradient's xs, zs and y)."""
    if node.op_type != "Gradient":
        return set()
    names = [*node.attr("xs", []), *node.attr("zs", []), node.attr("y", "")]
    return {n for n in names if n}
