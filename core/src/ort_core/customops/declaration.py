"""What a custom op declares: its inputs and outputs (types, type constraints, optional, variadic) and attributes.

Parses and checks a declaration once, at definition time, into plain specs that kernels consult
cheaply at run time. It runs nothing and knows nothing about sessions or providers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from onnx import TensorProto

from ..errors import InvalidArgument
from ..ir.types import _TYPE_NAMES, elem_type_name, elem_type_of

_BY_NAME = {name: code for code, name in _TYPE_NAMES.items()}


@dataclass(frozen=True)
class CustomOpInput:
    """One declared input: ``type`` is an ONNX element type ('float', 'int64', np.float32) or the
    name of one of the op's type constraints ('T'). An ``optional`` input may be omitted by the
    node (the kernel gets None); a ``variadic`` one (last input only) takes all remaining node
    inputs, at least one unless also optional."""

    name: str
    type: Any
    optional: bool = False
    variadic: bool = False


@dataclass(frozen=True)
class CustomOpOutput(CustomOpInput):
    """One declared output (same fields as CustomOpInput). The kernel may return None for an
    ``optional`` output; a ``variadic`` last output yields as many values as the node has outputs."""


@dataclass(frozen=True)
class ArgSpec:
    """A checked input/output: ``var`` is the type-constraint name or None; ``allowed`` the
    element type codes it accepts."""

    name: str
    var: str | None
    allowed: frozenset[int]
    optional: bool
    variadic: bool

    def describe(self) -> str:
        types = ", ".join(sorted(elem_type_name(t) for t in self.allowed))
        return f"{self.var}: {{{types}}}" if self.var else types


ATTR_KINDS = ("int", "float", "string", "ints", "floats", "strings", "tensor")
_PY_KINDS = {int: "int", float: "float", str: "string", np.ndarray: "tensor"}


@dataclass(frozen=True)
class AttrSpec:
    """A checked attribute: ``kind`` is one of ATTR_KINDS; ``required`` ones have no default."""

    name: str
    kind: str
    default: Any
    required: bool


def parse_elem_type(t: Any, where: str) -> int:
    """ONNX element type code for 'float' / 'tensor(float)' / np.float32 / 'float32' / a code."""
    if isinstance(t, (int, np.integer)) and not isinstance(t, bool):
        if int(t) in _TYPE_NAMES:
            return int(t)
    elif isinstance(t, str):
        name = t[len("tensor("):-1] if t.startswith("tensor(") and t.endswith(")") else t
        if name in _BY_NAME:
            return _BY_NAME[name]
        try:  # numpy names spelled out ('float32'), never one-letter codes that could be a typo'd 'T'
            dtype = np.dtype(name)
            code = elem_type_of(dtype) if dtype.name == name else None
        except TypeError:
            code = None
        if code is not None and code != TensorProto.STRING:
            return code
    else:
        try:
            code = elem_type_of(np.dtype(t))
        except TypeError:
            code = None
        if code is not None:
            return code
    raise InvalidArgument(f"{where}: unknown element type {t!r}; use an ONNX type name such as "
                          f"'float', 'double', 'int64', 'bool' or a numpy dtype")


def parse_args(args: Any, constraints: dict[str, frozenset[int]], what: str, op: str,
               cls: type) -> tuple[ArgSpec, ...]:
    """Check a list of CustomOpInput/CustomOpOutput (or bare type strings) into ArgSpecs."""
    if args is None or isinstance(args, (str, CustomOpInput)):
        raise InvalidArgument(f"custom op {op}: {what}s must be a list, got {args!r}")
    specs = []
    args = list(args)
    for k, a in enumerate(args):
        if not isinstance(a, CustomOpInput):
            if a is None or isinstance(a, (list, tuple, dict, bool)):
                raise InvalidArgument(f"custom op {op}: {what} {k} must be a {cls.__name__} or a type, got {a!r}")
            a = cls(f"{what}{k}", a)
        where = f"custom op {op}, {what} {k} ('{a.name}')"
        if a.variadic and k != len(args) - 1:
            raise InvalidArgument(f"{where}: only the last {what} may be variadic")
        if isinstance(a.type, str) and a.type in constraints:
            specs.append(ArgSpec(a.name, a.type, constraints[a.type], bool(a.optional), bool(a.variadic)))
            continue
        try:
            code = parse_elem_type(a.type, where)
        except InvalidArgument:
            raise InvalidArgument(
                f"{where}: type {a.type!r} is neither an ONNX element type nor one of the declared type "
                f"constraints {sorted(constraints)}") from None
        specs.append(ArgSpec(a.name, None, frozenset({code}), bool(a.optional), bool(a.variadic)))
    return tuple(specs)


def parse_constraints(constraints: Any, op: str) -> dict[str, frozenset[int]]:
    """{'T': ['float', 'double']} -> {'T': frozenset({1, 11})}."""
    if not constraints:
        return {}
    if not isinstance(constraints, dict):
        raise InvalidArgument(f"custom op {op}: type_constraints must be a dict name -> list of types, "
                              f"got {type(constraints).__name__}")
    out = {}
    for name, types in constraints.items():
        where = f"custom op {op}, type constraint '{name}'"
        if not isinstance(name, str) or not name or name in _BY_NAME:
            raise InvalidArgument(f"{where}: the name must be a string that is not an element type name")
        if isinstance(types, str):
            types = [t.strip() for t in types.split(",") if t.strip()]
        codes = frozenset(parse_elem_type(t, where) for t in types)
        if not codes:
            raise InvalidArgument(f"{where}: allows no type")
        out[name] = codes
    return out


def parse_attributes(attributes: Any, op: str) -> tuple[AttrSpec, ...]:
    """{'alpha': 1.0, 'axes': [0], 'k': int} -> AttrSpecs; a bare type means a required attribute."""
    if not attributes:
        return ()
    if not isinstance(attributes, dict):
        raise InvalidArgument(f"custom op {op}: attributes must be a dict name -> default (or type "
                              f"for a required one), got {type(attributes).__name__}")
    return tuple(attr_spec(name, value, op) for name, value in attributes.items())


def attr_spec(name: str, value: Any, op: str) -> AttrSpec:
    where = f"custom op {op}, attribute '{name}'"
    if not isinstance(name, str) or not name:
        raise InvalidArgument(f"custom op {op}: attribute names must be non-empty strings, got {name!r}")
    if isinstance(value, AttrSpec):
        if value.name != name or value.kind not in ATTR_KINDS:
            raise InvalidArgument(f"{where}: malformed {value!r}")
        return value
    if isinstance(value, type) or (hasattr(value, "__origin__") and value.__origin__ is list):
        kind = _kind_of_type(value)
        if kind is None:
            raise InvalidArgument(f"{where}: unsupported attribute type {value!r}; use int, float, str, "
                                  "list[int], list[float], list[str] or numpy.ndarray")
        return AttrSpec(name, kind, None, True)
    kind = _kind_of_value(value)
    if kind is None:
        raise InvalidArgument(f"{where}: unsupported default {value!r}; use an int, float, str, a list of "
                              "those or a numpy array (or the type itself for a required attribute)")
    return AttrSpec(name, kind, convert_attr(kind, value, where), False)


def _kind_of_type(t: Any) -> str | None:
    if t in _PY_KINDS:
        return _PY_KINDS[t]
    if t is bool:
        return "int"
    args = getattr(t, "__args__", ())
    if getattr(t, "__origin__", None) is list and len(args) == 1 and args[0] in (int, float, str):
        return {int: "ints", float: "floats", str: "strings"}[args[0]]
    return None


def _kind_of_value(v: Any) -> str | None:
    if isinstance(v, (bool, int, np.integer)):
        return "int"
    if isinstance(v, (float, np.floating)):
        return "float"
    if isinstance(v, str):
        return "string"
    if isinstance(v, np.ndarray):
        return "tensor"
    if isinstance(v, (list, tuple)):
        if all(isinstance(x, (bool, int, np.integer)) for x in v):
            return "ints"  # an empty list counts as ints; floats are accepted for it too
        if all(isinstance(x, (int, float, np.integer, np.floating)) for x in v):
            return "floats"
        if all(isinstance(x, str) for x in v):
            return "strings"
    return None


def convert_attr(kind: str, value: Any, where: str) -> Any:
    """A node's attribute value as the declared kind (ints widen to floats), else InvalidArgument."""
    got = _kind_of_value(value)
    if kind == "float" and got == "int" and not isinstance(value, bool):
        return float(value)
    if kind == "floats" and got == "ints":
        return [float(x) for x in value]
    if kind == "ints" and got == "floats" and len(value) == 0:
        return []
    if got != kind and not (kind == "floats" and got == "ints"):
        raise InvalidArgument(f"{where}: expected {_KIND_TEXT[kind]}, got {value!r}")
    if kind == "int":
        return int(value)
    if kind == "float":
        return float(value)
    if kind in ("ints", "floats", "strings"):
        return [{"ints": int, "floats": float, "strings": str}[kind](x) for x in value]
    return value


_KIND_TEXT = {"int": "an int", "float": "a float", "string": "a string", "ints": "a list of ints",
              "floats": "a list of floats", "strings": "a list of strings", "tensor": "a tensor"}
