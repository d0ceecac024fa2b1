"""Identity and inference-mode Dropout removal: their consumers read the input directly.

Kept when the output is a graph output or read by a nested subgraph (renaming would change the
model's interface or reach into subgraphs), and for Dropout whenever it might train or its mask
is used.
"""

from __future__ import annotations

import numpy as np

from ..ir.graph import Graph, Node, is_onnx_domain
from .rewrite import protected_names, rename_uses


def remove_identities(graph: Graph) -> int:
    protected = protected_names(graph)
    used = {i for n in graph.nodes for i in n.inputs if i}
    removed = []
    for node in graph.nodes:
        if not is_onnx_domain(node.domain) or not node.inputs or not node.inputs[0]:
            continue
        if node.op_type == "Identity" or (node.op_type == "Dropout" and _is_inference(node, graph, used)):
            src, dst = node.inputs[0], node.outputs[0]
            if not dst or dst in protected:
                continue
            rename_uses(graph, dst, src)
            removed.append(id(node))
    graph.nodes = [n for n in graph.nodes if id(n) not in removed]
    return len(removed)


def _is_inference(node: Node, graph: Graph, used: set[str]) -> bool:
    if len(node.outputs) > 1 and node.outputs[1] in used:
        return False  # the mask is read
    if node.attr("is_test", 1) == 0:  # opset < 7 training flag
        return False
    if len(node.inputs) > 2 and node.inputs[2]:
        flag = graph.constant_initializers().get(node.inputs[2])
        if flag is None or bool(np.asarray(flag)):
            return False  # training_mode decided at run time, or true
    return True
