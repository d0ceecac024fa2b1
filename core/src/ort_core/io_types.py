"""Descriptions of a session's inputs and outputs (NodeArg, ModelMetadata) and feed checking.

Mirrors onnxruntime's NodeArg/ModelMetadata; ``check_feed`` turns a user's value into the array
a kernel may read, or raises InvalidArgument naming the input, the expected and the given type.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .errors import InvalidArgument, InvalidGraph
from .ir.graph import Model, ValueInfo
from .ir.types import ValueType, elem_type_of, np_dtype
from .memory.device import Device


@dataclass(frozen=True)
class NodeArg:
    """An input or output: ``name``, ``type`` ('tensor(float)') and ``shape`` (ints, symbolic
    dims as strings, None for unknown dims)."""

    name: str
    type: str
    shape: list
    value_type: ValueType = field(repr=False, compare=False, default=ValueType("unknown"))

    @staticmethod
    def from_value_info(v: ValueInfo) -> NodeArg:
        shape = [] if v.type.shape is None else list(v.type.shape)
        return NodeArg(v.name, v.type.text, shape, v.type)

    def __str__(self) -> str:
        return f"NodeArg(name='{self.name}', type='{self.type}', shape={self.shape})"


@dataclass(frozen=True)
class MemoryInfo:
    """Where a session input or output lives (what onnxruntime's OrtMemoryInfo says): ``name`` is "Cpu" for
    host memory (onnxruntime's name) and the device type otherwise ('cuda', 'example', ...), ``device_id`` its
    ordinal, ``device`` the ort_core.memory.Device itself."""

    name: str
    device_id: int
    device: Device

    @staticmethod
    def of(device: Device) -> MemoryInfo:
        return MemoryInfo("Cpu" if device.is_host else device.type, device.id, device)


@dataclass(frozen=True)
class ModelMetadata:
    producer_name: str
    graph_name: str
    domain: str
    description: str
    graph_description: str
    version: int
    custom_metadata_map: dict[str, str]

    @staticmethod
    def from_model(m: Model) -> ModelMetadata:
        return ModelMetadata(m.producer_name, m.graph.name, m.domain, m.doc_string, m.graph.doc_string,
                             m.model_version, dict(m.metadata_props))


@dataclass(frozen=True)
class OrtEpAssignedNode:
    """A node of an assigned subgraph (onnxruntime's OrtEpAssignedNode): ``name``, ``op_type``, ``domain``."""

    name: str
    op_type: str
    domain: str = ""


@dataclass(frozen=True)
class SubgraphAssignment:
    """One compiled subgraph (onnxruntime's OrtEpAssignedSubgraph): ``ep_name`` and ``get_nodes()`` as there;
    ort-core's ``provider``, ``subgraph``, ``node_names`` and ``op_types`` say the same in tuples."""

    provider: str
    subgraph: str
    node_names: tuple[str, ...]
    op_types: tuple[str, ...]
    node_ids: tuple[int, ...] = field(repr=False, default=())
    domains: tuple[str, ...] = field(repr=False, default=())

    @property
    def ep_name(self) -> str:
        return self.provider

    def get_nodes(self) -> list[OrtEpAssignedNode]:
        domains = self.domains or ("",) * len(self.node_names)
        return [OrtEpAssignedNode(n, o, d) for n, o, d in zip(self.node_names, self.op_types, domains)]


OrtEpAssignedSubgraph = SubgraphAssignment


@functools.lru_cache(maxsize=1024)
def _expected(t: ValueType) -> tuple | None:
    """(dtype, rank, fixed dims as (axis, size) pairs) a plain array fed for ``t`` must match; None where the
    full check is needed anyway (not a numeric tensor, or no rank declared)."""
    if t.kind != "tensor" or not t.elem_type or t.shape is None:
        return None
    try:
        dtype = np_dtype(t.elem_type)
    except (KeyError, TypeError, ValueError):
        return None
    if dtype.kind == "O":
        return None
    return dtype, len(t.shape), tuple((i, d) for i, d in enumerate(t.shape) if isinstance(d, int))


def check_feed(arg: NodeArg, value: Any) -> Any:
    """Validate a fed value against its declared type; returns the array to use."""
    t = arg.value_type
    if type(value) is np.ndarray:  # the common case, checked without building anything
        expected = _expected(t)
        if expected is not None and value.dtype == expected[0] and value.ndim == expected[1] and \
                all(value.shape[i] == d for i, d in expected[2]):
            return value
    if t.kind != "tensor":
        return value  # sequences/maps/optionals are checked by the kernels consuming them
    expected = None
    if t.elem_type:
        try:
            expected = np_dtype(t.elem_type)
        except (KeyError, TypeError, ValueError):
            raise InvalidGraph(f"input '{arg.name}' declares unknown element type {t.elem_type}") from None
    if not isinstance(value, np.ndarray):
        if hasattr(value, "numpy") and callable(value.numpy):  # OrtValue-like objects
            value = value.numpy()
        else:
            # Python lists (nested too) become the declared type, as onnxruntime's binding converts them
            as_type = expected if isinstance(value, (list, tuple)) and expected is not None else None
            try:
                value = np.asarray(value, dtype=as_type)
            except (TypeError, ValueError, OverflowError) as e:
                raise InvalidArgument(f"input '{arg.name}': a {type(value).__name__} that is not an array "
                                      f"of {arg.type} ({e})") from None
    if expected is None:
        return value  # the model leaves the element type undefined: kernels check what they get
    if expected.kind == "O":
        value = _strings(arg, value)
    elif value.dtype != expected:
        given = elem_type_of(value.dtype)
        given_text = f"tensor({_name(given)})" if given else f"numpy {value.dtype}"
        raise InvalidArgument(f"input '{arg.name}': unexpected data type {given_text}, expected {arg.type}")
    if t.shape is not None and value.shape != t.shape:  # equal: every dimension fixed and matching
        if not t.shape and value.size == 1:
            return value  # a one-element array for a scalar input runs as given, as in onnxruntime
        if value.ndim != len(t.shape):
            raise InvalidArgument(f"input '{arg.name}': invalid rank {value.ndim} (shape {list(value.shape)}), "
                                  f"expected rank {len(t.shape)} (shape {list(t.shape)})")
        bad = [(i, d, g) for i, (d, g) in enumerate(zip(t.shape, value.shape)) if isinstance(d, int) and d != g]
        if bad:
            detail = ", ".join(f"dim {i}: expected {d}, got {g}" for i, d, g in bad)
            raise InvalidArgument(f"input '{arg.name}': invalid dimensions {list(value.shape)} "
                                  f"for expected shape {list(t.shape)} ({detail})")
    return value


def _strings(arg: NodeArg, value: np.ndarray) -> np.ndarray:
    """A feed for a tensor(string) input as an object array of str. numpy str arrays convert as they are;
    bytes ('S' arrays, bytes items) and raw items (np.void, as onnxruntime reads them) are decoded as UTF-8.
    Other items (numbers, None), which onnxruntime turns into their str() text, are refused."""
    kind = value.dtype.kind
    if kind == "U":
        return value.astype(object)
    if kind not in "OSV":
        raise InvalidArgument(f"input '{arg.name}': expected {arg.type}, got an array of {value.dtype}")
    out = np.empty(value.shape, dtype=object)
    flat, items = out.reshape(-1), value.reshape(-1)
    for i, item in enumerate(items):
        if kind == "V":
            item = bytes(item)
        if isinstance(item, (bytes, np.bytes_)):
            try:
                item = bytes(item).decode("utf-8")
            except UnicodeDecodeError as e:
                raise InvalidArgument(f"input '{arg.name}': string element {i} is not valid UTF-8 ({e})") from None
        elif not isinstance(item, str):
            raise InvalidArgument(f"input '{arg.name}': element {i} of a {arg.type} feed is a "
                                  f"{type(item).__name__}, not a str (convert it first)")
        flat[i] = item
    return out


def _name(elem_type: int) -> str:
    from .ir.types import elem_type_name

    return elem_type_name(elem_type)
