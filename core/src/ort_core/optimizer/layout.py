"""Channels-last for a provider that prefers it (``Preferences.layout == "NHWC"``), run on the nodes it claimed.

Hardware that computes in NHWC (Qualcomm's HTP, most NPUs) otherwise pays two Transposes around every
convolution. As onnxruntime does for such providers, the layout-sensitive ops the provider claimed (Conv,
MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool, LRN on 4-D tensors) become the same op in the domain
``com.ms.internal.nhwc`` (onnxruntime's name): its data input and output are NHWC, its weights and attributes stay
as ONNX defines them. A Transpose to NHWC goes before each, one back to NCHW after. Then the Transposes are moved
past the element-wise ops the same provider claimed (unary ones, and binary ones whose other operand is moved the
same way or is a constant, transposed once here; Concat with every input moved, its axis renumbered), and a
Transpose followed by its inverse is removed, so a chain of convolutions, activations, residual adds and channel
concatenations stays in NHWC between its first and last Transpose.

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
CHANNELS_FIRST_OPS = frozenset({"Conv", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "LRN"})
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

    producers = {o: n for n in g.nodes for o in n.outputs if o}
    readers = _readers(g)
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


def _readers(g: Graph) -> dict[str, list[Node]]:
    found: dict[str, list[Node]] = {}
    for n in g.nodes:
        for i in dict.fromkeys(n.inputs):
            if i:
                found.setdefault(i, []).append(n)
    return found


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
    """Move Transposes below the provider's element-wise ops and drop inverse pairs, until nothing changes;
    returns how many nodes changed."""
    changes = 0
    for _ in range(4 * len(g.nodes) + 8):  # each round moves a Transpose down or removes nodes: bounded
        protected = protected_names(g)
        readers = _readers(g)
        step = (_merge_one(g, mine, protected) or _cancel_one(g, mine, readers, protected)
                or _sink_one(g, mine, readers, protected, taken, new_id))
        if not step:
            break
        changes += step
    return changes


def _sole_reader(name: str, readers: dict[str, list[Node]], protected: set[str]) -> Node | None:
    found = readers.get(name, [])
    return found[0] if len(found) == 1 and name not in protected else None


def _cancel_one(g: Graph, mine: set[int], readers: dict[str, list[Node]], protected: set[str]) -> int:
    """One Transpose read by its inverse: the inverse's readers read the first one's input instead and the inverse
    goes (the first one too when nothing else reads it); 0 when there is none."""
    for a in g.nodes:
        p = _perm(a)
        if p is None or a.id not in mine:
            continue
        after = [b for b in readers.get(a.outputs[0], []) if b.id in mine and _perm(b) == _inverse(p)
                 and b.outputs[0] not in protected]
        if not after:
            continue
        source = a.inputs[0]
        gone = {id(b) for b in after}
        if len(readers[a.outputs[0]]) == len(after) and a.outputs[0] not in protected:
            gone.add(id(a))
        renames = {b.outputs[0]: source for b in after}
        for n in g.nodes:
            if id(n) not in gone:
                n.inputs = [renames.get(i, i) for i in n.inputs]
        g.nodes = [n for n in g.nodes if id(n) not in gone]
        return len(gone)
    return 0


def _merge_one(g: Graph, mine: set[int], protected: set[str]) -> int:
    """Two of the provider's Transposes of one value by one perm (two convolutions reading the same input): the
    second one's readers read the first one's output; 0 when there are none."""
    seen: dict[tuple[str, tuple[int, ...]], Node] = {}
    for t in g.nodes:
        p = _perm(t)
        if p is None or t.id not in mine:
            continue
        first = seen.setdefault((t.inputs[0], p), t)
        if first is t or t.outputs[0] in protected:
            continue
        old, new = t.outputs[0], first.outputs[0]
        for n in g.nodes:
            n.inputs = [new if i == old else i for i in n.inputs]
        g.nodes = [n for n in g.nodes if n is not t]
        return 1
    return 0


def _inverse(p: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(int(i) for i in np.argsort(p))


def _sink_one(g: Graph, mine: set[int], readers: dict[str, list[Node]], protected: set[str], taken: set[str],
              new_id) -> int:
    """Move one Transpose below the element-wise node that alone reads it. A binary node's other operands must
    come through a Transpose of the same perm (kept where something else reads it) or be constants."""
    producers = {o: n for n in g.nodes for o in n.outputs if o}
    for a in g.nodes:
        p = _perm(a)
        if p is None or a.id not in mine:
            continue
        op = _sole_reader(a.outputs[0], readers, protected)
        if op is None or op.id not in mine or not is_onnx_domain(op.domain) or len(op.outputs) != 1:
            continue
        if op.op_type in UNARY and len([i for i in op.inputs if i]) == 1:
            sources = {a.outputs[0]: a.inputs[0]}
        elif op.op_type in BINARY:
            sources = _operand_sources(g, op, p, producers)
            if sources is None:
                continue
        elif op.op_type == "Concat" and op.attr("axis") is not None:
            sources = _operand_sources(g, op, p, producers, constants_too=False)
            if sources is None:
                continue
            op.attrs["axis"] = p[int(op.attr("axis")) % len(p)]  # the same axis, counted in the other layout
        else:
            continue
        _sink(g, op, sources, p, readers, protected, taken, new_id)
        return 1
    return 0


def _operand_sources(g: Graph, op: Node, p: tuple[int, ...], producers: dict[str, Node],
                     constants_too: bool = True) -> dict[str, str] | None:
    """For each of ``op``'s operands made by a Transpose of perm ``p``, that Transpose's input; None when another
    operand is neither that nor (``constants_too``) a constant of at most as many dims."""
    sources: dict[str, str] = {}
    constants = g.constant_initializers() if constants_too else {}
    for name in op.inputs:
        t = producers.get(name)
        if t is not None and _perm(t) == p:
            sources[name] = t.inputs[0]
        elif name not in constants or constants[name].ndim > len(p):
            return None
    return sources


def _sink(g: Graph, op: Node, sources: dict[str, str], p: tuple[int, ...], readers: dict[str, list[Node]],
          protected: set[str], taken: set[str], new_id) -> None:
    """``op`` reads the Transposes' inputs (constants transposed by the inverse of ``p``) and writes a new value;
    one Transpose by ``p`` after it writes ``op``'s old output. The Transposes only ``op`` read go."""
    constants = g.constant_initializers()
    inputs = []
    for name in op.inputs:
        if name in sources:
            inputs.append(sources[name])
        else:  # a constant broadcast against the 4-D operands: aligned right, then put in the other layout
            value = constants[name]
            full = value.reshape((1,) * (len(p) - value.ndim) + value.shape)
            moved = fresh_name(g, f"{name}_nhwc", taken)
            g.initializers[moved] = np.ascontiguousarray(full.transpose(_inverse(p)))
            inputs.append(moved)
    out = op.outputs[0]
    inner = fresh_name(g, f"{out}_nhwc", taken)
    _retype(g, inner, out, _inverse(p))
    op.inputs, op.outputs = inputs, [inner]
    after = Node("Transpose", [inner], [out], {"perm": list(p)}, name=f"{op.name}_transposed", id=new_id())
    gone = {name for name in sources if _sole_reader(name, readers, protected) is op}
    nodes = []
    for n in g.nodes:
        if n.op_type == "Transpose" and n.outputs and n.outputs[0] in gone and n is not op:
            continue
        nodes.append(n)
        if n is op:
            nodes.append(after)
    g.nodes = nodes
