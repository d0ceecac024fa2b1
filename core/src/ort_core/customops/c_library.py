"""Load a C custom-op library (the ABI of include/ort_core_custom_op.h) through cffi in ABI mode.

``load_custom_ops_library(path)`` dlopens the library, checks its ABI version and turns each
entry of its op table into a CustomOp whose kernel calls the library's shape and compute functions
on the numpy buffers directly (no per-element Python). It compiles nothing and never unloads a library.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import numpy as np
from onnx import TensorProto

from ..errors import Fail, InvalidArgument, KernelError, NoSuchFile, OrtError
from ..ir.types import elem_type_name, elem_type_of, np_dtype
from .custom_op import CustomOp
from .declaration import AttrSpec, CustomOpInput, CustomOpOutput

HEADER = Path(__file__).with_name("include") / "ort_core_custom_op.h"
ABI_VERSION = 1
MAX_RANK = 16
MESSAGE_SIZE = 1024
_ARG_OPTIONAL, _ARG_VARIADIC = 1, 2
_ATTR_KINDS = {1: "int", 2: "float", 3: "string", 4: "ints", 5: "floats"}
_STATUS = {1: "FAIL", 2: "INVALID_ARGUMENT"}

_lock = threading.Lock()
_ffi_instance = None
_loaded: dict[str, list[CustomOp]] = {}


def get_include() -> str:
    """The folder holding ort_core_custom_op.h, for ``cc -I``."""
    return str(HEADER.parent)


def example_library_source() -> str:
    """Path of the example library's C source shipped with ort-core."""
    return str(Path(__file__).with_name("examples") / "example_ops.c")


def _ffi():
    """One cffi FFI, declared from the header's ORTC_CDEF block (the header is the single source)."""
    global _ffi_instance
    with _lock:
        if _ffi_instance is None:
            import cffi

            text = HEADER.read_text()
            begin = text.index("\n", text.index("ORTC_CDEF_BEGIN"))
            end = text.rindex("\n", 0, text.index("ORTC_CDEF_END"))
            ffi = cffi.FFI()
            ffi.cdef(text[begin:end])
            _ffi_instance = ffi
        return _ffi_instance


def load_custom_ops_library(path: str | os.PathLike) -> list[CustomOp]:
    """The custom ops of the C library at ``path`` (loaded once per process, then reused)."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise NoSuchFile(f"custom-op library '{path}' does not exist")
    real = os.path.realpath(path)
    with _lock:
        if real in _loaded:
            return list(_loaded[real])
    ffi = _ffi()
    try:
        lib = ffi.dlopen(real)
    except OSError as e:
        raise Fail(f"cannot load custom-op library '{path}': {e}") from e
    try:
        abi_version = lib.ortc_abi_version
    except AttributeError:
        raise Fail(f"custom-op library '{path}' does not export 'ortc_abi_version': it is not an ort-core custom-op "
                   f"library{_ort_hint(real)}; build it against {HEADER}") from None
    version = abi_version()
    if version != ABI_VERSION:
        raise Fail(f"custom-op library '{path}' implements ort-core custom-op ABI version {version}, but this ort-core "
                   f"implements version {ABI_VERSION}: rebuild the library against {HEADER}")
    try:
        get_ops = lib.ortc_get_ops
    except AttributeError:
        raise Fail(f"custom-op library '{path}' reports ABI version {version} but does not export 'ortc_get_ops'; "
                   f"see {HEADER}") from None
    count = ffi.new("int32_t *")
    table = get_ops(count)
    if table == ffi.NULL or count[0] <= 0:
        raise Fail(f"custom-op library '{path}': ortc_get_ops returned no ops (count {count[0]})")
    library = _Library(path, ffi, lib)
    ops: list[CustomOp] = []
    for k in range(count[0]):
        try:
            ops.append(CLibraryOp(library, table[k]))
        except OrtError as e:
            raise type(e)(f"custom-op library '{path}', op table entry {k}: {e}") from None
    with _lock:
        return list(_loaded.setdefault(real, ops))


def _ort_hint(path: str) -> str:
    """A hint when the file is an onnxruntime custom-op library, which speaks another ABI."""
    import cffi

    probe = cffi.FFI()
    probe.cdef("int RegisterCustomOps(void *, void *);")
    try:
        probe.dlopen(path).RegisterCustomOps  # noqa: B018 - probing for the symbol
    except (OSError, AttributeError):
        return ""
    return " (it exports RegisterCustomOps: an onnxruntime custom-op library, whose C API ort-core does not implement)"


class _Library:
    """A loaded library: its path for messages and the cffi handle that keeps it loaded."""

    def __init__(self, path: str, ffi, lib) -> None:
        self.path, self.ffi, self.lib = path, ffi, lib


class CLibraryOp(CustomOp):
    """A custom op implemented in a C library (see include/ort_core_custom_op.h)."""

    def __init__(self, library: _Library, op) -> None:
        ffi = library.ffi
        self.library = library
        self._op = op  # points into the library's static table: kept alive by library.lib
        domain, op_type = _text(ffi, op.domain, "domain"), _text(ffi, op.op_type, "op_type")
        name = f"{domain}::{op_type}"
        if op.shape == ffi.NULL or op.compute == ffi.NULL:
            raise InvalidArgument(f"custom op {name} has no {'shape' if op.shape == ffi.NULL else 'compute'} "
                                  "function")
        self._shape_fn, self._compute_c = op.shape, op.compute
        super().__init__(
            domain, op_type,
            inputs=[_arg(ffi, op.inputs, k, CustomOpInput, name) for k in range(_count(op.n_inputs, op.inputs, ffi))],
            outputs=[_arg(ffi, op.outputs, k, CustomOpOutput, name)
                     for k in range(_count(op.n_outputs, op.outputs, ffi))],
            type_constraints={_text(ffi, tc.name, "type constraint name"): _text(ffi, tc.types, "type constraint types")
                              for tc in _entries(op.type_constraints, op.n_type_constraints, ffi)},
            attributes={a.name: a for a in (_attr(ffi, d, name) for d in _entries(op.attrs, op.n_attrs, ffi))},
            since=int(op.since_version), until=int(op.until_version) or None)
        for spec in (*self.input_specs, *self.output_specs):
            if TensorProto.STRING in spec.allowed:
                raise InvalidArgument(f"custom op {name}: '{spec.name}' allows string tensors, which cannot "
                                      "cross the C ABI")

    def __repr__(self) -> str:
        return f"<CLibraryOp {self.qualified_name} opsets {self.opset_text()} from '{self.library.path}'>"

    def _compute_fn(self, attrs: dict[str, Any], n_outputs: int):
        ffi = self.library.ffi
        n_attrs = len(self.attr_specs)
        values = ffi.new("ortc_attr_value[]", max(n_attrs, 1))
        keep: list[Any] = [values]  # C copies of attribute values, alive as long as the kernel
        for k, spec in enumerate(self.attr_specs):
            _set_attr(ffi, values[k], spec.kind, attrs[spec.name], keep)
        shape_fn, compute_fn, name, path = self._shape_fn, self._compute_c, self.qualified_name, self.library.path

        def call(xs: list) -> list:
            n_in = len(xs)
            ins = ffi.new("ortc_tensor[]", max(n_in, 1))
            alive = []
            for k, x in enumerate(xs):
                if x is None:
                    continue
                x = np.asarray(x, order="C")  # (ascontiguousarray would turn 0-d into 1-d)
                if x.ndim > MAX_RANK:
                    raise InvalidArgument(f"input {k} of custom op {name} has rank {x.ndim}; the C ABI allows at "
                                          f"most {MAX_RANK}")
                t = ins[k]
                t.elem_type = elem_type_of(x.dtype)
                t.rank = x.ndim
                t.dims[0:x.ndim] = x.shape
                t.data = ffi.cast("void *", x.ctypes.data)
                alive.append(x)
            outs = ffi.new("ortc_tensor[]", max(n_outputs, 1))
            message = ffi.new("char[]", MESSAGE_SIZE)
            _check(shape_fn(ins, n_in, values, n_attrs, outs, n_outputs, message, MESSAGE_SIZE), message, ffi,
                   "shape", name, path)
            results = []
            for k in range(n_outputs):
                results.append(_allocate(outs[k], k, name))
                outs[k].data = ffi.cast("void *", results[-1].ctypes.data)
            _check(compute_fn(ins, n_in, values, n_attrs, outs, n_outputs, message, MESSAGE_SIZE), message, ffi,
                   "compute", name, path)
            return results

        call.keep_alive = keep  # the attribute buffers `values` points into live as long as the kernel
        return call


def _allocate(desc, k: int, name: str) -> np.ndarray:
    code, rank = int(desc.elem_type), int(desc.rank)
    if not 0 <= rank <= MAX_RANK:
        raise KernelError(f"custom op {name}: shape gave output {k} rank {rank} (allowed 0..{MAX_RANK})")
    dims = tuple(int(d) for d in desc.dims[0:rank])
    if any(d < 0 for d in dims):
        raise KernelError(f"custom op {name}: shape gave output {k} negative dims {list(dims)}")
    try:
        dtype = np_dtype(code) if code and code != TensorProto.STRING else None
    except (KeyError, TypeError, ValueError):
        dtype = None
    if dtype is None:
        raise KernelError(f"custom op {name}: shape gave output {k} element type {elem_type_name(code)}, which has "
                          "no tensor buffer")
    return np.empty(dims, dtype)


def _check(status: int, message, ffi, stage: str, name: str, path: str) -> None:
    if status == 0:
        return
    text = ffi.string(message).decode("utf-8", "replace") or "(no message)"
    error = InvalidArgument if status == 2 else KernelError
    raise error(f"custom op {name} ({stage} in '{path}') returned status {status} "
                f"({_STATUS.get(status, 'unknown status')}): {text}")


def _text(ffi, p, what: str) -> str:
    if p == ffi.NULL:
        raise InvalidArgument(f"{what} is NULL")
    return ffi.string(p).decode("utf-8")


def _count(n: int, array, ffi) -> int:
    if n < 0 or (n > 0 and array == ffi.NULL):
        raise InvalidArgument(f"an array of {n} entries is {'NULL' if n > 0 else 'negative'}")
    return int(n)


def _entries(array, n: int, ffi) -> list:
    return [array[k] for k in range(_count(n, array, ffi))]


def _arg(ffi, array, k: int, cls: type, op: str):
    a = array[k]
    if a.flags & ~(_ARG_OPTIONAL | _ARG_VARIADIC):
        raise InvalidArgument(f"custom op {op}: {cls.__name__} {k} has unknown flags {a.flags}")
    return cls(_text(ffi, a.name, f"custom op {op}: name of {cls.__name__} {k}"),
               _text(ffi, a.type, f"custom op {op}: type of {cls.__name__} {k}"),
               optional=bool(a.flags & _ARG_OPTIONAL), variadic=bool(a.flags & _ARG_VARIADIC))


def _attr(ffi, d, op: str) -> AttrSpec:
    name = _text(ffi, d.name, f"custom op {op}: an attribute name")
    kind = _ATTR_KINDS.get(int(d.type))
    if kind is None:
        raise InvalidArgument(f"custom op {op}: attribute '{name}' has unknown type {d.type}")
    if d.required:
        return AttrSpec(name, kind, None, True)
    v = d.default_value
    if kind == "int":
        default: Any = int(v.i)
    elif kind == "float":
        default = float(v.f)
    elif kind == "string":
        default = _text(ffi, v.s, f"custom op {op}: default of attribute '{name}'")
    else:
        src = v.ints if kind == "ints" else v.floats
        n = _count(v.count, src, ffi)
        default = [int(x) for x in src[0:n]] if kind == "ints" else [float(x) for x in src[0:n]]
    return AttrSpec(name, kind, default, False)


def _set_attr(ffi, slot, kind: str, value: Any, keep: list) -> None:
    if kind == "int":
        slot.i = value
    elif kind == "float":
        slot.f = value
    elif kind == "string":
        data = value.encode("utf-8")
        buf = ffi.new("char[]", data)
        keep.append(buf)
        slot.s, slot.count = buf, len(data)
    else:
        buf = ffi.new("int64_t[]" if kind == "ints" else "double[]", list(value) or [0])
        keep.append(buf)
        if kind == "ints":
            slot.ints = buf
        else:
            slot.floats = buf
        slot.count = len(value)
