"""LayerNorm fusion (CPU extended level): the ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div(/Mul/Add) chain
PyTorch exports for layer normalization over the last axis becomes one LayerNormalization, at every opset
(below opset 17 it is one of onnxruntime's contrib ops in the ONNX domain, as its own optimizer writes it).
Other axes and non-constant gamma/beta are left alone.
"""

from __future__ import annotations

import numpy as np

from ..ir.graph import Node
from .rewrite import Matcher


def fuse_layer_norms(m: Matcher) -> int:
    count = 0
    for node in list(m.graph.nodes):
        if node.op_type == "ReduceMean" and m.eligible(node) and (found := _match(m, node)) is not None:
            nodes, x, eps, gamma, beta, out = found
            count += m.replace(nodes, "LayerNormalization", [x, gamma, beta], [out], {"axis": -1, "epsilon": eps}) \
                is not None
    return count


def reduces_last_axis(m: Matcher, node: Node, rank: int) -> bool:
    """ReduceMean over exactly the last axis with keepdims (axes as attribute or, opset 18+, constant input)."""
    if int(node.attr("keepdims", 1)) != 1:
        return False
    axes = node.attr("axes")
    if axes is None and len(node.inputs) > 1:
        axes = m.const(node.inputs[1])
    if axes is None:
        return False
    axes = [int(a) for a in np.asarray(axes).reshape(-1)]
    return len(axes) == 1 and axes[0] in (-1, rank - 1)


def _match(m: Matcher, mean: Node):
    x = mean.inputs[0]
    shape = m.shape(x)
    if not shape or not isinstance(shape[-1], int) or shape[-1] <= 0 or not reduces_last_axis(m, mean, len(shape)):
        return None
    width = shape[-1]
    sub = m.sole_reader(mean.outputs[0], "Sub")
    if sub is None or sub.inputs != [x, mean.outputs[0]]:
        return None
    d = sub.outputs[0]
    readers = m.readers(d)
    square = next((n for n in readers if _is_square(m, n, d)), None)
    div = next((n for n in readers if m.eligible(n, "Div") and n.inputs[0] == d), None)
    if square is None or div is None or len(readers) != 2:
        return None
    var = m.sole_reader(square.outputs[0], "ReduceMean")
    if var is None or not reduces_last_axis(m, var, len(shape)):
        return None
    add = m.sole_reader(var.outputs[0], "Add")
    eps = m.scalar(m.other(add, var.outputs[0])) if add is not None else None
    sqrt = m.sole_reader(add.outputs[0], "Sqrt") if eps is not None else None
    if sqrt is None or div.inputs[1] != sqrt.outputs[0]:
        return None
    nodes = [mean, sub, square, var, add, sqrt, div]
    dtype = m.const(m.other(add, var.outputs[0])).dtype
    if dtype not in (np.float32, np.float64):
        return None  # 16-bit chains compute in 16 bits; the fused kernel would be more exact, hence different
    out, gamma, beta = div.outputs[0], None, None
    mul = m.sole_reader(out, "Mul")
    if mul is not None and _is_vector(m.const(m.other(mul, out)), width, dtype):
        gamma, out = m.other(mul, out), mul.outputs[0]
        nodes.append(mul)
        shift = m.sole_reader(out, "Add")
        if shift is not None and _is_vector(m.const(m.other(shift, out)), width, dtype):
            beta, out = m.other(shift, out), shift.outputs[0]
            nodes.append(shift)
    if not m.closed(nodes, {out}, [x, gamma or "", beta or ""]):
        return None
    if gamma is None:
        gamma = m.add_constant(f"{out}_ln_scale", np.ones(width, dtype))
    return nodes, x, eps, gamma, beta or "", out


def _is_square(m: Matcher, node: Node, d: str) -> bool:
    if m.eligible(node, "Mul"):
        return node.inputs == [d, d]
    return m.eligible(node, "Pow") and node.inputs[0] == d and m.scalar(node.inputs[1]) == 2.0


def _is_vector(c: np.ndarray | None, width: int, dtype: np.dtype) -> bool:
    return c is not None and c.shape == (width,) and c.dtype == dtype
