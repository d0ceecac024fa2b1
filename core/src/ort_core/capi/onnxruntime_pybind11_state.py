"""onnxruntime's ``capi.onnxruntime_pybind11_state`` names that code imports: its error classes and the
option and value types, mapped onto ort-core's (an ``except InvalidArgument`` written for onnxruntime
catches ort-core's). Only names; ort-core has no compiled extension behind them."""

from __future__ import annotations

from ..errors import (
    EPFail,
    Fail,
    InvalidArgument,
    InvalidGraph,
    InvalidProtobuf,
    NoSuchFile,
    NotImplemented,  # noqa: A004 - onnxruntime's name for the class
    RuntimeException,
)
from ..io_types import ModelMetadata, NodeArg
from ..options import ExecutionMode, ExecutionOrder, GraphOptimizationLevel, RunOptions, SessionOptions
from ..ortvalue import OrtValue

__all__ = ["EPFail", "ExecutionMode", "ExecutionOrder", "Fail", "GraphOptimizationLevel", "InvalidArgument",
           "InvalidGraph", "InvalidProtobuf", "ModelMetadata", "NoSuchFile", "NodeArg", "NotImplemented",
           "OrtValue", "RunOptions", "RuntimeException", "SessionOptions"]
