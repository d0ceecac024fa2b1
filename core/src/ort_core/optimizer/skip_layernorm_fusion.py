"""SkipLayerNorm fusion (CPU extended level): ``LayerNormalization(Add(x, skip))`` over the last axis,
optionally with a constant bias added first (``Add(Add(x, bias), skip)``), becomes onnxruntime's
``com.microsoft::SkipLayerNormalization`` for the shapes that op takes (x (B, S, H) or (T, H), skip of x's
shape or one batch of it). When the sum is read elsewhere (the next residual), the fused node outputs it
too (its fourth output, input_skip_bias_sum); the LayerNormalization may be the model's or fused from
its decomposed form.
"""

from __future__ import annotations

import numpy as np

from ..ir.graph import Node
from .rewrite import CONTRIB, Matcher


def fuse_skip_layer_norms(m: Matcher) -> int:
    count = 0
    for node in list(m.graph.nodes):
        if (found := _match(m, node)) is not None:
            nodes, inputs, outputs, eps = found
            count += m.replace(nodes, "SkipLayerNormalization", inputs, outputs, {"epsilon": eps},
                               domain=CONTRIB) is not None
    return count


def _layer_norm(m: Matcher, node: Node) -> float | None:
    """The epsilon of a last-axis, single-output LayerNorm the CPU provider runs, else None."""
    if node.id not in m.on_cpu or not m.alive(node) or len([o for o in node.outputs if o]) != 1:
        return None
    if not m.eligible(node, "LayerNormalization") or len(node.outputs) != 1:
        return None
    shape = m.shape(node.inputs[0])
    axis = int(node.attr("axis", -1))
    if axis != -1 and not (shape is not None and axis == len(shape) - 1):
        return None
    if m.graph.type_of(node.inputs[0]) is None or m.graph.type_of(node.inputs[0]).elem_type not in (1, 11):
        return None
    if any(len(m.shape(i) or ()) != 1 for i in node.inputs[1:] if i):
        return None  # the fused kernel takes per-feature (1-D) scale and bias only
    return float(node.attr("epsilon", 1e-5))


def _match(m: Matcher, ln: Node):
    eps = _layer_norm(m, ln)
    add = m.producer(ln.inputs[0], "Add") if eps is not None else None
    if add is None or len(add.inputs) != 2:
        return None
    total = add.outputs[0]
    nodes, (x, skip), bias = [add], add.inputs, ""
    for i in (0, 1):
        inner = m.producer(add.inputs[i], "Add")
        found = m.biased(inner) if inner is not None and m.sole_reader(inner.outputs[0]) is add else None
        if found is not None:
            (x, bias), skip = found, add.inputs[1 - i]
            nodes.append(inner)
            break
    if m.const(x) is not None and m.const(skip) is not None:
        return None
    if not _skip_fits(m.shape(x), m.shape(skip)):
        x, skip = skip, x
        if not _skip_fits(m.shape(x), m.shape(skip)):
            return None
    nodes.append(ln)
    sum_read = total in m.protected or any(r is not ln for r in m.readers(total))
    outputs = [ln.outputs[0]] + (["", "", total] if sum_read else [])  # input_skip_bias_sum is output 3
    gamma = ln.inputs[1]
    beta = ln.inputs[2] if len(ln.inputs) > 2 else ""
    if not m.closed(nodes, set(outputs) - {""}, [x, skip, gamma, beta, bias]):
        return None
    return nodes, [x, skip, gamma, beta, bias], outputs, float(np.float32(eps))


def _skip_fits(shape: tuple | None, skip: tuple | None) -> bool:
    """Shapes onnxruntime's op takes: input (B, S, H) or (T, H); skip of input's shape or, for a 3-D
    input, (1, S, H) or (S, H)."""
    if shape is None or skip is None or len(shape) not in (2, 3):
        return False
    return skip == shape or len(shape) == 3 and skip in (shape[1:], (1, *shape[1:]))
