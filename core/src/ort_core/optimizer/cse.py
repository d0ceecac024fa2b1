"""Common subexpression elimination: nodes with the same op, attributes and inputs compute once.

Random ops and nodes with subgraphs are never merged; a duplicate whose outputs are graph outputs
or read by a nested subgraph is kept.
"""

from __future__ import annotations

import numpy as np

from ..ir.graph import Graph, Node
from .rewrite import protected_names, rename_uses

NONDETERMINISTIC = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
                    "Bernoulli", "Dropout"}


def eliminate_common_subexpressions(graph: Graph) -> int:
    protected = protected_names(graph)
    seen: dict[tuple, Node] = {}
    removed: set[int] = set()
    for node in graph.topological_order():
        if node.op_type in NONDETERMINISTIC or node.subgraphs():
            continue
        key = _key(node)
        if key is None:
            continue
        first = seen.get(key)
        if first is None:
            seen[key] = node
            continue
        if any(o in protected for o in node.outputs if o) or len(first.outputs) != len(node.outputs):
            continue
        for dup, keep in zip(node.outputs, first.outputs):
            if dup:
                if not keep:
                    break
                rename_uses(graph, dup, keep)
        else:
            removed.add(id(node))
    graph.nodes = [n for n in graph.nodes if id(n) not in removed]
    return len(removed)


def _key(node: Node) -> tuple | None:
    try:
        attrs = tuple(sorted((k, _freeze(v)) for k, v in node.attrs.items()))
    except TypeError:
        return None
    return node.domain or "", node.op_type, tuple(node.inputs), attrs


def _freeze(v):
    if isinstance(v, np.ndarray):
        return ("tensor", v.dtype.str, v.shape, v.tobytes())
    if isinstance(v, list):
        return tuple(_freeze(x) for x in v)
    if isinstance(v, (int, float, str, bytes)):
        return v
    raise TypeError("unhashable attribute")
