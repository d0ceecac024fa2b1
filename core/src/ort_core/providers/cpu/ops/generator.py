"""CPU kernels creating tensors from attributes or shapes: Constant, ConstantOfShape, Range
and EyeLike. Random generators (RandomNormal, Bernoulli, ...) are not here.
"""

from __future__ import annotations

import math

import numpy as np
from onnx import TensorProto

from ....errors import KernelError
from ....ir.graph import Node
from ....ir.types import np_dtype
from ....limits import check_tensor_size
from ..registry import register


def _readonly(arr: np.ndarray) -> np.ndarray:
    """A private, read-only copy: the same array is returned by every run, so a caller that
    tries to modify it gets an error instead of silently changing later results."""
    arr = np.array(arr, copy=True)
    arr.setflags(write=False)
    return arr


def _dense_from_sparse(node: Node, sparse) -> np.ndarray:
    """Dense array from a sparse_value attribute (an ndarray, a SparseTensorProto, or an
    object with ``values``/``indices``/``dims``)."""
    if isinstance(sparse, np.ndarray):
        return sparse
    from onnx import numpy_helper

    values, indices, dims = sparse.values, sparse.indices, sparse.dims
    if isinstance(values, TensorProto):
        values = numpy_helper.to_array(values)
    if isinstance(indices, TensorProto):
        indices = numpy_helper.to_array(indices)
    values, indices, dims = np.asarray(values), np.asarray(indices, dtype=np.int64), tuple(dims)
    check_tensor_size(node.label, dims, values.dtype, "sparse_value")
    dense = np.zeros(dims, dtype=values.dtype)
    if indices.ndim == 1:  # linearized indices
        dense.reshape(-1)[indices] = values
    elif indices.ndim == 2:  # [NNZ, rank] coordinates
        dense[tuple(indices.T)] = values
    else:
        raise KernelError(f"{node.label}: sparse_value indices must be 1-D or 2-D")
    return dense


_VALUE_ATTRS = ("value", "sparse_value", "value_float", "value_floats", "value_int",
                "value_ints", "value_string", "value_strings")


@register("Constant", since=1)
def _constant(node: Node, opset: int):
    given = [a for a in _VALUE_ATTRS if node.attrs.get(a) is not None]
    if len(given) != 1:
        raise KernelError(f"{node.label}: exactly one value attribute is required, got "
                          f"{given or 'none'}")
    name = given[0]
    v = node.attrs[name]
    if name == "value":
        arr = np.asarray(v)
    elif name == "sparse_value":
        arr = _dense_from_sparse(node, v)
    elif name in ("value_float", "value_floats"):
        arr = np.array(v, dtype=np.float32)
    elif name in ("value_int", "value_ints"):
        arr = np.array(v, dtype=np.int64)
    else:
        strings = [s.decode() if isinstance(s, bytes) else s for s in
                   (v if name == "value_strings" else [v])]
        arr = np.empty(len(strings), dtype=object)
        arr[:] = strings
        if name == "value_string":
            arr = arr.reshape(())
    out = (_readonly(arr),)

    def kernel():
        return out
    return kernel


@register("ConstantOfShape", since=9)
def _constant_of_shape(node: Node, opset: int):
    value = node.attr("value")
    if value is None:
        value = np.zeros(1, dtype=np.float32)
    value = np.asarray(value)
    if value.size != 1:
        raise KernelError(f"{node.label}: 'value' must hold exactly one element, got {value.size}")
    dtype = value.dtype
    fill = value.reshape(-1)[0]
    zero = not fill

    def kernel(shape):
        dims = [int(d) for d in shape.reshape(-1).tolist()]
        if min(dims, default=0) < 0:
            raise KernelError(f"{node.label}: negative dimension in shape {dims}")
        check_tensor_size(node.label, dims, dtype)
        if zero:
            return (np.zeros(dims, dtype=dtype),)
        return (np.full(dims, fill, dtype=dtype),)
    return kernel


_STASH = {TensorProto.FLOAT: np.float32, TensorProto.DOUBLE: np.float64}


@register("Range", since=11)
def _range(node: Node, opset: int):
    stash = int(node.attr("stash_type", TensorProto.FLOAT))
    if opset >= 27 and stash not in _STASH:
        raise KernelError(f"{node.label}: stash_type must be FLOAT (1) or DOUBLE (11), got {stash}")

    def kernel(start, limit, delta):
        dtype = start.dtype
        s, lim, d = (v.reshape(-1)[0].item() for v in (start, limit, delta))
        if d == 0:
            raise KernelError(f"{node.label}: delta must not be zero")
        if dtype.kind in "iu":
            n = max(-((s - lim) // d), 0)  # ceil((limit - start) / delta) in exact integers
            check_tensor_size(node.label, (n,), dtype)
            return (np.arange(s, s + n * d, d, dtype=np.int64).astype(dtype, copy=False),)
        span = (lim - s) / d
        if not math.isfinite(span):
            raise KernelError(f"{node.label}: start {s}, limit {lim} and delta {d} give no finite number of elements")
        n = max(math.ceil(span), 0)
        check_tensor_size(node.label, (n,), dtype)
        # output[i] = start + i * delta, computed in double and rounded once to the type
        return ((np.arange(n, dtype=np.float64) * d + s).astype(dtype),)
    return kernel


@register("EyeLike", since=9)
def _eye_like(node: Node, opset: int):
    k = int(node.attr("k", 0))
    to = node.attr("dtype")
    dtype = None
    if to:  # absent or UNDEFINED (0): the input's type
        if int(to) == TensorProto.STRING:
            raise KernelError(f"{node.label}: dtype string is not supported")
        dtype = np_dtype(int(to))

    def kernel(x):
        if x.ndim != 2:
            raise KernelError(f"{node.label}: input must be 2-D, got shape {x.shape}")
        return (np.eye(x.shape[0], x.shape[1], k=k, dtype=x.dtype if dtype is None else dtype),)
    return kernel
