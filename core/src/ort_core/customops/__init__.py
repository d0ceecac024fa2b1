"""Custom operators: Python kernels (``custom_op`` / ``CustomOp``) and C libraries (``load_custom_ops_library``).

Ops are registered per session (``SessionOptions.register_custom_op`` /
``SessionOptions.register_custom_ops_library``) or for the process (``register_custom_op``); the
partitioner offers them to providers like any op and the CPU provider runs their kernels.
"""

from __future__ import annotations

from .c_library import ABI_VERSION, CLibraryOp, example_library_source, get_include, load_custom_ops_library
from .custom_op import CustomOp, TensorInfo, custom_op
from .declaration import CustomOpInput, CustomOpOutput
from .registry import CustomOpRegistry, global_registry, register_custom_op, unregister_custom_op
from .static_types import infer_static_types

__all__ = [
    "ABI_VERSION", "CLibraryOp", "CustomOp", "CustomOpInput", "CustomOpOutput", "CustomOpRegistry", "TensorInfo",
    "custom_op", "example_library_source", "get_include", "global_registry", "infer_static_types",
    "load_custom_ops_library", "register_custom_op", "unregister_custom_op",
]
