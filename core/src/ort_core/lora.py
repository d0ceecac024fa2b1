"""LoraAdapter: onnxruntime's LoRA adapter files, read without any dependency, and their use in runs.

The file format is onnxruntime's (``onnxruntime.AdapterFormat.export_adapter``, Olive): a flatbuffer with the
identifier "TORT" holding format, adapter and model versions and named tensors (dims, ONNX element type, raw
little-endian bytes). The few flatbuffer rules it needs are read here with ``struct``, every offset checked
against the file's size. An adapter made active with ``RunOptions.add_active_adapter`` feeds its tensors as the
model inputs (overridable initializers) of the same names, for that run only. Writing adapters is not done here.
"""

from __future__ import annotations

import os
import struct
from typing import Any

import numpy as np

from .errors import Fail, InvalidArgument, NoSuchFile
from .ir.types import np_dtype

FILE_IDENTIFIER = b"TORT"
FORMAT_VERSION = 1  # the adapter format version onnxruntime 1.32 writes and reads
_MAX_FILE_BYTES = 1 << 34


class _Reader:
    """Bounded reads of flatbuffer tables, vectors and strings in one file's bytes."""

    def __init__(self, data: bytes, label: str) -> None:
        self.data, self.label = data, label

    def bad(self, what: str) -> Fail:
        return Fail(f"{self.label}: not a valid LoRA adapter file ({what})")

    def unpack(self, fmt: str, pos: int) -> Any:
        if pos < 0 or pos + struct.calcsize(fmt) > len(self.data):
            raise self.bad(f"an offset points outside the file's {len(self.data)} bytes")
        return struct.unpack_from(fmt, self.data, pos)[0]

    def field(self, table: int, index: int) -> int | None:
        """The position of field ``index`` of the table at ``table``, None when absent."""
        vtable = table - self.unpack("<i", table)
        size = self.unpack("<H", vtable)
        slot = 4 + 2 * index
        if slot + 2 > size:
            return None
        offset = self.unpack("<H", vtable + slot)
        return table + offset if offset else None

    def scalar(self, table: int, index: int, fmt: str, default: int = 0) -> int:
        pos = self.field(table, index)
        return default if pos is None else self.unpack(fmt, pos)

    def indirect(self, pos: int) -> int:
        return pos + self.unpack("<I", pos)

    def vector(self, table: int, index: int) -> tuple[int, int]:
        """(position of the first element, element count) of a vector field; (0, 0) when absent."""
        pos = self.field(table, index)
        if pos is None:
            return 0, 0
        start = self.indirect(pos)
        return start + 4, self.unpack("<I", start)

    def string(self, table: int, index: int) -> str:
        start, count = self.vector(table, index)
        if start + count > len(self.data):
            raise self.bad("a name runs past the end of the file")
        try:
            return self.data[start:start + count].decode("utf-8")
        except UnicodeDecodeError:
            raise self.bad("a parameter name is not UTF-8") from None


def read_adapter(data: bytes, label: str) -> tuple[dict[str, int], dict[str, np.ndarray]]:
    """(versions, name -> read-only array) of an adapter file's bytes; anything malformed is refused."""
    r = _Reader(data, label)
    if len(data) < 8 or data[4:8] != FILE_IDENTIFIER:
        raise r.bad("The buffer does not appear to be a valid lora parameter format: no 'TORT' identifier")
    root = r.indirect(0)
    versions = {"format_version": r.scalar(root, 0, "<i"), "adapter_version": r.scalar(root, 1, "<i"),
                "model_version": r.scalar(root, 2, "<i")}
    if versions["format_version"] != FORMAT_VERSION:
        raise r.bad(f"format version {versions['format_version']}; ort-core reads version {FORMAT_VERSION}")
    start, count = r.vector(root, 3)
    params: dict[str, np.ndarray] = {}
    for k in range(count):
        table = r.indirect(start + 4 * k)
        name = r.string(table, 0)
        dims_at, rank = r.vector(table, 1)
        dims = [r.unpack("<q", dims_at + 8 * i) for i in range(rank)]
        elem_type = r.scalar(table, 2, "<i")
        raw_at, nbytes = r.vector(table, 3)
        if not name or name in params:
            raise r.bad(f"parameter #{k} has {'no name' if not name else f'the name {name!r} of another'}")
        try:
            dtype = np_dtype(elem_type)
        except (KeyError, TypeError, ValueError):
            raise r.bad(f"parameter '{name}' has unknown element type {elem_type}") from None
        if dtype.kind in "OUS" or any(d < 0 for d in dims):
            raise r.bad(f"parameter '{name}': strings or negative dims {dims} are not parameters")
        count_items = int(np.prod(dims, dtype=np.int64))
        if count_items * dtype.itemsize != nbytes or raw_at + nbytes > len(data):
            raise r.bad(f"parameter '{name}' of dims {dims} ({dtype}) holds {nbytes} bytes")
        value = np.frombuffer(data, dtype=dtype.newbyteorder("<"), count=count_items, offset=raw_at)
        params[name] = value.astype(dtype, copy=False).reshape(dims)
    return versions, params


class LoraAdapter:
    """A LoRA adapter (onnxruntime's LoraAdapter): ``LoraAdapter()``, then ``Load(path)`` reads an adapter file;
    ``RunOptions.add_active_adapter(adapter)`` makes a run feed its parameters. ort-core reads the file into
    memory once (onnxruntime maps it); ``parameters`` (name -> read-only array) and ``versions`` are ort-core's."""

    __slots__ = ("_params", "_versions", "_path")

    def __init__(self) -> None:
        self._params: dict[str, np.ndarray] = {}
        self._versions: dict[str, int] = {}
        self._path = ""

    def Load(self, adapter_file_path: str | os.PathLike) -> None:  # noqa: N802 - onnxruntime's name
        """Read the adapter file at ``adapter_file_path`` (replacing what was loaded before)."""
        path = os.fspath(adapter_file_path)
        if not isinstance(path, str):
            raise InvalidArgument(f"LoraAdapter.Load: the path must be a str or os.PathLike, got {path!r}")
        try:
            if os.path.getsize(path) > _MAX_FILE_BYTES:
                raise Fail(f"{path}: larger than {_MAX_FILE_BYTES} bytes; not a LoRA adapter")
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            raise NoSuchFile(f"LoRA adapter file '{path}' does not exist") from None
        except IsADirectoryError:
            raise Fail(f"LoRA adapter path '{path}' is a directory, not an adapter file") from None
        self._versions, params = read_adapter(data, path)
        for value in params.values():
            value.flags.writeable = False
        self._params, self._path = params, path

    @property
    def parameters(self) -> dict[str, np.ndarray]:
        return dict(self._params)

    @property
    def versions(self) -> dict[str, int]:
        return dict(self._versions)

    def __repr__(self) -> str:
        return f"LoraAdapter({self._path!r}, parameters={sorted(self._params)})" if self._path else \
            "LoraAdapter(nothing loaded)"


def active_feeds(run_options: Any) -> dict[str, np.ndarray]:
    """name -> array of the adapters ``run_options`` made active (a later adapter wins for a name)."""
    adapters = getattr(run_options, "_adapters", None) if run_options is not None else None
    if not adapters:
        return {}
    feeds: dict[str, np.ndarray] = {}
    for adapter in adapters:
        feeds.update(adapter._params)
    return feeds


def checked_adapter(adapter: Any) -> LoraAdapter:
    if not isinstance(adapter, LoraAdapter):
        raise InvalidArgument(f"add_active_adapter: expected an ort_core.LoraAdapter, got {type(adapter).__name__}")
    return adapter
