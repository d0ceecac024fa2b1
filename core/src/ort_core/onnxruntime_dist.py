"""What ort-core takes from an installed onnxruntime distribution, found without importing it: the folder of
its package (for ``install_as_onnxruntime()``'s tooling finder) and the native weight-packing routines its
quantizers import (``NATIVE_TOOLING``), plus the onnxruntime release ort-core's drop-in API mirrors.

Nothing here runs inference; onnxruntime is never a dependency of the runtime.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import threading
from typing import Any

ONNXRUNTIME_API_VERSION = "1.32.0"
"""What ``onnxruntime.__version__`` reports once installed: the onnxruntime release ort-core's drop-in API and
contrib ops are checked against (the tests compare both runtimes on it)."""

NATIVE_TOOLING = ("quantize_matmul_2bits", "quantize_matmul_4bits", "quantize_matmul_8bits",
                  "quantize_qdq_matmul_4bits", "quantize_matmul_bnb4")
"""Native routines that onnxruntime's quantizers import from ``capi._pybind_state`` (weight packing, no
inference): lent from the installed onnxruntime's compiled module, loaded privately on first use."""

_NAME = "onnxruntime"
_native_lock = threading.Lock()
_native: list[Any] = []  # once looked for: the installed onnxruntime's compiled module, or why there is none


def real_onnxruntime_dirs() -> list[str]:
    """The package folder(s) of an installed onnxruntime distribution (onnxruntime, onnxruntime-gpu, ...) on
    sys.path, found without importing it; [] when there is none."""
    spec = importlib.machinery.PathFinder.find_spec(_NAME)
    return list(spec.submodule_search_locations or []) if spec is not None else []


def native_tooling_function(name: str) -> Any:
    """``name`` (one of NATIVE_TOOLING) from the installed onnxruntime's compiled module; AttributeError for
    any other name, or saying why when that module cannot be had."""
    if name not in NATIVE_TOOLING:
        raise AttributeError(f"module 'onnxruntime.capi._pybind_state' (ort-core) has no attribute '{name}'")
    with _native_lock:
        if not _native:
            _native.append(_load_native())
    if isinstance(_native[0], str):
        raise AttributeError(f"{name} is a native routine of onnxruntime's quantizers, which ort-core does not have: "
                             f"{_native[0]}")
    return getattr(_native[0], name)


def _load_native() -> Any:
    """The installed onnxruntime's compiled module under a private name (not ``onnxruntime...``), or why not."""
    for folder in real_onnxruntime_dirs():
        found = importlib.machinery.PathFinder.find_spec("onnxruntime_pybind11_state", [os.path.join(folder, "capi")])
        if found is None or not isinstance(found.loader, importlib.machinery.ExtensionFileLoader):
            continue
        spec = importlib.util.spec_from_file_location("_ort_core_native.onnxruntime_pybind11_state", found.origin)
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
        except (ImportError, OSError) as e:
            return f"the installed onnxruntime's compiled module ({found.origin}) does not load: {e}"
        return module
    return "no onnxruntime is installed (`pip install onnxruntime` beside ort-core lends them)"
