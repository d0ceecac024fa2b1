"""CustomOpRegistry: custom ops keyed by (domain, op type) and opset range; the process-wide registry.

Sessions look ops up in a chain of their own registrations first, then the global ones. The
registry stores and finds ops; it neither binds nor runs them.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from typing import Any

from ..errors import InvalidArgument
from .custom_op import CustomOp


class CustomOpRegistry:
    """A set of custom ops; ``lookup`` finds the one covering a model's opset of the op's domain."""

    def __init__(self) -> None:
        self._ops: dict[tuple[str, str], list[CustomOp]] = {}
        self._lock = threading.Lock()

    def register(self, *ops: Any) -> None:
        """Add ops (CustomOp instances, CustomOp subclasses, or iterables of those).

        Registering the same op again does nothing; another op with the same domain and op type
        and an overlapping opset range is refused.
        """
        for op in _flatten(ops):
            key = (op.domain, op.op_type)
            with self._lock:
                known = self._ops.setdefault(key, [])
                if any(o is op for o in known):
                    continue
                clash = next((o for o in known if _overlap(o, op)), None)
                if clash is not None:
                    raise InvalidArgument(f"custom op {op!r} overlaps the already registered {clash!r}; unregister it "
                                          "first or give the two disjoint since/until opset ranges")
                known.append(op)

    def unregister(self, *ops: Any) -> None:
        """Remove ops registered here (unknown ones are ignored)."""
        for op in _flatten(ops):
            with self._lock:
                known = self._ops.get((op.domain, op.op_type), [])
                self._ops[(op.domain, op.op_type)] = [o for o in known if o is not op]

    def lookup(self, domain: str, op_type: str, opset: int) -> CustomOp | None:
        """The op covering ``opset`` of ``domain`` (0, a domain the model does not import, counts as 1)."""
        opset = opset or 1
        for op in self._ops.get((domain, op_type), ()):
            if op.covers(opset):
                return op
        return None

    def versions(self, domain: str, op_type: str) -> list[CustomOp]:
        """Every op registered under this domain and op type, whatever its opsets."""
        return list(self._ops.get((domain, op_type), ()))

    def __iter__(self) -> Iterator[CustomOp]:
        return iter([op for ops in list(self._ops.values()) for op in ops])

    def __len__(self) -> int:
        return sum(len(ops) for ops in self._ops.values())

    def __repr__(self) -> str:
        return f"CustomOpRegistry({[op.qualified_name for op in self]})"

    @staticmethod
    def chain(*registries: CustomOpRegistry) -> CustomOpRegistry:
        """A snapshot looking ops up in ``registries`` in order (the first match wins)."""
        out = CustomOpRegistry()
        for reg in registries:
            for op in reg:
                out._ops.setdefault((op.domain, op.op_type), []).append(op)
        return out


def _flatten(ops: Iterable[Any]) -> Iterator[CustomOp]:
    for op in ops:
        if isinstance(op, type) and issubclass(op, CustomOp):
            op = op()
        if isinstance(op, CustomOp):
            yield op
        elif isinstance(op, (list, tuple)):
            yield from _flatten(op)
        else:
            raise InvalidArgument(f"{op!r} is not a custom op: declare it with @ort_core.custom_op(...) or as a "
                                  "subclass of ort_core.CustomOp")


def _overlap(a: CustomOp, b: CustomOp) -> bool:
    a_end = a.until if a.until is not None else float("inf")
    b_end = b.until if b.until is not None else float("inf")
    return a.since <= b_end and b.since <= a_end


_GLOBAL = CustomOpRegistry()


def global_registry() -> CustomOpRegistry:
    """The registry every session consults after its own SessionOptions registrations."""
    return _GLOBAL


def register_custom_op(*ops: Any) -> None:
    """Register custom ops for every session of this process (``SessionOptions.register_custom_op``
    registers for one session only, and wins over these)."""
    _GLOBAL.register(*ops)


def unregister_custom_op(*ops: Any) -> None:
    """Undo ``register_custom_op``; sessions already created keep the ops they were built with."""
    _GLOBAL.unregister(*ops)
