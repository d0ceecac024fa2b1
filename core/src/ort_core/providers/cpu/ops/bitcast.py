"""CPU kernel for BitCast: reinterprets each element's bits as another type of the same width
(little-endian), keeping the shape. Value-converting casts are Cast/CastLike (elementwise).
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from ....errors import KernelError
from ....ir.graph import Node
from ....ir.types import elem_type_name, np_dtype
from ..registry import register

# ml_dtypes keeps sub-byte types one per byte, the value's bits in the low bits
_SUB_BYTE_BITS = {"int4": 4, "uint4": 4, "float4_e2m1fn": 4, "int2": 2, "uint2": 2}


def _bits(dtype: np.dtype) -> int:
    return _SUB_BYTE_BITS.get(dtype.name, dtype.itemsize * 8)


@register("BitCast", since=26)
def _bitcast(node: Node, opset: int):
    to = node.attr("to")
    if to is None:
        raise KernelError(f"{node.label}: attribute 'to' is required")
    to = int(to)
    if to in (TensorProto.STRING, TensorProto.UNDEFINED):
        raise KernelError(f"{node.label}: cannot bit-cast to {elem_type_name(to)}")
    try:
        target = np_dtype(to)
    except (KeyError, TypeError, ValueError) as e:
        raise KernelError(f"{node.label}: unknown target element type {to}") from e
    width = _bits(target)
    sub_byte = target.name in _SUB_BYTE_BITS

    def kernel(x):
        if x.dtype.kind in "OUS":
            raise KernelError(f"{node.label}: string tensors cannot be bit-cast")
        if _bits(x.dtype) != width:
            raise KernelError(f"{node.label}: cannot bit-cast {x.dtype} ({_bits(x.dtype)} bits) to "
                              f"{elem_type_name(to)} ({width} bits): widths differ")
        if x.dtype == target:
            return (x,)
        src = x if x.flags.c_contiguous else x.copy()  # a view needs contiguous memory
        if sub_byte:  # keep only the value's bits: the storage byte's upper bits are padding
            return ((src.view(np.uint8) & np.uint8((1 << width) - 1)).view(target),)
        if target == np.bool_:  # any non-zero byte is true; numpy bools must hold 0 or 1
            return (src.view(np.uint8) != 0,)
        # numpy's native order is little-endian on every platform this runs on; the result is a
        # read-only-by-contract view of the input, as Reshape's is
        return (src.view(target),)
    return kernel
