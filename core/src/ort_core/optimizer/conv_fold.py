"""Fold constant per-channel arithmetic into the preceding Conv: BatchNormalization (inference),
Mul by a per-channel scale, Add of a per-channel bias; and per-channel Mul/Add into a preceding
inference BatchNormalization (DenseNet's BN -> Mul -> Add), whose scale and bias absorb them.

Needs the producer's parameters and the other operand to be constant initializers and the
producer's output to feed only that node; float32/float64 only. Other patterns are left alone.
"""

from __future__ import annotations

import numpy as np

from ..ir.graph import Graph, Node, is_onnx_domain
from .rewrite import fresh_name, protected_names, taken_names


def fold_into_conv(graph: Graph) -> int:
    """One pass in topological order: each fold makes the producer write the folded node's output,
    so a Conv+BN+Mul+Add chain folds link by link as the pass reaches each one."""
    constants = graph.constant_initializers()
    producers = graph.producers()
    protected = protected_names(graph)
    readers: dict[str, int] = {}
    for n in graph.nodes:
        for i in set(n.inputs):
            readers[i] = readers.get(i, 0) + 1
    names = _Names(graph)
    removed: set[int] = set()
    for node in graph.topological_order():
        conv = _foldable_conv(graph, node, constants, protected, producers, readers)
        if conv is not None:
            scale_shift = _scale_shift(node, constants, conv)
            if scale_shift is None:
                continue
            _apply(graph, conv, node, *scale_shift, names, constants)
            producer = conv
        else:
            producer = _foldable_batch_norm(graph, node, constants, protected, producers, readers)
            if producer is None:
                continue
            _apply_to_batch_norm(graph, producer, node, constants, names)
        producers[node.outputs[0]] = producer
        removed.add(id(node))
    if removed:
        graph.nodes = [n for n in graph.nodes if id(n) not in removed]
    return len(removed)


class _Names:
    """Fresh initializer names, with the graph's names gathered once rather than per fold."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.taken = taken_names(graph)

    def add(self, base: str, value: np.ndarray, constants: dict) -> str:
        name = fresh_name(self.graph, base, self.taken)
        self.graph.initializers[name] = value
        constants[name] = value
        return name


def _foldable_conv(graph: Graph, node: Node, constants: dict, protected: set[str],
                   producers: dict[str, Node], readers: dict[str, int]) -> Node | None:
    if not is_onnx_domain(node.domain) or node.op_type not in ("BatchNormalization", "Mul", "Add"):
        return None
    x = node.inputs[0] if node.op_type == "BatchNormalization" else _other_than_constant(node, constants)
    if x is None:
        return None
    conv = producers.get(x)
    if conv is None or conv.op_type != "Conv" or not is_onnx_domain(conv.domain) or x in protected:
        return None
    if readers.get(x, 0) != 1 or conv.inputs[1] not in constants:
        return None
    if len(conv.inputs) > 2 and conv.inputs[2] and conv.inputs[2] not in constants:
        return None
    if constants[conv.inputs[1]].dtype not in (np.float32, np.float64):
        return None
    return conv


def _inference_batch_norm(node: Node, constants: dict) -> bool:
    if node.attr("training_mode", 0) or node.attr("spatial", 1) != 1 or node.attr("is_test", 1) == 0:
        return False
    return not any(o for o in node.outputs[1:]) and all(i in constants for i in node.inputs[1:5])


def _foldable_batch_norm(graph: Graph, node: Node, constants: dict, protected: set[str],
                         producers: dict[str, Node], readers: dict[str, int]) -> Node | None:
    """The inference BatchNormalization whose output only ``node`` (Mul/Add by a constant) reads."""
    if not is_onnx_domain(node.domain) or node.op_type not in ("Mul", "Add"):
        return None
    x = _other_than_constant(node, constants)
    bn = producers.get(x) if x is not None else None
    if bn is None or bn.op_type != "BatchNormalization" or not is_onnx_domain(bn.domain) or x in protected:
        return None
    if len(bn.inputs) < 5 or not _inference_batch_norm(bn, constants) or readers.get(x, 0) != 1:
        return None
    scale = constants[bn.inputs[1]]
    x_type = graph.type_of(bn.inputs[0])
    rank = len(x_type.shape) if x_type is not None and x_type.shape is not None else None
    if rank is None or rank < 2 or scale.ndim != 1 or scale.dtype not in (np.float32, np.float64):
        return None
    other = node.inputs[1] if node.inputs[0] == x else node.inputs[0]
    if constants[other].dtype != scale.dtype or _per_channel(constants[other], scale.shape[0], rank) is None:
        return None
    return bn


def _apply_to_batch_norm(graph: Graph, bn: Node, node: Node, constants: dict, names: _Names) -> None:
    """BN(x) * s -> BN with scale*s and bias*s; BN(x) + b -> BN with bias + b."""
    scale, bias = constants[bn.inputs[1]], constants[bn.inputs[2]]
    other = node.inputs[1] if node.inputs[0] == bn.outputs[0] else node.inputs[0]
    rank = len(graph.type_of(bn.inputs[0]).shape)
    per = _per_channel(constants[other], scale.shape[0], rank).astype(np.float64)
    if node.op_type == "Mul":
        new_scale, new_bias = scale.astype(np.float64) * per, bias.astype(np.float64) * per
    else:
        new_scale, new_bias = scale.astype(np.float64), bias.astype(np.float64) + per
    folded = [names.add(f"{bn.name or 'bn'}_{role}_folded", value.astype(scale.dtype), constants)
              for role, value in (("scale", new_scale), ("bias", new_bias))]
    bn.inputs = [bn.inputs[0], *folded, *bn.inputs[3:5]]
    bn.outputs = [node.outputs[0]]


def _other_than_constant(node: Node, constants: dict) -> str | None:
    a, b = node.inputs[:2]
    if b in constants and a not in constants:
        return a
    if a in constants and b not in constants:
        return b
    return None


def _per_channel(value: np.ndarray, channels: int, rank: int) -> np.ndarray | None:
    """A constant broadcast against a Conv output (N, C, spatial...) as one value per channel."""
    v = np.asarray(value)
    if v.ndim > rank:
        return None
    shape = (1,) * (rank - v.ndim) + v.shape
    if shape[0] != 1 or any(d != 1 for d in shape[2:]) or shape[1] not in (1, channels):
        return None
    return np.broadcast_to(v.reshape(-1) if v.size > 1 else v.reshape(1), (channels,))


def _scale_shift(node: Node, constants: dict, conv: Node):
    """(scale, shift) per output channel, so that node(conv(x)) == conv(x) * scale + shift."""
    w = constants[conv.inputs[1]]
    channels, rank = w.shape[0], w.ndim
    if node.op_type == "BatchNormalization":
        if not _inference_batch_norm(node, constants):
            return None
        gamma, beta, mean, var = (constants[i].astype(np.float64) for i in node.inputs[1:5])
        inv = gamma / np.sqrt(var + float(node.attr("epsilon", 1e-5)))
        return inv, beta - mean * inv
    other = node.inputs[1] if node.inputs[0] not in constants else node.inputs[0]
    per = _per_channel(constants[other], channels, rank)
    if per is None or constants[other].dtype != w.dtype:
        return None
    per = per.astype(np.float64)
    if node.op_type == "Mul":
        return per, np.zeros(channels)
    return np.ones(channels), per


def _apply(graph: Graph, conv: Node, node: Node, scale: np.ndarray, shift: np.ndarray, names: _Names,
           constants: dict) -> None:
    w = constants[conv.inputs[1]]
    dtype = w.dtype
    bias = constants[conv.inputs[2]] if len(conv.inputs) > 2 and conv.inputs[2] else np.zeros(w.shape[0])
    new_w = (w.astype(np.float64) * scale.reshape((-1,) + (1,) * (w.ndim - 1))).astype(dtype)
    new_b = (bias.astype(np.float64) * scale + shift).astype(dtype)
    w_name = names.add(f"{conv.inputs[1]}_folded", new_w, constants)
    b_name = names.add(f"{conv.name or 'conv'}_bias_folded", new_b, constants)
    conv.inputs = [conv.inputs[0], w_name, b_name]
    conv.outputs = [node.outputs[0]]
