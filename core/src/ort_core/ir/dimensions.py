"""Free-dimension overrides (SessionOptions.add_free_dimension_override_by_name / _by_denotation): a symbolic
dimension of the model fixed to a size, in every type of the main graph that names it, before anything else
reads the types. Rewrites types only; the session checks feeds against them.
"""

from __future__ import annotations

from dataclasses import replace

from ..errors import InvalidArgument
from .graph import Model, ValueInfo


def override_free_dimensions(model: Model, by_name: dict[str, int], by_denotation: dict[str, int]) -> int:
    """Fix the named (``dim_param``) and denoted dimensions of the main graph's types; returns how many dims
    changed. A fixed dimension of another size under an overridden denotation is an error naming it."""
    if not by_name and not by_denotation:
        return 0
    graph = model.graph
    changed = 0

    def fixed(v: ValueInfo) -> ValueInfo:
        nonlocal changed
        t = v.type
        if t.kind != "tensor" or t.shape is None:
            return v
        dims = list(t.shape)
        for k, d in enumerate(dims):
            denotation = t.denotations[k] if t.denotations else None
            size = by_name.get(d) if isinstance(d, str) else None
            if denotation in by_denotation:
                size = by_denotation[denotation]
                if isinstance(d, int) and d != size:
                    raise InvalidArgument(f"free dimension override '{denotation}'={size}: '{v.name}' fixes that "
                                          f"dimension (axis {k}) to {d}")
            if size is not None and d != size:
                dims[k] = size
                changed += 1
        return v if dims == list(t.shape) else ValueInfo(v.name, replace(t, shape=tuple(dims)), v.doc_string)

    graph.inputs = [fixed(v) for v in graph.inputs]
    graph.outputs = [fixed(v) for v in graph.outputs]
    graph.value_info = {k: fixed(v) for k, v in graph.value_info.items()}
    return changed


def check_override(kind: str, key: object, value: object) -> tuple[str, int]:
    """A (name, size) override as given to SessionOptions, checked."""
    if not isinstance(key, str) or not key:
        raise InvalidArgument(f"free dimension override by {kind}: expected a non-empty string, got {key!r}")
    try:
        size = int(value)
    except (TypeError, ValueError):
        raise InvalidArgument(f"free dimension override '{key}': size must be an int, got {value!r}") from None
    if size < 0:
        raise InvalidArgument(f"free dimension override '{key}': size must be >= 0, got {size}")
    return key, size


__all__ = ["check_override", "override_free_dimensions"]
