"""External tensor data, resolved strictly inside the model's folder and read with bounded reads.

Refuses absolute locations, '..' escapes, links leading out of the folder, anything but a regular file,
and offsets or lengths beyond the file's size; errors name the tensor and the location. Writing
external data is ir.save's job, not this module's.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator

import onnx

from ..errors import ExternalDataError, InvalidGraph
from ..limits import MAX_TENSOR_BYTES_KEY
from .graph import is_onnx_domain

MAX_SUBGRAPH_DEPTH = 64
"""Deepest nesting of subgraphs (If/Loop/Scan bodies inside bodies) a model may have."""


def external_tensors(proto: onnx.ModelProto) -> Iterator[onnx.TensorProto]:
    """Every tensor of the model (graphs, subgraphs, attributes, functions) stored as external data."""
    for t in _graph_tensors(proto.graph, 0):
        if t.data_location == onnx.TensorProto.EXTERNAL:
            yield t
    for f in proto.functions:
        for node in f.node:
            for t in _node_tensors(node, 1):
                if t.data_location == onnx.TensorProto.EXTERNAL:
                    yield t


def nesting_error(node: onnx.NodeProto, graph_name: str) -> InvalidGraph:
    op = node.op_type if is_onnx_domain(node.domain) else f"{node.domain}::{node.op_type}"
    who = f"node '{node.name}' ({op})" if node.name else f"a {op} node"
    return InvalidGraph(f"{who} in graph '{graph_name}' holds subgraphs nested more than {MAX_SUBGRAPH_DEPTH} "
                        "levels deep")


def _graph_tensors(g: onnx.GraphProto, depth: int) -> Iterator[onnx.TensorProto]:
    yield from g.initializer
    for s in g.sparse_initializer:
        yield s.values
        yield s.indices
    for node in g.node:
        if depth >= MAX_SUBGRAPH_DEPTH and any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
                                               for a in node.attribute):
            raise nesting_error(node, g.name)
        yield from _node_tensors(node, depth)


def _node_tensors(node: onnx.NodeProto, depth: int) -> Iterator[onnx.TensorProto]:
    for a in node.attribute:
        if a.HasField("t"):
            yield a.t
        yield from a.tensors
        for s in ([a.sparse_tensor] if a.HasField("sparse_tensor") else []) + list(a.sparse_tensors):
            yield s.values
            yield s.indices
        if a.HasField("g"):
            yield from _graph_tensors(a.g, depth + 1)
        for g in a.graphs:
            yield from _graph_tensors(g, depth + 1)


def load_external_data(proto: onnx.ModelProto, base_dir: str, label: str, max_tensor_bytes: int) -> None:
    """Read every external tensor of ``proto`` into its raw_data, in place, from inside ``base_dir``."""
    root = os.path.realpath(base_dir)
    for t in external_tensors(proto):
        data = read_external(t, root, label, max_tensor_bytes)
        t.raw_data = data
        del t.external_data[:]
        t.data_location = onnx.TensorProto.DEFAULT


def read_external(t: onnx.TensorProto, root: str, label: str, max_tensor_bytes: int) -> bytes:
    """The bytes of one external tensor; ``root`` is the model's folder with links resolved."""
    info = {e.key: e.value for e in t.external_data}
    name = t.name or "<unnamed>"
    location = info.get("location", "")
    where = f"{label}: tensor '{name}' external data location {location!r}"
    if not location:
        raise ExternalDataError(f"{label}: tensor '{name}' is stored as external data but names no location")
    if "\0" in location:
        raise ExternalDataError(f"{where}: contains a NUL character")
    if os.path.isabs(location) or location.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", location):
        raise ExternalDataError(f"{where}: is an absolute path; external data must lie inside the model's "
                                f"folder '{root}'")
    if ".." in re.split(r"[\\/]", location):
        raise ExternalDataError(f"{where}: escapes the model's folder '{root}' with '..'")
    path = os.path.realpath(os.path.join(root, location))
    if path == root or os.path.commonpath([root, path]) != root:
        raise ExternalDataError(f"{where}: resolves to '{path}', outside the model's folder '{root}' "
                                "(a link leading out of it?)")
    offset = _field(info, "offset", where)
    length = _field(info, "length", where)
    flags = os.O_RDONLY | getattr(os, "O_BINARY", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)  # non-blocking: opening a FIFO planted there must not hang
    except FileNotFoundError:
        raise ExternalDataError(f"{where}: file '{path}' does not exist") from None
    except OSError as e:
        raise ExternalDataError(f"{where}: cannot open '{path}': {e.strerror or e}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise ExternalDataError(f"{where}: '{path}' is not a regular file")
    with os.fdopen(fd, "rb", buffering=0) as f:
        size = st.st_size
        offset = offset or 0
        if offset > size:
            raise ExternalDataError(f"{where}: offset {offset} is beyond the end of the file ({size} bytes)")
        if length is None:
            length = size - offset
        if offset + length > size:
            raise ExternalDataError(f"{where}: offset {offset} + length {length} exceed the file's size of "
                                    f"{size} bytes")
        if length > max_tensor_bytes:
            raise InvalidGraph(f"{where}: length {length} bytes is more than the limit of {max_tensor_bytes} "
                               f"bytes per tensor (session config entry '{MAX_TENSOR_BYTES_KEY}')")
        f.seek(offset)
        chunks, left = [], length
        while left > 0:
            chunk = f.read(min(left, 64 << 20))
            if not chunk:
                raise ExternalDataError(f"{where}: the file ended after {length - left} of {length} bytes "
                                        "(changed while reading?)")
            chunks.append(chunk)
            left -= len(chunk)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _field(info: dict[str, str], key: str, where: str) -> int | None:
    text = info.get(key)
    if text is None or text == "":
        return None
    try:
        value = int(text)
    except ValueError:
        raise ExternalDataError(f"{where}: {key} {text!r} is not an integer") from None
    if value < 0:
        raise ExternalDataError(f"{where}: {key} {value} is negative")
    return value
