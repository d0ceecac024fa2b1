"""CPU kernels for tensor sequences: SequenceConstruct/Empty/Insert/Erase/At/Length, SplitToSequence,
ConcatFromSequence and SequenceMap. Sequences are Python lists of arrays, never modified in place
(every op returns a new list); optionals and maps live elsewhere.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from ....errors import KernelError
from ....ir.graph import Graph, Node
from ....ir.types import np_dtype
from ..registry import outer_scope_names, register
from .shape_ops import normalize_axis


def _seq(node: Node, value, what: str = "input_sequence") -> list:
    if not isinstance(value, (list, tuple)):
        raise KernelError(f"{node.label}: '{what}' must be a sequence, got {type(value).__name__}")
    return value


def _tensor(node: Node, value, what: str) -> np.ndarray:
    if not isinstance(value, np.ndarray):
        raise KernelError(f"{node.label}: '{what}' must be a tensor, got {type(value).__name__}")
    return value


def _position(node: Node, position, n: int, upper: int) -> int:
    """A scalar position checked against [-n, upper] and made non-negative."""
    if not isinstance(position, np.ndarray) or position.size != 1 or position.dtype.kind not in "iu":
        raise KernelError(f"{node.label}: 'position' must be a single int32/int64 value")
    p = int(position.reshape(-1)[0])
    if not -n <= p <= upper:
        raise KernelError(f"{node.label}: position {p} is out of range [{-n}, {upper}] for a sequence of "
                          f"length {n}")
    return p + n if p < 0 else p


def _same_type(node: Node, seq: list, tensor: np.ndarray) -> None:
    if seq and np.dtype(seq[0].dtype) != tensor.dtype and not (seq[0].dtype.kind in "OUS" and tensor.dtype.kind
                                                               in "OUS"):
        raise KernelError(f"{node.label}: tensor of dtype {tensor.dtype} does not match the sequence's "
                          f"element dtype {seq[0].dtype}")


@register("SequenceConstruct", since=11)
def _sequence_construct(node: Node, opset: int):
    def kernel(*inputs):
        if not inputs:
            raise KernelError(f"{node.label}: needs at least one input tensor")
        for k, x in enumerate(inputs):
            _tensor(node, x, f"inputs[{k}]")
            _same_type(node, inputs[:1], x)
        return (list(inputs),)
    return kernel


@register("SequenceEmpty", since=11)
def _sequence_empty(node: Node, opset: int):
    dtype = int(node.attr("dtype", TensorProto.FLOAT))
    try:
        np_dtype(dtype)
    except (KeyError, TypeError, ValueError):
        raise KernelError(f"{node.label}: unsupported dtype {dtype}") from None

    def kernel():
        return ([],)  # lists carry no element type: an empty sequence is the same for every dtype
    return kernel


@register("SequenceInsert", since=11)
def _sequence_insert(node: Node, opset: int):
    def kernel(seq, tensor, position=None):
        seq = _seq(node, seq)
        tensor = _tensor(node, tensor, "tensor")
        _same_type(node, seq, tensor)
        n = len(seq)
        p = n if position is None else _position(node, position, n, n)
        return ([*seq[:p], tensor, *seq[p:]],)
    return kernel


@register("SequenceErase", since=11)
def _sequence_erase(node: Node, opset: int):
    def kernel(seq, position=None):
        seq = _seq(node, seq)
        n = len(seq)
        if n == 0:
            raise KernelError(f"{node.label}: cannot erase from an empty sequence")
        p = n - 1 if position is None else _position(node, position, n, n - 1)
        return ([*seq[:p], *seq[p + 1:]],)
    return kernel


@register("SequenceAt", since=11)
def _sequence_at(node: Node, opset: int):
    def kernel(seq, position):
        seq = _seq(node, seq)
        return (seq[_position(node, position, len(seq), len(seq) - 1)],)
    return kernel


@register("SequenceLength", since=11)
def _sequence_length(node: Node, opset: int):
    def kernel(seq):
        return (np.array(len(_seq(node, seq)), dtype=np.int64),)
    return kernel


@register("SplitToSequence", since=11)
def _split_to_sequence(node: Node, opset: int):
    axis = int(node.attr("axis", 0))
    keepdims = bool(node.attr("keepdims", 1))

    def kernel(x, split=None):
        x = _tensor(node, x, "input")
        if x.ndim == 0:
            raise KernelError(f"{node.label}: cannot split a scalar")
        a = normalize_axis(node, axis, x.ndim)
        length = x.shape[a]
        moved = np.moveaxis(x, a, 0)  # views: splitting copies nothing
        if split is None:  # chunks of one; keepdims decides whether the axis stays
            if not keepdims:
                return (list(moved),)
            return ([np.moveaxis(moved[i:i + 1], 0, a) for i in range(length)],)
        sizes = np.asarray(split).astype(np.int64)
        if sizes.ndim > 1:
            raise KernelError(f"{node.label}: 'split' must be a scalar or 1-D, got shape {list(sizes.shape)}")
        if sizes.ndim == 0:
            size = int(sizes)
            if size <= 0:
                raise KernelError(f"{node.label}: 'split' must be positive, got {size}")
            bounds = list(range(0, length, size)) + [length]
        else:
            if (sizes < 0).any() or int(sizes.sum()) != length:
                raise KernelError(f"{node.label}: 'split' {sizes.tolist()} must be non-negative and sum to "
                                  f"the axis length {length}")
            bounds = [0, *np.cumsum(sizes).tolist()]
        return ([np.moveaxis(moved[s:e], 0, a) for s, e in zip(bounds[:-1], bounds[1:])],)
    return kernel


@register("ConcatFromSequence", since=11)
def _concat_from_sequence(node: Node, opset: int):
    if node.attr("axis") is None:
        raise KernelError(f"{node.label}: attribute 'axis' is required")
    axis = int(node.attr("axis"))
    new_axis = bool(node.attr("new_axis", 0))

    def kernel(seq):
        seq = _seq(node, seq)
        if not seq:
            raise KernelError(f"{node.label}: cannot concatenate an empty sequence")
        a = normalize_axis(node, axis, seq[0].ndim + (1 if new_axis else 0))
        try:
            if new_axis:
                return (np.stack(seq, axis=a),)
            return (np.concatenate(seq, axis=a),)
        except ValueError as e:
            raise KernelError(f"{node.label}: sequence elements of shapes "
                              f"{[list(t.shape) for t in seq]} cannot be joined on axis {axis}: {e}") from None
    return kernel


@register("SequenceMap", since=17)
def _sequence_map(node: Node, opset: int, bodies):
    """The body runs once per element of the first input (a Python loop over elements, each a
    whole subgraph run); other sequence inputs are zipped with it, tensor inputs repeated."""
    g = node.attr("body")
    if not isinstance(g, Graph):
        raise KernelError(f"{node.label}: graph attribute 'body' is required")
    n_in = len(node.inputs)
    body = bodies(g, node, outer_scope_names(node))
    if len(body.input_names) != n_in or len(body.output_names) != len(node.outputs):
        raise KernelError(f"{node.label}: body has {len(body.input_names)} input(s) and {len(body.output_names)} "
                          f"output(s); the node has {n_in} and {len(node.outputs)}")

    def kernel(*args):
        inputs = args[:n_in]
        n = len(_seq(node, inputs[0]))
        is_seq = [isinstance(x, (list, tuple)) for x in inputs]
        for k, x in enumerate(inputs):
            if is_seq[k] and len(x) != n:
                raise KernelError(f"{node.label}: input {k} has {len(x)} elements, the first sequence has {n}")
        base = body.bind(args[n_in:])
        outs: list[list] = [[] for _ in node.outputs]
        for i in range(n):
            results = body.run(base, [x[i] if s else x for x, s in zip(inputs, is_seq)])
            for acc, r in zip(outs, results):
                acc.append(r)
        return tuple(outs)
    return kernel
