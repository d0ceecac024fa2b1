"""Resource limits against hostile models: the largest tensor a session may create, and the run context
(limit plus RunOptions) that the execution plan publishes to kernels through a contextvar for one run.

Ground floor like errors.py: it checks sizes and the terminate flag; it allocates and runs nothing.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar, Token
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import InvalidArgument, KernelError, RunTerminated

MAX_TENSOR_BYTES_KEY = "session.max_tensor_bytes"
"""Session config entry: the largest tensor, in bytes, that the session's model may declare (initializers,
constants) or that a kernel may create from data (ConstantOfShape, Expand, Tile, Range, Resize, Pad, ...).
A positive integer; the default is DEFAULT_MAX_TENSOR_BYTES."""


def _default_max_tensor_bytes() -> int:
    """16 GiB, or half the physical memory where that is smaller (and known): one tensor past it
    would push the machine into swap or the OOM killer before any error could be raised."""
    limit = 16 << 30
    try:
        physical = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):  # not POSIX, or not reported
        return limit
    return min(limit, physical // 2) if physical > 0 else limit


DEFAULT_MAX_TENSOR_BYTES = _default_max_tensor_bytes()


def parse_max_tensor_bytes(config: dict[str, str]) -> int:
    """The limit set by the session config entry, else the default; a malformed value is an error."""
    text = config.get(MAX_TENSOR_BYTES_KEY)
    if text is None:
        return DEFAULT_MAX_TENSOR_BYTES
    try:
        value = int(str(text).strip())
    except ValueError:
        value = 0
    if value <= 0:
        raise InvalidArgument(f"session config entry '{MAX_TENSOR_BYTES_KEY}' must be a positive number of bytes, "
                              f"got {text!r}")
    return value


@dataclass(frozen=True)
class RunContext:
    """What kernels may consult while they run: the size limit, the run's RunOptions (or None) and the
    session's thread budget (``threads``: at most that many threads per kernel; 0: every available CPU)."""

    max_tensor_bytes: int = DEFAULT_MAX_TENSOR_BYTES
    run_options: Any = None
    threads: int = 0


_CURRENT: ContextVar[RunContext] = ContextVar("ort_core_run_context", default=RunContext())  # noqa: B039 - frozen


def current() -> RunContext:
    return _CURRENT.get()


def enter(ctx: RunContext) -> Token:
    """Publish ``ctx`` to the kernels called from this thread (and context); undo with ``leave``."""
    return _CURRENT.set(ctx)


def leave(token: Token) -> None:
    _CURRENT.reset(token)


@contextmanager
def run_context(ctx: RunContext) -> Iterator[RunContext]:
    """``enter``/``leave`` around a block."""
    token = _CURRENT.set(ctx)
    try:
        yield ctx
    finally:
        _CURRENT.reset(token)


def check_terminated(label: str) -> None:
    """Raise RunTerminated when the current run's RunOptions.terminate is set (long loops poll this)."""
    options = _CURRENT.get().run_options
    if options is not None and options.terminate:
        raise RunTerminated(f"{label}: run() was terminated through RunOptions.terminate")


def too_large(label: str, value: np.ndarray) -> str:
    """The message for a produced tensor past the limit."""
    limit = _CURRENT.get().max_tensor_bytes
    return (f"{label}: produced a tensor of shape {list(value.shape)} ({value.dtype}) taking {_human(value.nbytes)}, "
            f"more than the limit of {_human(limit)} per tensor (session config entry '{MAX_TENSOR_BYTES_KEY}')")


def _human(n: int) -> str:
    for unit, shift in (("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.1f} {unit}"
    return f"{n} bytes"


def tensor_bytes(shape: Iterable[int], itemsize: int) -> int:
    """Bytes of a tensor of ``shape`` in exact integers (no overflow); negative dims are an error."""
    count = 1
    for d in shape:
        d = int(d)
        if d < 0:
            raise ValueError(f"negative dimension {d}")
        count *= d
    return count * int(itemsize)


def check_tensor_size(label: str, shape: Iterable[int], dtype: Any, what: str = "output") -> None:
    """Refuse, before anything is allocated, a tensor of ``shape`` and ``dtype`` past the run's limit.

    ``label`` names the node (or tensor); raises KernelError.
    """
    shape = [int(d) for d in shape]
    try:
        nbytes = tensor_bytes(shape, np.dtype(dtype).itemsize)
    except ValueError as e:
        raise KernelError(f"{label}: {what} shape {shape} has a {e}") from None
    limit = _CURRENT.get().max_tensor_bytes
    if nbytes > limit:
        raise KernelError(f"{label}: {what} of shape {shape} ({np.dtype(dtype)}) would take {_human(nbytes)}, more "
                    f"than the limit of {_human(limit)} per tensor (session config entry '{MAX_TENSOR_BYTES_KEY}')")


def check_broadcast(label: str, *arrays: Any) -> None:
    """Refuse an element-wise result whose broadcast shape passes the limit (small inputs such as
    [N, 1] and [1, N] broadcast to N * N elements). Cheap when the inputs' sizes multiply to within
    the limit, which bounds every broadcast of them; exact otherwise."""
    limit = _CURRENT.get().max_tensor_bytes
    if len(arrays) == 2 and type(arrays[0]) is np.ndarray and type(arrays[1]) is np.ndarray:  # the usual case
        a, b = arrays
        if a.size * b.size * max(a.itemsize, b.itemsize) <= limit:
            return
    count, itemsize = 1, 1
    for x in arrays:  # plain attribute reads: variadic ops (Sum, Max...) of tiny tensors call this per run
        if type(x) is not np.ndarray and not (hasattr(x, "dtype") and hasattr(x, "size")):
            x = np.asarray(x)
        count *= int(x.size)
        if x.dtype.itemsize > itemsize:
            itemsize = x.dtype.itemsize
    if count * itemsize <= limit:
        return
    dtype = max((x.dtype if hasattr(x, "dtype") else np.asarray(x).dtype for x in arrays), key=lambda d: d.itemsize)
    try:
        shape = np.broadcast_shapes(*(np.shape(x) for x in arrays))
    except ValueError:
        return  # shapes that do not broadcast: the operation raises its own error
    check_tensor_size(label, shape, dtype)


def check_matmul(label: str, a: Any, b: Any) -> None:
    """Refuse a MatMul whose result passes the limit ([M, 1] @ [1, N] is M * N elements)."""
    if a.size and b.size and a.size * b.size * max(a.itemsize, b.itemsize) <= _CURRENT.get().max_tensor_bytes:
        return  # every output element takes at least one element of each operand
    dtype = max(a.dtype, b.dtype, key=lambda d: d.itemsize)
    if a.ndim < 1 or b.ndim < 1:
        return
    try:
        batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    except ValueError:
        return
    rows = a.shape[-2:-1] if a.ndim >= 2 else ()
    cols = b.shape[-1:] if b.ndim >= 2 else ()
    check_tensor_size(label, (*batch, *rows, *cols), dtype)
