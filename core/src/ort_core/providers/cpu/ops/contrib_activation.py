"""CPU kernels for onnxruntime's GELU-family contrib activations (domain com.microsoft).

Gelu(X) = 0.5 X (1 + erf(X / sqrt 2)); BiasGelu(A, B) is Gelu(A + B); FastGelu(X, bias?) is the tanh
approximation 0.5 Y (1 + tanh(sqrt(2/pi) (Y + 0.044715 Y^3))) of Y = X (+ bias); QuickGelu(X) = X sigmoid(alpha X),
alpha 1.702 by default. A bias is 1-D, as long as X's last axis. float16/bfloat16 run in float32 and are
rounded once at the end (as onnxruntime's float kernels behind its inserted casts); float32/float64 as they are.
The ONNX Gelu (opset 20) is in activation.py, not here.
"""

from __future__ import annotations

import numpy as np

from ....errors import KernelError
from ..registry import register
from .activation import BY_ROWS_MIN, _float_attr, _sigmoid, by_rows, gelu_erf_values, gelu_tanh_values

DOMAIN = "com.microsoft"
_F32 = np.dtype(np.float32)


def _compute(label: str, name: str, x: np.ndarray) -> np.ndarray:
    """x in the dtype it is computed in (16-bit floats in float32, at least 1-D); non-floats are refused."""
    if x.dtype.kind != "f" and x.dtype.name != "bfloat16":
        raise KernelError(f"{label}: input '{name}' must be float16, bfloat16, float or double, got {x.dtype}")
    xc = x.astype(_F32) if x.dtype.itemsize < 4 else x
    return xc.reshape(xc.shape or (1,))  # numpy turns 0-d results into scalars that out= cannot take


def _check_bias(label: str, x: np.ndarray, bias: np.ndarray) -> None:
    """bias must be 1-D of x's last dimension, in x's dtype."""
    if bias.dtype != x.dtype:
        raise KernelError(f"{label}: bias has type {bias.dtype}, its input has {x.dtype}")
    if bias.ndim != 1 or x.ndim == 0 or bias.shape[0] != x.shape[-1]:
        raise KernelError(f"{label}: bias must be 1-D with the length of the input's last dimension, got bias "
                          f"{bias.shape} for input {x.shape}")


def _plus_bias(label: str, x: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    """x + bias as a new array in x's compute dtype; bias must be 1-D of x's last dimension."""
    xc = _compute(label, "X", x)
    if bias is None:
        return xc
    _check_bias(label, x, bias)
    if x.dtype.itemsize >= 4:  # xc is x itself (or a view of it): never add into it
        return np.add(xc, bias)
    xc += bias.astype(xc.dtype, copy=False)
    return xc


def _gelu(label: str, fn, x: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    """fn(x + bias) in x's dtype: large float32/float64 inputs by row blocks (activation.by_rows)."""
    if x.dtype.kind == "f" and x.dtype.itemsize >= 4 and x.ndim and x.size >= BY_ROWS_MIN:
        if bias is not None:
            _check_bias(label, x, bias)
        return by_rows(fn, x, bias)
    return _finish(fn(_plus_bias(label, x, bias)), x)


def _finish(y: np.ndarray, like: np.ndarray) -> np.ndarray:
    return y.reshape(like.shape).astype(like.dtype, copy=False)


@register("Gelu", since=1, domain=DOMAIN)
def gelu_factory(node, opset):
    label = node.label

    def kernel(x):
        return (_gelu(label, gelu_erf_values, x),)

    return kernel


@register("BiasGelu", since=1, domain=DOMAIN)
def bias_gelu_factory(node, opset):
    label = node.label

    def kernel(a, b):
        return (_gelu(label, gelu_erf_values, a, b),)

    return kernel


@register("FastGelu", since=1, domain=DOMAIN)
def fast_gelu_factory(node, opset):
    label = node.label

    def kernel(x, bias=None):
        return (_gelu(label, gelu_tanh_values, x, bias),)

    return kernel


@register("QuickGelu", since=1, domain=DOMAIN)
def quick_gelu_factory(node, opset):
    label = node.label
    alpha = _float_attr(node, "alpha", 1.702)

    def kernel(x):
        xc = _compute(label, "X", x)
        y = np.multiply(xc, xc.dtype.type(alpha))
        y = _sigmoid(y)
        with np.errstate(invalid="ignore"):  # -inf * 0 is NaN, as x sigmoid(alpha x) says
            y *= xc
        return (_finish(y, x),)

    return kernel
