"""onnxruntime's ``capi.onnxruntime_pybind11_state`` names that code imports: its error classes, the
option and value types and the module-level functions, mapped onto ort-core's (an ``except InvalidArgument``
written for onnxruntime catches ort-core's). Only names; ort-core has no compiled extension behind them."""

from __future__ import annotations

from typing import Any

from .. import (
    OrtArenaCfg,
    create_and_register_allocator,
    create_and_register_allocator_v2,
    disable_telemetry_events,
    enable_telemetry_events,
    get_all_providers,
    get_available_providers,
    get_build_info,
    get_device,
    set_default_logger_severity,
    set_seed,
)
from ..ep_devices import (
    OrtAllocatorType,
    OrtDeviceMemoryType,
    OrtEpDevice,
    OrtHardwareDevice,
    OrtHardwareDeviceType,
    OrtMemoryInfo,
    OrtMemoryInfoDeviceType,
    OrtMemType,
    OrtSyncStream,
    copy_tensors,
    get_ep_devices,
)
from ..ep_selection import OrtExecutionProviderDevicePolicy
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
from ..io_types import ModelMetadata, NodeArg, OrtEpAssignedNode, OrtEpAssignedSubgraph
from ..lora import LoraAdapter
from ..model_compiler import OrtCompileApiFlags
from ..onnxruntime_dist import ONNXRUNTIME_API_VERSION, native_tooling_function
from ..options import ExecutionMode, ExecutionOrder, GraphOptimizationLevel, RunOptions, SessionOptions
from ..ortvalue import OrtValue
from ..plugin_library import register_execution_provider_library, unregister_execution_provider_library
from ..sparse import OrtSparseFormat, SparseCooView, SparseCsrView, SparseTensor


def get_version_string() -> str:
    """The onnxruntime version whose API this mirrors, as ``onnxruntime.__version__`` reports it once
    ``ort_core.install_as_onnxruntime()`` ran (ort-core's own: ``ort_core.__version__``, ``get_build_info()``)."""
    return ONNXRUNTIME_API_VERSION


def __getattr__(name: str) -> Any:
    """The native routines of onnxruntime's quantizers (ort_core.onnxruntime_dist.NATIVE_TOOLING), from an installed
    onnxruntime; any other missing name is an AttributeError."""
    return native_tooling_function(name)


__all__ = ["EPFail", "ExecutionMode", "ExecutionOrder", "Fail", "GraphOptimizationLevel", "InvalidArgument",
           "InvalidGraph", "InvalidProtobuf", "LoraAdapter", "ModelMetadata", "NoSuchFile", "NodeArg",
           "NotImplemented", "OrtAllocatorType", "OrtArenaCfg", "OrtCompileApiFlags", "OrtDeviceMemoryType",
           "OrtEpAssignedNode", "OrtEpAssignedSubgraph", "OrtEpDevice", "OrtExecutionProviderDevicePolicy",
           "OrtHardwareDevice", "OrtHardwareDeviceType", "OrtMemType", "OrtMemoryInfo", "OrtMemoryInfoDeviceType",
           "OrtSparseFormat", "OrtSyncStream", "OrtValue", "RunOptions", "RuntimeException", "SessionOptions",
           "SparseCooView", "SparseCsrView", "SparseTensor", "copy_tensors", "create_and_register_allocator",
           "create_and_register_allocator_v2", "disable_telemetry_events", "enable_telemetry_events",
           "get_all_providers", "get_available_providers", "get_build_info", "get_device", "get_ep_devices",
           "get_version_string", "register_execution_provider_library", "set_default_logger_severity", "set_seed",
           "unregister_execution_provider_library"]
