"""Fused ops of ort-core's own domain ``ort_core``, made by the extended-level CPU fusions.

FusedConv / FusedGemm: the standard op's attributes and inputs, plus ``activation`` (Relu,
LeakyRelu, Clip, Sigmoid, Tanh, HardSigmoid), ``activation_<attr>`` for its attributes, and
Clip's min/max as inputs 4 and 5; the activation runs in place on the fresh output.
FusedConvAdd: Conv(X, W, B) + Z (a residual of the output's shape, input 4) then the optional
activation (its extra inputs from 5). FusedBatchNormalization: inference BatchNormalization + activation.
FusedMatMul: MatMul(A, B) + bias (1-D over the last axis), the bias added in place. Never in a saved
model unless written by ``optimized_model_filepath``.
"""

from __future__ import annotations

import numpy as np

from ....errors import KernelError
from ....ir.graph import Node
from ..registry import lookup, register
from .conv import conv_factory
from .linalg import gemm_factory, matmul_factory
from .normalization import batch_normalization_factory

DOMAIN = "ort_core"
_NEWEST_ACTIVATION_OPSET = 22  # activation attributes are stable since long before


def _split(node: Node, base_op: str, n_base_inputs: int, act_from: int | None = None) -> tuple[Node, Node]:
    """The standard op (the first ``n_base_inputs`` inputs) and the activation (its extra inputs from
    ``act_from``, by default right after the base op's) that ``node`` fuses."""
    act_from = n_base_inputs if act_from is None else act_from
    base_attrs = {k: v for k, v in node.attrs.items() if not k.startswith("activation")}
    act_attrs = {k[len("activation_"):]: v for k, v in node.attrs.items() if k.startswith("activation_")}
    base = Node(base_op, node.inputs[:n_base_inputs], node.outputs, base_attrs, name=node.name, id=node.id)
    act = Node(str(node.attr("activation")), ["y", *node.inputs[act_from:]], node.outputs, act_attrs,
               name=node.name, id=node.id)
    return base, act


def _activation(act: Node):
    """An in-place activation for the common cases; otherwise the standard kernel."""
    if act.op_type == "Relu":
        return lambda y, *_: np.maximum(y, 0, out=y)
    if act.op_type == "LeakyRelu":
        alpha = float(act.attr("alpha", 0.01))

        def leaky(y, *_):
            neg = np.minimum(y, 0)
            neg *= y.dtype.type(alpha - 1.0)
            y += neg  # y + (alpha - 1) * min(y, 0): alpha * y below zero, y above
            return y
        return leaky
    if act.op_type == "Clip" and len(act.inputs) > 1:
        return lambda y, lo=None, hi=None: np.clip(y, lo, hi, out=y)
    kd = lookup("", act.op_type, _NEWEST_ACTIVATION_OPSET)
    if kd is None:
        raise KernelError(f"{act.label}: no CPU kernel for fused activation {act.op_type}")
    kernel = kd.factory(act, _NEWEST_ACTIVATION_OPSET)
    return lambda y, *extra: kernel(y, *extra)[0]


def _fused(node: Node, opset: int, base_op: str, factory, n_base: int):
    base, act = _split(node, base_op, n_base)
    inner = factory(base, 11)
    activate = _activation(act)

    def kernel(*xs):
        (y,) = inner(*xs[:n_base])[:1]
        if not y.flags.writeable or y.base is not None and any(y.base is x for x in xs):
            y = y.copy()  # the activation writes in place: never into an input or a read-only view
        return (activate(y, *xs[n_base:]),)

    return kernel


@register("FusedConv", since=1, domain=DOMAIN)
def fused_conv_factory(node, opset):
    return _fused(node, opset, "Conv", conv_factory, 3)


@register("FusedConvAdd", since=1, domain=DOMAIN)
def fused_conv_add_factory(node, opset):
    """Conv(X, W, B) + Z, then the optional activation, all on the Conv's fresh output."""
    base, act = _split(node, "Conv", 3, act_from=4)  # input 3 is the residual Z
    conv = conv_factory(base, 11)
    activate = _activation(act) if node.attr("activation") is not None else None

    def kernel(x, w, b, z, *extra):
        (y,) = conv(x, w, b)
        if not y.flags.writeable or y.shape != z.shape or y.dtype != z.dtype:
            y = np.add(y, z)
        else:
            y += z
        return (activate(y, *extra) if activate is not None else y,)

    return kernel


@register("FusedBatchNormalization", since=1, domain=DOMAIN)
def fused_batch_normalization_factory(node, opset):
    return _fused(node, opset, "BatchNormalization", batch_normalization_factory, 5)


@register("FusedGemm", since=1, domain=DOMAIN)
def fused_gemm_factory(node, opset):
    return _fused(node, opset, "Gemm", gemm_factory, 3)


@register("FusedMatMul", since=1, domain=DOMAIN)
def fused_matmul_factory(node, opset):
    base = Node("MatMul", node.inputs[:2], node.outputs, {}, name=node.name, id=node.id)
    matmul = matmul_factory(base, 13)

    def kernel(a, b, bias):
        (y,) = matmul(a, b)
        if not y.flags.writeable:
            y = y.copy()
        y += bias
        return (y,)

    return kernel
