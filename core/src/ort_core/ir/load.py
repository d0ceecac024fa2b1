"""Load an ONNX model (path, bytes or ModelProto) into the IR, with external data and shape inference.

Errors name the file and the problem. Tensors are checked against their declared size before they are
decoded, and external data is read only from inside the model's folder (ir.external). This module
converts; it does not optimize or validate operator support (the partitioner's and providers' job).
"""

from __future__ import annotations

import math
import mmap
import os
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import AttributeProto, numpy_helper

from ..errors import ExternalDataError, InvalidGraph, InvalidProtobuf, NoSuchFile, OrtError
from ..limits import DEFAULT_MAX_TENSOR_BYTES, MAX_TENSOR_BYTES_KEY
from .external import MAX_SUBGRAPH_DEPTH, external_tensors, load_external_data, nesting_error
from .graph import Graph, Model, Node, RawText, ValueInfo, onnx_domain
from .isolated import infer_value_types
from .types import ValueType, np_dtype

EXTERNAL_FOLDER_KEY = "session.model_external_initializers_file_folder_path"
"""Session config entry (onnxruntime's name): the folder holding the external data of a model given as
bytes or an onnx.ModelProto."""

_MAX_PROTO_BYTES = 2 << 30

# element types packing several values per byte: raw_data holds ceil(count * bits / 8) bytes
_SUB_BYTE = {getattr(onnx.TensorProto, n): b for n, b in (
    ("INT4", 4), ("UINT4", 4), ("FLOAT4E2M1", 4), ("INT2", 2), ("UINT2", 2)) if hasattr(onnx.TensorProto, n)}


def load_model(source: Any, base_dir: str | None = None, infer_shapes: bool | str = True,
               max_tensor_bytes: int = DEFAULT_MAX_TENSOR_BYTES,
               supply: Callable[[onnx.ModelProto, str], None] | None = None) -> Model:
    """Build a Model from a file path, serialized bytes or an onnx.ModelProto.

    ``base_dir`` is the folder external-data files must lie in (defaults to the model file's folder
    for paths); nothing outside it is read. Bytes and ModelProtos with external data need ``base_dir``:
    the current directory is not searched (it may hold anything). A tensor declaring more than
    ``max_tensor_bytes`` bytes is refused before it is read or decoded. ``infer_shapes``: True (or
    "isolated") runs onnx's shape inference in a child process, "in_process" here, False/"off" not at all.
    ``supply(proto, label)``, when given, puts data the caller supplies into external tensors first (in place, on
    a copy of a given ModelProto); the external tensors it leaves are read from files.
    """
    proto, label, base = _read_proto(source, base_dir)
    try:
        if supply is not None:
            if proto is source:
                proto = _copy(proto)
            supply(proto, label)
        first = next(external_tensors(proto), None)
        if first is not None and base is None:
            where = next((e.value for e in first.external_data if e.key == "location"), "")
            raise ExternalDataError(
                f"tensor '{first.name}' is stored as external data ({where!r}) but the model was given as "
                f"{label}, which has no folder; set the session config entry '{EXTERNAL_FOLDER_KEY}' to the "
                "folder holding it (the current directory is not searched)")
        if first is not None:
            load_external_data(proto, base, label, max_tensor_bytes)
    except OrtError as e:
        raise type(e)(str(e) if str(e).startswith(label) else f"{label}: {e}") from None
    inferred = {}
    mode = "isolated" if infer_shapes is True else "off" if infer_shapes is False else infer_shapes
    if mode != "off":
        try:
            inferred = infer_value_types(proto, mode)  # best effort, node by node where onnx's is safe
        except Exception:  # noqa: BLE001 - malformed protos are refused below with a clear error
            inferred = {}
    try:
        model = _model_from_proto(proto, label, max_tensor_bytes)
        _add_inferred(model.graph, inferred)
    except InvalidGraph:
        raise
    except Exception as e:  # noqa: BLE001 - malformed protos surface as a clear error
        raise InvalidGraph(f"{label}: invalid model: {type(e).__name__}: {e}") from e
    return model


def _copy(proto: onnx.ModelProto) -> onnx.ModelProto:
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    return copy


def _add_inferred(graph: Graph, inferred: dict[str, onnx.TypeProto]) -> None:
    """Inferred types become value_info, or complete a graph output declared without a type."""
    outputs = {v.name: k for k, v in enumerate(graph.outputs)}
    for name, tp in inferred.items():
        t = ValueType.from_proto(tp)
        k = outputs.get(name)
        if k is None:
            graph.value_info.setdefault(name, ValueInfo(name, t))
        elif graph.outputs[k].type.kind == "unknown":
            graph.outputs[k] = ValueInfo(name, t, graph.outputs[k].doc_string)


def _read_proto(source: Any, base_dir: str | None) -> tuple[onnx.ModelProto, str, str | None]:
    if isinstance(source, onnx.ModelProto):
        return source, "<ModelProto>", base_dir
    if isinstance(source, (bytes, bytearray, memoryview)):
        return _parse(bytes(source), "<bytes>"), "<bytes>", base_dir
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        if not os.path.exists(path):
            raise NoSuchFile(f"model file '{path}' does not exist")
        if os.path.isdir(path):
            raise InvalidProtobuf(f"model path '{path}' is a directory, not an ONNX file")
        if os.path.getsize(path) > _MAX_PROTO_BYTES:
            raise InvalidProtobuf(f"model file '{path}' is larger than 2 GiB, protobuf's limit: not an ONNX "
                                  "model (large tensors go to external data files)")
        try:
            with open(path, "rb") as f:
                proto = _parse_file(f, path)
        except OSError as e:
            raise NoSuchFile(f"cannot read model file '{path}': {e.strerror or e}") from e
        return proto, path, base_dir or os.path.dirname(os.path.abspath(path))
    raise TypeError(
        f"model must be a file path, bytes or onnx.ModelProto, got {type(source).__name__}")


def _parse_file(f: Any, label: str) -> onnx.ModelProto:
    """Parse an open model file through a read-only memory map: protobuf copies what it keeps while parsing,
    so the file's bytes are not first read into one more copy (BERT-base: 0.3 s -> 0.13 s)."""
    if os.fstat(f.fileno()).st_size == 0:
        return _parse(b"", label)
    try:
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError):  # a file that cannot be mapped (a pipe, some file systems)
        return _parse(f.read(), label)
    with mapped, memoryview(mapped) as view:
        return _parse(view, label)


def _parse(data: bytes | memoryview, label: str) -> onnx.ModelProto:
    if not data:
        raise InvalidProtobuf(f"{label}: file is empty, not an ONNX model")
    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as e:
        raise InvalidProtobuf(f"{label}: not a valid ONNX protobuf ({e})") from e
    if not proto.HasField("graph"):
        raise InvalidProtobuf(f"{label}: protobuf parsed but holds no graph; is this an ONNX model?")
    return proto


def _model_from_proto(proto: onnx.ModelProto, label: str, max_tensor_bytes: int) -> Model:
    if proto.ir_version > onnx.IR_VERSION:  # as onnxruntime: a newer IR may mean things this reader misses
        raise InvalidGraph(f"{label}: unsupported model IR version {proto.ir_version}; the newest this ort-core "
                           f"reads is {onnx.IR_VERSION} (onnx {onnx.__version__})")
    opsets: dict[str, int] = {}
    for op in proto.opset_import:
        dom = onnx_domain(op.domain)
        opsets[dom] = max(opsets.get(dom, 0), op.version)
    if proto.ir_version < 3 and "" not in opsets:
        opsets[""] = 1  # IR v1/v2 models carry no opset_import: they mean opset 1
    graph = graph_from_proto(proto.graph, None, label, max_tensor_bytes)
    if proto.ir_version < 4:
        # IR < 4 had to list every initializer as a graph input; they are constants, not
        # overridable inputs (as in onnxruntime). save.py lists them again for such models.
        graph.inputs = [v for v in graph.inputs if v.name not in graph.initializers]
    return Model(
        graph=graph,
        opset_imports=opsets,
        ir_version=proto.ir_version,
        producer_name=proto.producer_name,
        producer_version=proto.producer_version,
        domain=proto.domain,
        model_version=proto.model_version,
        doc_string=proto.doc_string,
        metadata_props={p.key: p.value for p in proto.metadata_props},
        functions=list(proto.functions),
        source=label,
    )


def graph_from_proto(gp: onnx.GraphProto, parent: Graph | None, label: str,
                     max_tensor_bytes: int = DEFAULT_MAX_TENSOR_BYTES, depth: int = 0) -> Graph:
    """The IR of one graph; ``depth`` counts the subgraph levels above it (refused past the limit)."""
    initializers: dict[str, np.ndarray] = {}
    for t in gp.initializer:
        if t.name in initializers:
            raise InvalidGraph(f"{label}: graph '{gp.name}' defines initializer '{t.name}' twice")
        initializers[t.name] = _tensor(t, label, max_tensor_bytes)
    for sp in gp.sparse_initializer:  # dense constants, as onnxruntime turns them when it loads a model
        name = sp.values.name
        if name in initializers:
            raise InvalidGraph(f"{label}: graph '{gp.name}' defines initializer '{name}' twice (once sparse)")
        initializers[name] = dense_from_sparse(sp, label, max_tensor_bytes)
    graph = Graph(
        name=gp.name,
        nodes=[],
        inputs=[_value_info(v) for v in gp.input],
        outputs=[_value_info(v) for v in gp.output],
        initializers=initializers,
        value_info={v.name: _value_info(v) for v in gp.value_info},
        doc_string=gp.doc_string,
        parent=parent,
    )
    for i, np_ in enumerate(gp.node):
        if depth >= MAX_SUBGRAPH_DEPTH and any(a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS)
                                               for a in np_.attribute):
            raise InvalidGraph(f"{label}: {nesting_error(np_, gp.name)}")
        attrs = {a.name: _attr(a, graph, label, max_tensor_bytes, depth) for a in np_.attribute}
        graph.nodes.append(Node(np_.op_type, list(np_.input), list(np_.output), attrs,
                                domain=np_.domain, name=np_.name, id=i, doc_string=np_.doc_string,
                                attr_types={a.name: a.type for a in np_.attribute}))
    return graph


def dense_from_sparse(sp: onnx.SparseTensorProto, label: str,
                      max_tensor_bytes: int = DEFAULT_MAX_TENSOR_BYTES) -> np.ndarray:
    """The dense array of an ONNX sparse tensor (COO: linear indices [NNZ] or coordinates [NNZ, rank]), zeros
    elsewhere; indices out of range, a values tensor that is not 1-D, or a dense size past the limit are refused."""
    name = sp.values.name or "<unnamed sparse tensor>"
    dims = [int(d) for d in sp.dims]
    values = _tensor(sp.values, label, max_tensor_bytes)
    indices = _tensor(sp.indices, label, max_tensor_bytes).astype(np.int64, copy=False)
    if any(d < 0 for d in dims):
        raise InvalidGraph(f"{label}: sparse tensor '{name}' has a negative dimension in {dims}")
    count = math.prod(dims)
    if count * values.dtype.itemsize > max_tensor_bytes:
        raise InvalidGraph(f"{label}: sparse tensor '{name}' expands to dims {dims} "
                           f"({count * values.dtype.itemsize} bytes), more than the limit of {max_tensor_bytes} "
                           f"bytes per tensor (session config entry '{MAX_TENSOR_BYTES_KEY}')")
    if values.ndim != 1:
        raise InvalidGraph(f"{label}: sparse tensor '{name}': values must be 1-D, got shape {list(values.shape)}")
    nnz = values.shape[0]
    if indices.shape == (nnz, len(dims)) and len(dims) > 1:
        if nnz and (np.any(indices < 0) or np.any(indices >= np.array(dims))):
            raise InvalidGraph(f"{label}: sparse tensor '{name}': an index is out of range for dims {dims}")
        linear = np.ravel_multi_index(tuple(indices.T), dims) if nnz else indices[:, 0]
    elif indices.shape == (nnz,):
        if nnz and (indices.min() < 0 or indices.max() >= count):
            raise InvalidGraph(f"{label}: sparse tensor '{name}': an index is out of range for dims {dims} "
                               f"({count} elements)")
        linear = indices
    else:
        raise InvalidGraph(f"{label}: sparse tensor '{name}': indices of shape {list(indices.shape)} for {nnz} "
                           f"values; expected [{nnz}] or [{nnz}, {len(dims)}]")
    dense = np.zeros(count, dtype=values.dtype) if values.dtype.kind != "O" else np.full(count, "", dtype=object)
    dense[linear] = values
    return dense.reshape(dims)


def _value_info(v: onnx.ValueInfoProto) -> ValueInfo:
    return ValueInfo(v.name, ValueType.from_proto(v.type), v.doc_string)


def check_declared_size(t: onnx.TensorProto, label: str, max_tensor_bytes: int, raw: bytes | None = None) -> None:
    """Refuse a tensor whose dims are negative, whose size passes the limit, or whose raw_data
    disagrees with its dims, before anything is decoded or allocated. ``raw``: its raw_data when the caller
    read it already (each read of the protobuf field is a copy of the bytes)."""
    dims = [int(d) for d in t.dims]
    if any(d < 0 for d in dims):
        raise InvalidGraph(f"{label}: tensor '{t.name}' has a negative dimension in {dims}")
    try:
        itemsize = np_dtype(t.data_type).itemsize
    except (KeyError, TypeError, ValueError):
        raise InvalidGraph(f"{label}: tensor '{t.name}' has unknown element type {t.data_type}") from None
    count = math.prod(dims)
    if count * itemsize > max_tensor_bytes:
        raise InvalidGraph(f"{label}: tensor '{t.name}' declares dims {dims} ({count * itemsize} bytes), more than "
                           f"the limit of {max_tensor_bytes} bytes per tensor (session config entry "
                           f"'{MAX_TENSOR_BYTES_KEY}')")
    if raw is None:
        raw = t.raw_data
    if raw and t.data_type != onnx.TensorProto.STRING:
        bits = _SUB_BYTE.get(t.data_type)
        need = -(-count * bits // 8) if bits else count * itemsize
        if len(raw) != need:
            raise InvalidGraph(f"{label}: tensor '{t.name}' holds {len(raw)} bytes of raw data; its dims "
                               f"{dims} need {need}")


# element types whose raw_data is the little-endian array itself: read without a further copy
_PLAIN = {onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16, onnx.TensorProto.INT8,
          onnx.TensorProto.INT16, onnx.TensorProto.INT32, onnx.TensorProto.INT64, onnx.TensorProto.UINT8,
          onnx.TensorProto.UINT16, onnx.TensorProto.UINT32, onnx.TensorProto.UINT64, onnx.TensorProto.BOOL}


def _tensor(t: onnx.TensorProto, label: str, max_tensor_bytes: int = DEFAULT_MAX_TENSOR_BYTES) -> np.ndarray:
    raw = t.raw_data if t.data_type != onnx.TensorProto.STRING else b""  # one copy out of the protobuf
    check_declared_size(t, label, max_tensor_bytes, raw)
    if t.data_location == onnx.TensorProto.EXTERNAL:
        raise InvalidGraph(f"{label}: tensor '{t.name}' is stored as external data that was not loaded")
    if raw and t.data_type in _PLAIN and sys.byteorder == "little":
        # a read-only view of those bytes, as onnx's numpy_helper makes (which would copy them out again)
        return np.frombuffer(raw, dtype=np_dtype(t.data_type)).reshape([int(d) for d in t.dims])
    try:
        return numpy_helper.to_array(t)
    except Exception as e:  # noqa: BLE001 - corrupt tensor payloads must name the tensor
        raise InvalidGraph(f"{label}: tensor '{t.name}' cannot be decoded: {e}") from e


def _attr(a: onnx.AttributeProto, graph: Graph, label: str, max_tensor_bytes: int = DEFAULT_MAX_TENSOR_BYTES,
          depth: int = 0) -> Any:
    t = a.type
    if t == AttributeProto.FLOAT:
        return float(a.f)
    if t == AttributeProto.INT:
        return int(a.i)
    if t == AttributeProto.STRING:
        return _text(a.s)
    if t == AttributeProto.TENSOR:
        return _tensor(a.t, label, max_tensor_bytes)
    if t == AttributeProto.GRAPH:
        return graph_from_proto(a.g, graph, label, max_tensor_bytes, depth + 1)
    if t == AttributeProto.FLOATS:
        return [float(x) for x in a.floats]
    if t == AttributeProto.INTS:
        return [int(x) for x in a.ints]
    if t == AttributeProto.STRINGS:
        return [_text(s) for s in a.strings]
    if t == AttributeProto.TENSORS:
        return [_tensor(x, label, max_tensor_bytes) for x in a.tensors]
    if t == AttributeProto.GRAPHS:
        return [graph_from_proto(g, graph, label, max_tensor_bytes, depth + 1) for g in a.graphs]
    if t == AttributeProto.SPARSE_TENSOR:
        return a.sparse_tensor
    if t == AttributeProto.TYPE_PROTO:
        return a.tp
    if t == AttributeProto.TYPE_PROTOS:
        return list(a.type_protos)
    if a.ref_attr_name:
        return a  # reference to a function attribute; resolved when functions are inlined
    raise InvalidGraph(f"{label}: attribute '{a.name}' has unknown type code {t}")


def _text(b: bytes) -> str:
    return RawText(b)
