"""Session options a model carries in its metadata (``ort_config``), read when the environment variable
``ORT_LOAD_CONFIG_FROM_MODEL`` is "1", as onnxruntime reads them.

The metadata value is JSON; its ``session_options`` object may set ``intra_op_num_threads``,
``inter_op_num_threads``, ``execution_mode``, ``graph_optimization_level`` and ``enable_profiling`` (integers),
which win over the caller's options; other keys are ignored, as in onnxruntime. The caller's SessionOptions
object is not changed: the session gets a copy.
"""

from __future__ import annotations

import json
import os
from typing import Any

import onnx

from .errors import Fail

ENV_VAR = "ORT_LOAD_CONFIG_FROM_MODEL"
METADATA_KEY = "ort_config"


def _threads(value: int, key: str) -> int:
    if value < 0:
        raise Fail(f"Unsupported value for {key}: {value}")
    return value


def _mode(value: int, key: str) -> int:
    if value not in (0, 1):
        raise Fail(f"Unsupported {key} value in ORT config: {value}")
    return value


def _level(value: int, key: str) -> Any:
    from .options import GraphOptimizationLevel

    if value not in (0, 1, 2, 99):
        raise Fail(f"Unsupported {key} value in ORT config: {value}")
    return GraphOptimizationLevel(value)


def _profiling(value: int, key: str) -> bool:
    if value not in (0, 1):
        raise Fail(f"Unsupported value for {key} option: {value}")
    return bool(value)


_READERS = {"intra_op_num_threads": _threads, "inter_op_num_threads": _threads, "execution_mode": _mode,
            "graph_optimization_level": _level, "enable_profiling": _profiling}


def options_from_model(source: Any, options: Any) -> Any:
    """``options``, or a copy of them with what the model's ``ort_config`` sets, when ORT_LOAD_CONFIG_FROM_MODEL
    is "1". Another value than "0" or "1" is refused; a model that cannot be read is left to the loader, which
    reports it."""
    flag = os.environ.get(ENV_VAR, "")
    if flag not in ("", "0", "1"):
        raise Fail(f"The only supported values for the environment variable {ENV_VAR} are '0' and '1'. The "
                   f"environment variable contained the value: {flag}")
    if flag != "1":
        return options
    text = _metadata(source)
    if text is None:
        return options
    try:
        parsed = json.loads(text)
    except ValueError as e:
        raise Fail(f"Json stored in the `{METADATA_KEY}` key cannot be parsed. Error message: {e}") from None
    found = parsed.get("session_options") if isinstance(parsed, dict) else None
    if not isinstance(found, dict):
        return options
    options = options._copy()
    for key, value in found.items():
        reader = _READERS.get(key)
        if reader is None:
            continue  # onnxruntime ignores the session options it does not read from models
        if isinstance(value, bool) or not isinstance(value, int):
            raise Fail(f"{key} option in the model file must be an integer")
        setattr(options, key, reader(value, key))
    return options


def _metadata(source: Any) -> str | None:
    """The model's ``ort_config`` metadata value, or None (no such entry, or not a readable model)."""
    try:
        if isinstance(source, onnx.ModelProto):
            proto = source
        elif isinstance(source, (bytes, bytearray, memoryview)):
            proto = onnx.ModelProto()
            proto.ParseFromString(bytes(source))
        elif isinstance(source, (str, os.PathLike)):
            proto = onnx.load_model(os.fspath(source), load_external_data=False)
        else:
            return None
    except Exception:  # noqa: BLE001 - the loader reports unreadable models with its own clear error
        return None
    return next((p.value for p in proto.metadata_props if p.key == METADATA_KEY), None)
