"""Convert the IR back into an ONNX ModelProto and write it to disk.

Used to hand fused subgraphs to providers as standalone ONNX models and to save models;
large initializers can be written as external data next to the file.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .graph import Graph, Model, Node, RawText, ValueInfo
from .types import ValueType


def model_to_proto(model: Model) -> onnx.ModelProto:
    graph = graph_to_proto(model.graph)
    if 0 < model.ir_version < 4:  # IR < 4 requires initializers to be listed as inputs too
        listed = {v.name for v in graph.input}
        graph.input.extend(helper.make_tensor_value_info(t.name, t.data_type, t.dims)
                           for t in graph.initializer if t.name not in listed)
    opsets = [helper.make_opsetid(d, v) for d, v in sorted(model.opset_imports.items())]
    proto = helper.make_model(graph, opset_imports=opsets, producer_name=model.producer_name,
                              producer_version=model.producer_version, domain=model.domain,
                              model_version=model.model_version, doc_string=model.doc_string)
    proto.ir_version = model.ir_version or onnx.IR_VERSION
    for k, v in model.metadata_props.items():
        proto.metadata_props.add(key=k, value=v)
    proto.functions.extend(model.functions)
    return proto


def save_model(model: Model, path: str | os.PathLike, external_data_threshold: int | None = None) -> None:
    """Write a model; tensors over ``external_data_threshold`` bytes go to '<file>.data' beside it."""
    proto = model_to_proto(model)
    if external_data_threshold is not None:
        onnx.save_model(proto, os.fspath(path), save_as_external_data=True, all_tensors_to_one_file=True,
                        location=os.path.basename(os.fspath(path)) + ".data",
                        size_threshold=external_data_threshold)
    else:
        onnx.save_model(proto, os.fspath(path))


def graph_to_proto(graph: Graph) -> onnx.GraphProto:
    initializers = [numpy_helper.from_array(np.asarray(v), name=k) for k, v in graph.initializers.items()]
    gp = helper.make_graph(
        [node_to_proto(n) for n in graph.nodes], graph.name,
        [value_info_to_proto(v) for v in graph.inputs],
        [value_info_to_proto(v) for v in graph.outputs],
        initializer=initializers, doc_string=graph.doc_string or None,
        value_info=[value_info_to_proto(v) for v in graph.value_info.values()],
        sparse_initializer=graph.sparse_initializers or None,
    )
    return gp


def node_to_proto(node: Node) -> onnx.NodeProto:
    proto = helper.make_node(node.op_type, node.inputs, node.outputs, name=node.name or None,
                             domain=node.domain or None, doc_string=node.doc_string or None)
    for name, value in node.attrs.items():
        proto.attribute.append(_attr_to_proto(name, value, node.attr_types.get(name)))
    return proto


def _attr_to_proto(name: str, value: Any, attr_type: int | None) -> onnx.AttributeProto:
    if isinstance(value, onnx.AttributeProto):
        return value
    if isinstance(value, RawText):
        return helper.make_attribute(name, value.raw, attr_type=onnx.AttributeProto.STRING)
    if isinstance(value, bytes):
        return helper.make_attribute(name, value, attr_type=onnx.AttributeProto.STRING)
    if isinstance(value, list) and value and isinstance(value[0], RawText):
        value = [v.raw for v in value]
    if isinstance(value, np.ndarray):
        value = numpy_helper.from_array(value)
    elif isinstance(value, Graph):
        value = graph_to_proto(value)
    elif isinstance(value, list) and value:
        if isinstance(value[0], np.ndarray):
            value = [numpy_helper.from_array(v) for v in value]
        elif isinstance(value[0], Graph):
            value = [graph_to_proto(v) for v in value]
    if isinstance(value, list) and not value:
        return helper.make_attribute(name, value, attr_type=attr_type or onnx.AttributeProto.INTS)
    return helper.make_attribute(name, value)


def value_info_to_proto(v: ValueInfo) -> onnx.ValueInfoProto:
    t = v.type
    if t.kind == "tensor":
        vi = helper.make_tensor_value_info(v.name, t.elem_type, t.shape)
        for d, denotation in zip(vi.type.tensor_type.shape.dim, t.denotations or ()):
            if denotation:
                d.denotation = denotation
    elif t.kind == "unknown":
        vi = helper.make_empty_tensor_value_info(v.name)
    else:
        vi = onnx.ValueInfoProto(name=v.name)
        vi.type.CopyFrom(type_to_proto(t))
    if v.doc_string:
        vi.doc_string = v.doc_string
    return vi


def type_to_proto(t: ValueType) -> onnx.TypeProto:
    if t.kind == "tensor":
        return helper.make_tensor_type_proto(t.elem_type, t.shape)
    if t.kind == "sequence":
        return helper.make_sequence_type_proto(helper.make_tensor_type_proto(t.elem_type, None))
    if t.kind == "optional":
        return helper.make_optional_type_proto(helper.make_tensor_type_proto(t.elem_type, None))
    return onnx.TypeProto()
