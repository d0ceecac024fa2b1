"""Graph optimizer: provider-independent passes run before partitioning, chosen by level.

Each pass family lives in its own module and rewrites the IR in place. Passes that need to
compute values (constant folding) receive an ``evaluate`` callback from the session, so the
optimizer never reaches into providers itself. Graph bodies (If, Loop, Scan, ...) get the same passes
after the graph holding them, nested ones last; a body folds over its own constants and the constants
of the scopes around it that it does not shadow.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable

import numpy as np

from ..ir.graph import Graph, Model
from .chains import simplify_chains
from .constant_folding import fold_constants
from .conv_fold import fold_into_conv
from .cse import eliminate_common_subexpressions
from .dead_code import eliminate_dead_code
from .identity import remove_identities
from .shape_folding import fold_static_shapes

BASIC = 1
EXTENDED = 2  # provider fusions, run as the providers' transforms after partitioning (cpu_fusion.py)


def optimize(model: Model, level: int, evaluate: Callable, keep_qdq: bool = False) -> dict[str, int]:
    """Run the passes enabled at ``level`` (a GraphOptimizationLevel); returns counts per pass.

    ``keep_qdq``: a provider of the session runs quantized (QDQ) groups, so the DequantizeLinear of a
    quantized weight stays a node for it to claim instead of being folded into a float weight.
    """
    stats: Counter = Counter()
    if level >= BASIC:
        _basic(model, model.graph, evaluate, {"DequantizeLinear"} if keep_qdq else set(), {}, stats)
    return dict(stats)


def _basic(model: Model, graph: Graph, evaluate: Callable, keep: set[str], outer: dict[str, np.ndarray],
           stats: Counter, depth: int = 0) -> None:
    """The basic passes over ``graph``, then over the bodies of its nodes (``outer``: the constants of the
    enclosing scopes). Counts for bodies go under the same pass names, and under ``bodies``."""
    view = model if graph is model.graph else dataclasses.replace(model, graph=graph)
    before = len(graph.nodes)
    stats["identity_removal"] += remove_identities(graph)
    stats["common_subexpressions"] += eliminate_common_subexpressions(graph)
    stats["constant_folding"] += fold_constants(view, evaluate, keep=keep, outer=outer)
    shapes = fold_static_shapes(graph)  # after folding: the indices read off shapes are constants by now
    if shapes:
        stats["shape_folding"] += shapes
        stats["constant_folding"] += fold_constants(view, evaluate, keep=keep, outer=outer)
    stats["chains"] += simplify_chains(graph)
    stats["conv_folding"] += fold_into_conv(graph)
    stats["dead_code"] += eliminate_dead_code(graph)
    if depth:
        stats["bodies"] += before - len(graph.nodes)
    bodies = [body for node in graph.nodes for body in node.subgraphs()]
    if bodies:
        visible = {**outer, **graph.constant_initializers()}
        for body in bodies:
            shadowed = {v.name for v in body.inputs} | set(body.initializers)
            shadowed |= {o for n in body.nodes for o in n.outputs}
            _basic(model, body, evaluate, keep, {k: v for k, v in visible.items() if k not in shadowed}, stats,
                   depth + 1)
