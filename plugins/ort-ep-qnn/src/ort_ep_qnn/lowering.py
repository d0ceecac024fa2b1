"""ONNX nodes as QNN operations: one small rule per ONNX op, each with the conditions it maps correctly under.

``RULES[op].why_not(node, values)`` says why a node cannot be mapped (None when it can); ``emit(node, em)``
adds the QNN tensors and nodes computing it to a graph through an ``Emitter``. Values keep ONNX's layout
(NCHW) between nodes; Conv, the pools and LRN work in QNN's NHWC between two Transposes, except in their
channels-last forms (domain ``com.ms.internal.nhwc``, which the core makes of them for this provider: its
``Preferences.layout`` is NHWC), whose input and output are NHWC already. Which nodes are offered to QNN, and the
probes, are ``capability``'s.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ort_core.optimizer.layout import NHWC_DOMAIN

from .emitter import NCHW_TO_NHWC, NHWC_TO_NCHW, Emitter, Values
from .graph import Scalar, TensorParam
from .runtime import QnnError

NHWC_OPS = frozenset({"Conv", "MaxPool", "AveragePool", "GlobalAveragePool", "LRN", "BatchNormalization"})
"""The channels-last ops (domain com.ms.internal.nhwc) this provider lowers."""


def _nhwc_input(node: Any, em: Emitter, hint: str):
    """The op's data input as an NHWC tensor: as it is for a channels-last node, else through a Transpose."""
    x = em.read(node.inputs[0])
    return x if node.domain == NHWC_DOMAIN else em.transpose(x, NCHW_TO_NHWC, hint=hint)


def _nhwc_output(node: Any, em: Emitter, hint: str, shape: Sequence[int] | None = None):
    """The NHWC tensor the op writes: its output itself for a channels-last node, else a temporary that
    ``_nhwc_done`` transposes into it. ``shape``: NHWC, when not the output's own."""
    if node.domain == NHWC_DOMAIN:
        return em.write(node.outputs[0], shape)
    y_shape = em.values.shape(node.outputs[0])
    nhwc = tuple(shape) if shape is not None else tuple(y_shape[p] for p in NCHW_TO_NHWC)
    return em.temp(hint, nhwc, quant=em.out_quant(node.outputs[0]))


def _nhwc_done(node: Any, em: Emitter, y, hint: str) -> None:
    if node.domain != NHWC_DOMAIN:
        em.transpose(y, NHWC_TO_NCHW, em.write(node.outputs[0]), hint)


def _hw(node: Any, values: Values) -> tuple[int, int]:
    """The data input's height and width, in either layout."""
    shape = values.shape(node.inputs[0])
    return (shape[1], shape[2]) if node.domain == NHWC_DOMAIN else (shape[2], shape[3])


# ------------------------------------------------------------------------------------------- helpers
def _ints(node: Any, name: str, default: Sequence[int] | None = None) -> list[int] | None:
    v = node.attr(name, default)
    return None if v is None else [int(x) for x in v]


def _attr_str(node: Any, name: str, default: str) -> str:
    v = node.attr(name, default)
    return v.decode() if isinstance(v, bytes) else str(v)


@dataclass(frozen=True)
class Rule:
    """How one ONNX op becomes QNN ops: ``why_not(node, values)`` -> reason or None; ``emit(node, em)``."""

    why_not: Callable[[Any, Values], str | None]
    emit: Callable[[Any, Emitter], None]


def _no_reason(node: Any, values: Values) -> None:
    return None


# ------------------------------------------------------------------------------------- elementwise
BINARY = {"Add": "ElementWiseAdd", "Sub": "ElementWiseSubtract", "Mul": "ElementWiseMultiply",
          "Div": "ElementWiseDivide", "Pow": "ElementWisePower"}
UNARY = {"Relu": "Relu", "Sigmoid": "Sigmoid", "Tanh": "Tanh", "Sqrt": "ElementWiseSquareRoot", "Exp": "ElementWiseExp",
         "Abs": "ElementWiseAbs", "Neg": "ElementWiseNeg", "Erf": "Erf", "Gelu": "Gelu"}


def _binary_why(node: Any, values: Values) -> str | None:
    if values.opset < 7 or node.attr("broadcast") is not None or node.attr("axis") is not None:
        return "opset < 7 broadcasting (the 'broadcast'/'axis' attributes) is not mapped"
    return None


def _emit_binary(node: Any, em: Emitter) -> None:
    out_shape = em.values.shape(node.outputs[0])
    a = em.with_rank(node.inputs[0], len(out_shape), f"{node.op_type}_a")
    b = em.with_rank(node.inputs[1], len(out_shape), f"{node.op_type}_b")
    em.op(BINARY[node.op_type], [a, b], [em.write(node.outputs[0])], hint=node.op_type)


def _emit_sum(node: Any, em: Emitter) -> None:
    out_shape = em.values.shape(node.outputs[0])
    names = [n for n in node.inputs if n]
    if len(names) == 1:
        em.reshape(em.read(names[0]), out_shape, em.write(node.outputs[0]), "Sum")
        return
    acc = em.with_rank(names[0], len(out_shape), "Sum_a")
    for k, name in enumerate(names[1:], start=1):
        term = em.with_rank(name, len(out_shape), f"Sum_{k}")
        # each partial sum has the broadcast shape of the terms so far; the last one is the output
        partial = np.broadcast_shapes(*(em.values.shape(n) for n in names[:k + 1]))
        out = em.write(node.outputs[0]) if k == len(names) - 1 else em.temp("Sum_partial", (1,) * (
            len(out_shape) - len(partial)) + tuple(partial))
        em.op("ElementWiseAdd", [acc, term], [out], hint="Sum")
        acc = out


def _emit_unary(node: Any, em: Emitter) -> None:
    em.op(UNARY[node.op_type], [em.read(node.inputs[0])], [em.write(node.outputs[0])], hint=node.op_type)


def _gelu_why(node: Any, values: Values) -> str | None:
    approximate = _attr_str(node, "approximate", "none")
    return None if approximate == "none" else f"Gelu with approximate='{approximate}' is not mapped (QNN's is erf's)"


def _emit_bias_gelu(node: Any, em: Emitter) -> None:
    """com.microsoft BiasGelu: Gelu(X + bias), bias broadcast over the last axis."""
    shape = em.values.shape(node.outputs[0])
    x = em.with_rank(node.inputs[0], len(shape), "BiasGelu_x")
    bias = em.with_rank(node.inputs[1], len(shape), "BiasGelu_b")
    summed = em.temp("BiasGelu_sum", shape)
    em.op("ElementWiseAdd", [x, bias], [summed], hint="BiasGelu")
    em.op("Gelu", [summed], [em.write(node.outputs[0])], hint="BiasGelu")


# ------------------------------------------------------------------------------------------ matmul
def _matmul_why(node: Any, values: Values) -> str | None:
    a, b = values.shape(node.inputs[0]), values.shape(node.inputs[1])
    if len(a) < 2 or len(b) < 2:
        return "1-D MatMul operands (vector products) are not mapped yet"
    if len(b) == 2 or (len(a) == len(b) and a[:-2] == b[:-2]):
        return None
    return f"batch broadcasting between {list(a)} and {list(b)} is not mapped yet"


def _emit_matmul(node: Any, em: Emitter) -> None:
    a_shape, b_shape = em.values.shape(node.inputs[0]), em.values.shape(node.inputs[1])
    out = node.outputs[0]
    params = [Scalar("transpose_in0", False, "bool"), Scalar("transpose_in1", False, "bool")]
    if len(b_shape) == 2 and len(a_shape) > 2:
        # (..., M, K) @ (K, N): one 2-D product over the flattened rows, then the batch shape back
        rows = int(np.prod(a_shape[:-1]))
        a2 = em.reshape(em.read(node.inputs[0]), (rows, a_shape[-1]), hint="MatMul_rows")
        y2 = em.temp("MatMul_y", (rows, b_shape[-1]), quant=em.out_quant(out))
        em.op("MatMul", [a2, em.read(node.inputs[1])], [y2], params, "MatMul")
        em.reshape(y2, em.values.shape(out), em.write(out), "MatMul_out")
        return
    em.op("MatMul", [em.read(node.inputs[0]), em.read(node.inputs[1])], [em.write(out)], params, "MatMul")


def _gemm_why(node: Any, values: Values) -> str | None:
    if values.opset < 7:
        return "opset < 7 Gemm (the 'broadcast' attribute) is not mapped"
    alpha = float(node.attr("alpha", 1.0))
    a, b = node.inputs[0], node.inputs[1]
    if alpha != 1.0 and values.constant(b) is None and values.constant(a) is None:
        return "alpha != 1 with both A and B computed at run time is not mapped"
    if len(node.inputs) > 2 and node.inputs[2] and float(node.attr("beta", 1.0)) != 1.0 \
            and values.constant(node.inputs[2]) is None:
        return "beta != 1 with C computed at run time is not mapped"
    return None


def _emit_gemm(node: Any, em: Emitter) -> None:
    if em.quantized:
        _emit_gemm_quantized(node, em)
        return
    alpha, beta = float(node.attr("alpha", 1.0)), float(node.attr("beta", 1.0))
    trans_a, trans_b = bool(node.attr("transA", 0)), bool(node.attr("transB", 0))
    a_name, b_name = node.inputs[0], node.inputs[1]
    a_const, b_const = em.values.constant(a_name), em.values.constant(b_name)
    if alpha != 1.0 and b_const is not None:
        a, b = em.read(a_name), em.static(np.asarray(b_const, np.float32) * np.float32(alpha), "Gemm_B")
    elif alpha != 1.0:
        a, b = em.static(np.asarray(a_const, np.float32) * np.float32(alpha), "Gemm_A"), em.read(b_name)
    else:
        a, b = em.read(a_name), em.read(b_name)
    out = node.outputs[0]
    params = [Scalar("transpose_in0", trans_a, "bool"), Scalar("transpose_in1", trans_b, "bool")]
    c_name = node.inputs[2] if len(node.inputs) > 2 else ""
    if not c_name:
        em.op("MatMul", [a, b], [em.write(out)], params, "Gemm")
        return
    y = em.temp("Gemm_ab", em.values.shape(out))
    em.op("MatMul", [a, b], [y], params, "Gemm")
    c_const = em.values.constant(c_name)
    if c_const is not None:
        c_val = np.asarray(c_const, np.float32) * np.float32(beta)
        c = em.static(c_val.reshape((1,) * (2 - c_val.ndim) + c_val.shape), "Gemm_C")
    else:
        c = em.with_rank(c_name, 2, "Gemm_C")
    em.op("ElementWiseAdd", [y, c], [em.write(out)], hint="Gemm_bias")


def _emit_gemm_quantized(node: Any, em: Emitter) -> None:
    """Gemm on quantized tensors as QNN's FullyConnected: weights (N, K), int32 bias of scale s_A * s_B."""
    b_perm = None if node.attr("transB", 0) else (1, 0)
    inputs = [em.read(node.inputs[0]), em.weight(node.inputs[1], b_perm, "Gemm_w")]
    if len(node.inputs) > 2 and node.inputs[2]:
        inputs.append(em.weight(node.inputs[2], None, "Gemm_b"))
    em.op("FullyConnected", inputs, [em.write(node.outputs[0])], (), "Gemm")


def _gemm_quantized_why(node: Any, values: Values) -> str | None:
    if node.attr("transA", 0) or float(node.attr("alpha", 1.0)) != 1.0 or float(node.attr("beta", 1.0)) != 1.0:
        return "quantized Gemm with transA or alpha/beta other than 1 is not mapped"
    if values.constant(node.inputs[1]) is None:
        return "quantized Gemm with weights computed at run time is not mapped"
    if len(node.inputs) > 2 and node.inputs[2]:
        c = values.constant(node.inputs[2])
        if c is None or c.ndim != 1 or c.shape[0] != values.shape(node.outputs[0])[-1]:
            return "quantized Gemm needs a constant 1-D bias of N values"
    return None


# -------------------------------------------------------------------------------- conv and pooling
def _spatial(node: Any, values: Values, kernel: Sequence[int], dilations: Sequence[int],
             strides: Sequence[int]) -> tuple[list[int], str | None]:
    """Explicit pads [top, left, bottom, right] for a 2-D window op, from ``pads`` or ``auto_pad``."""
    auto = _attr_str(node, "auto_pad", "NOTSET")
    hw = _hw(node, values)
    if auto in ("NOTSET", ""):
        pads = _ints(node, "pads", [0, 0, 0, 0])
        return pads, None
    if auto == "VALID":
        return [0, 0, 0, 0], None
    if auto not in ("SAME_UPPER", "SAME_LOWER"):
        return [], f"auto_pad={auto} is not mapped"
    pads = [0, 0, 0, 0]
    for i in range(2):
        size, span = hw[i], (kernel[i] - 1) * dilations[i] + 1
        out = -(-size // strides[i])
        total = max(0, (out - 1) * strides[i] + span - size)
        small, big = total // 2, total - total // 2
        pads[i], pads[i + 2] = (small, big) if auto == "SAME_UPPER" else (big, small)
    return pads, None


def _out_size(size: int, pad: int, kernel: int, dilation: int, stride: int, ceil: bool) -> int:
    span = (kernel - 1) * dilation + 1
    n = size + pad - span
    return (-(-n // stride) if ceil else n // stride) + 1


def _window_why(node: Any, values: Values, kernel: Sequence[int], ceil: bool = False) -> str | None:
    x = values.shape(node.inputs[0])
    y = values.shape(node.outputs[0])
    if len(x) != 4:
        return f"{len(x) - 2}-D {node.op_type} is not mapped (2-D only so far)"
    if len(kernel) != 2:
        return "kernel_shape must have two entries"
    dilations = _ints(node, "dilations", [1, 1])
    strides = _ints(node, "strides", [1, 1])
    pads, why = _spatial(node, values, kernel, dilations, strides)
    if why:
        return why
    if len(pads) != 4 or min(pads) < 0:
        return f"pads {pads} are not four non-negative values"
    expect = [_out_size(x[2 + i], pads[i] + pads[i + 2], kernel[i], dilations[i], strides[i], ceil)
              for i in range(2)]
    if list(y[2:]) != expect:
        # ceil_mode with a last window starting in the padding: ONNX drops it, QNN keeps it
        return f"output size {list(y[2:])} differs from QNN's window count {expect}"
    return None


def _conv_why(node: Any, values: Values) -> str | None:
    w = values.constant(node.inputs[1])
    if w is None:
        return "weights computed at run time are not mapped (QNN wants them static)"
    if len(node.inputs) > 2 and node.inputs[2] and values.constant(node.inputs[2]) is None:
        return "a bias computed at run time is not mapped"
    x = values.shape(node.inputs[0])
    if w.ndim != 4 or len(x) != 4:
        return f"{w.ndim - 2}-D Conv is not mapped (2-D only so far)"
    group = int(node.attr("group", 1))
    if group < 1 or x[1] % group or w.shape[0] % group or w.shape[1] * group != x[1]:
        return f"group={group} does not divide the {x[1]} input and {w.shape[0]} output channels"
    kernel = _ints(node, "kernel_shape", list(w.shape[2:]))
    if list(kernel) != list(w.shape[2:]):
        return f"kernel_shape {kernel} differs from the weights' {list(w.shape[2:])}"
    return _window_why(node, values, kernel)


def _emit_conv(node: Any, em: Emitter) -> None:
    w = np.asarray(em.values.constant(node.inputs[1]), np.float32)
    out_channels, kernel = w.shape[0], list(w.shape[2:])
    dilations, strides = _ints(node, "dilations", [1, 1]), _ints(node, "strides", [1, 1])
    pads, _ = _spatial(node, em.values, kernel, dilations, strides)
    group = int(node.attr("group", 1))
    has_bias = len(node.inputs) > 2 and bool(node.inputs[2])
    if has_bias:
        bias = [em.weight(node.inputs[2], None, "Conv_b")]
    else:  # a quantized Conv without bias takes none (QNN's bias input is optional)
        bias = [] if em.quantized else [em.static(np.zeros(out_channels, np.float32), "Conv_b")]
    x = _nhwc_input(node, em, "Conv_in")
    y = _nhwc_output(node, em, "Conv_nhwc")
    params = [TensorParam("stride", np.array(strides, np.uint32)),
              TensorParam("pad_amount", np.array([[pads[0], pads[2]], [pads[1], pads[3]]], np.uint32)),
              TensorParam("dilation", np.array(dilations, np.uint32))]
    weights = em.weight(node.inputs[1], (2, 3, 1, 0), "Conv_w")  # OIHW -> HWIO, I = input channels / group
    if not (group > 1 and group == w.shape[0] and w.shape[1] == 1):
        params.append(Scalar("group", group))
        em.op("Conv2d", [x, weights, *bias], [y], params, "Conv")
    else:  # depthwise: QNN's filter is (H, W, 1, C)
        em.op("DepthWiseConv2d", [x, weights, *bias], [y], params, "DwConv")
    _nhwc_done(node, em, y, "Conv_out")


def _pool_why(node: Any, values: Values) -> str | None:
    if len(node.outputs) > 1 and node.outputs[1]:
        return "MaxPool's Indices output is not mapped"
    if any(d != 1 for d in (_ints(node, "dilations", [1, 1]) or [1])):
        return "dilated pooling is not mapped"
    ceil = bool(node.attr("ceil_mode", 0))
    if ceil and node.op_type == "AveragePool":
        return "AveragePool with ceil_mode=1 is not mapped (partial last windows)"
    return _window_why(node, values, _ints(node, "kernel_shape", []), ceil)


def _emit_pool(node: Any, em: Emitter) -> None:
    kernel = _ints(node, "kernel_shape", [])
    strides = _ints(node, "strides", [1, 1])
    pads, _ = _spatial(node, em.values, kernel, [1, 1], strides)
    x = _nhwc_input(node, em, f"{node.op_type}_in")
    y = _nhwc_output(node, em, f"{node.op_type}_nhwc")
    if node.op_type == "MaxPool":
        # QNN's PoolMax2d pads with zeros; ONNX's padding never wins a max. Pad with the lowest float first
        # (also the tail a ceil_mode window reaches past the input), then pool without padding.
        _, h, w, c = x.shape
        bottom = (y.shape[1] - 1) * strides[0] + kernel[0] - h - pads[0]
        right = (y.shape[2] - 1) * strides[1] + kernel[1] - w - pads[1]
        amounts = [[0, 0], [pads[0], max(bottom, 0)], [pads[1], max(right, 0)], [0, 0]]
        if any(a for pair in amounts for a in pair):
            if em.quantized:
                raise QnnError("a padded MaxPool is not mapped for quantized tensors")
            padded = em.temp("MaxPool_pad", (x.shape[0], h + pads[0] + max(bottom, 0), w + pads[1] + max(right, 0), c))
            em.op("Pad", [x], [padded], [Scalar("scheme", 0), TensorParam("pad_amount", np.array(amounts, np.uint32)),
                                         Scalar("pad_constant_value", float(np.finfo(np.float32).min), "float32")],
                  "MaxPool_pad")
            x = padded
        params = [TensorParam("filter_size", np.array(kernel, np.uint32)),
                  TensorParam("stride", np.array(strides, np.uint32)),
                  TensorParam("pad_amount", np.zeros((2, 2), np.uint32)), Scalar("rounding_mode", 0)]
        em.op("PoolMax2d", [x], [y], params, "MaxPool")
    else:
        # the backend does not always honour count_pad_for_edges=false (a one-channel input averages over the
        # padding too), so the padding is always counted and, where ONNX excludes it, each output is scaled by
        # kernel area / its count of real input elements (a constant of the static shapes)
        params = [TensorParam("filter_size", np.array(kernel, np.uint32)),
                  TensorParam("stride", np.array(strides, np.uint32)),
                  TensorParam("pad_amount", np.array([[pads[0], pads[2]], [pads[1], pads[3]]], np.uint32)),
                  Scalar("rounding_mode", 0), Scalar("count_pad_for_edges", True, "bool")]
        if any(pads) and not node.attr("count_include_pad", 0):
            summed = em.temp("AveragePool_all", y.shape)
            em.op("PoolAvg2d", [x], [summed], params, "AveragePool")
            scale = _window_counts(x.shape[1:3], y.shape[1:3], kernel, strides, pads)
            em.op("ElementWiseMultiply", [summed, em.static(scale.reshape(1, *scale.shape, 1), "AveragePool_scale")],
                  [y], hint="AveragePool_exclude_pads")
        else:
            em.op("PoolAvg2d", [x], [y], params, "AveragePool")
    _nhwc_done(node, em, y, f"{node.op_type}_out")


def _window_counts(size: Sequence[int], out: Sequence[int], kernel: Sequence[int], strides: Sequence[int],
                   pads: Sequence[int]) -> np.ndarray:
    """kernel area / number of input (not padding) elements in each output's window, shape ``out``."""
    per_axis = []
    for i in range(2):
        start = np.arange(out[i]) * strides[i] - pads[i]
        inside = np.minimum(start + kernel[i], size[i]) - np.maximum(start, 0)
        per_axis.append(inside.astype(np.float64))
    counts = np.outer(per_axis[0], per_axis[1])
    return (kernel[0] * kernel[1] / counts).astype(np.float32)


def _lrn_why(node: Any, values: Values) -> str | None:
    size = int(node.attr("size", 0))
    if size < 1 or size % 2 == 0:
        return f"LRN with an even size ({size}) has an asymmetric window, which is not mapped"
    return None if len(values.shape(node.inputs[0])) == 4 else "LRN other than on 4-D (N, C, H, W) is not mapped"


def _emit_lrn(node: Any, em: Emitter) -> None:
    """ONNX divides alpha by the window size and centres the window on the channel; QNN's Lrn (channels last)
    takes the radius and alpha as they apply."""
    size = int(node.attr("size"))
    x = _nhwc_input(node, em, "LRN_in")
    y = _nhwc_output(node, em, "LRN_nhwc", x.shape)
    params = [Scalar("alpha", float(node.attr("alpha", 1e-4)) / size, "float32"),
              Scalar("beta", float(node.attr("beta", 0.75)), "float32"),
              Scalar("bias", float(node.attr("bias", 1.0)), "float32"),
              Scalar("radius", (size - 1) // 2, "int32"), Scalar("region", 0)]
    em.op("Lrn", [x], [y], params, "LRN")
    _nhwc_done(node, em, y, "LRN_out")


def _gap_why(node: Any, values: Values) -> str | None:
    x = values.shape(node.inputs[0])
    return None if len(x) == 4 else f"{len(x) - 2}-D GlobalAveragePool is not mapped (2-D only so far)"


def _emit_gap(node: Any, em: Emitter) -> None:
    # reduced over H, W in NHWC: the HTP backend fails to finalize some graphs that read a ReduceMean over
    # NCHW's two last axes (it keeps that result in a layout later reshapes cannot take)
    x = _nhwc_input(node, em, "GAP_in")
    n, _, _, c = x.shape
    y = _nhwc_output(node, em, "GAP_nhwc", (n, 1, 1, c))
    em.op("ReduceMean", [x], [y], [TensorParam("axes", np.array([1, 2], np.uint32)), Scalar("keep_dims", True, "bool")],
          "GAP")
    _nhwc_done(node, em, y, "GAP_out")


def _batchnorm_why(node: Any, values: Values) -> str | None:
    if node.attr("training_mode", 0) or len([o for o in node.outputs if o]) > 1:
        return "training-mode BatchNormalization (running statistics outputs) is not mapped"
    if values.opset < 7:
        return "opset < 7 BatchNormalization (the 'spatial'/'is_test' attributes) is not mapped"
    if any(values.constant(n) is None for n in node.inputs[1:5]):
        return "scale, bias, mean and variance must be constants"
    if len(values.shape(node.inputs[0])) < 2:
        return "BatchNormalization needs a channel dimension"
    return None


def _emit_batchnorm(node: Any, em: Emitter) -> None:
    """y = x * a + b per channel, a = scale / sqrt(var + eps) and b = bias - mean * a folded in float64."""
    scale, bias, mean, var = (np.asarray(em.values.constant(n), np.float64) for n in node.inputs[1:5])
    a = scale / np.sqrt(var + float(node.attr("epsilon", 1e-5)))
    b = bias - mean * a
    shape = em.values.shape(node.inputs[0])
    if node.domain == NHWC_DOMAIN:  # channels last
        per_channel = (1,) * (len(shape) - 1) + (shape[-1],)
    else:
        per_channel = (1, shape[1]) + (1,) * (len(shape) - 2)
    scaled = em.temp("BatchNorm_scaled", shape)
    em.op("ElementWiseMultiply", [em.read(node.inputs[0]), em.static(a.reshape(per_channel), "BatchNorm_a")],
          [scaled], hint="BatchNorm")
    em.op("ElementWiseAdd", [scaled, em.static(b.reshape(per_channel), "BatchNorm_b")], [em.write(node.outputs[0])],
          hint="BatchNorm")


# ------------------------------------------------------------------------------------------- layout
def _reshape_why(node: Any, values: Values) -> str | None:
    if node.op_type == "Reshape" and len(node.inputs) > 1 and values.constant(node.inputs[1]) is None:
        return "a shape computed at run time is not mapped (QNN graphs have fixed shapes)"
    return None


def _reduce_axes(node: Any, values: Values) -> tuple[list[int] | None, str | None]:
    """ReduceMean's axes (normalized, sorted; all axes when none are given), or why they are not mapped."""
    rank = len(values.shape(node.inputs[0]))
    if values.opset >= 18 and len(node.inputs) > 1 and node.inputs[1]:
        axes = values.constant(node.inputs[1])
        if axes is None:
            return None, "axes computed at run time are not mapped"
        axes = [int(a) for a in np.asarray(axes).reshape(-1)]
    else:
        axes = _ints(node, "axes", []) or []
    if not axes:
        if node.attr("noop_with_empty_axes", 0):
            return None, "noop_with_empty_axes=1 without axes is not mapped"
        axes = list(range(rank))
    if any(not -rank <= a < rank for a in axes):
        return None, f"axes {axes} are out of range for rank {rank}"
    return sorted({a % rank for a in axes}), None


def _reduce_why(node: Any, values: Values) -> str | None:
    return _reduce_axes(node, values)[1]


def _emit_reduce(node: Any, em: Emitter) -> None:
    axes, _ = _reduce_axes(node, em.values)
    keep = bool(node.attr("keepdims", 1))
    em.op("ReduceMean", [em.read(node.inputs[0])], [em.write(node.outputs[0])],
          [TensorParam("axes", np.array(axes, np.uint32)), Scalar("keep_dims", keep, "bool")], "ReduceMean")


def _emit_reshape(node: Any, em: Emitter) -> None:
    em.reshape(em.read(node.inputs[0]), em.values.shape(node.outputs[0]), em.write(node.outputs[0]), node.op_type)


def _emit_transpose(node: Any, em: Emitter) -> None:
    rank = len(em.values.shape(node.inputs[0]))
    perm = _ints(node, "perm", list(range(rank))[::-1])
    em.transpose(em.read(node.inputs[0]), perm, em.write(node.outputs[0]), "Transpose")


def _emit_concat(node: Any, em: Emitter) -> None:
    rank = len(em.values.shape(node.outputs[0]))
    axis = int(node.attr("axis", 0)) % rank
    inputs = [em.read(n) for n in node.inputs if n]
    em.op("Concat", inputs, [em.write(node.outputs[0])], [Scalar("axis", axis)], "Concat")


def _concat_why(node: Any, values: Values) -> str | None:
    if any(values.shape(n) is not None and 0 in values.shape(n) for n in node.inputs if n):
        return "empty Concat inputs are not mapped"
    return None


def _emit_softmax(node: Any, em: Emitter) -> None:
    shape = em.values.shape(node.inputs[0])
    rank = len(shape)
    default = 1 if em.values.opset < 13 else -1
    axis = int(node.attr("axis", default)) % rank
    beta = Scalar("beta", 1.0, "float32")
    x, out = em.read(node.inputs[0]), node.outputs[0]
    if axis == rank - 1:
        em.op("Softmax", [x], [em.write(out)], [Scalar("axis", rank - 1), beta], "Softmax")
    elif em.values.opset < 13:  # softmax over the flattened trailing dims [axis:]
        rows, cols = int(np.prod(shape[:axis])), int(np.prod(shape[axis:]))
        x2 = em.reshape(x, (rows, cols), hint="Softmax_2d")
        y2 = em.temp("Softmax_y", (rows, cols), quant=em.out_quant(out))
        em.op("Softmax", [x2], [y2], [Scalar("axis", 1), beta], "Softmax")
        em.reshape(y2, shape, em.write(out), "Softmax_out")
    else:  # move the axis last and back
        perm = [d for d in range(rank) if d != axis] + [axis]
        inverse = list(np.argsort(perm))
        xt = em.transpose(x, perm, hint="Softmax_in")
        yt = em.temp("Softmax_y", xt.shape, quant=em.out_quant(out))
        em.op("Softmax", [xt], [yt], [Scalar("axis", rank - 1), beta], "Softmax")
        em.transpose(yt, inverse, em.write(out), "Softmax_out")


# --------------------------------------------------------------------------------- quantize, dequantize
def _emit_dequantize(node: Any, em: Emitter) -> None:
    source = em.values.qdq.dq[node.outputs[0]]
    x = em.read_quant(source.name, source.quant)
    em.op("Dequantize", [x], [em.write(node.outputs[0])], (), "Dequantize")


def _emit_quantize(node: Any, em: Emitter) -> None:
    _, quant = em.values.qdq.q.get(node.inputs[0], (None, None))
    if quant is None:
        from .qdq import q_target

        quant = q_target(node, em.values)
    y = em.write_quant(node.outputs[0], quant, em.values.shape(node.outputs[0]))
    em.op("Quantize", [em.read(node.inputs[0])], [y], (), "Quantize")


def _qdq_why(node: Any, values: Values) -> str | None:
    from .qdq import dq_source, q_target

    if node.op_type == "DequantizeLinear":
        source = dq_source(node, values)
        if source is None:
            return "only DequantizeLinear of 8/16-bit integers (or int32) with constant scale and zero point is mapped"
        if source.quant.axis is not None and values.raw_constant(source.name) is None:
            return "per-axis DequantizeLinear of values computed at run time is not mapped"
        return None
    if q_target(node, values) is None:
        return "only QuantizeLinear to 8/16-bit integers with a constant per-tensor scale and zero point is mapped"
    return None


def quantized_why(node: Any, values: Values) -> str | None:
    """Why ``node`` (a QDQ group's op) cannot run on quantized tensors, beyond its float rule; None if it can."""
    if node.op_type == "Gemm":
        return _gemm_quantized_why(node, values)
    if node.op_type in ("Conv", "Gemm") and values.constant(node.inputs[1]) is None:
        return "quantized weights computed at run time are not mapped"
    return None


def emit_nodes(em: Emitter, nodes: Sequence[Any], plan: Any) -> None:
    """Emit ``nodes`` into one graph following ``plan`` (qdq.Plan): quantized ops on fixed-point tensors, the
    QuantizeLinear nodes they write and DequantizeLinear nodes read only by them emit nothing."""
    quantized_readers: dict[str, bool] = {}  # DequantizeLinear output -> whether only quantized ops read it here
    for node in nodes:
        for name in node.inputs:
            if name:
                quantized_readers[name] = quantized_readers.get(name, True) and node.id in plan.quantized
    for node in nodes:
        if node.id in plan.absorbed:
            continue
        if node.op_type == "DequantizeLinear":
            out = node.outputs[0]
            if out in em.values.qdq.constant_sources:
                continue  # a quantized weight: read as its integers, or as the float constant it computes
            if out not in em.outputs and quantized_readers.get(out, True):
                continue  # read only by ops on quantized tensors
        em.quantized = node.id in plan.quantized
        try:
            RULES[node.op_type].emit(node, em)
        finally:
            em.quantized = False


RULES: dict[str, Rule] = {
    **{op: Rule(_binary_why, _emit_binary) for op in BINARY},
    **{op: Rule(_no_reason, _emit_unary) for op in UNARY},
    "Sum": Rule(_no_reason, _emit_sum),
    "MatMul": Rule(_matmul_why, _emit_matmul),
    "Gemm": Rule(_gemm_why, _emit_gemm),
    "Conv": Rule(_conv_why, _emit_conv),
    "MaxPool": Rule(_pool_why, _emit_pool),
    "AveragePool": Rule(_pool_why, _emit_pool),
    "GlobalAveragePool": Rule(_gap_why, _emit_gap),
    "BatchNormalization": Rule(_batchnorm_why, _emit_batchnorm),
    "LRN": Rule(_lrn_why, _emit_lrn),
    "Reshape": Rule(_reshape_why, _emit_reshape),
    "Flatten": Rule(_no_reason, _emit_reshape),
    "Transpose": Rule(_no_reason, _emit_transpose),
    "Concat": Rule(_concat_why, _emit_concat),
    "Softmax": Rule(_no_reason, _emit_softmax),
    "ReduceMean": Rule(_reduce_why, _emit_reduce),
    "Gelu": Rule(_gelu_why, _emit_unary),
    "BiasGelu": Rule(_no_reason, _emit_bias_gelu),
    "DequantizeLinear": Rule(_qdq_why, _emit_dequantize),
    "QuantizeLinear": Rule(_qdq_why, _emit_quantize),
}
"""The ONNX ops mapped (default domain, float32; QDQ groups of QUANT_OPS on fixed-point tensors)."""

FUSED = {("com.microsoft", "Gelu"), ("com.microsoft", "BiasGelu")}
"""Fused ops of the contract (onnxruntime's contrib ops) that map: the erf GELU chain (after a bias Add or not)
as QNN's Gelu."""

SCALAR_CONSTANTS = frozenset(BINARY)
"""Ops whose constant inputs may be scalars (rank 0): broadcast to the output's rank as (1, ..., 1)."""

DATA_INPUTS: dict[str, tuple[int, ...]] = {"Reshape": (0,), "BatchNormalization": (0,), "DequantizeLinear": (0,),
                                           "QuantizeLinear": (0,), "ReduceMean": (0,)}
"""Inputs that carry float data, for ops where others are shapes (the rest of an op's inputs are data)."""

