"""Fused ops of ort-core's own domain ``ort_core``, made by the extended-level CPU fusions.

FusedConv / FusedGemm: the standard op's attributes and inputs, plus ``activation`` (Relu,
LeakyRelu, Clip, Sigmoid, Tanh, HardSigmoid), ``activation_<attr>`` for its attributes, and
Clip's min/max as inputs 4 and 5; the activation runs in place on the fresh output. FusedMatMul:
MatMul(A, B) + bias (1-D over the last axis), the bias added in place. Never in a saved model
unless written by ``optimized_model_filepath``.
"""

from __future__ import annotations

import numpy as np

from ....errors import KernelError
from ....ir.graph import Node
from ..registry import lookup, register
from .conv import conv_factory
from .linalg import gemm_factory, matmul_factory

DOMAIN = "ort_core"
_NEWEST_ACTIVATION_OPSET = 22  # activation attributes are stable since long before


def _split(node: Node, base_op: str, n_base_inputs: int) -> tuple[Node, Node]:
    base_attrs = {k: v for k, v in node.attrs.items() if not k.startswith("activation")}
    act_attrs = {k[len("activation_"):]: v for k, v in node.attrs.items() if k.startswith("activation_")}
    base = Node(base_op, node.inputs[:n_base_inputs], node.outputs, base_attrs, name=node.name, id=node.id)
    act = Node(str(node.attr("activation")), ["y", *node.inputs[n_base_inputs:]], node.outputs, act_attrs,
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
