"""Small graph-editing helpers shared by the optimizer passes: renaming uses, unique names.

They edit the IR in place and know nothing about what a pass is trying to achieve.
"""

from __future__ import annotations

from ..ir.graph import Graph, outer_scope_reads


def protected_names(graph: Graph) -> set[str]:
    """Values a rewrite must not rename away: graph outputs and reads from nested subgraphs."""
    names = {v.name for v in graph.outputs}
    for node in graph.nodes:
        if node.subgraphs():
            names |= outer_scope_reads(node)
    return names


def rename_uses(graph: Graph, old: str, new: str) -> None:
    """Make every node input reading ``old`` read ``new`` instead."""
    for node in graph.nodes:
        if old in node.inputs:
            node.inputs = [new if i == old else i for i in node.inputs]


def consumers_of(graph: Graph, name: str) -> list:
    return [n for n in graph.nodes if name in n.inputs]


def fresh_name(graph: Graph, base: str) -> str:
    """A value name not used anywhere in the graph yet."""
    taken = set(graph.initializers) | {v.name for v in graph.inputs} | {o for n in graph.nodes for o in n.outputs}
    name, k = base, 0
    while name in taken:
        k += 1
        name = f"{base}_{k}"
    return name
