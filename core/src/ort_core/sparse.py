"""SparseTensor: onnxruntime's Python sparse tensor (COO and CSR formats) over host numpy arrays.

Made with ``sparse_coo_from_numpy`` / ``sparse_csr_from_numpy``, read back through ``values()`` and the
format's view; ``to_dense`` expands one (ONNX ``sparse_initializer`` loading uses it). Host memory only: no
provider computes on sparse tensors, so ``to_cuda`` and device-backed tensors are refused, naming the reason.
"""

from __future__ import annotations

import enum
from typing import Any

import numpy as np

from .errors import Fail, InvalidArgument
from .ir.types import elem_type_name, elem_type_of


class OrtSparseFormat(enum.IntEnum):
    """onnxruntime's formats (its numbers); ort-core makes COO and CSR(C) tensors."""

    ORT_SPARSE_UNDEFINED = 0
    ORT_SPARSE_COO = 1
    ORT_SPARSE_CSRC = 2
    ORT_SPARSE_BLOCK_SPARSE = 4


class SparseCooView:
    """The COO indices of a SparseTensor: ``indices()``, int64, one linear index per value (1-D) or one
    coordinate pair per value (2-D, shape (nnz, 2))."""

    __slots__ = ("_indices",)

    def __init__(self, indices: np.ndarray) -> None:
        self._indices = indices

    def indices(self) -> np.ndarray:
        return self._indices


class SparseCsrView:
    """The CSR(C) indices of a SparseTensor: ``inner()`` (the column of each value) and ``outer()`` (where
    each row starts in the values, rows + 1 entries)."""

    __slots__ = ("_inner", "_outer")

    def __init__(self, inner: np.ndarray, outer: np.ndarray) -> None:
        self._inner, self._outer = inner, outer

    def inner(self) -> np.ndarray:
        return self._inner

    def outer(self) -> np.ndarray:
        return self._outer


class SparseTensor:
    """A sparse tensor in host memory (onnxruntime.SparseTensor): its dense shape, the non-zero ``values`` and
    the indices of the format. Numeric values and indices are the caller's arrays (not copied, as in
    onnxruntime); string values are copied."""

    __slots__ = ("_format", "_shape", "_values", "_indices", "_outer")

    def __init__(self, fmt: OrtSparseFormat, dense_shape: list[int], values: np.ndarray, indices: np.ndarray,
                 outer: np.ndarray | None = None) -> None:
        if not isinstance(fmt, OrtSparseFormat):
            raise InvalidArgument("SparseTensor is made with SparseTensor.sparse_coo_from_numpy(...) or "
                                  "sparse_csr_from_numpy(...)")
        self._format, self._shape, self._values, self._indices, self._outer = fmt, dense_shape, values, indices, outer

    # ---------------------------------------------------------------- creation
    @classmethod
    def sparse_coo_from_numpy(cls, dense_shape: Any, values: np.ndarray, coo_indices: np.ndarray,
                              ort_device: Any = None) -> SparseTensor:
        """A COO tensor: ``values`` (1-D, nnz) and ``coo_indices`` (int64: nnz linear indices, or (nnz, 2)
        coordinate pairs for a 2-D tensor), on the host (``ort_device``: an OrtDevice for 'cpu', or None)."""
        _host_only(ort_device, "sparse_coo_from_numpy")
        shape = _dense_shape(dense_shape)
        vals = _values(values, "COO")
        idx = _indices(coo_indices, "coo_indices")
        nnz, size = len(vals), int(np.prod(shape, dtype=np.int64))
        if idx.ndim == 1 and idx.size == nnz:
            bad = idx[(idx < 0) | (idx >= size)] if nnz else idx[:0]
            where = f"dense shape {shape} has {size} elements"
        elif idx.size == 2 * nnz and len(shape) == 2:
            idx = idx.reshape(nnz, 2) if idx.ndim == 1 else idx
            if idx.shape != (nnz, 2):
                raise InvalidArgument(f"sparse_coo_from_numpy: coo_indices of shape {list(idx.shape)}: coordinate "
                                      f"pairs come as shape ({nnz}, 2)")
            out = (idx[:, 0] < 0) | (idx[:, 0] >= shape[0]) | (idx[:, 1] < 0) | (idx[:, 1] >= shape[1])
            bad, where = idx[out], f"dense shape is {shape}"
        else:
            raise InvalidArgument(f"sparse_coo_from_numpy: {idx.size} COO index values for {nnz} values: give one "
                                  f"linear index per value, or (for a 2-D dense shape) two coordinates per value")
        if len(bad):
            raise InvalidArgument(f"sparse_coo_from_numpy: index {bad[0].tolist()} is out of range: the {where}")
        return cls(OrtSparseFormat.ORT_SPARSE_COO, shape, vals, idx)

    @classmethod
    def sparse_csr_from_numpy(cls, dense_shape: Any, values: np.ndarray, inner_indices: np.ndarray,
                              outer_indices: np.ndarray, ort_device: Any = None) -> SparseTensor:
        """A CSR tensor of a 2-D dense shape: ``values`` (1-D, nnz), ``inner_indices`` (the column of each value)
        and ``outer_indices`` (rows + 1 offsets into the values, non-decreasing from 0 to nnz), int64."""
        _host_only(ort_device, "sparse_csr_from_numpy")
        shape = _dense_shape(dense_shape)
        if len(shape) != 2:
            raise InvalidArgument(f"sparse_csr_from_numpy: the dense shape must be 2-D (rows, cols), got {shape}")
        vals = _values(values, "CSR")
        inner = _indices(inner_indices, "inner_indices")
        outer = _indices(outer_indices, "outer_indices")
        nnz = len(vals)
        if inner.ndim != 1 or inner.size != nnz:
            raise InvalidArgument(f"sparse_csr_from_numpy: inner_indices must be 1-D with one entry per value "
                                  f"({nnz}), got shape {list(inner.shape)}")
        if nnz and (outer.ndim != 1 or outer.size != shape[0] + 1):
            raise InvalidArgument(f"sparse_csr_from_numpy: outer_indices must have rows + 1 = {shape[0] + 1} "
                                  f"entries, got {outer.size}")
        if nnz and (outer[0] != 0 or outer[-1] != nnz or np.any(np.diff(outer) < 0)):
            raise InvalidArgument(f"sparse_csr_from_numpy: outer_indices {outer.tolist()[:12]} must rise from 0 "
                                  f"to the number of values ({nnz}) without going down")
        if nnz and (inner.min() < 0 or inner.max() >= shape[1]):
            raise InvalidArgument(f"sparse_csr_from_numpy: inner index out of range for {shape[1]} columns")
        return cls(OrtSparseFormat.ORT_SPARSE_CSRC, shape, vals, inner, outer)

    # ------------------------------------------------------------------ queries
    def values(self) -> np.ndarray:
        return self._values

    def format(self) -> OrtSparseFormat:
        return self._format

    def dense_shape(self) -> list[int]:
        """The dense shape, a list of ints (as onnxruntime returns it)."""
        return list(self._shape)

    def data_type(self) -> str:
        """'sparse_tensor(float)', ..."""
        kind = self._values.dtype.kind
        name = "string" if kind in "OU" else elem_type_name(elem_type_of(self._values.dtype))
        return f"sparse_tensor({name})"

    def device_name(self) -> str:
        return "cpu"

    def as_coo_view(self) -> SparseCooView:
        if self._format != OrtSparseFormat.ORT_SPARSE_COO:
            raise Fail("This sparse tensor does not contain COO format")
        return SparseCooView(self._indices)

    def as_csrc_view(self) -> SparseCsrView:
        if self._format != OrtSparseFormat.ORT_SPARSE_CSRC:
            raise Fail("This sparse tensor does not contain CSR(C) format")
        return SparseCsrView(self._indices, self._outer)

    def as_blocksparse_view(self) -> Any:
        raise Fail("This sparse tensor does not contain BlockSparse format (ort-core makes COO and CSR tensors)")

    def to_cuda(self, ort_device: Any) -> SparseTensor:
        raise Fail("SparseTensor.to_cuda: ort-core keeps sparse tensors in host memory only (no provider computes "
                   "on sparse tensors); densify it and copy the dense tensor with OrtValue.ortvalue_from_numpy")

    def to_dense(self) -> np.ndarray:
        """The dense array (an ort-core extra): zeros ('' for strings) except at the indexed positions."""
        fill = "" if self._values.dtype.kind == "O" else 0
        dense = np.full(self._shape, fill, dtype=self._values.dtype)
        if self._format == OrtSparseFormat.ORT_SPARSE_COO:
            if self._indices.ndim == 2:
                dense[self._indices[:, 0], self._indices[:, 1]] = self._values
            else:
                dense.reshape(-1)[self._indices] = self._values
        else:
            rows = np.repeat(np.arange(self._shape[0]), np.diff(self._outer)) if len(self._values) else []
            dense[rows, self._indices] = self._values
        return dense

    def __repr__(self) -> str:
        return (f"SparseTensor({self._format.name}, {self.data_type()}, dense_shape={self._shape}, "
                f"nnz={len(self._values)})")


def _host_only(ort_device: Any, what: str) -> None:
    device = getattr(ort_device, "device", None)
    if ort_device is not None and (device is None or not device.is_host):
        raise InvalidArgument(f"SparseTensor.{what}: ort-core keeps sparse tensors in host memory; give "
                              f"OrtDevice.make('cpu', 0), got {ort_device!r}")


def _dense_shape(dense_shape: Any) -> list[int]:
    try:
        shape = [int(d) for d in np.asarray(dense_shape).reshape(-1)]
    except (TypeError, ValueError):
        raise InvalidArgument(f"dense_shape must be a list or 1-D array of ints, got {dense_shape!r}") from None
    if any(d < 0 for d in shape):
        raise InvalidArgument(f"dense_shape {shape} has a negative dimension")
    return shape


def _values(values: Any, fmt: str) -> np.ndarray:
    if not isinstance(values, np.ndarray):
        raise InvalidArgument(f"values must be a numpy array, got {type(values).__name__}")
    if values.ndim != 1:
        raise InvalidArgument(f"Expecting values 1-D numpy values array for {fmt} format. Got dims: {values.ndim}")
    if values.dtype.kind in "OUS":
        return np.array([str(v) if not isinstance(v, bytes) else v.decode("utf-8") for v in values], dtype=object)
    if elem_type_of(values.dtype) is None:
        raise InvalidArgument(f"values of dtype {values.dtype} have no ONNX element type")
    return values if values.flags.c_contiguous else np.ascontiguousarray(values)


def _indices(indices: Any, name: str) -> np.ndarray:
    arr = np.asarray(indices)
    if arr.dtype.kind not in "iu":
        raise InvalidArgument(f"{name} must be integers (int64), got {arr.dtype}")
    return arr if arr.dtype == np.int64 and arr.flags.c_contiguous else np.ascontiguousarray(arr, dtype=np.int64)
