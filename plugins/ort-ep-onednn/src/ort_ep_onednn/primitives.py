"""Owned oneDNN objects as small Python values: memory descriptors, attributes with post-ops,
primitive descriptors and primitives, each destroyed when collected.

Thin wrappers over ``library``: every creation checks its status; deciding what to build is not done here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from . import enums as E
from .library import Library
from .views import dense_strides


class Md:
    """A memory descriptor (dnnl_memory_desc_t), owned. ``dims`` is its logical shape."""

    __slots__ = ("lib", "ptr", "dims")

    def __init__(self, lib: Library, ptr: Any, dims: tuple[int, ...]) -> None:
        self.lib, self.dims = lib, dims
        self.ptr = lib.ffi.gc(ptr, lib.lib.dnnl_memory_desc_destroy)

    @property
    def size(self) -> int:
        """Bytes needed to hold it (padding of blocked layouts included)."""
        return int(self.lib.lib.dnnl_memory_desc_get_size(self.ptr))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Md) and bool(self.lib.lib.dnnl_memory_desc_equal(self.ptr, other.ptr))

    __hash__ = None  # type: ignore[assignment]

    def format_kind(self) -> int:
        out = self.lib.ffi.new("int *")
        self.lib.check(self.lib.lib.dnnl_memory_desc_query(self.ptr, E.QUERY_FORMAT_KIND, out), "query format_kind")
        return int(out[0])

    def data_type(self) -> int:
        out = self.lib.ffi.new("int *")
        self.lib.check(self.lib.lib.dnnl_memory_desc_query(self.ptr, E.QUERY_DATA_TYPE, out), "query data_type")
        return int(out[0])

    def strides(self) -> tuple[int, ...] | None:
        """Element strides of a strided layout (plain row-major, channels-last, any dimension order);
        None for blocked layouts (nChw16c, ...), padded ones and views at an offset."""
        lib, ffi = self.lib, self.lib.ffi
        c, n = lib.lib, len(self.dims)
        if self.format_kind() != E.FMT_KIND_BLOCKED:
            return None
        blocks, offset = ffi.new("int *"), ffi.new("int64_t *")
        padded, strides = ffi.new("dnnl_dims_t **"), ffi.new("dnnl_dims_t **")
        if (c.dnnl_memory_desc_query(self.ptr, E.QUERY_INNER_NBLKS_S32, blocks) != E.SUCCESS or blocks[0]
                or c.dnnl_memory_desc_query(self.ptr, E.QUERY_SUBMEMORY_OFFSET_S64, offset) != E.SUCCESS
                or offset[0]
                or c.dnnl_memory_desc_query(self.ptr, E.QUERY_PADDED_DIMS, padded) != E.SUCCESS
                or tuple(padded[0][0][0:n]) != self.dims
                or c.dnnl_memory_desc_query(self.ptr, E.QUERY_STRIDES, strides) != E.SUCCESS):
            return None
        return tuple(int(s) for s in strides[0][0][0:n])

    def sub(self, dims: Sequence[int], offsets: Sequence[int]) -> Md:
        """The block of ``dims`` at ``offsets`` inside this layout (same buffer, no copy)."""
        lib = self.lib
        out = lib.ffi.new("dnnl_memory_desc_t *")
        lib.check(lib.lib.dnnl_memory_desc_create_submemory(out, self.ptr, _dims(lib, dims), _dims(lib, offsets)),
                  f"dnnl_memory_desc_create_submemory({list(dims)} at {list(offsets)})")
        return Md(lib, out[0], tuple(int(d) for d in dims))


def _dims(lib: Library, values: Sequence[int]) -> Any:
    return lib.ffi.new("dnnl_dims_t", [int(v) for v in values])


def strided_md(lib: Library, shape: Sequence[int], strides: Sequence[int], dt: int = E.DT_F32) -> Md:
    out = lib.ffi.new("dnnl_memory_desc_t *")
    lib.check(lib.lib.dnnl_memory_desc_create_with_strides(out, len(shape), _dims(lib, shape), dt,
                                                           _dims(lib, strides)),
              f"dnnl_memory_desc_create_with_strides({list(shape)}, {list(strides)})")
    return Md(lib, out[0], tuple(int(d) for d in shape))


def plain_md(lib: Library, shape: Sequence[int], dt: int = E.DT_F32) -> Md:
    """The dense row-major layout of ``shape`` (numpy's C order)."""
    return strided_md(lib, shape, dense_strides(shape), dt)


def any_md(lib: Library, shape: Sequence[int], dt: int = E.DT_F32) -> Md:
    """A layout left to the primitive (format tag 'any')."""
    out = lib.ffi.new("dnnl_memory_desc_t *")
    lib.check(lib.lib.dnnl_memory_desc_create_with_tag(out, len(shape), _dims(lib, shape), dt, E.TAG_ANY),
              f"dnnl_memory_desc_create_with_tag({list(shape)}, any)")
    return Md(lib, out[0], tuple(int(d) for d in shape))


def clone_md(lib: Library, ptr: Any, dims: Sequence[int]) -> Md:
    """An owned copy of a descriptor another object owns (a primitive descriptor's answer)."""
    out = lib.ffi.new("dnnl_memory_desc_t *")
    lib.check(lib.lib.dnnl_memory_desc_clone(out, ptr), "dnnl_memory_desc_clone")
    return Md(lib, out[0], tuple(int(d) for d in dims))


class PostOps:
    """What a primitive applies to its result before writing it: ('eltwise', alg, alpha, beta),
    ('sum',) (accumulate onto the destination's previous contents) or ('binary', alg, md)."""

    def __init__(self) -> None:
        self.ops: list[tuple] = []

    def eltwise(self, alg: int, alpha: float = 0.0, beta: float = 0.0) -> None:
        self.ops.append(("eltwise", alg, float(alpha), float(beta)))

    def sum(self) -> None:
        self.ops.append(("sum",))

    def binary(self, alg: int, md: Md) -> int:
        """Append a binary post-op; returns its index (its operand is DNNL_ARG_ATTR_MULTIPLE_POST_OP(i) | SRC_1)."""
        self.ops.append(("binary", alg, md))
        return len(self.ops) - 1

    def __len__(self) -> int:
        return len(self.ops)


class Attr:
    """Primitive attributes: user-managed scratchpad (one buffer per concurrent call), post-ops and
    zero points (``zero_points``: DNNL_ARG_* whose common zero point is given at execution, as an s32
    memory argument ``DNNL_ARG_ATTR_ZERO_POINTS | arg``)."""

    def __init__(self, lib: Library, post_ops: PostOps | None = None, zero_points: Sequence[int] = ()) -> None:
        ffi, c = lib.ffi, lib.lib
        out = ffi.new("dnnl_primitive_attr_t *")
        lib.check(c.dnnl_primitive_attr_create(out), "dnnl_primitive_attr_create")
        self.ptr = ffi.gc(out[0], c.dnnl_primitive_attr_destroy)
        lib.check(c.dnnl_primitive_attr_set_scratchpad_mode(self.ptr, E.SCRATCHPAD_USER), "set_scratchpad_mode")
        for arg in zero_points:
            lib.check(c.dnnl_primitive_attr_set_zero_points_mask(self.ptr, arg, 0), "set_zero_points_mask")
        if post_ops is not None and len(post_ops):
            po = ffi.new("dnnl_post_ops_t *")
            lib.check(c.dnnl_post_ops_create(po), "dnnl_post_ops_create")
            handle = ffi.gc(po[0], c.dnnl_post_ops_destroy)
            for op in post_ops.ops:
                if op[0] == "eltwise":
                    lib.check(c.dnnl_post_ops_append_eltwise(handle, op[1], op[2], op[3]), "append_eltwise")
                elif op[0] == "sum":
                    lib.check(c.dnnl_post_ops_append_sum(handle, 1.0, 0, E.DT_UNDEF), "append_sum")
                else:
                    lib.check(c.dnnl_post_ops_append_binary(handle, op[1], op[2].ptr), "append_binary")
            lib.check(c.dnnl_primitive_attr_set_post_ops(self.ptr, handle), "set_post_ops")


class Pd:
    """A primitive descriptor, owned; ``md(query, i)`` answers which layouts it chose."""

    def __init__(self, lib: Library, ptr: Any, what: str) -> None:
        self.lib, self.what = lib, what
        self.ptr = lib.ffi.gc(ptr, lib.lib.dnnl_primitive_desc_destroy)

    @property
    def impl(self) -> str:
        """The implementation oneDNN picked ('brg:avx512_core', 'jit:avx512_core', 'ref:any', ...)."""
        lib = self.lib
        out = lib.ffi.new("const char **")
        if (lib.lib.dnnl_primitive_desc_query(self.ptr, E.QUERY_IMPL_INFO_STR, 0, out) != E.SUCCESS
                or out[0] == lib.ffi.NULL):
            return ""
        return lib.ffi.string(out[0]).decode(errors="replace")

    @property
    def is_ref(self) -> bool:
        """Whether that is oneDNN's reference implementation (correct, often 10-100x slower)."""
        return self.impl.startswith("ref")

    def md(self, query: int, index: int, dims: Sequence[int]) -> Md:
        ptr = self.lib.lib.dnnl_primitive_desc_query_md(self.ptr, query, index)
        if ptr == self.lib.ffi.NULL:
            raise ValueError(f"{self.what}: no memory descriptor for query {query}[{index}]")
        return clone_md(self.lib, ptr, dims)

    def scratchpad_md(self) -> Md | None:
        ptr = self.lib.lib.dnnl_primitive_desc_query_md(self.ptr, E.QUERY_SCRATCHPAD_MD, 0)
        if ptr == self.lib.ffi.NULL or self.lib.lib.dnnl_memory_desc_get_size(ptr) == 0:
            return None
        return clone_md(self.lib, ptr, ())

    def primitive(self) -> Any:
        lib = self.lib
        out = lib.ffi.new("dnnl_primitive_t *")
        lib.check(lib.lib.dnnl_primitive_create(out, self.ptr), f"dnnl_primitive_create({self.what})")
        return lib.ffi.gc(out[0], lib.lib.dnnl_primitive_destroy)


def _pd(lib: Library, what: str, create, *args) -> Pd:
    out = lib.ffi.new("dnnl_primitive_desc_t *")
    lib.check(create(out, *args), f"{what} primitive descriptor")
    return Pd(lib, out[0], what)


def _ptr(md: Md | None, lib: Library) -> Any:
    return lib.ffi.NULL if md is None else md.ptr


def convolution(lib: Library, src: Md, weights: Md, bias: Md | None, dst: Md, strides, dilates, pad_l, pad_r,
                attr: Attr) -> Pd:
    return _pd(lib, "convolution", lib.lib.dnnl_convolution_forward_primitive_desc_create, lib.engine,
               E.FORWARD_INFERENCE, E.CONVOLUTION_DIRECT, src.ptr, weights.ptr, _ptr(bias, lib), dst.ptr,
               _dims(lib, strides), _dims(lib, dilates), _dims(lib, pad_l), _dims(lib, pad_r), attr.ptr)


def matmul(lib: Library, src: Md, weights: Md, bias: Md | None, dst: Md, attr: Attr) -> Pd:
    return _pd(lib, "matmul", lib.lib.dnnl_matmul_primitive_desc_create, lib.engine, src.ptr, weights.ptr,
               _ptr(bias, lib), dst.ptr, attr.ptr)


def inner_product(lib: Library, src: Md, weights: Md, bias: Md | None, dst: Md, attr: Attr) -> Pd:
    return _pd(lib, "inner_product", lib.lib.dnnl_inner_product_forward_primitive_desc_create, lib.engine,
               E.FORWARD_INFERENCE, src.ptr, weights.ptr, _ptr(bias, lib), dst.ptr, attr.ptr)


def pooling(lib: Library, alg: int, src: Md, dst: Md, strides, kernel, dilation, pad_l, pad_r, attr: Attr) -> Pd:
    return _pd(lib, "pooling", lib.lib.dnnl_pooling_forward_primitive_desc_create, lib.engine, E.FORWARD_INFERENCE,
               alg, src.ptr, dst.ptr, _dims(lib, strides), _dims(lib, kernel), _dims(lib, dilation),
               _dims(lib, pad_l), _dims(lib, pad_r), attr.ptr)


def eltwise(lib: Library, alg: int, src: Md, dst: Md, alpha: float, beta: float, attr: Attr) -> Pd:
    return _pd(lib, "eltwise", lib.lib.dnnl_eltwise_forward_primitive_desc_create, lib.engine, E.FORWARD_INFERENCE,
               alg, src.ptr, dst.ptr, float(alpha), float(beta), attr.ptr)


def binary(lib: Library, alg: int, src0: Md, src1: Md, dst: Md, attr: Attr) -> Pd:
    return _pd(lib, "binary", lib.lib.dnnl_binary_primitive_desc_create, lib.engine, alg, src0.ptr, src1.ptr,
               dst.ptr, attr.ptr)


def softmax(lib: Library, alg: int, src: Md, dst: Md, axis: int, attr: Attr) -> Pd:
    return _pd(lib, "softmax", lib.lib.dnnl_softmax_forward_primitive_desc_create, lib.engine, E.FORWARD_INFERENCE,
               alg, src.ptr, dst.ptr, int(axis), attr.ptr)


def layer_norm(lib: Library, src: Md, dst: Md, stat: Md, epsilon: float, flags: int, attr: Attr) -> Pd:
    return _pd(lib, "layer_normalization", lib.lib.dnnl_layer_normalization_forward_primitive_desc_create,
               lib.engine, E.FORWARD_INFERENCE, src.ptr, dst.ptr, stat.ptr, float(epsilon), int(flags), attr.ptr)


def batch_norm(lib: Library, src: Md, dst: Md, epsilon: float, flags: int, attr: Attr) -> Pd:
    return _pd(lib, "batch_normalization", lib.lib.dnnl_batch_normalization_forward_primitive_desc_create,
               lib.engine, E.FORWARD_INFERENCE, src.ptr, dst.ptr, float(epsilon), int(flags), attr.ptr)


def reduction(lib: Library, alg: int, src: Md, dst: Md, attr: Attr) -> Pd:
    return _pd(lib, "reduction", lib.lib.dnnl_reduction_primitive_desc_create, lib.engine, alg, src.ptr, dst.ptr,
               0.0, 0.0, attr.ptr)


def reorder(lib: Library, src: Md, dst: Md, attr: Attr) -> Pd:
    return _pd(lib, "reorder", lib.lib.dnnl_reorder_primitive_desc_create, src.ptr, lib.engine, dst.ptr,
               lib.engine, attr.ptr)


def concat(lib: Library, dst: Md, axis: int, srcs: Sequence[Md], attr: Attr) -> Pd:
    arr = lib.ffi.new("const_dnnl_memory_desc_t[]", [s.ptr for s in srcs])
    return _pd(lib, "concat", lib.lib.dnnl_concat_primitive_desc_create, lib.engine, dst.ptr, len(srcs), int(axis),
               arr, attr.ptr)


def stream(lib: Library) -> Any:
    """An in-order CPU stream, owned."""
    out = lib.ffi.new("dnnl_stream_t *")
    lib.check(lib.lib.dnnl_stream_create(out, lib.engine, E.STREAM_IN_ORDER), "dnnl_stream_create")
    return lib.ffi.gc(out[0], lib.lib.dnnl_stream_destroy)


def memory(lib: Library, md: Md, data: np.ndarray | None) -> Any:
    """A memory object over ``data``'s buffer (None: no buffer yet, bound per call), owned."""
    out = lib.ffi.new("dnnl_memory_t *")
    ptr = lib.ffi.NULL if data is None else lib.ffi.from_buffer(data)
    lib.check(lib.lib.dnnl_memory_create(out, md.ptr, lib.engine, ptr), "dnnl_memory_create")
    return lib.ffi.gc(out[0], lib.lib.dnnl_memory_destroy)


def aligned_bytes(nbytes: int, align: int = 64) -> np.ndarray:
    """A uint8 array of ``nbytes`` whose data starts on an ``align``-byte boundary."""
    raw = np.empty(nbytes + align, np.uint8)
    shift = (-raw.ctypes.data) % align
    return raw[shift:shift + nbytes]
