"""Which nodes oneDNN takes: the ops mapped to primitives, their float32 and attribute rules, and a
probe that lowers a node with its static shapes to learn whether oneDNN implements it.

A node is claimed only when the rules pass and, where its input shapes are known, the probe builds
its primitive descriptors (cached per signature); running nodes is not done here.
"""

from __future__ import annotations

import hashlib
import threading
from typing import Any

import numpy as np
from onnx import TensorProto, helper

from ort_core.plugins import constant_node_values, is_onnx_domain

from .library import DnnlError, Library
from .lowering import (
    BINARY_OPS,
    ELTWISE_OPS,
    INACCURATE,
    REDUCE_OPS,
    Builder,
    Spec,
    Unsupported,
    eltwise_of,
)
from .lowering_quant import MS_QUANT_OPS, QUANT_OPS, quant_reason

F32 = TensorProto.FLOAT
OPS = frozenset([*ELTWISE_OPS, *BINARY_OPS, *REDUCE_OPS, "Split", "Conv", "BatchNormalization", "MaxPool",
                 "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "MatMul", "Gemm", "Softmax", "LogSoftmax",
                 "LayerNormalization", "Concat", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose"])
# inputs that hold shapes or axes (int64, must be constants), not float32 data
INDEX_INPUTS = {"Reshape": {1}, "Squeeze": {1}, "Unsqueeze": {1}, "Split": {1}, "ReduceMean": {1}, "ReduceSum": {1}}
# ops whose first output has the type of their first input (element type inference past com.microsoft ops)
SAME_TYPE_OPS = frozenset([*ELTWISE_OPS, *BINARY_OPS, "BatchNormalization", "MaxPool", "AveragePool",
                           "GlobalAveragePool", "GlobalMaxPool", "Conv", "MatMul", "Gemm", "Softmax", "Flatten",
                           "Reshape", "Squeeze", "Unsqueeze", "Transpose", "Concat", "Split", "Identity",
                           "LayerNormalization", "ReduceMean", "ReduceSum", "Resize", "Pad", "Slice",
                           "com.microsoft.FusedBatchNormalization", "FusedBatchNormalization", "FusedConv",
                           "FusedGemm", "MatMulBias"])
# quantized ops (ONNX and com.microsoft): the input holding the result's zero point (its type is the result's)
Y_ZERO_POINT = {"QLinearConv": 7, "QLinearMatMul": 7, "QLinearAdd": 7, "QLinearMul": 7, "QLinearGlobalAveragePool": 4,
                "QLinearAveragePool": 4, "QLinearLeakyRelu": 4, "QLinearSigmoid": 4, "QLinearSoftmax": 4,
                "QLinearConcat": 1, "QLinearReduceMean": 4, "QLinearWhere": 8, "QGemm": 8}
# fused ops of the core's optimizer lowered as their ONNX namesake (com.microsoft's Gelu is the erf GELU, ONNX's
# Gelu with approximate="none"); declared in the provider's preferences, so they are made before partitioning
FUSED_OPS = frozenset([("com.microsoft", "Gelu")])
# ops whose every output is computed (others: only the first)
MULTI_OUTPUT = {"Split"}


class Context:
    """What judging a node needs: the graph (static types), the default-domain opset, constants."""

    def __init__(self, graph: Any, opset: int, initializer) -> None:
        self.graph, self.opset, self._initializer = graph, opset, initializer
        self._constant_nodes: dict[str, np.ndarray] | None = None
        self._elems: dict[str, np.dtype | None] | None = None
        self._producers: dict[str, Any] = {}
        self._readers: dict[str, list] | None = None

    def constant(self, name: str) -> np.ndarray | None:
        if not name:
            return None
        value = self._initializer(name)
        if value is None:
            if self._constant_nodes is None:
                self._constant_nodes = constant_node_values(self.graph)
            value = self._constant_nodes.get(name)
        return None if value is None else np.asarray(value)

    def readers(self, name: str) -> list:
        """The nodes reading ``name`` (nested graph bodies included)."""
        if self._readers is None:
            self._readers = self.graph.consumers()
        return self._readers.get(name, [])

    def elem(self, name: str) -> np.dtype | None:
        """The element type of ``name``: the graph's static type, else inferred through its producer
        (onnx's inference stops at com.microsoft ops such as QLinearAdd, whose readers then have no type)."""
        if not name:
            return None
        c = self.constant(name)
        if c is not None:
            return c.dtype
        if self._elems is None:
            self._elems, self._producers = {}, self.graph.producers()
        if name in self._elems:
            return self._elems[name]
        self._elems[name] = None  # a cycle never loops
        t = self.graph.type_of(name)
        dt = None
        if t is not None and t.kind == "tensor" and t.elem_type:
            try:
                dt = np.dtype(helper.tensor_dtype_to_np_dtype(t.elem_type))
            except (KeyError, TypeError, ValueError):
                dt = None
        elif t is None or t.kind == "tensor":
            dt = self._inferred(self._producers.get(name), name)
        self._elems[name] = dt
        return dt

    def _inferred(self, node: Any, name: str) -> np.dtype | None:
        if node is None:
            return None
        op, ins = node.op_type, list(node.inputs)
        if op in ("QuantizeLinear", "DynamicQuantizeLinear"):
            return self.elem(ins[2]) if len(ins) > 2 and ins[2] else np.dtype(np.uint8)
        if op == "DequantizeLinear":
            return self.elem(ins[1])
        if op in ("MatMulInteger", "ConvInteger"):
            return np.dtype(np.int32)
        if op in Y_ZERO_POINT:  # the result's type is its zero point's
            k = Y_ZERO_POINT[op]
            if len(ins) > k and ins[k]:
                return self.elem(ins[k])
            return np.dtype(np.float32) if op == "QGemm" else np.dtype(np.uint8)
        if name == node.outputs[0] and ins and ins[0] and op in SAME_TYPE_OPS:
            return self.elem(ins[0])
        return None

    def shape(self, name: str) -> tuple[int, ...] | None:
        """The static shape of ``name`` when every dimension is known, else None."""
        c = self.constant(name)
        if c is not None:
            return tuple(c.shape)
        t = self.graph.type_of(name)
        if t is None or t.shape is None or not all(isinstance(d, int) and d >= 0 for d in t.shape):
            return None
        return tuple(t.shape)


def dtypes_of(ctx: Context, names) -> dict[str, np.dtype]:
    """The element types of ``names`` that are not float32 (the quantized values a subgraph reads or writes)."""
    out = {}
    for name in names:
        dt = ctx.elem(name)
        if dt in INT_TYPES:
            out[name] = dt
    return out


INT_TYPES = (np.dtype(np.uint8), np.dtype(np.int8), np.dtype(np.int32))
# float ops that also take u8/s8 values as they are: the max of integers, views
INT8_OK = ("MaxPool", "Flatten", "Reshape", "Squeeze", "Unsqueeze")
INT8_COMPUTE = ("QLinearConv", "QLinearMatMul", "ConvInteger", "MatMulInteger")


def rule_reason(node: Any, ctx: Context, lib: Library | None = None) -> str | None:
    """Why ``node`` is not lowered whatever its shapes (op, types, attributes), or None."""
    op = node.op_type
    if node.domain == "com.microsoft" and op in MS_QUANT_OPS:
        if lib is not None and not lib.has_vnni and op == "QGemm":
            return f"QGemm: this CPU has no VNNI ({lib.isa_name()})"
        return quant_reason(node, ctx)
    if not is_onnx_domain(node.domain) and (node.domain, op) not in FUSED_OPS:
        return f"domain '{node.domain}' has no oneDNN lowering"
    if op in QUANT_OPS:
        if node.subgraphs():
            return "attributes holding subgraphs"
        if op in INT8_COMPUTE and lib is not None and not lib.has_vnni:
            return (f"{op}: this CPU has no VNNI ({lib.isa_name()}); oneDNN's u8 x s8 kernels would add "
                    "products in saturating 16-bit pairs and could differ from ONNX's exact int32 sums")
        return quant_reason(node, ctx)
    if op in INACCURATE:
        return INACCURATE[op]
    if op not in OPS:
        return f"{op} has no oneDNN primitive mapping in this provider"
    if node.subgraphs():
        return "attributes holding subgraphs"
    index = INDEX_INPUTS.get(op, set())
    for k, name in enumerate(node.inputs):
        if not name:
            continue
        if k in index:
            c = ctx.constant(name)
            if c is None:
                return f"{op} input {k} ('{name}') must be a constant"
            continue
        t = ctx.graph.type_of(name)
        if t is not None and t.kind != "tensor":
            return f"input '{name}' is not a tensor"
        dt = ctx.elem(name)
        if dt is None:
            return f"input '{name}' has no known tensor type"
        if dt != np.float32 and not (op in INT8_OK and dt in INT_TYPES[:2] and ctx.elem(node.outputs[0]) == dt):
            return f"input '{name}' is {dt}: only float32 tensors are computed"
    for k, name in enumerate(node.outputs):
        if not name:
            continue
        if k > 0 and op not in MULTI_OUTPUT:
            return f"{op} output {k} ('{name}') is not computed (only the first output)"
        t = ctx.graph.type_of(name)
        if (t is not None and t.kind != "tensor") or (ctx.elem(name) != np.float32 and op not in INT8_OK):
            return f"output '{name}' is not a known float32 tensor"
    if op in BINARY_OPS and ("axis" in node.attrs or node.attr("broadcast", 0)):
        return f"{op} with the legacy axis/broadcast attributes"
    if op in ELTWISE_OPS:  # Clip's bounds and Gelu's approximation included
        try:
            eltwise_of(node, ctx.constant)
        except Unsupported as e:
            return str(e)
    if op == "BatchNormalization":
        if node.attr("training_mode", 0):
            return "BatchNormalization training_mode=1"
        if node.attr("spatial", 1) != 1:
            return "BatchNormalization spatial=0"
        if "consumed_inputs" in node.attrs and ctx.opset < 6:
            return "BatchNormalization-1 legacy attributes"
    if op in ("MaxPool", "AveragePool") and node.attr("storage_order", 0):
        return "MaxPool storage_order=1"
    return None


class Probes:
    """Verdicts of lowering one node with given static shapes (None: lowers; else the reason)."""

    def __init__(self) -> None:
        self._verdicts: dict[str, str | None] = {}
        self._lock = threading.Lock()

    def verdict(self, lib: Library, node: Any, ctx: Context, bf16: bool) -> str | None:
        names = [n for n in node.inputs if n]
        shapes = {}
        consts = {}
        for name in names:
            c = ctx.constant(name)
            if c is not None:
                consts[name] = c
                continue
            s = ctx.shape(name)
            if s is None:
                return None  # shapes known only at run time: the rules decide
            shapes[name] = s
        key = _key(node, shapes, consts, ctx.opset, bf16)
        with self._lock:
            if key in self._verdicts:
                return self._verdicts[key]
        spec = Spec([node], list(dict.fromkeys(names)), [node.outputs[0]], consts, ctx.opset,
                    dtypes_of(ctx, [*names, node.outputs[0]]))
        try:
            Builder(lib, spec, shapes, bf16=bf16, probe=True).build()
            why = None
        except Unsupported as e:
            why = str(e)
        except DnnlError as e:
            why = f"oneDNN does not implement it for these shapes ({e})"
        with self._lock:
            self._verdicts[key] = why
        return why


def _key(node: Any, shapes, consts, opset: int, bf16: bool) -> str:
    h = hashlib.sha1()
    h.update(f"{node.op_type}|{opset}|{bf16}|{sorted((k, repr(v)) for k, v in node.attrs.items())}".encode())
    for k, name in enumerate(node.inputs):
        h.update(f"|{k}:{shapes.get(name)}".encode())
        c = consts.get(name)
        if c is not None:
            h.update(f"{c.dtype}{c.shape}".encode())
            if c.size <= 64:
                h.update(np.ascontiguousarray(c).tobytes())
    return h.hexdigest()


PROBES = Probes()


def unsupported_reason(lib: Library, node: Any, ctx: Context, bf16: bool = False) -> str | None:
    return rule_reason(node, ctx, lib) or PROBES.verdict(lib, node, ctx, bf16)
