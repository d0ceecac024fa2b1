"""What the example provider can run, and the kernel it compiles a fused subgraph into.

``unsupported_reason`` is the single rule shared by capability and compile; ``compile_subgraph``
turns a claimed subgraph into a stateless ContextKernel that enqueues its work on the run's stream.
Numpy does the arithmetic: a real vendor would hand the subgraph (or ``subgraph.to_model_proto()``)
to its SDK here instead, and enqueue the compiled engine on its stream.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from onnx import TensorProto

from ort_core.plugins import ContextKernel, FusedSubgraph, KernelContext, context_blob, is_context_node

from .memory import view

PROVIDER = "ExampleExecutionProvider"  # its name, here because compile reads its own EPContext nodes

NEWEST_OPSET = 28
"""The newest default-domain opset these ops were checked against (onnx 1.23). A later opset
may change an operator's meaning, so nodes of newer models are declined rather than guessed at."""

DTYPES = {TensorProto.FLOAT: "float32", TensorProto.DOUBLE: "float64"}


def _relu(out: np.ndarray, x: np.ndarray) -> None:
    np.maximum(x, x.dtype.type(0), out=out)


def _sigmoid(out: np.ndarray, x: np.ndarray) -> None:
    # 0.5 * tanh(x / 2) + 0.5 equals 1 / (1 + exp(-x)) but cannot overflow for large |x|
    half = x.dtype.type(0.5)
    np.multiply(x, half, out=out)
    np.tanh(out, out=out)
    out *= half
    out += half


def _ufunc(fn: np.ufunc) -> Callable[..., None]:
    return lambda out, *xs: fn(*xs, out=out)


@dataclass(frozen=True)
class Op:
    """One supported operator: how many inputs, the oldest opset with today's meaning, the math
    (writes into ``out``) and the output shape for given input arrays."""

    arity: int
    since: int
    compute: Callable[..., None]
    shape: Callable[..., tuple[int, ...]]


def _same_shape(x: np.ndarray) -> tuple[int, ...]:
    return x.shape


def _broadcast_shape(a: np.ndarray, b: np.ndarray) -> tuple[int, ...]:
    return np.broadcast_shapes(a.shape, b.shape)


def _matmul_shape(a: np.ndarray, b: np.ndarray) -> tuple[int, ...]:
    """numpy.matmul's (and ONNX MatMul's) result shape; 1-D operands gain then lose an axis."""
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError(f"MatMul needs inputs of rank >= 1, got shapes {a.shape} and {b.shape}")
    a2 = a.shape if a.ndim > 1 else (1, *a.shape)
    b2 = b.shape if b.ndim > 1 else (*b.shape, 1)
    if a2[-1] != b2[-2]:
        raise ValueError(f"MatMul inner dimensions differ: {a.shape} x {b.shape}")
    rows = (a2[-2],) if a.ndim > 1 else ()
    cols = (b2[-1],) if b.ndim > 1 else ()
    return (*np.broadcast_shapes(a2[:-2], b2[:-2]), *rows, *cols)


# Opsets before these changed meaning: binary ops before 7 broadcast through a ``broadcast``
# attribute, unary ops before 6 carried ``consumed_inputs``. MatMul has meant numpy.matmul since 1.
OPS: dict[str, Op] = {
    **{name: Op(2, 7, _ufunc(fn), _broadcast_shape) for name, fn in
       {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide}.items()},
    "Relu": Op(1, 6, _relu, _same_shape),
    "Sigmoid": Op(1, 6, _sigmoid, _same_shape),
    **{name: Op(1, 6, _ufunc(fn), _same_shape) for name, fn in
       {"Tanh": np.tanh, "Exp": np.exp, "Neg": np.negative, "Abs": np.absolute}.items()},
    "MatMul": Op(2, 1, _ufunc(np.matmul), _matmul_shape),
    "Identity": Op(1, 1, lambda out, x: np.copyto(out, x), _same_shape),
}
VIEW_OPS = frozenset({"Identity"})
"""Ops whose result is their input's memory: an output computed only by them from a subgraph input is
declared a view of that input (ContextKernel.views), handed back without work when the core allows it."""


def unsupported_reason(node: Any, opset: int, type_of: Callable[[str], Any]) -> str | None:
    """Why this provider cannot run ``node`` (a short phrase), or None when it can.

    ``opset`` is the model's default-domain opset; ``type_of`` maps a value name to its static
    ort_core ValueType (None when unknown).
    """
    if node.domain not in ("", "ai.onnx"):
        return f"domain '{node.domain}' is not supported"
    op = OPS.get(node.op_type)
    if op is None:
        return f"{node.op_type} is not one of the example's ops ({', '.join(sorted(OPS))})"
    if opset < op.since:
        return f"{node.op_type} at opset {opset} has legacy semantics (supported from opset {op.since})"
    if opset > NEWEST_OPSET:
        return f"opset {opset} is newer than the {NEWEST_OPSET} this provider was checked against"
    if node.attrs:
        return f"attribute(s) {', '.join(sorted(node.attrs))} not supported"
    if len(node.inputs) != op.arity or not all(node.inputs) or len(node.outputs) != 1:
        return f"expected {op.arity} input(s) and 1 output"
    elem_types = set()
    for name in node.inputs:
        t = type_of(name)
        if t is None or t.kind != "tensor" or not t.elem_type:
            return f"type of input '{name}' is unknown"
        if t.elem_type not in DTYPES:
            return f"input '{name}' is {t.text}; only tensor(float) and tensor(double) are supported"
        elem_types.add(t.elem_type)
    if len(elem_types) > 1:
        return "inputs of different element types"
    return None


Program = list[tuple[str, tuple[str, ...], str]]
"""What this provider compiles a subgraph into: (op type, input names, output name) per step, in order.
It is also the compiled context it saves in EPContext nodes (``program_to_bytes``)."""

CONTEXT_FORMAT = "ort-ep-example-program/1"


def compile_program(subgraph: FusedSubgraph, model_path: str | None = None) -> Program:
    """The program of ``subgraph``: its nodes checked one by one, or, for an EPContext node of this provider,
    the program saved in it (loaded, not compiled again). Raises ValueError for a node it cannot run."""
    opset = subgraph.opsets.get("", 0)
    program: Program = []
    for node in subgraph.nodes:
        if is_context_node(node, PROVIDER):
            program += program_from_bytes(context_blob(node, model_path), node.label)
            continue
        why = unsupported_reason(node, opset, subgraph.graph.type_of)
        if why is not None:
            raise ValueError(f"{node.label}: {why}")
        program.append((node.op_type, tuple(node.inputs), node.outputs[0]))
    return program


def program_to_bytes(program: Program) -> bytes:
    return json.dumps({"format": CONTEXT_FORMAT, "steps": [[op, list(ins), out] for op, ins, out in program]}).encode()


def program_from_bytes(blob: bytes, label: str) -> Program:
    """A saved program, checked step by step (the bytes come from a model file: trust nothing)."""
    def invalid(why: str) -> ValueError:
        return ValueError(f"{label}: its context is not a valid {CONTEXT_FORMAT} program ({why})")

    try:
        data = json.loads(blob.decode("utf-8"))
    except ValueError as e:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise invalid(str(e)) from None
    if not isinstance(data, dict) or data.get("format") != CONTEXT_FORMAT or not isinstance(data.get("steps"), list):
        raise invalid(f"format {data.get('format') if isinstance(data, dict) else None!r}, expected {CONTEXT_FORMAT!r}")
    program = []
    for step in data["steps"]:
        op, ins, out = step if isinstance(step, list) and len(step) == 3 else (None, None, None)
        if not isinstance(op, str) or op not in OPS:
            raise invalid(f"unknown op {op!r}")
        if not isinstance(ins, list) or len(ins) != OPS[op].arity or \
                not all(isinstance(n, str) and n for n in (*ins, out)):
            raise invalid(f"bad operands for {op}")
        program.append((op, tuple(ins), out))
    return program


def compile_subgraph(subgraph: FusedSubgraph, program: Program) -> ContextKernel:
    """A kernel of contract v2 running ``program`` (``subgraph``'s, from ``compile_program``): called with a
    KernelContext holding one device tensor per ``subgraph.inputs``, it works out the output shapes on the
    host, takes the output buffers from the context (pre-allocated by the core where the model fixes their
    shape) and enqueues the arithmetic on the run's stream."""
    steps = [(OPS[op], ins, out, f"{op} -> '{out}'", op in VIEW_OPS) for op, ins, out in program]
    inputs = tuple(subgraph.inputs)
    out_index = {name: k for k, name in enumerate(subgraph.outputs)}
    same = {out: ins[0] for op, ins, out in program if op in VIEW_OPS}  # value -> the value it repeats
    for out in same:
        while same[out] in same:
            same[out] = same[same[out]]
    views = {out_index[out]: inputs.index(src) for out, src in same.items() if out in out_index and src in inputs}
    # Resolved once here so a call is only a walk over ``steps``; nothing is stored between
    # calls, which is what makes the kernel safe to share between threads.

    def run(ctx: KernelContext) -> None:
        xs = ctx.inputs
        if len(xs) != len(inputs):
            raise ValueError(f"expected {len(inputs)} inputs {list(inputs)}, got {len(xs)}")
        meta = {name: (x.shape, x.dtype) for name, x in zip(inputs, xs)}
        plan = []  # (op, input names, output name, shape, device buffer of a subgraph output or None, view)
        for op, names, out_name, label, is_view in steps:
            dtypes = {meta[n][1] for n in names}
            if len(dtypes) > 1:
                raise TypeError(f"{label}: inputs {list(names)} have different dtypes {sorted(map(str, dtypes))}")
            shape = op.shape(*[_Shape(meta[n][0]) for n in names])
            dtype = meta[names[0]][1]
            meta[out_name] = (shape, dtype)
            k = out_index.get(out_name)
            if k is not None and k in views and ctx.may_view(k):  # the input itself: no work, no memory
                ctx.outputs[k] = xs[views[k]]
                plan.append((op, names, out_name, shape, None, True))
                continue
            plan.append((op, names, out_name, shape, None if k is None else ctx.output(k, shape, dtype),
                         is_view and k is None))
        tensors = dict(zip(inputs, xs))
        ctx.stream.enqueue(lambda: _compute(plan, tensors), f"subgraph of {len(steps)} node(s)")

    return ContextKernel(run, views=views)


def _compute(plan: list, tensors: dict) -> None:
    """The arithmetic of one call, on the stream's worker: device memory viewed as numpy (this device is host
    RAM), subgraph outputs written straight into their device buffers, intermediates as numpy scratch."""
    env = {name: view(t) for name, t in tensors.items()}
    # inf/nan from Exp or Div are results, as on the CPU provider; not worth a warning
    with np.errstate(all="ignore"):
        for op, names, out_name, shape, target, is_view in plan:
            args = [env[n] for n in names]
            if is_view:  # an intermediate (or allowed output) repeating its input: nothing to compute
                env[out_name] = args[0]
                continue
            out = np.empty(shape, args[0].dtype) if target is None else view(target, writable=True)
            op.compute(out, *args)
            out.flags.writeable = False
            env[out_name] = out


class _Shape:
    """Stands for an array in the shape functions, which read only ``shape`` and ``ndim``."""

    __slots__ = ("shape", "ndim")

    def __init__(self, shape: tuple[int, ...]) -> None:
        self.shape, self.ndim = tuple(shape), len(shape)
