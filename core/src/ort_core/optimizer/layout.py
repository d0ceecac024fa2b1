"""Channels-last for a provider that prefers it (``Preferences.layout == "NHWC"``), run on the nodes it claimed.

Hardware that computes in NHWC (Qualcomm's HTP, most NPUs) otherwise pays two Transposes around every
convolution. As onnxruntime does for such providers, the layout-sensitive ops the provider claimed (Conv,
MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool, LRN and inference BatchNormalization on 4-D tensors)
become the same op in the domain ``com.ms.internal.nhwc`` (onnxruntime's name): its data input and output are
NHWC, its weights and attributes stay as ONNX defines them. A Transpose to NHWC goes before each, one back to
NCHW after. Then one pass in node order keeps the values in NHWC where it can: the provider's element-wise ops
(unary ones, and binary ones whose other operands have an NHWC form too or are constants, transposed once here)
and Concats (axis renumbered) compute in NHWC, a Transpose back to NHWC of a value the provider has in NHWC goes,
and so does a Transpose nothing reads any more, so a chain of convolutions, normalizations, activations,
residual adds and channel concatenations stays in NHWC between its first and last Transpose. The pass is linear
in the graph's size.

The values other providers read, graph outputs and values nested graphs read keep their NCHW form. QDQ groups
(a DequantizeLinear feeding the op, or a QuantizeLinear reading it) are left as they are: the provider asked for
them as groups. The provider must take Transpose. This module only rewrites the graph.
"""

from __future__ import annotations

import numpy as np

from ..ir.graph import Graph, Model, Node, ValueInfo, is_onnx_domain
from ..ir.types import ValueType
from .rewrite import fresh_name, protected_names, taken_names

NHWC_DOMAIN = "com.ms.internal.nhwc"
CHANNELS_FIRST_OPS = frozenset({"Conv", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "LRN",
                                "BatchNormalization"})
TO_NHWC, TO_NCHW = (0, 2, 3, 1), (0, 3, 1, 2)
ADDED_SUFFIXES = ("_to_nhwc", "_to_nchw", "_transposed")  # the names of the Transposes this rewrite adds end so
UNARY = frozenset({"Relu", "Sigmoid", "Tanh", "LeakyRelu", "Elu", "Selu", "HardSigmoid", "HardSwish", "Softplus",
                   "Abs", "Neg", "Exp", "Log", "Sqrt", "Erf", "Reciprocal", "Floor", "Ceil", "Identity"})
BINARY = frozenset({"Add", "Sub", "Mul", "Div", "Max", "Min", "Sum"})


def to_channels_last(model: Model, claimed: frozenset[int] | set[int]) -> int:
    """Rewrite the claimed layout-sensitive nodes to NHWC and tidy the Transposes (see the module docstring);
    returns how many nodes were rewritten, added or removed (0: the graph is unchanged)."""
    g = model.graph
    mine = set(claimed)
    ids = [max((n.id for n in g.nodes), default=0)]

    def new_id() -> int:
        ids[0] += 1
        mine.add(ids[0])
        return ids[0]

    producers, readers = g.producers(), g.consumers()
    taken = taken_names(g)
    out, rewritten = [], 0
    for node in g.nodes:
        if node.id in mine and _channels_first(g, node, producers, readers):
            x, y = node.inputs[0], node.outputs[0]
            xt, yt = fresh_name(g, f"{x}_nhwc", taken), fresh_name(g, f"{y}_nhwc", taken)
            _retype(g, xt, x, TO_NHWC)
            _retype(g, yt, y, TO_NHWC)
            before = Node("Transpose", [x], [xt], {"perm": list(TO_NHWC)}, name=f"{node.name}_to_nhwc", id=new_id())
            after = Node("Transpose", [yt], [y], {"perm": list(TO_NCHW)}, name=f"{node.name}_to_nchw", id=new_id())
            node.domain, node.inputs, node.outputs = NHWC_DOMAIN, [xt, *node.inputs[1:]], [yt, *node.outputs[1:]]
            out += [before, node, after]
            rewritten += 1
        else:
            out.append(node)
    if not rewritten:
        return 0
    g.nodes = out
    # the domain's ops are ONNX's: their opset is the model's ONNX opset (onnxruntime versions them so too)
    model.opset_imports.setdefault(NHWC_DOMAIN, model.opset_imports.get("", model.opset_imports.get("ai.onnx", 1)))
    return 3 * rewritten + _tidy(g, mine, taken, new_id)


def _rank4(g: Graph, name: str) -> bool:
    t = g.type_of(name)
    return t is not None and t.kind == "tensor" and t.shape is not None and len(t.shape) == 4


def _channels_first(g: Graph, node: Node, producers: dict[str, Node], readers: dict[str, list[Node]]) -> bool:
    if not is_onnx_domain(node.domain) or node.op_type not in CHANNELS_FIRST_OPS or node.subgraphs():
        return False
    if not node.inputs or not node.outputs or any(node.outputs[1:]):  # MaxPool's Indices index NCHW
        return False
    if not _rank4(g, node.inputs[0]) or not _rank4(g, node.outputs[0]):
        return False
    source = producers.get(node.inputs[0])
    if source is not None and source.op_type == "DequantizeLinear":
        return False
    return not any(r.op_type == "QuantizeLinear" for r in readers.get(node.outputs[0], []))


def _retype(g: Graph, name: str, like: str, perm: tuple[int, ...]) -> None:
    """Give ``name`` the type of ``like`` with its dims permuted by ``perm``."""
    t = g.type_of(like)
    if t is not None and t.shape is not None and len(t.shape) == len(perm):
        g.value_info[name] = ValueInfo(name, ValueType.tensor(t.elem_type, [t.shape[p] for p in perm]))
    elif t is not None:
        g.value_info[name] = ValueInfo(name, t)


def _perm(node: Node) -> tuple[int, ...] | None:
    if node.op_type != "Transpose" or not is_onnx_domain(node.domain) or len(node.inputs) != 1:
        return None
    perm = node.attr("perm")
    return tuple(int(p) for p in perm) if perm is not None else None


def _tidy(g: Graph, mine: set[int], taken: set[str], new_id) -> int:
    """One pass in node order, then one sweep: each value the provider has in NHWC is remembered; a Transpose of
    such a value back to NHWC goes (its readers read the NHWC value), so does a second Transpose of one value by
    one perm; the provider's element-wise ops and Concats whose operands all have NHWC forms (constants
    transposed once) compute in NHWC, a Transpose after them giving their NCHW output; the Transposes nothing
    reads any more go at the end. Linear in the graph's size; returns how many nodes changed."""
    protected = protected_names(g)
    constants = g.constant_initializers()
    nhwc_of: dict[str, str] = {}  # an NCHW value -> the same value in NHWC, where the provider has it
    done: dict[tuple[str, tuple[int, ...]], str] = {}  # (input, perm) -> output of a Transpose kept
    moved_constants: dict[str, str] = {}
    renames: dict[str, str] = {}
    out: list[Node] = []
    changes = 0
    for node in g.nodes:
        node.inputs = [renames.get(i, i) for i in node.inputs]
        p = _perm(node) if node.id in mine else None
        if p is not None:
            x, y = node.inputs[0], node.outputs[0]
            twin = done.get((x, p))
            if p == TO_NHWC and x in nhwc_of and y not in protected:
                renames[y] = nhwc_of[x]  # back to NHWC: the value it came from
                changes += 1
                continue
            if twin is not None and y not in protected:
                renames[y] = twin
                changes += 1
                continue
            done[(x, p)] = y
            if p == TO_NCHW:
                nhwc_of[y] = x
            out.append(node)
            continue
        moved = _channels_last_form(g, node, mine, nhwc_of, constants, moved_constants, taken)
        if moved is None:
            out.append(node)
            continue
        inputs, axis = moved
        y = node.outputs[0]
        inner = fresh_name(g, f"{y}_nhwc", taken)
        _retype(g, inner, y, TO_NHWC)
        node.inputs, node.outputs = inputs, [inner]
        if axis is not None:
            node.attrs["axis"] = axis
        back = Node("Transpose", [inner], [y], {"perm": list(TO_NCHW)}, name=f"{node.name}_transposed", id=new_id())
        done[(inner, TO_NCHW)] = y
        nhwc_of[y] = inner
        out += [node, back]
        changes += 2
    g.nodes = out
    return changes + _drop_unread_transposes(g, mine, protected)


def _channels_last_form(g: Graph, node: Node, mine: set[int], nhwc_of: dict[str, str], constants: dict,
                        moved_constants: dict[str, str], taken: set[str]) -> tuple[list[str], int | None] | None:
    """The NHWC inputs (and Concat's renumbered axis) when ``node`` is the provider's element-wise op or Concat
    and every operand has an NHWC form or is a constant that broadcasts from the right; else None."""
    if node.id not in mine or not is_onnx_domain(node.domain) or len(node.outputs) != 1 or node.subgraphs():
        return None
    op, data = node.op_type, [i for i in node.inputs if i]
    if op in UNARY:
        ok = len(data) == 1 and len(node.inputs) == 1
    elif op in BINARY or (op == "Concat" and node.attr("axis") is not None):
        ok = bool(data) and len(data) == len(node.inputs)
    else:
        return None
    if not ok or not any(i in nhwc_of for i in data):
        return None
    inputs = []
    for name in node.inputs:
        if name in nhwc_of:
            inputs.append(nhwc_of[name])
        elif op != "Concat" and name in constants and constants[name].ndim <= len(TO_NHWC):
            if name not in moved_constants:
                value = constants[name]
                full = value.reshape((1,) * (len(TO_NHWC) - value.ndim) + value.shape)
                moved_constants[name] = fresh_name(g, f"{name}_nhwc", taken)
                g.initializers[moved_constants[name]] = np.ascontiguousarray(full.transpose(TO_NHWC))
            inputs.append(moved_constants[name])
        else:
            return None
    axis = TO_NCHW[int(node.attr("axis")) % len(TO_NCHW)] if op == "Concat" else None
    return inputs, axis


def _drop_unread_transposes(g: Graph, mine: set[int], protected: set[str]) -> int:
    """The provider's Transposes whose output nothing reads any more (the pass left them behind)."""
    read = {i for n in g.nodes for i in n.inputs if i}
    dead = [n for n in g.nodes if n.id in mine and _perm(n) is not None and n.outputs[0] not in read
            and n.outputs[0] not in protected]
    if dead:
        gone = {id(n) for n in dead}
        g.nodes = [n for n in g.nodes if id(n) not in gone]
    return len(dead)
