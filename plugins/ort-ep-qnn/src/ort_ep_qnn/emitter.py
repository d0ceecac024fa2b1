"""How lowering sees an ONNX value and writes QNN tensors: ``Values`` (static shape, element type, constant)
and ``Emitter`` (ONNX value names to the tensors of one graph, plus small compositions: Transpose, Reshape,
rank padding). Which QNN ops stand for which ONNX op is ``lowering``'s.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx

from . import qnn_api as q
from .graph import GraphBuilder, Scalar, Tensor, TensorParam
from .qdq import QdqIndex, Quant, dequantized
from .runtime import QnnError

NCHW_TO_NHWC = (0, 2, 3, 1)
NHWC_TO_NCHW = (0, 3, 1, 2)


class Values:
    """What lowering knows about a value: its static shape, its ONNX element type, its constant value."""

    def __init__(self, type_of: Callable[[str], Any], constant: Callable[[str], np.ndarray | None],
                 opset: int) -> None:
        self._type_of, self._constant, self.opset = type_of, constant, opset
        self.qdq: QdqIndex | None = None

    def attach(self, index: QdqIndex) -> None:
        """Know the graph's Q/DQ structure: a DequantizeLinear of a constant then is the float constant it
        computes (``constant``), its integers stay readable (``raw_constant``)."""
        self.qdq = index

    def raw_constant(self, name: str) -> np.ndarray | None:
        return self._constant(name) if name else None

    def shape(self, name: str) -> tuple[int, ...] | None:
        const = self.raw_constant(name)
        if const is not None:
            return tuple(const.shape)
        t = self._type_of(name)
        if t is None or t.kind != "tensor" or t.shape is None:
            return None
        if not all(isinstance(d, int) and d >= 0 for d in t.shape):
            return None
        return tuple(int(d) for d in t.shape)

    def elem_type(self, name: str) -> int:
        """The ONNX TensorProto element type (0 when unknown)."""
        t = self._type_of(name)
        if t is not None and t.kind == "tensor" and t.elem_type:
            return int(t.elem_type)
        const = self.raw_constant(name)
        if const is not None:
            try:
                return int(onnx.helper.np_dtype_to_tensor_dtype(const.dtype))
            except (KeyError, TypeError, ValueError):
                return 0
        return 0

    def constant(self, name: str) -> np.ndarray | None:
        if not name:
            return None
        value = self._constant(name)
        if value is None and self.qdq is not None and name in self.qdq.dq:
            source = self.qdq.dq[name]
            raw = self._constant(source.name)
            return None if raw is None else dequantized(raw, source.quant)
        return value


class Emitter:
    """Maps ONNX value names to QNN tensors of one graph while nodes are emitted.

    A value read that is a constant becomes a STATIC tensor; any other value read before it is written is a
    graph input (APP_WRITE), recorded in ``input_names`` in the order first read; a node output listed in
    ``outputs`` is APP_READ (in ``output_names``), every other one NATIVE.

    While ``quantized`` is set (the node being emitted runs on fixed-point tensors, ``qdq.plan``), reading a
    DequantizeLinear output gives the quantized tensor it dequantizes, and writing an output read only by a
    QuantizeLinear writes that node's quantized output: the float values between them never exist in QNN.
    """

    def __init__(self, builder: GraphBuilder, values: Values, outputs: Sequence[str]) -> None:
        self.g, self.values, self.outputs = builder, values, set(outputs)
        self.tensors: dict[str, Tensor] = {}
        self.input_names: list[str] = []
        self.output_names: list[str] = []
        self.quantized = False

    # ----------------------------------------------------------------------------------- values
    def read(self, name: str) -> Tensor:
        qdq = self.values.qdq
        if self.quantized and qdq is not None and name in qdq.dq:
            source = qdq.dq[name]
            return self.read_quant(source.name, source.quant)
        t = self.tensors.get(name)
        if t is not None:
            return t
        const = self.values.constant(name)
        if const is not None:
            t = self.static(np.asarray(const, np.float32), name)
        else:
            t = self.g.tensor(name, q.TENSOR_APP_WRITE, self.values.shape(name))
            self.input_names.append(name)
        self.tensors[name] = t
        return t

    def read_quant(self, name: str, quant: Quant) -> Tensor:
        """The integer value ``name`` as a fixed-point tensor encoded by ``quant``."""
        t = self.tensors.get(name)
        if t is not None:
            return t
        raw = self.values.raw_constant(name)
        if raw is not None:
            t = self.g.tensor(name, q.TENSOR_STATIC, raw.shape, data=np.asarray(raw, quant.dtype), quant=quant)
        else:
            t = self.g.tensor(name, q.TENSOR_APP_WRITE, self.values.shape(name), quant=quant)
            self.input_names.append(name)
        self.tensors[name] = t
        return t

    def out_quant(self, name: str) -> Quant | None:
        """The encoding the output ``name`` of the node being emitted gets (None: float)."""
        qdq = self.values.qdq
        if self.quantized and qdq is not None and name in qdq.q:
            return qdq.q[name][1]
        return None

    def write(self, name: str, shape: Sequence[int] | None = None) -> Tensor:
        shape = tuple(shape) if shape is not None else self.values.shape(name)
        quant = self.out_quant(name)
        target = name if quant is None else self.values.qdq.q[name][0].outputs[0]
        kind = q.TENSOR_APP_READ if target in self.outputs else q.TENSOR_NATIVE
        t = self.g.tensor(target, kind, shape, quant=quant)
        if kind == q.TENSOR_APP_READ:
            self.output_names.append(target)
        self.tensors[name] = self.tensors[target] = t
        return t

    def write_quant(self, name: str, quant: Quant, shape: Sequence[int]) -> Tensor:
        """The integer value ``name`` written as a fixed-point tensor (a QuantizeLinear's output)."""
        kind = q.TENSOR_APP_READ if name in self.outputs else q.TENSOR_NATIVE
        t = self.g.tensor(name, kind, tuple(shape), quant=quant)
        if kind == q.TENSOR_APP_READ:
            self.output_names.append(name)
        self.tensors[name] = t
        return t

    def temp(self, hint: str, shape: Sequence[int], like: Tensor | None = None, quant: Quant | None = None) -> Tensor:
        """An intermediate tensor: float, or fixed-point with ``quant`` (or the encoding of ``like``)."""
        quant = like.quant if like is not None else quant
        return self.g.tensor(hint, q.TENSOR_NATIVE, tuple(shape), quant=quant)

    def static(self, value: np.ndarray, hint: str = "const") -> Tensor:
        if self.quantized:
            raise QnnError(f"{hint}: a float constant is not mapped for ops on quantized tensors")
        value = np.ascontiguousarray(value, np.float32)
        return self.g.tensor(hint, q.TENSOR_STATIC, value.shape, np.float32, value)

    def weight(self, name: str, perm: Sequence[int] | None = None, hint: str = "w") -> Tensor:
        """The constant ``name`` (transposed by ``perm``) as a static tensor: the integers a DequantizeLinear
        reads, with its encoding, for an op on quantized tensors; else the float values."""
        qdq = self.values.qdq
        if self.quantized and qdq is not None and name in qdq.dq:
            source = qdq.dq[name]
            raw = np.asarray(self.values.raw_constant(source.name), source.quant.dtype)
            data = np.ascontiguousarray(raw.transpose(perm) if perm is not None else raw)
            quant = source.quant.moved(perm)
            return self.g.tensor(hint, q.TENSOR_STATIC, data.shape, data=data, quant=quant)
        value = np.asarray(self.values.constant(name), np.float32)
        return self.static(value.transpose(perm) if perm is not None else value, hint)

    def op(self, op_type: str, inputs: Sequence[Tensor], outputs: Sequence[Tensor],
           params: Sequence[Scalar | TensorParam] = (), hint: str = "") -> None:
        self.g.node(op_type, inputs, outputs, params, hint)

    # small compositions used by several rules
    def transpose(self, t: Tensor, perm: Sequence[int], out: Tensor | None = None, hint: str = "") -> Tensor:
        shape = tuple(t.shape[p] for p in perm)
        if out is None:
            out = self.temp(f"{hint}_t", shape, quant=t.quant.moved(perm) if t.quant is not None else None)
        self.op("Transpose", [t], [out], [TensorParam("perm", np.array(perm, np.uint32))], hint)
        return out

    def reshape(self, t: Tensor, shape: Sequence[int], out: Tensor | None = None, hint: str = "") -> Tensor:
        if t.quant is not None and t.quant.axis is not None:
            raise QnnError(f"{hint}: reshaping a per-axis quantized tensor is not mapped")
        out = out if out is not None else self.temp(f"{hint}_r", shape, like=t)
        self.op("Reshape", [t], [out], (), hint)
        return out

    def with_rank(self, name: str, rank: int, hint: str) -> Tensor:
        """The value ``name`` with leading 1s added up to ``rank`` (numpy broadcasting made explicit)."""
        shape = self.values.shape(name)
        if len(shape) == rank:
            return self.read(name)
        full = (1,) * (rank - len(shape)) + tuple(shape)
        qdq = self.values.qdq
        if self.quantized and qdq is not None and name in qdq.dq:
            source = qdq.dq[name]
            raw = self.values.raw_constant(source.name)
            if raw is not None:
                quant = source.quant
                if quant.axis is not None:
                    quant = Quant(quant.qnn_type, quant.dtype, quant.scale, quant.zero_point,
                                  quant.axis + rank - len(shape))
                data = np.ascontiguousarray(np.asarray(raw, quant.dtype).reshape(full))
                return self.g.tensor(f"{hint}_c", q.TENSOR_STATIC, full, data=data, quant=quant)
            return self.reshape(self.read(name), full, hint=hint)
        const = self.values.constant(name)
        if const is not None:
            return self.static(np.asarray(const, np.float32).reshape(full), f"{hint}_c")
        return self.reshape(self.read(name), full, hint=hint)
