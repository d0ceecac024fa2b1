"""onnxruntime's fused contrib ops of domain ``com.microsoft`` that ort-core's own fusions emit as well
(optimizer/cpu_fusion.py), so a model saved after ort-core's optimizer loads in onnxruntime and back.

FusedConv(X, W, B?, Z?): Conv with all of Conv's attributes; Z, when given, has the output's shape and
is added to the convolution; then ``activation`` (none, Relu, Tanh, Sigmoid, LeakyRelu, Clip,
HardSigmoid) with its parameters in ``activation_params`` (LeakyRelu [alpha], Clip [min, max],
HardSigmoid [alpha, beta]; required where the activation has parameters).
FusedGemm(A, B, C?): Gemm (alpha, beta, transA, transB) then ``activation`` (required: Relu, Tanh,
Sigmoid, LeakyRelu, HardSigmoid, Elu, Selu, ThresholdedRelu, Softplus, Softsign, ScaledTanh,
ParametricSoftplus) with ``activation_alpha`` / ``activation_beta`` / ``activation_gamma``.
FusedMatMul(A, B): alpha * MatMul(A', B') where A' moves A's first axis behind its other batch axes
when ``transBatchA`` (axes 1..r-2, 0, r-1), then swaps its last two axes when ``transA``; B likewise.
The activation always runs in place on the operation's fresh output.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ....errors import KernelError
from ....ir.graph import Node
from ..registry import lookup, register
from .conv import conv_factory
from .linalg import gemm_factory, matmul_factory

DOMAIN = "com.microsoft"
_NEWEST_ACTIVATION_OPSET = 22  # the activations' attributes are stable since long before
_CONV_PARAMS = {"Relu": (), "Tanh": (), "Sigmoid": (), "LeakyRelu": ("alpha",), "Clip": ("min", "max"),
                "HardSigmoid": ("alpha", "beta")}
_GEMM_PARAMS = {"Relu": (), "Tanh": (), "Sigmoid": (), "Softplus": (), "Softsign": (), "LeakyRelu": ("alpha",),
                "Elu": ("alpha",), "ThresholdedRelu": ("alpha",), "HardSigmoid": ("alpha", "beta"),
                "Selu": ("alpha", "gamma"), "ScaledTanh": ("alpha", "beta"), "ParametricSoftplus": ("alpha", "beta")}

Activation = Callable[[np.ndarray], np.ndarray]


def inplace_activation(label: str, op_type: str, params: dict[str, float]) -> Activation:
    """``y -> activation(y)`` writing into ``y`` where numpy can (y must be the operation's own fresh,
    writable output). ``params`` are the activation's attributes (alpha, beta, gamma, min, max)."""
    if op_type == "Relu":
        return lambda y: np.maximum(y, 0, out=y)
    if op_type == "LeakyRelu":
        alpha = params["alpha"]

        def leaky(y):
            neg = np.minimum(y, 0)
            neg *= y.dtype.type(alpha - 1.0)
            y += neg  # y + (alpha - 1) * min(y, 0): alpha * y below zero, y above
            return y
        return leaky
    if op_type == "Sigmoid":  # as activation.py's: 0.5 + 0.5 tanh(y / 2), here in place
        def sigmoid(y):
            half = y.dtype.type(0.5)
            y *= half
            np.tanh(y, out=y)
            y *= half
            y += half
            return y
        return sigmoid
    if op_type == "Tanh":
        return lambda y: np.tanh(y, out=y)
    if op_type == "Clip":
        return lambda y: np.clip(y, y.dtype.type(params["min"]), y.dtype.type(params["max"]), out=y)
    if op_type == "ScaledTanh":  # alpha * tanh(beta * y)
        alpha, beta = params["alpha"], params["beta"]
        return lambda y: _scaled(np.tanh(_scaled(y, beta), out=y), alpha)
    if op_type == "ParametricSoftplus":  # alpha * softplus(beta * y)
        alpha, beta = params["alpha"], params["beta"]
        softplus = _standard(label, "Softplus", {})
        return lambda y: _scaled(softplus(_scaled(y, beta)), alpha)
    return _standard(label, op_type, params)


def _scaled(y: np.ndarray, factor: float) -> np.ndarray:
    if factor != 1.0:
        y *= y.dtype.type(factor)
    return y


def _standard(label: str, op_type: str, attrs: dict) -> Activation:
    """The CPU provider's kernel for the standard activation op."""
    kd = lookup("", op_type, _NEWEST_ACTIVATION_OPSET)
    if kd is None:
        raise KernelError(f"{label}: no CPU kernel for fused activation {op_type}")
    kernel = kd.factory(Node(op_type, ["y"], ["z"], dict(attrs), name=label), _NEWEST_ACTIVATION_OPSET)
    return lambda y: kernel(y)[0]


def _checked(node: Node, known: dict[str, tuple[str, ...]], values: list[float], required: bool) -> Activation | None:
    """The node's ``activation`` with its parameter names bound to ``values`` (in the order onnxruntime
    reads them), or None when the node has none and may have none."""
    act = node.attr("activation")
    if act is None and not required:
        return None
    act = act.decode() if isinstance(act, bytes) else act
    if act not in known:
        raise KernelError(f"{node.label}: activation {act!r} of {node.op_type} is not one of {sorted(known)}")
    names = known[act]
    if len(values) < len(names):
        raise KernelError(f"{node.label}: activation {act} needs its parameters {list(names)}")
    return inplace_activation(node.label, act, dict(zip(names, values)))


def _writable(y: np.ndarray, inputs) -> np.ndarray:
    """The result itself when it is the operation's own writable array, else a copy to write into."""
    if not y.flags.writeable or y.base is not None and any(y.base is x for x in inputs if x is not None):
        return y.copy()
    return y


def _base(node: Node, op_type: str) -> Node:
    """The standard op a fused node starts with: its first three inputs, its attributes but the activation's."""
    return Node(op_type, node.inputs[:3], node.outputs,
                {k: v for k, v in node.attrs.items() if not k.startswith("activation")}, name=node.name, id=node.id)


@register("FusedConv", since=1, domain=DOMAIN)
def fused_conv_factory(node, opset, graph=None):
    conv = conv_factory(_base(node, "Conv"), 11, graph)
    params = [float(p) for p in (node.attr("activation_params") or [])]
    activate = _checked(node, _CONV_PARAMS, params, required=False)
    label = node.label

    def kernel(x, w, b=None, z=None):
        (y,) = conv(x, w, b)
        if z is not None:
            if z.shape != y.shape or z.dtype != y.dtype:
                raise KernelError(f"{label}: the sum input Z {z.dtype}{list(z.shape)} must match the convolution's "
                                  f"output {y.dtype}{list(y.shape)}")
            y = _writable(y, (x, w, b))
            y += z
        elif activate is not None:
            y = _writable(y, (x, w, b))
        return (activate(y) if activate is not None else y,)

    return kernel


@register("FusedGemm", since=1, domain=DOMAIN)
def fused_gemm_factory(node, opset):
    gemm = gemm_factory(_base(node, "Gemm"), 13)
    given = {k: float(node.attr(f"activation_{k}")) for k in ("alpha", "beta", "gamma")
             if node.attr(f"activation_{k}") is not None}
    act = node.attr("activation")
    names = _GEMM_PARAMS.get(act.decode() if isinstance(act, bytes) else act, ())
    if any(n not in given for n in names):
        raise KernelError(f"{node.label}: activation {act} of FusedGemm needs "
                          f"{['activation_' + n for n in names]}")
    activate = _checked(node, _GEMM_PARAMS, [given[n] for n in names], required=True)

    def kernel(a, b, c=None):
        (y,) = gemm(a, b, c)
        return (activate(_writable(y, (a, b, c))),)

    return kernel


def _batch_moved(rank: int) -> list[int]:
    """transBatch: the first axis goes behind the other batch axes, the matrix axes stay."""
    return [*range(1, rank - 1), 0, rank - 1]


def _operand(x: np.ndarray, batch: bool, trans: bool) -> np.ndarray:
    if x.ndim >= 3 and batch:
        x = x.transpose(_batch_moved(x.ndim))
    if x.ndim >= 2 and trans:
        x = np.swapaxes(x, -1, -2)
    return x


@register("FusedMatMul", since=1, domain=DOMAIN)
def fused_matmul_factory(node, opset):
    matmul = matmul_factory(Node("MatMul", node.inputs[:2], node.outputs, {}, name=node.name, id=node.id), 13)
    alpha = float(node.attr("alpha", 1.0))
    flags = [bool(node.attr(k, 0)) for k in ("transBatchA", "transA", "transBatchB", "transB")]

    def kernel(a, b):
        (y,) = matmul(_operand(a, *flags[:2]), _operand(b, *flags[2:]))
        if alpha != 1.0:
            y = _writable(y, (a, b))
            y *= y.dtype.type(alpha)
        return (y,)

    return kernel
