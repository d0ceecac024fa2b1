"""CPU kernels for the ai.onnx.preview.training domain: the optimizers Adagrad, Adam and Momentum,
and Gradient by reverse-mode differentiation of the forward graph for a few arithmetic ops.

Gradient differentiates Add, Sub, Mul, Div, Neg and Identity only, and needs the graph holding
the node (passed as ``graph=``); it builds no training graph and runs no other kernel.
"""

from __future__ import annotations

import numpy as np

from ....errors import KernelError
from ....ir.graph import Graph, Node, is_onnx_domain
from ..registry import register

TRAINING = "ai.onnx.preview.training"


def _float(node: Node, name: str, default: float | None = None) -> float:
    v = node.attr(name, default)
    if v is None:
        raise KernelError(f"{node.label}: attribute '{name}' is required")
    return float(v)


def _scalar(node: Node, v, what: str) -> float:
    if v is None or np.size(v) != 1:
        raise KernelError(f"{node.label}: {what} must be a scalar, got {None if v is None else np.shape(v)}")
    return float(np.asarray(v).reshape(-1)[0])


def _groups(node: Node, inputs: tuple, per: int) -> tuple[float, float, list[tuple]]:
    """(R, T, [(X, G, ...) per optimized tensor]) from the inputs R, T, X1..Xn, G1..Gn, ..."""
    if len(inputs) < 2 + per or (len(inputs) - 2) % per:
        raise KernelError(f"{node.label}: expected R, T and {per} inputs per optimized tensor, "
                          f"got {len(inputs)} inputs")
    n = (len(inputs) - 2) // per
    tensors = inputs[2:]
    groups = [tuple(np.asarray(tensors[j * n + i]) for j in range(per)) for i in range(n)]
    return _scalar(node, inputs[0], "R"), _scalar(node, inputs[1], "T"), groups


@register("Adagrad", since=1, domain=TRAINING)
def _adagrad(node: Node, opset: int):
    norm = _float(node, "norm_coefficient", 0.0)
    decay = _float(node, "decay_factor", 0.0)
    eps = _float(node, "epsilon", 1e-6)

    def kernel(*inputs):
        r, t, groups = _groups(node, inputs, 3)
        rate = r / (1.0 + t * decay)
        xs, hs = [], []
        for x, g, h in groups:
            g_reg = norm * x + g
            h_new = h + g_reg * g_reg
            xs.append((x - rate * g_reg / (np.sqrt(h_new) + eps)).astype(x.dtype))
            hs.append(h_new.astype(h.dtype))
        return tuple(xs + hs)
    return kernel


@register("Adam", since=1, domain=TRAINING)
def _adam(node: Node, opset: int):
    norm = _float(node, "norm_coefficient", 0.0)
    norm_post = _float(node, "norm_coefficient_post", 0.0)
    alpha, beta = _float(node, "alpha", 0.9), _float(node, "beta", 0.999)
    eps = _float(node, "epsilon", 1e-6)

    def kernel(*inputs):
        r, t, groups = _groups(node, inputs, 4)
        # bias correction of both moments, from the second update on
        rate = r * np.sqrt(1.0 - beta ** t) / (1.0 - alpha ** t) if t > 0 else r
        xs, vs, hs = [], [], []
        for x, g, v, h in groups:
            g_reg = norm * x + g
            v_new = alpha * v + (1.0 - alpha) * g_reg
            h_new = beta * h + (1.0 - beta) * g_reg * g_reg
            x_new = (1.0 - norm_post) * (x - rate * v_new / (np.sqrt(h_new) + eps))
            xs.append(x_new.astype(x.dtype))
            vs.append(v_new.astype(v.dtype))
            hs.append(h_new.astype(h.dtype))
        return tuple(xs + vs + hs)
    return kernel


@register("Momentum", since=1, domain=TRAINING)
def _momentum(node: Node, opset: int):
    norm = _float(node, "norm_coefficient")
    alpha, beta = _float(node, "alpha"), _float(node, "beta")
    mode = str(node.attr("mode", "standard"))
    if mode not in ("standard", "nesterov"):
        raise KernelError(f"{node.label}: mode must be 'standard' or 'nesterov', got {mode!r}")

    def kernel(*inputs):
        r, t, groups = _groups(node, inputs, 3)
        scale = beta if t > 0 else 1.0  # the first update takes the whole gradient
        xs, vs = [], []
        for x, g, v in groups:
            g_reg = norm * x + g
            v_new = alpha * v + scale * g_reg
            step = g_reg + alpha * v_new if mode == "nesterov" else v_new
            xs.append((x - r * step).astype(x.dtype))
            vs.append(v_new.astype(v.dtype))
        return tuple(xs + vs)
    return kernel


# --------------------------------------------------------------------------------------------
# Gradient
# --------------------------------------------------------------------------------------------

def _unbroadcast(g: np.ndarray, shape: tuple) -> np.ndarray:
    """Sum a broadcast gradient back to the operand's shape."""
    extra = g.ndim - len(shape)
    if extra:
        g = g.sum(axis=tuple(range(extra)))
    axes = tuple(i for i, d in enumerate(shape) if d == 1 and g.shape[i] != 1)
    return g.sum(axis=axes, keepdims=True) if axes else g


def _forward(op: str, a, b=None):
    return {"Add": lambda: a + b, "Sub": lambda: a - b, "Mul": lambda: a * b, "Div": lambda: a / b,
            "Neg": lambda: -a, "Identity": lambda: a}[op]()


def _backward(op: str, g, a, b=None) -> list:
    """Gradients with respect to each operand, given the output gradient g."""
    if op == "Identity":
        return [g]
    if op == "Neg":
        return [-g]
    sa, sb = np.shape(a), np.shape(b)
    if op == "Add":
        return [_unbroadcast(g, sa), _unbroadcast(g, sb)]
    if op == "Sub":
        return [_unbroadcast(g, sa), _unbroadcast(-g, sb)]
    if op == "Mul":
        return [_unbroadcast(g * b, sa), _unbroadcast(g * a, sb)]
    return [_unbroadcast(g / b, sa), _unbroadcast(-g * a / (b * b), sb)]  # Div


_DIFFERENTIABLE = {"Add": 2, "Sub": 2, "Mul": 2, "Div": 2, "Neg": 1, "Identity": 1}


def _forward_cone(node: Node, graph: Graph, y: str, leaves: set[str]) -> list[Node]:
    """The nodes computing y from the leaves (xs and zs), in execution order."""
    producers = {o: n for n in graph.nodes for o in n.outputs if o}
    needed: dict[int, Node] = {}
    stack = [y]
    while stack:
        name = stack.pop()
        if name in leaves or name in graph.initializers:
            continue
        producer = producers.get(name)
        if producer is None:
            raise KernelError(f"{node.label}: y '{y}' depends on '{name}', which is neither in xs/zs nor "
                              "computed in this graph")
        if producer is node:
            raise KernelError(f"{node.label}: y '{y}' depends on the Gradient node's own output")
        if producer.id in needed:
            continue
        if not is_onnx_domain(producer.domain) or producer.op_type not in _DIFFERENTIABLE:
            raise KernelError(f"{node.label}: cannot differentiate {producer.label}; Gradient supports "
                              f"{sorted(_DIFFERENTIABLE)}")
        if len([i for i in producer.inputs if i]) != _DIFFERENTIABLE[producer.op_type]:
            raise KernelError(f"{node.label}: {producer.label} has an unexpected number of inputs")
        needed[producer.id] = producer
        stack.extend(producer.inputs)
    return [n for n in graph.topological_order() if n.id in needed]


@register("Gradient", since=1, domain=TRAINING)
def _gradient(node: Node, opset: int, graph: Graph | None = None):
    """dy/dx for each x in xs, with the inputs (xs then zs) as the point of evaluation.

    y is recomputed from the inputs through the nodes between them and y; the seed is
    ones_like(y), so a non-scalar y is differentiated as sum(y). An x that y does not depend on
    gets zeros.
    """
    xs = [str(v) for v in node.attr("xs", []) or []]
    zs = [str(v) for v in node.attr("zs", []) or []]
    y = node.attr("y")
    if not xs or y is None:
        raise KernelError(f"{node.label}: attributes 'xs' and 'y' are required")
    if graph is None:
        raise KernelError(f"{node.label}: Gradient needs the graph holding the node, which this "
                          "provider was not given")
    names = xs + zs
    if len(names) != len([i for i in node.inputs if i]):
        raise KernelError(f"{node.label}: takes xs then zs as inputs ({len(names)}), got {len(node.inputs)}")
    cone = _forward_cone(node, graph, str(y), set(names))
    constants = {k: v for k, v in graph.initializers.items() if k not in names}

    def kernel(*inputs):
        values = dict(constants)
        values.update(zip(names, (np.asarray(v) for v in inputs)))
        for n in cone:
            values[n.outputs[0]] = _forward(n.op_type, *(values[i] for i in n.inputs))
        out = values[str(y)]
        grads: dict[str, np.ndarray] = {str(y): np.ones_like(out)}
        for n in reversed(cone):
            g = grads.get(n.outputs[0])
            if g is None:
                continue
            for name, gi in zip(n.inputs, _backward(n.op_type, g, *(values[i] for i in n.inputs))):
                grads[name] = grads[name] + gi if name in grads else gi
        result = []
        for x, o in zip(xs, node.outputs):
            v = values[x]
            result.append(np.asarray(grads.get(x, np.zeros_like(v)), dtype=v.dtype).reshape(v.shape)
                          if o else None)
        return tuple(result)
    return kernel
