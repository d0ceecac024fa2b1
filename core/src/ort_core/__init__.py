"""ort-core: a Python ONNX inference runtime with pluggable execution providers.

Drop-in for the commonly used part of onnxruntime's Python API::

    import ort_core as ort
    sess = ort.InferenceSession("model.onnx", providers=["CPUExecutionProvider"])
    outputs = sess.run(None, {"input": array})
"""

from __future__ import annotations

from . import blas as _blas

_blas.choose_kernels_before_numpy()  # must run before anything below imports numpy

from .arena_config import OrtArenaCfg, create_and_register_allocator, create_and_register_allocator_v2
from .blas import blas_info
from .compat import install_as_onnxruntime as install_as_onnxruntime  # "as": exported
from .customops import CustomOp, CustomOpInput, CustomOpOutput, custom_op, register_custom_op, unregister_custom_op
from .ep_devices import (
    OrtAllocatorType,
    OrtDevice,
    OrtDeviceMemoryType,
    OrtDeviceVendorId,
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
from .ep_selection import OrtExecutionProviderDevicePolicy
from .errors import (
    ExternalDataError,
    Fail,
    InvalidArgument,
    InvalidGraph,
    InvalidProtobuf,
    KernelError,
    NoSuchFile,
    NotImplementedOp,
    OrtError,
    OrtWarning,
    PluginError,
    RunTerminated,
)
from .io_types import ModelMetadata, NodeArg, OrtEpAssignedNode, OrtEpAssignedSubgraph
from .iobinding import IOBinding
from .lora import LoraAdapter
from .model_compiler import ModelCompiler, OrtCompileApiFlags
from .options import ExecutionMode, ExecutionOrder, GraphOptimizationLevel, RunOptions, SessionOptions
from .ortvalue import OrtValue
from .plugin_library import register_execution_provider_library, unregister_execution_provider_library
from .session import InferenceSession
from .sparse import OrtSparseFormat, SparseTensor

__version__ = "0.1.0"

# Every provider name onnxruntime knows, so code probing get_all_providers() keeps working.
_KNOWN_PROVIDERS = [
    "TensorrtExecutionProvider", "CUDAExecutionProvider", "MIGraphXExecutionProvider",
    "ROCMExecutionProvider", "OpenVINOExecutionProvider", "DnnlExecutionProvider",
    "VitisAIExecutionProvider", "QNNExecutionProvider", "NnapiExecutionProvider",
    "VSINPUExecutionProvider", "JsExecutionProvider", "CoreMLExecutionProvider",
    "ArmNNExecutionProvider", "ACLExecutionProvider", "DmlExecutionProvider",
    "RknpuExecutionProvider", "WebNNExecutionProvider", "WebGpuExecutionProvider",
    "XnnpackExecutionProvider", "CANNExecutionProvider", "AzureExecutionProvider",
    "CPUExecutionProvider",
]


def get_available_providers() -> list[str]:
    """Providers installed and usable on this machine, plugins first, CPU last."""
    from .plugins.manager import get_registry

    return get_registry().available()


def get_all_providers() -> list[str]:
    """Every provider name known: onnxruntime's list plus any installed plugin's."""
    from .plugins.manager import get_registry

    extra = [p for p in get_registry().providers if p not in _KNOWN_PROVIDERS]
    return _KNOWN_PROVIDERS[:-1] + sorted(extra) + ["CPUExecutionProvider"]


def get_device() -> str:
    """'GPU' when an available provider computes on a GPU, else 'CPU' (as onnxruntime reports)."""
    from .plugins.manager import get_registry

    for reg in get_registry().providers.values():
        if reg.info.available and any(d.type in ("cuda", "gpu", "rocm", "dml") for d in reg.info.devices):
            return "GPU"
    return "CPU"


def get_version_string() -> str:
    return __version__


def get_build_info() -> str:
    """What this ort-core runs on (onnxruntime's call; ort-core is a pure Python wheel)."""
    import sys

    import numpy
    import onnx

    return (f"ort-core {__version__}, Python {sys.version.split()[0]}, numpy {numpy.__version__}, "
            f"onnx {onnx.__version__}")


def set_seed(seed: int) -> None:
    """Make random ops without a ``seed`` attribute reproducible in this process (as onnxruntime.set_seed)."""
    from .providers.cpu.ops.random import set_seed as _set_seed

    _set_seed(seed)


def set_default_logger_severity(severity: int) -> None:
    """0 verbose, 1 info, 2 warning (default), 3 error, 4 fatal, as onnxruntime: from 3 on, ort-core's own
    warnings (OrtWarning) are silenced in this process (a session's log_severity_level wins for its own)."""
    from .errors import set_default_severity

    if not isinstance(severity, int) or not 0 <= severity <= 4:
        raise InvalidArgument(f"severity must be an int from 0 (verbose) to 4 (fatal), got {severity!r}")
    set_default_severity(severity)


def disable_telemetry_events() -> None:
    """Accepted for onnxruntime code: ort-core collects and sends no telemetry."""


def enable_telemetry_events() -> None:
    """Accepted for onnxruntime code: ort-core collects and sends no telemetry."""


__all__ = [
    "CustomOp", "CustomOpInput", "CustomOpOutput", "ExecutionMode", "ExecutionOrder", "ExternalDataError", "Fail",
    "GraphOptimizationLevel", "IOBinding", "InferenceSession", "InvalidArgument", "InvalidGraph", "InvalidProtobuf",
    "KernelError", "LoraAdapter", "ModelCompiler", "ModelMetadata", "NoSuchFile", "NodeArg", "NotImplementedOp",
    "OrtAllocatorType", "OrtArenaCfg", "OrtCompileApiFlags", "OrtDevice", "OrtDeviceMemoryType", "OrtDeviceVendorId",
    "OrtEpAssignedNode", "OrtEpAssignedSubgraph", "OrtEpDevice", "OrtError", "OrtExecutionProviderDevicePolicy",
    "OrtHardwareDevice", "OrtHardwareDeviceType", "OrtMemType", "OrtMemoryInfo", "OrtMemoryInfoDeviceType",
    "OrtSparseFormat", "OrtSyncStream", "OrtValue", "OrtWarning", "PluginError", "RunOptions", "RunTerminated",
    "SessionOptions", "SparseTensor", "blas_info", "copy_tensors", "create_and_register_allocator",
    "create_and_register_allocator_v2", "custom_op", "disable_telemetry_events", "enable_telemetry_events",
    "get_all_providers", "get_available_providers", "get_build_info", "get_device", "get_ep_devices",
    "get_version_string", "register_custom_op", "register_execution_provider_library", "set_default_logger_severity",
    "set_seed", "unregister_custom_op", "unregister_execution_provider_library"
]
