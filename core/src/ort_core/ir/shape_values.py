"""Shape values through shape inference: the dims that ``Shape`` reads, followed through the small integer
ops exports build reshape targets with, so that a Reshape to ``Concat(Shape(x)[0], Shape(x)[1], -1, 64)``
gets an output shape (``('batch', 1500, 6, 64)``) where onnx's node-by-node inference, which sees only
constant data, leaves every dim unknown (onnx's own ``data_prop`` does this for whole models).

A value is a short list of dims (an int, a symbolic name, or None for unknown) and whether it is a scalar.
Shape, Gather and Slice with constant indices, Unsqueeze/Squeeze at axis 0, Concat, integer Cast and
constants carry them; Reshape turns one into its output type, inferring a -1 when the symbols cancel.
Lists are capped at ``MAX_DIMS`` entries, so a hostile model cannot make them large.
"""

from __future__ import annotations

from collections import Counter

from onnx import TensorProto, TypeProto, helper, numpy_helper

from .graph import is_onnx_domain

MAX_DIMS = 16
_INTS = (TensorProto.INT64, TensorProto.INT32)

Value = tuple[list, bool]  # (dims: int | str | None each, is a scalar)


def step(node, types: dict[str, TypeProto], data: dict[str, TensorProto], values: dict[str, Value]
         ) -> dict[str, TypeProto] | None:
    """Record the shape value ``node`` makes in ``values``; for a Reshape whose target is known that way,
    return its output type (None otherwise)."""
    if not is_onnx_domain(node.domain) or len(node.output) != 1 or not node.output[0] or not node.input:
        return None
    op, out = node.op_type, node.output[0]
    if op == "Reshape" and len(node.input) >= 2:
        return _reshaped(node, types, data, values)
    value = None
    try:
        if op == "Shape":
            value = _shape(node, types)
        elif op == "Gather":
            value = _gather(node, data, values)
        elif op in ("Unsqueeze", "Squeeze"):
            value = _squeezed(node, data, values)
        elif op == "Concat" and int(_attr(node, "axis", 0)) in (0, -1):
            parts = [_value(i, data, values) for i in node.input]
            if parts and all(p is not None and not p[1] for p in parts):
                value = ([d for p in parts for d in p[0]], False)
        elif op == "Slice":
            value = _sliced(node, data, values)
        elif op == "Cast" and int(_attr(node, "to", 0)) in _INTS:
            value = _value(node.input[0], data, values)
    except (ValueError, IndexError, TypeError, OverflowError):
        value = None
    if value is not None and len(value[0]) <= MAX_DIMS:
        values[out] = value
    return None


def _attr(node, name: str, default):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _value(name: str, data: dict[str, TensorProto], values: dict[str, Value]) -> Value | None:
    """A shape value, or a small integer constant (0-D or 1-D) read as one."""
    if not name:
        return None
    if name in values:
        return values[name]
    t = data.get(name)
    if t is None or t.data_type not in _INTS or len(t.dims) > 1:
        return None
    arr = numpy_helper.to_array(t)
    if arr.size > MAX_DIMS:
        return None
    return [int(v) for v in arr.reshape(-1)], arr.ndim == 0


def shape_window(rank: int, start: int, end: int | None) -> slice:
    """The dims ``Shape`` with ``start``/``end`` reads of a rank-``rank`` value (negative and out-of-range
    values clamped, as the spec says)."""
    end = rank if end is None else end
    return slice(*(min(max(v + rank if v < 0 else v, 0), rank) for v in (start, end)))


def slice_window(length: int, start: int, end: int, step: int) -> slice:
    """ONNX Slice's ``start:end:step`` over ``length`` items (huge and negative bounds clamped as the spec
    says) as a Python slice; ``step`` is not 0."""
    high = length if step > 0 else length - 1
    start = min(max(start + length if start < 0 else start, 0), high)  # backward: [0, length - 1]
    end = min(max(end + length if end < 0 else end, 0 if step > 0 else -1), high)
    return slice(start, None if end < 0 else end, step)


def _dims(types: dict[str, TypeProto], name: str) -> list | None:
    """The dims of value ``name`` (int, symbolic name or None each), None when its rank is unknown."""
    t = types.get(name)
    if t is None or t.WhichOneof("value") != "tensor_type" or not t.tensor_type.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") and d.dim_value >= 0 else d.dim_param or None
            for d in t.tensor_type.shape.dim]


def _shape(node, types: dict[str, TypeProto]) -> Value | None:
    dims = _dims(types, node.input[0])
    if dims is None:
        return None
    end = _attr(node, "end", None)
    return dims[shape_window(len(dims), int(_attr(node, "start", 0)), None if end is None else int(end))], False


def _gather(node, data, values) -> Value | None:
    v, idx = _value(node.input[0], data, values), _value(node.input[1], data, values) if len(node.input) > 1 else None
    if v is None or idx is None or v[1] or int(_attr(node, "axis", 0)) != 0 or any(not isinstance(i, int)
                                                                                     for i in idx[0]):
        return None
    n = len(v[0])
    if any(not -n <= i < n for i in idx[0]):
        return None
    return [v[0][i] for i in idx[0]], idx[1]


def _axes(node, data, values) -> list | None:
    axes = _attr(node, "axes", None)
    if axes is None and len(node.input) > 1:
        found = _value(node.input[1], data, values)
        axes = found[0] if found is not None else None
    return list(axes) if axes is not None else None


def _squeezed(node, data, values) -> Value | None:
    """Unsqueeze of a scalar, or Squeeze of a one-element list, at axis 0."""
    v = _value(node.input[0], data, values)
    if v is None:
        return None
    axes = _axes(node, data, values)
    if node.op_type == "Unsqueeze":
        return (v[0], False) if v[1] and axes in ([0], [-1]) else None
    return (v[0], True) if not v[1] and len(v[0]) == 1 and axes in (None, [0], [-1]) else None


def _sliced(node, data, values) -> Value | None:
    if len(node.input) < 3:
        return None
    v = _value(node.input[0], data, values)
    parts = [_value(i, data, values) for i in node.input[1:5]]
    if v is None or v[1] or any(p is None and name for p, name in zip(parts, node.input[1:5])):
        return None
    starts, ends = parts[0], parts[1]
    axes = parts[2][0] if len(parts) > 2 and parts[2] is not None else [0]
    steps = parts[3][0] if len(parts) > 3 and parts[3] is not None else [1]
    if len(starts[0]) != 1 or len(ends[0]) != 1 or axes not in ([0], [-1]) or len(steps) != 1 or steps[0] == 0:
        return None
    return v[0][slice_window(len(v[0]), starts[0][0], ends[0][0], steps[0])], False


def _reshaped(node, types, data, values) -> dict[str, TypeProto] | None:
    target = _value(node.input[1], data, values)
    t = types.get(node.input[0])
    if target is None or target[1] or node.input[1] in data or t is None or \
            t.WhichOneof("value") != "tensor_type":
        return None  # a constant target is onnx's own case
    dims_in = _dims(types, node.input[0])
    allowzero = int(_attr(node, "allowzero", 0))
    out: list = []
    for k, d in enumerate(target[0]):
        if d == 0 and not allowzero:  # 0 copies the input's dim there
            d = dims_in[k] if dims_in is not None and k < len(dims_in) else None
        out.append(d)
    if out.count(-1) > 1 or any(isinstance(d, int) and d < -1 for d in out):
        return None
    if -1 in out:
        out[out.index(-1)] = _inferred(dims_in, [d for d in out if d != -1])
    return {node.output[0]: helper.make_tensor_type_proto(t.tensor_type.elem_type, out)}


def _inferred(dims_in: list | None, others: list):
    """The dim a -1 stands for: the input's dims over the target's others, when their symbols cancel."""
    if dims_in is None or any(d is None for d in dims_in + others):
        return None
    num, den = _factors(dims_in), _factors(others)
    if den[1] - num[1]:  # a symbol of the target that the input lacks
        return None
    left = num[1] - den[1]
    if den[0] == 0 or num[0] % den[0]:
        return None
    size = num[0] // den[0]
    if not left:
        return size
    if size == 1 and sum(left.values()) == 1:
        return next(iter(left))
    return None


def _factors(dims: list) -> tuple[int, Counter]:
    product, symbols = 1, Counter()
    for d in dims:
        if isinstance(d, str):
            symbols[d] += 1
        else:
            product *= int(d)
    return product, symbols

