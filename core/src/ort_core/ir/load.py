"""Load an ONNX model (path, bytes or ModelProto) into the IR, with external data and shape inference.

Errors name the file and the problem. This module converts; it does not optimize or validate
operator support (that is the partitioner's and the providers' job).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import AttributeProto, numpy_helper

from ..errors import InvalidGraph, InvalidProtobuf, NoSuchFile
from .graph import Graph, Model, Node, ValueInfo
from .types import ValueType


def load_model(source: Any, base_dir: str | None = None, infer_shapes: bool = True) -> Model:
    """Build a Model from a file path, serialized bytes or an onnx.ModelProto.

    ``base_dir`` is where external-data files are looked up for bytes/ModelProto sources
    (defaults to the model file's folder for paths, the current directory otherwise).
    """
    proto, label, base = _read_proto(source, base_dir)
    if _has_external_data(proto):
        try:
            onnx.external_data_helper.load_external_data_for_model(proto, base)
        except Exception as e:  # noqa: BLE001 - onnx raises its own ValidationError here
            raise InvalidGraph(f"{label}: cannot load external data relative to '{base}': {e}") from e
    if infer_shapes:
        try:
            proto = onnx.shape_inference.infer_shapes(proto, check_type=False, strict_mode=False)
        except Exception:  # noqa: BLE001 - inference is best effort; kernels check at run time
            pass
    try:
        model = _model_from_proto(proto, label)
    except InvalidGraph:
        raise
    except Exception as e:  # noqa: BLE001 - malformed protos surface as a clear error
        raise InvalidGraph(f"{label}: invalid model: {type(e).__name__}: {e}") from e
    return model


def _read_proto(source: Any, base_dir: str | None) -> tuple[onnx.ModelProto, str, str]:
    if isinstance(source, onnx.ModelProto):
        return source, "<ModelProto>", base_dir or os.getcwd()
    if isinstance(source, (bytes, bytearray, memoryview)):
        return _parse(bytes(source), "<bytes>"), "<bytes>", base_dir or os.getcwd()
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        if not os.path.exists(path):
            raise NoSuchFile(f"model file '{path}' does not exist")
        if os.path.isdir(path):
            raise InvalidProtobuf(f"model path '{path}' is a directory, not an ONNX file")
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as e:
            raise NoSuchFile(f"cannot read model file '{path}': {e.strerror or e}") from e
        return _parse(data, path), path, base_dir or os.path.dirname(os.path.abspath(path))
    raise TypeError(
        f"model must be a file path, bytes or onnx.ModelProto, got {type(source).__name__}")


def _parse(data: bytes, label: str) -> onnx.ModelProto:
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


def _has_external_data(proto: onnx.ModelProto) -> bool:
    return any(t.data_location == onnx.TensorProto.EXTERNAL
               for t in onnx.external_data_helper._get_all_tensors(proto))


def _model_from_proto(proto: onnx.ModelProto, label: str) -> Model:
    opsets: dict[str, int] = {}
    for op in proto.opset_import:
        dom = "" if op.domain == "ai.onnx" else op.domain
        opsets[dom] = max(opsets.get(dom, 0), op.version)
    if proto.ir_version < 3 and "" not in opsets:
        opsets[""] = 1  # IR v1/v2 models carry no opset_import: they mean opset 1
    graph = graph_from_proto(proto.graph, None, label)
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


def graph_from_proto(gp: onnx.GraphProto, parent: Graph | None, label: str) -> Graph:
    initializers: dict[str, np.ndarray] = {}
    for t in gp.initializer:
        initializers[t.name] = _tensor(t, label)
    graph = Graph(
        name=gp.name,
        nodes=[],
        inputs=[_value_info(v) for v in gp.input],
        outputs=[_value_info(v) for v in gp.output],
        initializers=initializers,
        value_info={v.name: _value_info(v) for v in gp.value_info},
        doc_string=gp.doc_string,
        parent=parent,
        sparse_initializers=list(gp.sparse_initializer),
    )
    for i, np_ in enumerate(gp.node):
        attrs = {a.name: _attr(a, graph, label) for a in np_.attribute}
        graph.nodes.append(Node(np_.op_type, list(np_.input), list(np_.output), attrs,
                                domain=np_.domain, name=np_.name, id=i, doc_string=np_.doc_string,
                                attr_types={a.name: a.type for a in np_.attribute}))
    return graph


def _value_info(v: onnx.ValueInfoProto) -> ValueInfo:
    return ValueInfo(v.name, ValueType.from_proto(v.type), v.doc_string)


def _tensor(t: onnx.TensorProto, label: str) -> np.ndarray:
    try:
        return numpy_helper.to_array(t)
    except Exception as e:  # noqa: BLE001 - corrupt tensor payloads must name the tensor
        raise InvalidGraph(f"{label}: tensor '{t.name}' cannot be decoded: {e}") from e


def _attr(a: onnx.AttributeProto, graph: Graph, label: str) -> Any:
    t = a.type
    if t == AttributeProto.FLOAT:
        return float(a.f)
    if t == AttributeProto.INT:
        return int(a.i)
    if t == AttributeProto.STRING:
        return _text(a.s)
    if t == AttributeProto.TENSOR:
        return _tensor(a.t, label)
    if t == AttributeProto.GRAPH:
        return graph_from_proto(a.g, graph, label)
    if t == AttributeProto.FLOATS:
        return [float(x) for x in a.floats]
    if t == AttributeProto.INTS:
        return [int(x) for x in a.ints]
    if t == AttributeProto.STRINGS:
        return [_text(s) for s in a.strings]
    if t == AttributeProto.TENSORS:
        return [_tensor(x, label) for x in a.tensors]
    if t == AttributeProto.GRAPHS:
        return [graph_from_proto(g, graph, label) for g in a.graphs]
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
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        return b.decode("latin-1")
