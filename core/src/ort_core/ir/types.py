"""ONNX element types and value types: mapping to numpy dtypes and ORT-style type strings.

Pure data: knows nothing about graphs or execution. Exotic dtypes (bfloat16, float8, int4, ...)
come from ml_dtypes, which onnx already depends on.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
from onnx import TensorProto, helper

# ORT's type-string names: 'tensor(float)', 'tensor(int64)', ...
_TYPE_NAMES = {
    TensorProto.FLOAT: "float",
    TensorProto.UINT8: "uint8",
    TensorProto.INT8: "int8",
    TensorProto.UINT16: "uint16",
    TensorProto.INT16: "int16",
    TensorProto.INT32: "int32",
    TensorProto.INT64: "int64",
    TensorProto.STRING: "string",
    TensorProto.BOOL: "bool",
    TensorProto.FLOAT16: "float16",
    TensorProto.DOUBLE: "double",
    TensorProto.UINT32: "uint32",
    TensorProto.UINT64: "uint64",
    TensorProto.COMPLEX64: "complex64",
    TensorProto.COMPLEX128: "complex128",
    TensorProto.BFLOAT16: "bfloat16",
    TensorProto.FLOAT8E4M3FN: "float8e4m3fn",
    TensorProto.FLOAT8E4M3FNUZ: "float8e4m3fnuz",
    TensorProto.FLOAT8E5M2: "float8e5m2",
    TensorProto.FLOAT8E5M2FNUZ: "float8e5m2fnuz",
    TensorProto.UINT4: "uint4",
    TensorProto.INT4: "int4",
    TensorProto.FLOAT4E2M1: "float4e2m1",
}
for _name in ("FLOAT8E8M0", "UINT2", "INT2"):
    if hasattr(TensorProto, _name):
        _TYPE_NAMES[getattr(TensorProto, _name)] = _name.lower()


def elem_type_name(elem_type: int) -> str:
    """'float' for TensorProto.FLOAT; 'unknown(N)' for codes this onnx does not know."""
    return _TYPE_NAMES.get(elem_type, f"unknown({elem_type})")


@functools.cache
def np_dtype(elem_type: int) -> np.dtype:
    """The numpy dtype that holds values of an ONNX element type (strings -> object)."""
    if elem_type == TensorProto.STRING:
        return np.dtype(object)
    return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))


_NP_TO_ELEM: dict[np.dtype, int] = {}
for _code in _TYPE_NAMES:
    if _code == TensorProto.STRING:
        continue
    try:
        _NP_TO_ELEM.setdefault(np.dtype(helper.tensor_dtype_to_np_dtype(_code)), _code)
    except (KeyError, TypeError, ValueError):  # dtype without a numpy counterpart in this onnx
        pass


def elem_type_of(dtype: np.dtype) -> int | None:
    """ONNX element type for a numpy dtype; strings (object, str_, bytes_) map to STRING."""
    dtype = np.dtype(dtype)
    if dtype.kind in "OUS":
        return TensorProto.STRING
    return _NP_TO_ELEM.get(dtype)


@dataclass(frozen=True)
class ValueType:
    """Static type of a value: a tensor (elem_type + shape) or another ONNX type kind.

    ``shape`` is None when the rank is unknown; each dim is an int, a symbolic name (str)
    or None when unknown. ``kind`` is 'tensor', 'sequence', 'map', 'optional',
    'sparse_tensor' or 'unknown'. ``text`` is the ORT-style type string.
    """

    kind: str
    elem_type: int = 0
    shape: tuple | None = None
    text: str = "unknown"
    denotations: tuple | None = None  # per dim, its denotation ("DATA_BATCH", ...) or None; None: none at all

    @staticmethod
    def from_proto(tp) -> ValueType:
        which = tp.WhichOneof("value")
        if which == "tensor_type" or which == "sparse_tensor_type":
            t = getattr(tp, which)
            shape = None
            denotations = None
            if t.HasField("shape"):
                shape = tuple(_dim(d) for d in t.shape.dim)
                if any(d.denotation for d in t.shape.dim):
                    denotations = tuple(d.denotation or None for d in t.shape.dim)
            kind = "tensor" if which == "tensor_type" else "sparse_tensor"
            return ValueType(kind, t.elem_type, shape, f"{kind}({elem_type_name(t.elem_type)})", denotations)
        if which == "sequence_type":
            inner = ValueType.from_proto(tp.sequence_type.elem_type)
            return ValueType("sequence", inner.elem_type, None, f"seq({inner.text})")
        if which == "optional_type":
            inner = ValueType.from_proto(tp.optional_type.elem_type)
            return ValueType("optional", inner.elem_type, None, f"optional({inner.text})")
        if which == "map_type":
            key = elem_type_name(tp.map_type.key_type)
            inner = ValueType.from_proto(tp.map_type.value_type)
            return ValueType("map", 0, None, f"map({key},{inner.text})")
        return ValueType("unknown")

    @staticmethod
    def tensor(elem_type: int, shape) -> ValueType:
        shape = None if shape is None else tuple(shape)
        return ValueType("tensor", elem_type, shape, f"tensor({elem_type_name(elem_type)})")


def _dim(d) -> int | str | None:
    """One dimension as read from a model: its size, its symbolic name, or None when free. Every way a
    dimension can be free is free: a name, no value, an empty name, or a negative value (some exporters
    write -1), as onnxruntime reads them."""
    if d.HasField("dim_value"):
        return d.dim_value if d.dim_value >= 0 else None
    return d.dim_param or None
