"""What CUDAExecutionProvider runs, and the plan it compiles a fused subgraph into.

``unsupported_reason`` is the one rule shared by capability and compile. ``plan_subgraph`` turns a claimed
subgraph into steps: fused elementwise kernels (``codegen.Program``s: runs of elementwise nodes with one output
shape become one kernel), cuBLAS matrix products, and views (Reshape, Identity, Squeeze, Unsqueeze, Flatten:
new shapes over the same memory). Planning is pure and runs without a GPU; ``launch`` executes plans.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto

from ort_core.plugins import FusedSubgraph

from . import codegen, rowops

NEWEST_OPSET = onnx.defs.onnx_opset_version()
"""The newest default-domain opset the ops were checked against (the installed onnx's): a later opset may
change an operator's meaning, so nodes of newer models are declined rather than guessed at."""

MS_DOMAIN = "com.microsoft"
FLOATS = {TensorProto.FLOAT: "float32", TensorProto.FLOAT16: "float16"}

# op type -> oldest opset with today's meaning (binary ops broadcast numpy-style from 7, unary ops lost
# consumed_inputs at 6)
ELEMENTWISE = {"Add": 7, "Sub": 7, "Mul": 7, "Div": 7, "Pow": 7, "Where": 9, "Relu": 6, "Sigmoid": 6, "Tanh": 6,
               "Exp": 6, "Log": 6, "Sqrt": 6, "Neg": 6, "Abs": 6, "Erf": 9, "Gelu": 20}
VIEWS = {"Identity": 1, "Reshape": 5, "Squeeze": 1, "Unsqueeze": 1, "Flatten": 1}
MATRIX = {"MatMul": 1, "Gemm": 7}
ROWS = {"Softmax": 1, "LayerNormalization": 1}  # LayerNormalization: opset 17's, or the optimizer's fused op below it
MS_OPS = {"Gelu", "SkipLayerNormalization"}
COPIES = {"Transpose": 1, "Split": 2}  # strided copies through the Identity kernel


def _label(node: Any) -> str:
    return node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}::{node.op_type}"


def unsupported_reason(node: Any, opsets: dict[str, int], type_of: Callable[[str], Any],
                       constant: Callable[[str], Any]) -> str | None:
    """Why this provider cannot run ``node`` (a short phrase), or None when it can.

    ``opsets``: the model's opset imports; ``type_of``: value name -> static ValueType or None; ``constant``:
    value name -> the constant initializer's array or None."""
    op, domain = node.op_type, node.domain
    opset = opsets.get("", opsets.get("ai.onnx", 0))
    if domain == MS_DOMAIN:
        if op not in MS_OPS:
            return f"{MS_DOMAIN}::{op} is not supported (of that domain only {', '.join(sorted(MS_OPS))} are)"
        since = 1
    elif domain in ("", "ai.onnx"):
        since = {**ELEMENTWISE, **VIEWS, **MATRIX, **ROWS, **COPIES}.get(op)
        if since is None:
            return (f"{op} is not supported yet (elementwise ops, MatMul, Gemm, Softmax, LayerNormalization, "
                    "Transpose, Split and views are)")
        if opset < since:
            return f"{op} at opset {opset} has legacy semantics (supported from opset {since})"
        if opset > NEWEST_OPSET:
            return f"opset {opset} is newer than the {NEWEST_OPSET} this provider was checked against"
    else:
        return f"domain '{domain}' is not supported"
    if op == "SkipLayerNormalization":
        if not node.outputs or not node.outputs[0] or any(node.outputs[1:3]):
            return "only the output and the summed input are computed (Mean and InvStdDev are not)"
    elif op in ROWS:
        if not node.outputs or not node.outputs[0] or any(node.outputs[1:]):
            return "only the first output is computed (Mean and InvStdDev are not)"
    elif op == "Split":
        if not node.outputs or not all(node.outputs):
            return "every output of Split must be used"
    elif len(node.outputs) != 1 or not node.outputs[0]:
        return "expected exactly one output"
    types = {}
    for name in node.inputs:  # output ranks follow from the inputs' at run time
        if name:
            t = type_of(name)
            if t is None or t.kind != "tensor" or not t.elem_type or t.shape is None:
                return f"type or rank of '{name}' is unknown"
            types[name] = t
    if op in VIEWS:
        return _view_reason(node, opset, types, constant)
    if op in ("Gemm", "MatMul"):
        return _matrix_reason(node, types)
    if op in ROWS or op == "SkipLayerNormalization":
        return _row_reason(node, opset, types)
    if op in COPIES:
        return _copy_reason(node, opset, types, constant)
    # elementwise
    attrs = dict(node.attrs)
    if op == "Gelu" and domain != MS_DOMAIN:
        if attrs.pop("approximate", "none") != "none":
            return "Gelu approximate='tanh' is not supported (only the erf form)"
    if attrs:
        return f"attribute(s) {', '.join(sorted(attrs))} not supported"
    arity = codegen.OPS[op].arity
    if len(node.inputs) != arity or not all(node.inputs):
        return f"expected {arity} input(s)"
    if op == "Where":  # the kernels compute floats: a constant condition is uploaded as 0/1 of the data's type
        condition = node.inputs[0]
        if types[condition].elem_type != TensorProto.BOOL or constant(condition) is None:
            return "the condition is not a constant tensor(bool) initializer"
        return _float_reason(node, {n: types[n] for n in node.inputs[1:]})
    return _float_reason(node, types)


def _float_reason(node: Any, types: dict) -> str | None:
    elems = {t.elem_type for t in types.values()}
    if len(elems) != 1 or next(iter(elems)) not in FLOATS:
        shown = ", ".join(sorted({t.text for t in types.values()}))
        return f"types {shown}: only tensor(float) or tensor(float16), all the same, are supported"
    return None


def _matrix_reason(node: Any, types: dict) -> str | None:
    ins = [n for n in node.inputs if n]
    if node.op_type == "MatMul":
        if len(node.inputs) != 2 or len(ins) != 2:
            return "expected 2 inputs"
        if any(len(types[n].shape) == 0 for n in ins):
            return "MatMul of a scalar is not defined"
        return _float_reason(node, types)
    if len(node.inputs) < 2 or not node.inputs[0] or not node.inputs[1] or len(node.inputs) > 3:
        return "expected inputs A, B and an optional C"
    extra = set(node.attrs) - {"alpha", "beta", "transA", "transB"}
    if extra:
        return f"attribute(s) {', '.join(sorted(extra))} not supported"
    if len(types[node.inputs[0]].shape) != 2 or len(types[node.inputs[1]].shape) != 2:
        return "Gemm needs 2-D A and B"
    if len(node.inputs) == 3 and node.inputs[2] and len(types[node.inputs[2]].shape) > 2:
        return "Gemm's C has more than 2 dimensions"
    return _float_reason(node, types)


def _row_reason(node: Any, opset: int, types: dict) -> str | None:
    op, attrs = node.op_type, dict(node.attrs)
    x = node.inputs[0] if node.inputs else ""
    if not x:
        return "expected an input"
    rank = len(types[x].shape)
    if op == "Softmax":
        if len(node.inputs) != 1 or set(attrs) - {"axis"}:
            return "expected one input and only 'axis'"
        axis = int(attrs.get("axis", -1 if opset >= 13 else 1))
        if not -rank <= axis < max(rank, 1):
            return f"axis {axis} is out of range for rank {rank}"
        if opset >= 13 and axis % max(rank, 1) != rank - 1:
            return "only the last axis is supported"
        return _float_reason(node, types)
    required = 3 if op == "SkipLayerNormalization" else 2
    if len(node.inputs) < required or not all(node.inputs[:required]) or len(node.inputs) > required + 2:
        return f"expected {required} to {required + 2} inputs"
    extra = set(attrs) - ({"epsilon"} if op == "SkipLayerNormalization" else {"axis", "epsilon", "stash_type"})
    if extra:
        return f"attribute(s) {', '.join(sorted(extra))} not supported"
    if rank == 0:
        return "a scalar has no axis to normalize"
    if op == "LayerNormalization" and int(attrs.get("axis", -1)) % rank != rank - 1:
        return "only the last axis is normalized (axis=-1)"
    for name in node.inputs[required - 1:]:  # gamma, beta, bias: one value per column
        if name and len(types[name].shape) != 1:
            return f"'{name}' is not 1-D (scale, bias and beta of the last axis are)"
    if op == "SkipLayerNormalization":
        if rank not in (2, 3):  # onnxruntime's definition (and the CPU provider's kernel)
            return f"the input is {rank}-D; SkipLayerNormalization takes 3-D (batch, sequence, hidden) or 2-D input"
        if len(types[node.inputs[1]].shape) != rank:
            return "the skip input has another rank than the input"
    return _float_reason(node, types)


def _copy_reason(node: Any, opset: int, types: dict, constant: Callable[[str], Any]) -> str | None:
    op, attrs = node.op_type, dict(node.attrs)
    data = node.inputs[0] if node.inputs else ""
    if not data:
        return "expected a data input"
    rank = len(types[data].shape)
    if rank == 0:
        return f"{op} of a scalar"
    if op == "Transpose":
        if len(node.inputs) != 1 or set(attrs) - {"perm"}:
            return "expected one input and only 'perm'"
        perm = attrs.get("perm")
        if perm is not None and sorted(int(p) for p in perm) != list(range(rank)):
            return f"perm {list(perm)} is not a permutation of {rank} axes"
        return _float_reason(node, {data: types[data]})
    if set(attrs) - {"axis", "split", "num_outputs"}:
        return f"attribute(s) {', '.join(sorted(set(attrs) - {'axis', 'split', 'num_outputs'}))} not supported"
    if not -rank <= int(attrs.get("axis", 0)) < rank:
        return f"axis {attrs.get('axis')} is out of range for rank {rank}"
    if len(node.inputs) > 1 and node.inputs[1] and constant(node.inputs[1]) is None:
        return "the split sizes are not a constant initializer"
    return _float_reason(node, {data: types[data]})


def _view_reason(node: Any, opset: int, types: dict, constant: Callable[[str], Any]) -> str | None:
    data = node.inputs[0] if node.inputs else ""
    if not data:
        return "expected a data input"
    if types[data].elem_type not in FLOATS:
        # this provider computes float types only: a view of anything else (shape arithmetic in int64, masks)
        # would only send its value to the GPU and back
        return f"'{data}' is {types[data].text}: views are taken of tensor(float) and tensor(float16) only"
    op, attrs = node.op_type, dict(node.attrs)
    if op == "Identity":
        return None if len(node.inputs) == 1 and not attrs else "expected one input and no attributes"
    if op == "Flatten":
        return None if len(node.inputs) == 1 and set(attrs) <= {"axis"} else "expected one input and only 'axis'"
    if op == "Reshape":
        if len(node.inputs) != 2 or constant(node.inputs[1]) is None:
            return "the target shape is not a constant initializer"
        extra = sorted(set(attrs) - {"allowzero"})
        return f"attribute(s) {', '.join(extra)} not supported" if extra else None
    # Squeeze / Unsqueeze: axes as an attribute before opset 13, as an input from 13
    if opset < 13:
        if len(node.inputs) != 1 or set(attrs) - {"axes"}:
            return "expected one input and only 'axes'"
        if op == "Unsqueeze" and "axes" not in attrs:
            return "Unsqueeze needs 'axes'"
        return None
    if attrs:
        return f"attribute(s) {', '.join(sorted(attrs))} not supported at opset {opset}"
    if len(node.inputs) > 1 and node.inputs[1]:
        if constant(node.inputs[1]) is None:
            return "axes are not a constant initializer"
        return None
    return None if op == "Squeeze" else "Unsqueeze needs axes"


# ------------------------------------------------------------------------------------------------- plan
@dataclass
class Elementwise:
    """A fused elementwise kernel: ``program`` over ``inputs`` (value names), writing ``outputs``."""

    program: codegen.Program
    inputs: list[str]
    outputs: list[str]
    labels: list[str]


@dataclass
class MatMul:
    a: str
    b: str
    out: str
    dtype: str
    label: str


@dataclass
class Gemm:
    a: str
    b: str
    c: str  # "" when absent
    out: str
    alpha: float
    beta: float
    trans_a: bool
    trans_b: bool
    dtype: str
    label: str
    broadcast: codegen.Program | None = None  # writes C broadcast into the output before the product


@dataclass
class Row:
    """A row kernel (``rowops``): ``inputs`` maps the program's input roles (x, skip, gamma, beta, bias) to value
    names; ``coerce_axis``: Softmax before opset 13 (rows are the dims before it, flattened), else None (rows
    are the last axis)."""

    program: rowops.RowProgram
    inputs: dict[str, str]
    out: str
    eps: float
    coerce_axis: int | None
    label: str
    total: str = ""  # SkipLayerNormalization's summed-input output, "" when unused


@dataclass
class Copy:
    """Strided copies through ``program`` (the Identity kernel): Transpose (``perm``) or Split (``axis``, ``sizes``:
    None for equal parts) of ``src`` into ``outs``."""

    op: str
    program: codegen.Program
    src: str
    outs: list[str]
    perm: tuple[int, ...] | None
    axis: int
    sizes: tuple[int, ...] | None
    label: str


@dataclass
class View:
    """A new shape over the same memory: ``shape_of(input shape) -> output shape``."""

    op: str
    src: str
    out: str
    shape_of: Callable[[tuple[int, ...]], tuple[int, ...]]
    label: str


@dataclass
class Plan:
    steps: list[Any]
    inputs: list[str]
    outputs: list[str]
    device_constants: list[str]  # constants the steps read on the GPU (uploaded once)
    views: dict[int, int] = field(default_factory=dict)  # output index -> input index (ContextKernel.views)
    casts: dict[str, str] = field(default_factory=dict)  # constants uploaded as another dtype (Where's condition)

    @property
    def programs(self) -> list[codegen.Program]:
        progs = [s.program for s in self.steps if isinstance(s, (Elementwise, Row, Copy))]
        return progs + [s.broadcast for s in self.steps if isinstance(s, Gemm) and s.broadcast is not None]


def _shape_key(t: Any) -> tuple | None:
    """A static shape usable to compare output shapes (ints and symbolic names), None if a dim is unknown."""
    if t is None or t.shape is None or any(d is None for d in t.shape):
        return None
    return tuple(t.shape)


def _view_shape_fn(node: Any, opset: int, constants: dict) -> Callable[[tuple[int, ...]], tuple[int, ...]]:
    from . import shapes

    op, attrs = node.op_type, node.attrs
    if op == "Identity":
        return lambda s: s
    if op == "Flatten":
        axis = int(attrs.get("axis", 1))
        return lambda s: shapes.flatten_shape(s, axis)
    if op == "Reshape":
        target = [int(d) for d in np.asarray(constants[node.inputs[1]]).reshape(-1)]
        allowzero = bool(attrs.get("allowzero", 0))
        return lambda s: shapes.reshape_shape(s, target, allowzero)
    if opset < 13:
        axes = attrs.get("axes")
    else:
        axes = None if len(node.inputs) < 2 or not node.inputs[1] else \
            [int(a) for a in np.asarray(constants[node.inputs[1]]).reshape(-1)]
    if op == "Squeeze":
        return lambda s: shapes.squeeze_shape(s, axes)
    return lambda s: shapes.unsqueeze_shape(s, axes)


def plan_subgraph(subgraph: FusedSubgraph) -> Plan:
    """The steps of ``subgraph`` (checked node by node against ``unsupported_reason``; ValueError naming the
    node it cannot run). Elementwise nodes join the open kernel while their output has its static shape."""
    graph, opsets = subgraph.graph, subgraph.opsets
    constants = dict(subgraph.constants)

    def constant(name: str) -> Any:
        return constants.get(name)

    nodes = subgraph.nodes
    for node in nodes:
        why = unsupported_reason(node, opsets, graph.type_of, constant)
        if why is not None:
            raise ValueError(f"{node.label}: {why}")
    opset = opsets.get("", opsets.get("ai.onnx", 0))
    host_only = set()  # constants read on the host only (shapes, axes)
    for node in nodes:
        if node.op_type in ("Reshape", "Squeeze", "Unsqueeze") and len(node.inputs) > 1 and node.inputs[1]:
            host_only.add(node.inputs[1])
    consumers: dict[str, list[int]] = {}
    for i, node in enumerate(nodes):
        for name in node.inputs:
            if name:
                consumers.setdefault(name, []).append(i)
    sub_outputs = set(subgraph.outputs)

    steps: list[Any] = []
    group: list[int] = []  # indices of the open elementwise run
    group_key: tuple | None = None

    def close() -> None:
        if group:
            steps.append(_elementwise(group, nodes, graph, consumers, sub_outputs))
            group.clear()

    for i, node in enumerate(nodes):
        op = node.op_type
        if op in ELEMENTWISE or (node.domain == MS_DOMAIN and op == "Gelu"):
            shape = _shape_key(graph.type_of(node.outputs[0]))
            key = None if shape is None else (_data_elem(node, graph), shape)
            if not (group and key is not None and key == group_key):
                close()
            group.append(i)
            group_key = key
            continue
        close()
        dtype = FLOATS.get(graph.type_of(node.inputs[0]).elem_type, "")
        if op in ROWS or op == "SkipLayerNormalization":
            steps.append(_row(node, opset, dtype))
        elif op in COPIES:
            steps.append(_copy(node, opset, dtype, graph, constants))
        elif op == "MatMul":
            steps.append(MatMul(node.inputs[0], node.inputs[1], node.outputs[0], dtype, node.label))
        elif op == "Gemm":
            c = node.inputs[2] if len(node.inputs) > 2 else ""
            beta = float(node.attrs.get("beta", 1.0))
            bcast = codegen.Program(dtype, 2, 1, (("Identity", (("in", 0),)),), (0,)) if c and beta != 0 else None
            steps.append(Gemm(node.inputs[0], node.inputs[1], c, node.outputs[0], float(node.attrs.get("alpha", 1.0)),
                              beta, bool(node.attrs.get("transA", 0)), bool(node.attrs.get("transB", 0)), dtype,
                              node.label, bcast))
        else:
            steps.append(View(op, node.inputs[0], node.outputs[0], _view_shape_fn(node, opset, constants), node.label))
    close()

    read = {n for s in steps for n in _reads(s)}
    device_constants = sorted(n for n in read if n in constants and n not in host_only)
    # outputs that are views (through views only) of a subgraph input: handed back without a copy when allowed
    origin = {}
    for s in steps:
        if isinstance(s, View):
            origin[s.out] = origin.get(s.src, s.src)
    inputs = list(subgraph.inputs)
    views = {k: inputs.index(origin[o]) for k, o in enumerate(subgraph.outputs)
             if o in origin and origin[o] in inputs}
    casts = {}
    for s in steps:
        if isinstance(s, Elementwise):
            for (op, operands) in s.program.steps:
                if op == "Where" and operands[0][0] == "in":
                    casts[s.inputs[operands[0][1]]] = s.program.dtype
    return Plan(steps, inputs, list(subgraph.outputs), device_constants, views, casts)


def _row(node: Any, opset: int, dtype: str) -> Row:
    op, attrs = node.op_type, node.attrs
    roles = rowops.REQUIRED[op] + rowops.OPTIONAL[op]
    inputs = {role: name for role, name in zip(roles, node.inputs) if name}
    program = rowops.RowProgram(op, dtype, tuple(r for r in rowops.OPTIONAL[op] if r in inputs))
    coerce = None
    if op == "Softmax" and opset < 13:
        coerce = int(attrs.get("axis", 1))
    total = node.outputs[3] if op == "SkipLayerNormalization" and len(node.outputs) > 3 else ""
    if total:
        program = rowops.RowProgram(op, dtype, program.present, with_sum=True)
    return Row(program, inputs, node.outputs[0], float(attrs.get("epsilon", 1e-5)), coerce, node.label, total)


def _copy(node: Any, opset: int, dtype: str, graph: Any, constants: dict) -> Copy:
    attrs = node.attrs
    rank = len(graph.type_of(node.inputs[0]).shape)
    program = codegen.Program(dtype, rank, 1, (("Identity", (("in", 0),)),), (0,))
    if node.op_type == "Transpose":
        perm = tuple(int(p) for p in attrs.get("perm", range(rank - 1, -1, -1)))
        return Copy("Transpose", program, node.inputs[0], list(node.outputs), perm, 0, None, node.label)
    sizes = attrs.get("split") if opset < 13 else None
    if len(node.inputs) > 1 and node.inputs[1]:
        sizes = np.asarray(constants[node.inputs[1]]).reshape(-1)
    sizes = None if sizes is None else tuple(int(v) for v in sizes)
    axis = int(attrs.get("axis", 0)) % rank
    return Copy("Split", program, node.inputs[0], list(node.outputs), None, axis, sizes, node.label)


def _data_elem(node: Any, graph: Any) -> int:
    """The element type an elementwise node computes in: its first data input's (Where's condition is not data;
    output types may be unknown inside graph bodies, input types are checked by ``unsupported_reason``)."""
    return graph.type_of(node.inputs[1 if node.op_type == "Where" else 0]).elem_type


def _reads(step: Any) -> list[str]:
    if isinstance(step, Elementwise):
        return step.inputs
    if isinstance(step, Row):
        return list(step.inputs.values())
    if isinstance(step, Copy):
        return [step.src]
    if isinstance(step, MatMul):
        return [step.a, step.b]
    if isinstance(step, Gemm):
        return [step.a, step.b, *([step.c] if step.c else [])]
    return [step.src]


def _elementwise(group: list[int], nodes: list, graph: Any, consumers: dict, sub_outputs: set) -> Elementwise:
    members = set(group)
    produced = {nodes[i].outputs[0]: j for j, i in enumerate(group)}
    inputs: list[str] = []
    steps = []
    for i in group:
        node = nodes[i]
        operands = []
        for name in node.inputs:
            if name in produced and produced[name] < len(steps):
                operands.append(("t", produced[name]))
            else:
                if name not in inputs:
                    inputs.append(name)
                operands.append(("in", inputs.index(name)))
        steps.append(("Gelu" if node.op_type == "Gelu" else node.op_type, tuple(operands)))
    outputs = [j for j, i in enumerate(group) if nodes[i].outputs[0] in sub_outputs
               or any(c not in members for c in consumers.get(nodes[i].outputs[0], []))]
    outputs = outputs or [len(group) - 1]  # a value nobody reads is still computed, into scratch memory
    ranks = [len(graph.type_of(name).shape) for name in inputs]  # the index space: all inputs broadcast
    elem = _data_elem(nodes[group[0]], graph)
    program = codegen.Program(FLOATS[elem], max(*ranks, 1), len(inputs), tuple(steps), tuple(outputs))
    return Elementwise(program, inputs, [nodes[group[j]].outputs[0] for j in outputs], [nodes[i].label for i in group])
