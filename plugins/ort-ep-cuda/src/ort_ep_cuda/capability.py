"""What CUDAExecutionProvider runs: the op tables and ``unsupported_reason``, the one rule shared by capability
and compile (a short phrase saying why a node is declined, None when it is taken). Pure: no CUDA.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto

from . import codegen

NEWEST_OPSET = onnx.defs.onnx_opset_version()
"""The newest default-domain opset the ops were checked against (the installed onnx's): a later opset may
change an operator's meaning, so nodes of newer models are declined rather than guessed at."""

MS_DOMAIN = "com.microsoft"
FLOATS = {TensorProto.FLOAT: "float32", TensorProto.FLOAT16: "float16"}

# op type -> oldest opset with today's meaning (binary ops broadcast numpy-style from 7, unary ops lost
# consumed_inputs at 6)
ELEMENTWISE = {"Add": 7, "Sub": 7, "Mul": 7, "Div": 7, "Pow": 7, "Sum": 8, "Where": 9, "Relu": 6, "Sigmoid": 6,
               "Tanh": 6, "Exp": 6, "Log": 6, "Sqrt": 6, "Neg": 6, "Abs": 6, "Erf": 9, "Gelu": 20}
VIEWS = {"Identity": 1, "Reshape": 5, "Squeeze": 1, "Unsqueeze": 1, "Flatten": 1}
MATRIX = {"MatMul": 1, "Gemm": 7}
ROWS = {"Softmax": 1, "LayerNormalization": 1}  # LayerNormalization: opset 17's, or the optimizer's fused op below it
MS_OPS = {"Gelu", "SkipLayerNormalization"}
COPIES = {"Transpose": 1, "Split": 2, "Concat": 4}  # strided copies (Identity kernel; Concat: 2-D memcpy)
SELECTIONS = {"Slice": 10, "Gather": 1}  # Slice: a strided read (Identity kernel); Gather: 2-D memcpys
CASTS = {"Cast": 6}  # between float32 and float16 (the copy kernel storing another type)
REDUCTIONS = {"ReduceSum": 1, "ReduceMean": 1, "ReduceMax": 1, "ReduceMin": 1}  # trailing axes: a row kernel
AXES_INPUT = {"ReduceSum": 13, "ReduceMean": 18, "ReduceMax": 18, "ReduceMin": 18}  # axes an input from this opset
WINDOWS = {"Conv": 1, "MaxPool": 1, "AveragePool": 7, "GlobalAveragePool": 1}  # 2-D only
AFFINE = {"BatchNormalization": 9}  # inference form, constant statistics: x * a + b per channel
SINCE = {**ELEMENTWISE, **VIEWS, **MATRIX, **ROWS, **COPIES, **WINDOWS, **AFFINE, **SELECTIONS, **CASTS,
         **REDUCTIONS}
"""op -> the first opset taken"""


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
        since = SINCE.get(op)
        if since is None:
            return (f"{op} is not supported yet (elementwise ops, MatMul, Gemm, Conv, pooling, BatchNormalization, "
                    "Softmax, LayerNormalization, reductions, Transpose, Split, Concat, Slice, Gather, Cast and views "
                    "are)")
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
    elif op in ("MaxPool", "BatchNormalization"):
        if not node.outputs or not node.outputs[0] or any(node.outputs[1:]):
            return f"only {op}'s first output is computed"
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
    if op in COPIES or op in SELECTIONS:
        data, rank, why = _tensor_data(node, types)
        if why:
            return why
        check = _copy_reason if op in COPIES else _selection_reason
        return check(node, data, rank, types, constant)
    if op in CASTS:
        return _cast_reason(node, types)
    if op in REDUCTIONS:
        _, why = reduced_axes(node, opset, len(types[node.inputs[0]].shape) if node.inputs else 0, constant)
        return why or _float_reason(node, {node.inputs[0]: types[node.inputs[0]]})
    if op in WINDOWS:
        return _window_reason(node, types, constant)
    if op in AFFINE:
        if int(node.attrs.get("training_mode", 0)):
            return "training_mode=1 is not supported"
        if len(node.inputs) != 5 or any(constant(n) is None for n in node.inputs[1:]):
            return "scale, bias, mean and variance must be constant initializers"
        if len(types[node.inputs[0]].shape) < 2:
            return "the input has no channel axis"
        return _float_reason(node, {node.inputs[0]: types[node.inputs[0]]})
    # elementwise
    attrs = dict(node.attrs)
    if op == "Gelu" and domain != MS_DOMAIN:
        if attrs.pop("approximate", "none") != "none":
            return "Gelu approximate='tanh' is not supported (only the erf form)"
    if attrs:
        return f"attribute(s) {', '.join(sorted(attrs))} not supported"
    if op == "Sum":  # a chain of Adds in the kernel
        if not node.inputs or not all(node.inputs):
            return "expected one or more inputs"
        return _float_reason(node, types)
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


def _window_reason(node: Any, types: dict, constant: Callable[[str], Any]) -> str | None:
    op, attrs = node.op_type, dict(node.attrs)
    x = node.inputs[0] if node.inputs else ""
    if not x:
        return "expected an input"
    if len(types[x].shape) != 4:
        return "only 2-D images (N, C, H, W) are supported"
    if attrs.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
        return f"auto_pad={attrs['auto_pad']} is not supported (explicit pads are)"
    if op == "GlobalAveragePool":
        return _float_reason(node, {x: types[x]})
    if op in ("MaxPool", "AveragePool"):
        if int(attrs.get("ceil_mode", 0)) or int(attrs.get("storage_order", 0)):
            return "ceil_mode=1 and storage_order=1 are not supported"
        if op == "AveragePool" and any(int(d) != 1 for d in attrs.get("dilations", ())):
            return "dilated AveragePool is not supported"
        return _float_reason(node, {x: types[x]})
    if len(node.inputs) < 2 or not node.inputs[1] or constant(node.inputs[1]) is None:
        return "the weights are not a constant initializer"
    if len(node.inputs) > 2 and node.inputs[2] and constant(node.inputs[2]) is None:
        return "the bias is not a constant initializer"
    group, w = int(attrs.get("group", 1)), constant(node.inputs[1])
    channels = types[x].shape[1]
    if np.ndim(w) != 4 or group < 1 or w.shape[0] % group or \
            (isinstance(channels, int) and (channels % group or w.shape[1] * group != channels)):
        return f"weights {list(np.shape(w))} do not fit group={group} and the input's channels"
    return _float_reason(node, {n: types[n] for n in node.inputs if n})


def _tensor_data(node: Any, types: dict) -> tuple[str, int, str | None]:
    """The node's data input and its rank, and why it cannot be copied from (none, or a scalar) or None: what the
    copy and selection ops check first."""
    data = node.inputs[0] if node.inputs else ""
    if not data:
        return "", 0, "expected a data input"
    rank = len(types[data].shape)
    return data, rank, f"{node.op_type} of a scalar" if rank == 0 else None


def _copy_reason(node: Any, data: str, rank: int, types: dict, constant: Callable[[str], Any]) -> str | None:
    op, attrs = node.op_type, dict(node.attrs)
    if op == "Concat":
        if not all(node.inputs) or set(attrs) != {"axis"}:
            return "expected inputs and an 'axis'"
        if not -rank <= int(attrs["axis"]) < rank:
            return f"axis {attrs['axis']} is out of range for rank {rank}"
        if any(len(types[n].shape) != rank for n in node.inputs):
            return "inputs of different ranks"
        return _float_reason(node, {n: types[n] for n in node.inputs})
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


def _selection_reason(node: Any, data: str, rank: int, types: dict, constant: Callable[[str], Any]) -> str | None:
    """Slice with constant starts, ends, axes and steps; Gather with constant indices (the data any float)."""
    op, attrs = node.op_type, dict(node.attrs)
    if op == "Gather":
        if len(node.inputs) != 2 or not node.inputs[1] or set(attrs) - {"axis"}:
            return "expected data, indices and only 'axis'"
        if not -rank <= int(attrs.get("axis", 0)) < rank:
            return f"axis {attrs.get('axis')} is out of range for rank {rank}"
        indices = constant(node.inputs[1])
        if indices is None:
            return "the indices are not a constant initializer (run-time indices are not supported)"
        indices = np.asarray(indices)
        if indices.dtype.kind not in "iu":
            return "the indices are not integers"
        dim = types[data].shape[int(attrs.get("axis", 0)) % rank]
        if isinstance(dim, int) and indices.size and (indices.min() < -dim or indices.max() >= dim):
            return f"an index is out of range for the axis of size {dim}"
        return _float_reason(node, {data: types[data]})
    if attrs:
        return f"attribute(s) {', '.join(sorted(attrs))} not supported"
    if len(node.inputs) < 3 or not node.inputs[1] or not node.inputs[2] or len(node.inputs) > 5:
        return "expected data, starts, ends and optional axes and steps"
    for name in node.inputs[1:]:
        if name and constant(name) is None:
            return f"'{name}' is not a constant initializer"
    return _float_reason(node, {data: types[data]})


def _cast_reason(node: Any, types: dict) -> str | None:
    attrs = dict(node.attrs)
    if len(node.inputs) != 1 or not node.inputs[0] or set(attrs) - {"to", "saturate"}:
        return "expected one input and only 'to' (and 'saturate')"
    to = int(attrs.get("to", 0))
    if to not in FLOATS:
        name = TensorProto.DataType.Name(to) if to in TensorProto.DataType.values() else str(to)
        return f"Cast to {name}: only float and float16 are supported"
    return _float_reason(node, types)


def reduced_axes(node: Any, opset: int, rank: int, constant: Callable[[str], Any]) -> tuple[list[int], str | None]:
    """The axes a Reduce node reduces (normalized, sorted) and None, or [] and why this provider cannot: the axes
    must be constant and trailing (the rows of a row kernel: the last axis, or (H, W) of NCHW, or every axis)."""
    attrs = dict(node.attrs)
    if not node.inputs or not node.inputs[0]:
        return [], "expected a data input"
    extra = set(attrs) - {"axes", "keepdims", "noop_with_empty_axes"}
    if extra:
        return [], f"attribute(s) {', '.join(sorted(extra))} not supported"
    if opset >= AXES_INPUT[node.op_type]:
        if "axes" in attrs:
            return [], f"'axes' is an input from opset {AXES_INPUT[node.op_type]}, not an attribute"
        if len(node.inputs) > 1 and node.inputs[1]:
            value = constant(node.inputs[1])
            if value is None:
                return [], "the axes are not a constant initializer"
            axes = [int(a) for a in np.asarray(value).reshape(-1)]
        else:
            axes = []
    else:
        if len(node.inputs) > 1:
            return [], f"expected one input before opset {AXES_INPUT[node.op_type]}"
        axes = [int(a) for a in attrs.get("axes", ())]
    if not axes:
        if int(attrs.get("noop_with_empty_axes", 0)):
            return [], "noop_with_empty_axes=1 with no axes (an identity) is not supported"
        return list(range(rank)), None
    if any(not -rank <= a < rank for a in axes):
        return [], f"axes {axes} are out of range for rank {rank}"
    norm = sorted({a % rank for a in axes})
    if len(norm) != len(axes):
        return [], f"axes {axes} repeat an axis"
    if norm != list(range(rank - len(norm), rank)):
        return [], f"axes {axes}: only trailing axes are reduced (the last, or the last few together)"
    return norm, None
