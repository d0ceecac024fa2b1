"""CPU kernels for the newer gated and thresholding activations: Swish (24), SwiGLU (28) and
Shrink (9). The classic activations (Relu, Sigmoid, HardSwish, Gelu, ...) are in activation.py.
"""

from __future__ import annotations

import numpy as np

from ....errors import KernelError
from ....ir.graph import Node
from ..registry import register

_NARROW = ("float16", "bfloat16")


def _float_attr(node: Node, name: str, default: float) -> float:
    """A float attribute as ONNX stores it (float32), so defaults round the same way."""
    return float(np.float32(node.attr(name, default)))


def _swish(x: np.ndarray, alpha: float) -> np.ndarray:
    """x * sigmoid(alpha * x) in x's dtype; the sigmoid is rounded to that dtype before the
    product, as the spec's Mul(X, Sigmoid(alpha X)) does. 16-bit floats run in float32 with the
    same roundings."""
    dtype, shape = x.dtype, x.shape
    x = np.atleast_1d(x)  # 0-d results of ufuncs are scalars, which out= cannot take
    narrow = dtype.name in _NARROW
    xf = x.astype(np.float32) if narrow else x
    z = xf * xf.dtype.type(alpha)
    if narrow:
        z = z.astype(dtype).astype(np.float32)
    # sigmoid(z) = e / (1 + e) for z < 0, 1 / (1 + e) otherwise, with e = exp(-|z|): neither
    # overflows, and both tails keep their relative precision (x * sigmoid(x) -> 0 stays accurate)
    e = np.abs(z)
    np.negative(e, out=e)
    np.exp(e, out=e)
    z = np.where(z < 0, e, z.dtype.type(1)) / (e + z.dtype.type(1))
    if narrow:
        z = z.astype(dtype).astype(np.float32)
    z *= xf
    return z.astype(dtype, copy=False).reshape(shape)


def _check_float(label: str, x: np.ndarray, what: str) -> None:
    if x.dtype.kind != "f" and x.dtype.name != "bfloat16":
        raise KernelError(f"{label}: {what} must be a float tensor, got {x.dtype}")


@register("Swish", since=24, until=None)
def swish_factory(node: Node, opset: int):
    alpha = _float_attr(node, "alpha", 1.0)
    label = node.label

    def kernel(x):
        _check_float(label, x, "X")
        return (_swish(x, alpha),)

    return kernel


@register("SwiGLU", since=28, until=None)
def swiglu_factory(node: Node, opset: int):
    alpha = _float_attr(node, "alpha", 1.0)
    label = node.label

    def kernel(a, b):
        _check_float(label, a, "A")
        if a.shape != b.shape or a.dtype != b.dtype:
            raise KernelError(f"{label}: A and B must have the same shape and type (no broadcasting), "
                              f"got {a.dtype} {list(a.shape)} and {b.dtype} {list(b.shape)}")
        gate = _swish(a, alpha)
        if a.dtype.name in _NARROW:
            return ((gate.astype(np.float32) * b.astype(np.float32)).astype(a.dtype),)
        gate *= b
        return (gate,)

    return kernel


@register("Shrink", since=9, until=None)
def shrink_factory(node: Node, opset: int):
    lambd = _float_attr(node, "lambd", 0.5)
    bias = _float_attr(node, "bias", 0.0)
    label = node.label

    def kernel(x):
        if x.dtype.kind not in "iuf" and x.dtype.name != "bfloat16":
            raise KernelError(f"{label}: input must be numeric, got {x.dtype}")
        # integers are shifted in float64 and truncated back, as x +/- bias then a cast would
        if x.dtype.kind in "iu":
            wide = x.astype(np.float64)
        else:
            wide = x.astype(np.float32) if x.dtype.name in _NARROW else x
        t = wide.dtype.type
        y = np.where(wide < t(-lambd), wide + t(bias), np.where(wide > t(lambd), wide - t(bias), t(0)))
        return (y.astype(x.dtype, copy=False),)

    return kernel
