"""Constant folding: nodes whose inputs are all constants are computed once, at session creation.

Results replace the nodes as initializers. Random ops, nodes with subgraphs and nodes outside
the default domain are never folded. How a node is computed is the caller's ``evaluate``.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping

import numpy as np

from ..ir.graph import Model, Node, is_onnx_domain

NEVER_FOLD = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
              "Bernoulli", "If", "Loop", "Scan"}


def fold_constants(model: Model, evaluate: Callable[[Node, list], list], keep: Collection[str] = (),
                   outer: Mapping[str, np.ndarray] | None = None) -> int:
    """Fold in place; ``evaluate(node, inputs)`` returns the node's outputs. Returns nodes folded.

    ``keep``: op types left as nodes although their inputs are constant (a provider's preference, such as
    DequantizeLinear for one that runs QDQ groups). ``outer``: for a graph body, the constants of the
    enclosing scopes it may read (names it defines itself already left out)."""
    graph = model.graph
    if any(n.op_type == "Gradient" for n in graph.nodes):
        return 0  # folding the forward cone a Gradient differentiates would zero its result
    feedable = {v.name for v in graph.inputs}
    outer = outer or {}
    constants = set(graph.constant_initializers()) | set(outer)
    folded_ids: set[int] = set()
    for node in graph.topological_order():
        if node.op_type not in keep and _foldable(node, constants) and not (set(node.outputs) & feedable):
            inputs = [graph.initializers[i] if i in graph.initializers else outer[i] if i else None
                      for i in node.inputs]
            try:
                outputs = evaluate(node, inputs)
            except Exception:  # noqa: BLE001 - leave the node for run time, where errors name it
                continue
            if not all(isinstance(v, np.ndarray) for n, v in zip(node.outputs, outputs) if n):
                continue  # sequences and optionals stay run-time values: initializers are tensors
            for name, value in zip(node.outputs, outputs):
                if name and value is not None:
                    graph.initializers[name] = np.asarray(value)
                    constants.add(name)
            folded_ids.add(id(node))
    graph.nodes = [n for n in graph.nodes if id(n) not in folded_ids]
    return len(folded_ids)


def _foldable(node: Node, constants: set[str]) -> bool:
    if not is_onnx_domain(node.domain) or node.op_type in NEVER_FOLD or node.subgraphs():
        return False
    return all(i in constants for i in node.inputs if i)
