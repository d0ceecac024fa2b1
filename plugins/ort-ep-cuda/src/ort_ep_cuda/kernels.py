"""The plan CUDAExecutionProvider compiles a claimed subgraph into (``plan_subgraph``).

Steps: fused elementwise kernels (``codegen.Program``s: runs of elementwise nodes with one output shape become
one kernel; Sum and inference BatchNormalization join them), cuBLAS matrix products, row kernels (Softmax and
the layer normalizations, ``rowops``), window steps (convolutions as im2col + cuBLAS, pooling, ``windows``),
strided copies (Transpose, Split, Slice, Concat), Gather with constant indices (2-D copies, ``selection``), Cast
between float32 and float16 (the copy kernel storing another type) and views (Reshape, Identity, Squeeze,
Unsqueeze, Flatten: new shapes over the same memory). Planning is pure and runs without a GPU; ``record`` and
``launch`` execute plans.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ort_core.plugins import FusedSubgraph

from . import codegen, rowops, windows
from .capability import (
    AFFINE,
    COPIES,
    ELEMENTWISE,
    FLOATS,
    MS_DOMAIN,
    REDUCTIONS,
    ROWS,
    WINDOWS,
    reduced_axes,
    unsupported_reason,
)


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
    names; ``coerce_axis``: Softmax before opset 13 and the reductions (rows are the dims before it, flattened; a
    reduction writes one value per row), else None (rows are the last axis). ``keepdims``: a reduction's reduced
    axes stay as 1s."""

    program: rowops.RowProgram
    inputs: dict[str, str]
    out: str
    eps: float
    coerce_axis: int | None
    label: str
    total: str = ""  # SkipLayerNormalization's summed-input output, "" when unused
    keepdims: bool = True


@dataclass
class Copy:
    """Strided copies through ``program`` (the Identity kernel): Transpose (``perm``), Split (``axis``, ``sizes``:
    None for equal parts) or Slice (``bounds``: starts, ends, axes, steps) of ``src`` into ``outs``."""

    op: str
    program: codegen.Program
    src: str
    outs: list[str]
    perm: tuple[int, ...] | None
    axis: int
    sizes: tuple[int, ...] | None
    label: str
    bounds: tuple[tuple[int, ...], ...] | None = None


@dataclass
class Take:
    """Gather of ``src`` along ``axis`` at constant ``indices``: one 2-D copy per run of consecutive indices."""

    src: str
    out: str
    axis: int
    indices: np.ndarray
    dtype: str
    label: str


@dataclass
class Window:
    """A 2-D convolution (im2col, then cuBLAS; ``w``/``b`` its weights and bias, ``broadcast`` the kernel that
    writes the bias first) or pooling (``program`` the pooling kernel) of ``src`` into ``out``. Geometry
    attributes as ONNX gives them: ``kernel`` (None: the weights' or, for global pooling, the input's), pads
    (begin_h, begin_w, end_h, end_w), strides, dilations."""

    op: str
    program: windows.WindowProgram
    src: str
    out: str
    kernel: tuple[int, int] | None
    pads: tuple[int, int, int, int]
    strides: tuple[int, int]
    dilations: tuple[int, int]
    label: str
    w: str = ""
    b: str = ""
    broadcast: codegen.Program | None = None
    group: int = 1


@dataclass
class Concat:
    srcs: list[str]
    out: str
    axis: int
    dtype: str
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
    made: dict[str, np.ndarray] = field(default_factory=dict)  # constants computed here (BatchNormalization's)

    @property
    def programs(self) -> list[codegen.Program]:
        progs = [s.program for s in self.steps if isinstance(s, (Elementwise, Row, Copy, Window))]
        progs += [s.broadcast for s in self.steps if isinstance(s, Window) and s.broadcast is not None]
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
        if node.op_type in ("Reshape", "Squeeze", "Unsqueeze", "Slice", "Gather", *REDUCTIONS) and len(node.inputs) > 1:
            host_only.update(n for n in node.inputs[1:] if n)
    consumers: dict[str, list[int]] = {}
    for i, node in enumerate(nodes):
        for name in node.inputs:
            if name:
                consumers.setdefault(name, []).append(i)
    sub_outputs = set(subgraph.outputs)

    steps: list[Any] = []
    made: dict[str, np.ndarray] = {}
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
        elif op in REDUCTIONS:
            rank = len(graph.type_of(node.inputs[0]).shape)
            axes, _ = reduced_axes(node, opset, rank, constant)
            steps.append(Row(rowops.RowProgram(op, dtype), {"x": node.inputs[0]}, node.outputs[0], 0.0,
                             rank - len(axes), node.label, keepdims=bool(node.attrs.get("keepdims", 1))))
        elif op == "Concat":
            rank = len(graph.type_of(node.inputs[0]).shape)
            steps.append(Concat(list(node.inputs), node.outputs[0], int(node.attrs["axis"]) % rank, dtype, node.label))
        elif op in COPIES or op == "Slice":
            steps.append(_copy(node, opset, dtype, graph, constants))
        elif op == "Gather":
            steps.append(Take(node.inputs[0], node.outputs[0], int(node.attrs.get("axis", 0)),
                              np.asarray(constants[node.inputs[1]]), dtype, node.label))
        elif op == "Cast":
            rank = max(len(graph.type_of(node.inputs[0]).shape), 1)
            program = codegen.cast(dtype, FLOATS[int(node.attrs["to"])], rank)
            steps.append(Elementwise(program, [node.inputs[0]], [node.outputs[0]], [node.label]))
        elif op in AFFINE:
            steps.append(_batchnorm(node, dtype, graph, constants, made))
        elif op in WINDOWS:
            steps.append(_window(node, dtype))
        elif op == "MatMul":
            steps.append(MatMul(node.inputs[0], node.inputs[1], node.outputs[0], dtype, node.label))
        elif op == "Gemm":
            c = node.inputs[2] if len(node.inputs) > 2 else ""
            beta = float(node.attrs.get("beta", 1.0))
            bcast = codegen.identity(dtype, 2) if c and beta != 0 else None
            steps.append(Gemm(node.inputs[0], node.inputs[1], c, node.outputs[0], float(node.attrs.get("alpha", 1.0)),
                              beta, bool(node.attrs.get("transA", 0)), bool(node.attrs.get("transB", 0)), dtype,
                              node.label, bcast))
        else:
            steps.append(View(op, node.inputs[0], node.outputs[0], _view_shape_fn(node, opset, constants), node.label))
    close()

    read = {n for s in steps for n in _reads(s)}
    device_constants = sorted(n for n in read if (n in constants or n in made) and n not in host_only)
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
    return Plan(steps, inputs, list(subgraph.outputs), device_constants, views, casts, made)


def _row(node: Any, opset: int, dtype: str) -> Row:
    op, attrs = node.op_type, node.attrs
    roles = rowops.REQUIRED[op] + rowops.OPTIONAL[op]
    inputs = {role: name for role, name in zip(roles, node.inputs) if name}
    total = node.outputs[3] if op == "SkipLayerNormalization" and len(node.outputs) > 3 else ""
    program = rowops.RowProgram(op, dtype, tuple(r for r in rowops.OPTIONAL[op] if r in inputs), with_sum=bool(total))
    coerce = None
    if op == "Softmax" and opset < 13:
        coerce = int(attrs.get("axis", 1))
    return Row(program, inputs, node.outputs[0], float(attrs.get("epsilon", 1e-5)), coerce, node.label, total)


def _batchnorm(node: Any, dtype: str, graph: Any, constants: dict, made: dict) -> Elementwise:
    """BatchNormalization with constant statistics as one kernel: x * a + b, a = scale / sqrt(var + eps) and
    b = bias - mean * a computed here (in float64, stored in the data's type) with the channel axis broadcast."""
    scale, bias, mean, var = (np.asarray(constants[n], np.float64) for n in node.inputs[1:])
    a = scale / np.sqrt(var + float(node.attrs.get("epsilon", 1e-5)))
    b = bias - mean * a
    rank = len(graph.type_of(node.inputs[0]).shape)
    tail = (1,) * (rank - 2)
    names = (f"{node.outputs[0]}::bn_scale", f"{node.outputs[0]}::bn_shift")
    made[names[0]], made[names[1]] = a.reshape(-1, *tail).astype(dtype), b.reshape(-1, *tail).astype(dtype)
    program = codegen.Program(dtype, rank, 3, (("Mul", (("in", 0), ("in", 1))), ("Add", (("t", 0), ("in", 2)))), (1,))
    return Elementwise(program, [node.inputs[0], *names], [node.outputs[0]], [node.label, node.label])


def _window(node: Any, dtype: str) -> Window:
    op, attrs = node.op_type, node.attrs
    pads = tuple(int(p) for p in attrs.get("pads", (0, 0, 0, 0)))
    if attrs.get("auto_pad", "NOTSET") == "VALID":
        pads = (0, 0, 0, 0)
    strides = tuple(int(v) for v in attrs.get("strides", (1, 1)))
    dilations = tuple(int(v) for v in attrs.get("dilations", (1, 1)))
    kernel = tuple(int(v) for v in attrs["kernel_shape"]) if "kernel_shape" in attrs else None
    if op == "Conv":
        b = node.inputs[2] if len(node.inputs) > 2 else ""
        bcast = codegen.identity(dtype, 4) if b else None
        return Window(op, windows.WindowProgram("Im2col", dtype), node.inputs[0], node.outputs[0], kernel, pads,
                      strides, dilations, node.label, node.inputs[1], b, bcast, int(attrs.get("group", 1)))
    kind = "MaxPool" if op == "MaxPool" else \
        "AveragePoolIncludePad" if int(attrs.get("count_include_pad", 0)) else "AveragePool"
    return Window(op, windows.WindowProgram(kind, dtype), node.inputs[0], node.outputs[0], kernel, pads, strides,
                  dilations, node.label)


def _copy(node: Any, opset: int, dtype: str, graph: Any, constants: dict) -> Copy:
    attrs = node.attrs
    rank = len(graph.type_of(node.inputs[0]).shape)
    program = codegen.identity(dtype, rank)
    if node.op_type == "Transpose":
        perm = tuple(int(p) for p in attrs.get("perm", range(rank - 1, -1, -1)))
        return Copy("Transpose", program, node.inputs[0], list(node.outputs), perm, 0, None, node.label)
    if node.op_type == "Slice":  # starts, ends, axes, steps: constants (axes and steps may be absent)
        bounds = tuple(tuple(int(v) for v in np.asarray(constants[n]).reshape(-1)) if n else None
                       for n in (list(node.inputs[1:]) + ["", ""])[:4])
        return Copy("Slice", program, node.inputs[0], list(node.outputs), None, 0, None, node.label, bounds)
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
    if isinstance(step, (Copy, Take)):
        return [step.src]
    if isinstance(step, Window):
        return [n for n in (step.src, step.w, step.b) if n]
    if isinstance(step, Concat):
        return step.srcs
    if isinstance(step, MatMul):
        return [step.a, step.b]
    if isinstance(step, Gemm):
        return [step.a, step.b, *([step.c] if step.c else [])]
    return [step.src]


def _elementwise(group: list[int], nodes: list, graph: Any, consumers: dict, sub_outputs: set) -> Elementwise:
    members = set(group)
    produced: dict[str, int] = {}  # value name -> the step computing it
    inputs: list[str] = []
    steps: list[tuple] = []
    labels: list[str] = []  # the node of each step

    def operand(name: str) -> tuple[str, int]:
        if name in produced:
            return ("t", produced[name])
        if name not in inputs:
            inputs.append(name)
        return ("in", inputs.index(name))

    for i in group:
        node = nodes[i]
        operands = [operand(name) for name in node.inputs]
        if node.op_type == "Sum":  # Sum(a, b, c) = (a + b) + c; Sum(a) = a
            acc = operands[0]
            if len(operands) == 1:
                steps.append(("Identity", (acc,)))
                labels.append(node.label)
            for other in operands[1:]:
                steps.append(("Add", (acc, other)))
                labels.append(node.label)
                acc = ("t", len(steps) - 1)
        else:
            steps.append(("Gelu" if node.op_type == "Gelu" else node.op_type, tuple(operands)))
            labels.append(node.label)
        produced[node.outputs[0]] = len(steps) - 1
    written = [i for i in group if nodes[i].outputs[0] in sub_outputs
               or any(c not in members for c in consumers.get(nodes[i].outputs[0], []))]
    written = written or [group[-1]]  # a value nobody reads is still computed, into scratch memory
    outputs = [produced[nodes[i].outputs[0]] for i in written]
    ranks = [len(graph.type_of(name).shape) for name in inputs]  # the index space: all inputs broadcast
    elem = _data_elem(nodes[group[0]], graph)
    program = codegen.Program(FLOATS[elem], max(*ranks, 1), len(inputs), tuple(steps), tuple(outputs))
    return Elementwise(program, inputs, [nodes[i].outputs[0] for i in written], labels)
