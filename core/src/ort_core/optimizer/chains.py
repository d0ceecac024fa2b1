"""Simplify chains of layout ops: Transpose∘Transpose composes (and vanishes when it is the
identity), Reshape∘Reshape keeps only the last one, Cast to the type a value already has vanishes.

Only rewrites where the intermediate value has no other reader and is not a graph output; Reshape
targets containing 0 (copy a dim from the intermediate) and non-constant shapes are left alone, and so is
an inner Reshape that could refuse an input the outer one accepts (dropping it would turn an error into
a result): it goes only when its input's shape is static and fits its target, or its target cannot fail
(only copied dims and one -1).
"""

from __future__ import annotations

import numpy as np

from ..ir.graph import Graph, Node, is_onnx_domain
from .rewrite import protected_names, rename_uses


def simplify_chains(graph: Graph) -> int:
    count = 0
    changed = True
    while changed:
        changed = False
        protected = protected_names(graph)
        producers = graph.producers()
        readers = graph.consumers()  # valid for this round: the loop restarts after each rewrite
        for node in list(graph.nodes):
            if not is_onnx_domain(node.domain) or not node.inputs or not node.inputs[0]:
                continue
            inner = producers.get(node.inputs[0])
            if node.op_type == "Cast" and _cast_is_noop(graph, node):
                if node.outputs[0] in protected:
                    continue
                rename_uses(graph, node.outputs[0], node.inputs[0])
                graph.nodes = [n for n in graph.nodes if n is not node]
            elif inner is None or inner.outputs[0] in protected or len(readers.get(inner.outputs[0], ())) != 1:
                continue
            elif node.op_type == "Transpose" and inner.op_type == "Transpose" and is_onnx_domain(inner.domain):
                if not _compose_transposes(graph, inner, node, protected):
                    continue
            elif node.op_type == "Reshape" and inner.op_type == "Reshape" and is_onnx_domain(inner.domain):
                if not _skip_inner_reshape(graph, inner, node):
                    continue
            else:
                continue
            count += 1
            changed = True
            break
    return count


def _cast_is_noop(graph: Graph, node: Node) -> bool:
    t = graph.type_of(node.inputs[0])
    return t is not None and t.kind == "tensor" and t.elem_type == node.attr("to") and t.elem_type != 0


def _compose_transposes(graph: Graph, inner: Node, outer: Node, protected: set[str]) -> bool:
    p1, p2 = inner.attr("perm"), outer.attr("perm")
    if p1 is None or p2 is None or len(p1) != len(p2):
        return False  # default perms depend on the rank, which may be unknown
    perm = [p1[i] for i in p2]
    if perm == sorted(perm) and perm == list(range(len(perm))):
        if outer.outputs[0] in protected:
            return False
        rename_uses(graph, outer.outputs[0], inner.inputs[0])
        graph.nodes = [n for n in graph.nodes if n is not inner and n is not outer]
        return True
    outer.inputs = [inner.inputs[0]]
    outer.attrs["perm"] = perm
    graph.nodes = [n for n in graph.nodes if n is not inner]
    return True


def _skip_inner_reshape(graph: Graph, inner: Node, outer: Node) -> bool:
    shape = graph.constant_initializers().get(outer.inputs[1]) if len(outer.inputs) > 1 else None
    if shape is None or np.any(np.asarray(shape) == 0) or not _never_fails(graph, inner):
        return False
    outer.inputs = [inner.inputs[0], outer.inputs[1]]
    graph.nodes = [n for n in graph.nodes if n is not inner]
    return True


def _never_fails(graph: Graph, reshape: Node) -> bool:
    """Whether ``reshape`` accepts every input its graph can give it."""
    target = graph.constant_initializers().get(reshape.inputs[1]) if len(reshape.inputs) > 1 else None
    t = graph.type_of(reshape.inputs[0])
    shape = t.shape if t is not None and t.kind == "tensor" else None
    if target is None or shape is None or int(reshape.attr("allowzero", 0)):
        return False
    target = [int(d) for d in np.asarray(target).reshape(-1)]
    if target.count(-1) > 1 or min(target, default=0) < -1 or len(target) > len(shape) and 0 in target[len(shape):]:
        return False
    if all(d in (0, -1) for d in target) and target.count(-1) == 1 and len(target) <= len(shape):
        return True  # copied dims and the rest (a -1 over a zero-size copied dim fails either way)
    if not all(isinstance(d, int) and d >= 0 for d in shape):
        return False
    dims = [shape[i] if d == 0 else d for i, d in enumerate(target)]
    known = int(np.prod([d for d in dims if d != -1], dtype=np.int64))
    total = int(np.prod(shape, dtype=np.int64))
    return known == total if -1 not in dims else known > 0 and total % known == 0
