"""Quantized (QDQ) graphs: DequantizeLinear -> op -> QuantizeLinear groups found in an ONNX graph, run by QNN
on its fixed-point tensors.

``Quant`` describes a quantized value (QNN data type, per-tensor or per-axis scale and offset). ``QdqIndex``
knows, for a whole graph, which values DequantizeLinear nodes produce (and from what) and which values are read
by nothing but one QuantizeLinear; ``plan`` decides, for the nodes built into one QNN graph, which ops run on
the quantized tensors (their float inputs and outputs never exist in QNN) and which Q/DQ nodes then need no QNN
op at all. Lowering an op is ``lowering``'s; choosing what is claimed is ``capability``'s.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

from . import qnn_api as q

TP = onnx.TensorProto
QUANT_TYPES = {TP.UINT8: (q.UFIXED_POINT_8, np.uint8), TP.INT8: (q.SFIXED_POINT_8, np.int8),
               TP.UINT16: (q.UFIXED_POINT_16, np.uint16), TP.INT16: (q.SFIXED_POINT_16, np.int16),
               TP.INT32: (q.SFIXED_POINT_32, np.int32)}
"""ONNX integer types of quantized values -> (QNN fixed-point type, numpy type of its buffer)."""

QUANT_OPS = ("Conv", "Gemm", "MatMul", "Add", "Sub", "Mul", "Relu", "Sigmoid", "Tanh", "MaxPool", "AveragePool",
             "GlobalAveragePool", "Reshape", "Flatten", "Transpose", "Concat", "Softmax")
"""Ops run on quantized tensors when their float inputs all come from DequantizeLinear and each output goes
to one QuantizeLinear only."""


@dataclass(frozen=True)
class Quant:
    """A quantized tensor: QNN type, numpy type of its buffer, scales and zero points (one per tensor, or one
    per index of ``axis``). QNN's offset is minus ONNX's zero point: real = scale * (q + offset)."""

    qnn_type: int
    dtype: np.dtype
    scale: tuple[float, ...]
    zero_point: tuple[int, ...]
    axis: int | None = None

    def moved(self, perm: Sequence[int] | None) -> Quant:
        """The same encoding for the tensor transposed by ``perm`` (its per-axis axis follows)."""
        if self.axis is None or perm is None:
            return self
        return Quant(self.qnn_type, self.dtype, self.scale, self.zero_point, list(perm).index(self.axis))


@dataclass(frozen=True)
class Source:
    """What a DequantizeLinear output is: the integer value ``name`` with encoding ``quant``."""

    name: str
    quant: Quant


def _const(values: Any, name: str) -> np.ndarray | None:
    return values.constant(name) if name else None


def quant_of(elem_type: int, scale: np.ndarray, zero_point: np.ndarray | None, axis: int | None,
             rank: int) -> Quant | None:
    """The encoding of a Q/DQ node's integer side, or None when QNN cannot hold it."""
    if elem_type not in QUANT_TYPES:
        return None
    qnn_type, dtype = QUANT_TYPES[elem_type]
    scale = np.asarray(scale, np.float32).reshape(-1)
    zp = np.zeros(scale.shape, np.int64) if zero_point is None else np.asarray(zero_point, np.int64).reshape(-1)
    if scale.size == 0 or zp.size != scale.size or not np.all(np.isfinite(scale)) or np.any(scale <= 0):
        return None
    if scale.size == 1:
        return Quant(qnn_type, np.dtype(dtype), (float(scale[0]),), (int(zp[0]),))
    return Quant(qnn_type, np.dtype(dtype), tuple(float(s) for s in scale), tuple(int(z) for z in zp),
                 axis % rank if axis is not None else 1 % max(rank, 1))


def dq_source(node: Any, values: Any) -> Source | None:
    """For a DequantizeLinear node with constant scale and zero point: its integer input and encoding."""
    if node.op_type != "DequantizeLinear" or len(node.inputs) < 2 or node.attr("block_size", 0):
        return None
    scale, zp = _const(values, node.inputs[1]), _const(values, node.inputs[2] if len(node.inputs) > 2 else "")
    if scale is None or (len(node.inputs) > 2 and node.inputs[2] and zp is None):
        return None
    shape = values.shape(node.inputs[0])
    rank = len(shape) if shape is not None else 0
    quant = quant_of(values.elem_type(node.inputs[0]), scale, zp, int(node.attr("axis", 1)), rank)
    return None if quant is None else Source(node.inputs[0], quant)


def q_target(node: Any, values: Any) -> Quant | None:
    """For a QuantizeLinear node with a constant per-tensor scale and zero point: its output's encoding."""
    if node.op_type != "QuantizeLinear" or len(node.inputs) < 2 or node.attr("block_size", 0):
        return None
    if node.attr("saturate", 1) != 1 or node.attr("output_dtype", 0):
        return None
    scale, zp = _const(values, node.inputs[1]), _const(values, node.inputs[2] if len(node.inputs) > 2 else "")
    if scale is None or np.asarray(scale).size != 1 or (len(node.inputs) > 2 and node.inputs[2] and zp is None):
        return None
    elem = values.elem_type(node.outputs[0]) or TP.UINT8
    return quant_of(elem, scale, zp, None, 0)


def dequantized(source: np.ndarray, quant: Quant) -> np.ndarray:
    """ONNX DequantizeLinear of a constant, in float32 (what a float op sees)."""
    x = np.asarray(source, np.float64)
    scale, zp = np.asarray(quant.scale, np.float64), np.asarray(quant.zero_point, np.float64)
    if quant.axis is not None:
        shape = [1] * x.ndim
        shape[quant.axis] = -1
        scale, zp = scale.reshape(shape), zp.reshape(shape)
    else:
        scale, zp = scale[0], zp[0]
    return ((x - zp) * scale).astype(np.float32)


class QdqIndex:
    """The Q/DQ structure of a whole graph: ``dq[v]`` the Source of DequantizeLinear output ``v``; ``q[v]`` the
    (QuantizeLinear node, its output's Quant) of a value read only by that node."""

    def __init__(self, nodes: Iterable[Any], graph_outputs: Iterable[str], values: Any) -> None:
        nodes = list(nodes)
        readers: dict[str, list[Any]] = {}
        for node in nodes:
            for name in node.inputs:
                if name:
                    readers.setdefault(name, []).append(node)
        outputs = set(graph_outputs)
        self.dq: dict[str, Source] = {}
        self.dq_nodes: dict[str, Any] = {}
        self.q: dict[str, tuple[Any, Quant]] = {}
        self.constant_sources: set[str] = set()  # DequantizeLinear outputs whose integers are constants
        for node in nodes:
            if node.op_type == "DequantizeLinear" and node.outputs and node.outputs[0]:
                source = dq_source(node, values)
                if source is not None:
                    self.dq[node.outputs[0]] = source
                    self.dq_nodes[node.outputs[0]] = node
                    if values.raw_constant(source.name) is not None:
                        self.constant_sources.add(node.outputs[0])
            elif node.op_type == "QuantizeLinear" and node.inputs and node.inputs[0]:
                name = node.inputs[0]
                target = q_target(node, values)
                if target is not None and len(readers.get(name, [])) == 1 and name not in outputs:
                    self.q[name] = (node, target)

    def group_of(self, node: Any, data_inputs: Sequence[int] | None) -> tuple[list[Any], list[Any]] | None:
        """(DequantizeLinear nodes feeding ``node``'s float data inputs, QuantizeLinear nodes reading its outputs)
        when ``node`` is a QDQ group's op: every data input dequantized, every output quantized; else None."""
        if node.op_type not in QUANT_OPS:
            return None
        dqs = []
        for k, name in enumerate(node.inputs):
            if not name or (data_inputs is not None and k not in data_inputs):
                continue
            if name not in self.dq:
                return None
            dqs.append(self.dq_nodes[name])
        qs = []
        for name in node.outputs:
            if not name:
                continue
            if name not in self.q:
                return None
            qs.append(self.q[name][0])
        return (dqs, qs) if dqs and qs else None


def constant_reader(values: Any, index: QdqIndex):
    """``constant(name)`` that also sees a DequantizeLinear of a constant as the float constant it computes."""

    def constant(name: str) -> np.ndarray | None:
        value = values(name)
        if value is not None or name not in index.dq:
            return value
        source = index.dq[name]
        raw = values(source.name)
        return None if raw is None else dequantized(raw, source.quant)

    return constant


@dataclass
class Plan:
    """How the nodes built into one QNN graph treat Q/DQ: ``quantized`` ops run on fixed-point tensors,
    ``absorbed`` QuantizeLinear nodes are written by the op before them (no QNN op of their own)."""

    quantized: set[int]
    absorbed: set[int]

    @staticmethod
    def empty() -> Plan:
        return Plan(set(), set())


def make_plan(nodes: Sequence[Any], index: QdqIndex | None, quantizable, data_inputs: dict) -> Plan:
    """The ops of ``nodes`` that run quantized: a QDQ group's op whose QuantizeLinear nodes, and whose
    DequantizeLinear nodes of values computed at run time, are among ``nodes``, and that ``quantizable(node)``
    accepts (its rule and its probe)."""
    plan = Plan.empty()
    if index is None:
        return plan
    ids = {n.id for n in nodes}
    for node in nodes:
        group = index.group_of(node, data_inputs.get(node.op_type))
        if group is None:
            continue
        dqs, qs = group
        if any(q.id not in ids for q in qs):
            continue
        if any(d.id not in ids for d in dqs if not _is_constant_source(d, index)):
            continue
        if quantizable(node):
            plan.quantized.add(node.id)
            plan.absorbed.update(q.id for q in qs)
    return plan


def is_dequantized_constant(node: Any, values: Any) -> bool:
    """A DequantizeLinear of a constant (a quantized weight): no QNN op, its float value is a constant."""
    index = values.qdq
    return (node.op_type == "DequantizeLinear" and index is not None and bool(node.outputs)
            and node.outputs[0] in index.constant_sources)


def _is_constant_source(dq_node: Any, index: QdqIndex) -> bool:
    return dq_node.outputs[0] in index.constant_sources


def atoms(nodes: Sequence[Any], plan: Plan, index: QdqIndex | None) -> list[list[Any]]:
    """``nodes`` in order as units that must be built into the same graph: a quantized op with the
    QuantizeLinear nodes it writes; every other node alone."""
    if not plan.quantized:
        return [[n] for n in nodes]
    out = []
    for node in nodes:
        if node.id in plan.absorbed:
            continue
        unit = [node]
        if node.id in plan.quantized:
            unit += [index.q[o][0] for o in node.outputs if o]
        out.append(unit)
    return out


def reads(node: Any, plan: Plan, index: QdqIndex | None, values: Any) -> list[str]:
    """The values a node's QNN ops read from other nodes: a quantized op reads the integers its
    DequantizeLinear inputs dequantize; constants (and dequantized constants) are baked, not read."""
    if node.id in plan.absorbed:
        return []
    names = []
    for name in node.inputs:
        if not name:
            continue
        if node.id in plan.quantized and index is not None and name in index.dq:
            name = index.dq[name].name
        if values.raw_constant(name) is None and values.constant(name) is None:
            names.append(name)
    return names


def writes(node: Any, plan: Plan, index: QdqIndex | None) -> list[str]:
    """The values a node's QNN ops produce (a quantized op: its QuantizeLinear nodes' outputs)."""
    if node.id in plan.absorbed:
        return []
    if node.id in plan.quantized:
        return [index.q[o][0].outputs[0] for o in node.outputs if o]
    return [o for o in node.outputs if o]
