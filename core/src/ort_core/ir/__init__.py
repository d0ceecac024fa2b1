"""ONNX IR: graph, node and value types; loading models into it and saving them back to ONNX.

The ground floor of ort-core: imports nothing else of ours, executes nothing.
"""

from .graph import Graph, Model, Node, ValueInfo, outer_scope_reads
from .load import load_model
from .save import model_to_proto, save_model
from .types import ValueType, elem_type_name, elem_type_of, np_dtype

__all__ = ["Graph", "Model", "Node", "ValueInfo", "ValueType", "elem_type_name", "elem_type_of",
           "load_model", "model_to_proto", "np_dtype", "outer_scope_reads", "save_model"]
