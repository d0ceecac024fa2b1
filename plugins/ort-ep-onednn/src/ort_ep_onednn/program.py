"""What lowering produces and works with: storage areas (Buf), their views (Mem), primitive steps,
values during lowering, the subgraph Spec and the lowered Program.

Plain data and small helpers only; deciding what to build is ``lowering``'s job.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import enums as E
from . import primitives as P


class Unsupported(ValueError):
    """The node, with these shapes, is not something this provider lowers (a decline reason)."""


class RefOnly(Exception):
    """oneDNN offers only its (slow) reference implementation for a fusion: build it unfused."""


@dataclass(eq=False)
class Buf:
    """A storage area: a feed (``input`` k), a result (``output`` k), a per-call scratch area
    (``internal``) or read-only data shared by every call (``const``, in ``array``)."""

    kind: str
    nbytes: int
    index: int = -1
    array: np.ndarray | None = None
    values: list[str] = field(default_factory=list)


@dataclass(eq=False)
class Mem:
    """A view of a Buf through a memory descriptor (one dnnl_memory_t per concurrent call)."""

    md: P.Md
    buf: Buf


@dataclass(eq=False)
class Step:
    """One primitive execution: its arguments (DNNL_ARG_* -> Mem) and scratchpad layout."""

    prim: Any
    args: list[tuple[int, Mem]]
    scratch: P.Md | None
    label: str
    impl: str = ""


@dataclass(eq=False)
class Val:
    """A value during lowering: its shape and where/how it is stored; ``views`` caches reorders."""

    shape: tuple[int, ...]
    mem: Mem
    views: list[Mem] = field(default_factory=list)


@dataclass
class Spec:
    """What lowering needs of a subgraph: nodes in order, input/output names, constant values, opset,
    and the element types of inputs and outputs that are not float32 (quantized values)."""

    nodes: list[Any]
    inputs: list[str]
    outputs: list[str]
    constants: dict[str, np.ndarray]
    opset: int
    dtypes: dict[str, np.dtype] = field(default_factory=dict)


@dataclass
class Program:
    """The lowered subgraph for one signature: steps in order and every Buf and Mem they use."""

    steps: list[Step]
    bufs: list[Buf]
    mems: list[Mem]
    output_shapes: list[tuple[int, ...]]
    fused: dict[str, int]
    output_dtypes: list[np.dtype] = field(default_factory=list)


DT_OF = {np.dtype(np.float32): E.DT_F32, np.dtype(np.uint8): E.DT_U8, np.dtype(np.int8): E.DT_S8,
         np.dtype(np.int32): E.DT_S32}
"""numpy element types of the values this provider stores, and oneDNN's data types for them."""
NP_OF = {v: k for k, v in DT_OF.items()}


def dims_of(shape: tuple[int, ...]) -> tuple[int, ...]:
    """oneDNN has no 0-d descriptors: a scalar is held as one element."""
    return shape if shape else (1,)
