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

NCHW_TO_NHWC = (0, 2, 3, 1)
NHWC_TO_NCHW = (0, 3, 1, 2)


class Values:
    """What lowering knows about a value: its static shape, its ONNX element type, its constant value."""

    def __init__(self, type_of: Callable[[str], Any], constant: Callable[[str], np.ndarray | None],
                 opset: int) -> None:
        self._type_of, self._constant, self.opset = type_of, constant, opset

    def shape(self, name: str) -> tuple[int, ...] | None:
        const = self._constant(name)
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
        const = self._constant(name)
        if const is not None:
            try:
                return int(onnx.helper.np_dtype_to_tensor_dtype(const.dtype))
            except (KeyError, TypeError, ValueError):
                return 0
        return 0

    def constant(self, name: str) -> np.ndarray | None:
        return self._constant(name) if name else None


class Emitter:
    """Maps ONNX value names to QNN tensors of one graph while nodes are emitted.

    A value read that is a constant becomes a STATIC tensor; any other value read before it is written is a
    graph input (APP_WRITE), recorded in ``input_names`` in the order first read; a node output listed in
    ``outputs`` is APP_READ (in ``output_names``), every other one NATIVE.
    """

    def __init__(self, builder: GraphBuilder, values: Values, outputs: Sequence[str]) -> None:
        self.g, self.values, self.outputs = builder, values, set(outputs)
        self.tensors: dict[str, Tensor] = {}
        self.input_names: list[str] = []
        self.output_names: list[str] = []

    def read(self, name: str) -> Tensor:
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

    def write(self, name: str, shape: Sequence[int] | None = None) -> Tensor:
        shape = tuple(shape) if shape is not None else self.values.shape(name)
        if name in self.outputs:
            t = self.g.tensor(name, q.TENSOR_APP_READ, shape)
            self.output_names.append(name)
        else:
            t = self.g.tensor(name, q.TENSOR_NATIVE, shape)
        self.tensors[name] = t
        return t

    def temp(self, hint: str, shape: Sequence[int]) -> Tensor:
        return self.g.tensor(hint, q.TENSOR_NATIVE, tuple(shape))

    def static(self, value: np.ndarray, hint: str = "const") -> Tensor:
        value = np.ascontiguousarray(value, np.float32)
        return self.g.tensor(hint, q.TENSOR_STATIC, value.shape, np.float32, value)

    def op(self, op_type: str, inputs: Sequence[Tensor], outputs: Sequence[Tensor],
           params: Sequence[Scalar | TensorParam] = (), hint: str = "") -> None:
        self.g.node(op_type, inputs, outputs, params, hint)

    # small compositions used by several rules
    def transpose(self, t: Tensor, perm: Sequence[int], out: Tensor | None = None, hint: str = "") -> Tensor:
        shape = tuple(t.shape[p] for p in perm)
        out = out if out is not None else self.temp(f"{hint}_t", shape)
        self.op("Transpose", [t], [out], [TensorParam("perm", np.array(perm, np.uint32))], hint)
        return out

    def reshape(self, t: Tensor, shape: Sequence[int], out: Tensor | None = None, hint: str = "") -> Tensor:
        out = out if out is not None else self.temp(f"{hint}_r", shape)
        self.op("Reshape", [t], [out], (), hint)
        return out

    def with_rank(self, name: str, rank: int, hint: str) -> Tensor:
        """The value ``name`` with leading 1s added up to ``rank`` (numpy broadcasting made explicit)."""
        const = self.values.constant(name)
        shape = self.values.shape(name)
        if len(shape) == rank:
            return self.read(name)
        full = (1,) * (rank - len(shape)) + tuple(shape)
        if const is not None:
            return self.static(np.asarray(const, np.float32).reshape(full), f"{hint}_c")
        return self.reshape(self.read(name), full, hint=hint)
