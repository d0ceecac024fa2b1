"""Static shape reads folded at session creation (basic level).

Exports compute reshape targets and scales from ``Shape`` of their activations (PyTorch's ``q.size(-1) **
-0.5``, ``view(batch, seq, heads, -1)``). Where shape inference knows the dims such a read takes, the value
is a constant: ``Shape(x)`` of a fully static ``x`` becomes one, and so do ``Gather(Shape(x), i)`` and
``Slice(Shape(x), ...)`` with constant indices that take only static dims of an ``x`` whose other dims are
symbolic (a batch, say). Constant folding then folds what is computed from them, and the fusions see
constant scales. onnxruntime's constant folding does the same for Shape; dims come from the model's shape
inference, which the session runs before optimizing.
"""

from __future__ import annotations

import numpy as np

from ..ir.graph import Graph, Node, is_onnx_domain
from ..ir.shape_values import shape_window, slice_window


def fold_static_shapes(graph: Graph) -> int:
    """Replace static shape reads by initializers, in place; returns the nodes folded (the Shape nodes
    left without readers go with dead-code elimination)."""
    constants = graph.constant_initializers()
    consumers = graph.consumers()
    protected = {v.name for v in graph.inputs}
    folded: set[int] = set()
    for node in graph.nodes:
        if node.op_type != "Shape" or not is_onnx_domain(node.domain) or not node.inputs or not node.inputs[0]:
            continue
        dims = _dims(graph, node)
        if dims is None:
            continue
        if all(d is not None for d in dims) and node.outputs[0] not in protected:
            graph.initializers[node.outputs[0]] = np.array(dims, np.int64)
            folded.add(id(node))
            continue
        for reader in consumers.get(node.outputs[0], []):
            picked = _picked(reader, node.outputs[0], len(dims), constants)
            if picked is None or not reader.outputs or reader.outputs[0] in protected:
                continue
            values = [dims[i] for i in picked.reshape(-1)]
            if all(v is not None for v in values):
                graph.initializers[reader.outputs[0]] = np.array(values, np.int64).reshape(picked.shape)
                folded.add(id(reader))
    if folded:
        graph.nodes = [n for n in graph.nodes if id(n) not in folded]
    return len(folded)


def _dims(graph: Graph, shape: Node) -> list[int | None] | None:
    """The dims Shape reads (its start/end applied): ints where static, None where symbolic; None when the
    input's rank is unknown."""
    t = graph.type_of(shape.inputs[0])
    if t is None or t.kind != "tensor" or t.shape is None:
        return None
    dims = [d if isinstance(d, int) and d >= 0 else None for d in t.shape]
    end = shape.attr("end")
    return dims[shape_window(len(dims), int(shape.attr("start", 0)), None if end is None else int(end))]


def _picked(reader: Node, shape_out: str, length: int, constants: dict) -> np.ndarray | None:
    """Which positions of the shape vector ``reader`` (a Gather or Slice of it with constant indices)
    takes, as an int array of its output's shape; None for any other reader."""
    if not is_onnx_domain(reader.domain) or not reader.inputs or reader.inputs[0] != shape_out:
        return None
    positions = np.arange(length)
    if reader.op_type == "Gather" and len(reader.inputs) == 2 and int(reader.attr("axis", 0)) == 0:
        idx = constants.get(reader.inputs[1])
        if idx is None or idx.dtype.kind not in "iu" or np.any((idx < -length) | (idx >= length)):
            return None
        return positions[idx.astype(np.int64)]
    if reader.op_type == "Slice" and 3 <= len(reader.inputs) <= 5:
        parts = [constants.get(name) if name else None for name in reader.inputs[1:]]
        if parts[0] is None or parts[1] is None or any(p is None for p, name in zip(parts, reader.inputs[1:]) if name):
            return None
        starts, ends = parts[0].reshape(-1), parts[1].reshape(-1)
        axes = parts[2].reshape(-1) if len(parts) > 2 and parts[2] is not None else np.zeros(1, np.int64)
        steps = parts[3].reshape(-1) if len(parts) > 3 and parts[3] is not None else np.ones(1, np.int64)
        if starts.size != 1 or ends.size != 1 or axes.size != 1 or steps.size != 1 or int(axes[0]) not in (0, -1):
            return None
        if int(steps[0]) == 0:
            return None
        return positions[slice_window(length, int(starts[0]), int(ends[0]), int(steps[0]))]
    return None

