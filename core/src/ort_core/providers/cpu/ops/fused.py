"""Fused ops of ort-core's own domain ``ort_core``, made by the extended-level CPU fusions where
onnxruntime has no contrib op for the pattern (its FusedConv and FusedGemm are in contrib_fused.py).

FusedBatchNormalization(X, scale, B, mean, var): inference BatchNormalization, then ``activation`` with
``activation_params`` as com.microsoft FusedConv takes them (Relu, Tanh, Sigmoid, LeakyRelu [alpha],
Clip [min, max], HardSigmoid [alpha, beta]). MatMulBias(A, B, bias): MatMul(A, B) + bias (1-D over the
last axis), the bias added in place. Never in a saved model unless written by ``optimized_model_filepath``.
"""

from __future__ import annotations

from ....ir.graph import Node
from ..registry import register
from .contrib_fused import inplace_activation
from .linalg import matmul_factory
from .normalization import batch_normalization_factory

DOMAIN = "ort_core"
_PARAM_NAMES = {"LeakyRelu": ("alpha",), "Clip": ("min", "max"), "HardSigmoid": ("alpha", "beta")}


@register("FusedBatchNormalization", since=1, domain=DOMAIN)
def fused_batch_normalization_factory(node, opset):
    base = Node("BatchNormalization", node.inputs[:5], node.outputs,
                {k: v for k, v in node.attrs.items() if not k.startswith("activation")}, name=node.name, id=node.id)
    bn = batch_normalization_factory(base, 15)
    act = str(node.attr("activation"))
    params = dict(zip(_PARAM_NAMES.get(act, ()), (float(p) for p in node.attr("activation_params") or ())))
    activate = inplace_activation(node.label, act, params)

    def kernel(*xs):
        (y,) = bn(*xs[:5])
        if not y.flags.writeable or y.base is not None and any(y.base is x for x in xs):
            y = y.copy()  # the activation writes in place: never into an input or a read-only view
        return (activate(y),)

    return kernel


@register("MatMulBias", since=1, domain=DOMAIN)
def matmul_bias_factory(node, opset):
    base = Node("MatMul", node.inputs[:2], node.outputs, {}, name=node.name, id=node.id)
    matmul = matmul_factory(base, 13)

    def kernel(a, b, bias):
        (y,) = matmul(a, b)
        if not y.flags.writeable:
            y = y.copy()
        y += bias
        return (y,)

    return kernel
