"""CPU kernels for dense linear algebra: Gemm and MatMul (numpy matmul semantics, BLAS-backed).

Quantized and integer variants (MatMulInteger, QLinearMatMul), Einsum and Det are not here.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from ....errors import KernelError
from ....limits import check_matmul
from ..registry import register

_NARROW_FLOATS = {np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)}


def _matmul(a, b):
    """np.matmul; 16-bit floats are multiplied in float32 (no BLAS for them) and cast back."""
    if a.dtype in _NARROW_FLOATS and b.dtype == a.dtype:
        return np.matmul(a.astype(np.float32), b.astype(np.float32)).astype(a.dtype)
    return np.matmul(a, b)


@register("MatMul", since=1, until=None)
def matmul_factory(node, opset):
    label = node.label

    def kernel(a, b):
        if a.ndim == 0 or b.ndim == 0:
            raise KernelError(f"{label}: MatMul operands must have rank >= 1, got shapes "
                              f"{a.shape} and {b.shape}")
        check_matmul(label, a, b)
        try:
            y = _matmul(a, b)
        except ValueError as e:
            raise KernelError(f"{label}: MatMul shapes {a.shape} and {b.shape} do not match: {e}") from None
        return (y if type(y) is np.ndarray else np.asarray(y),)

    return kernel


@register("Gemm", since=1, until=None)
def gemm_factory(node, opset):
    alpha = float(np.float32(node.attr("alpha", 1.0)))  # float attributes are float32 in ONNX
    beta = float(np.float32(node.attr("beta", 1.0)))
    trans_a = bool(node.attr("transA", 0))
    trans_b = bool(node.attr("transB", 0))
    label = node.label

    def kernel(a, b, c=None):
        if a.ndim != 2 or b.ndim != 2:
            raise KernelError(f"{label}: Gemm operands must be 2-D, got shapes {a.shape} and {b.shape}")
        at = a.T if trans_a else a
        bt = b.T if trans_b else b
        if at.shape[1] != bt.shape[0]:
            raise KernelError(f"{label}: Gemm inner dimensions differ: A' is {at.shape}, B' is {bt.shape} "
                              f"(transA={int(trans_a)}, transB={int(trans_b)})")
        check_matmul(label, at, bt)
        y = _matmul(at, bt)
        dt = y.dtype.type
        if alpha != 1.0:
            if y.dtype.kind == "f":
                y *= dt(alpha)
            else:
                y = (y * alpha).astype(y.dtype)
        if c is not None and beta != 0.0:
            try:
                cb = np.broadcast_to(c, y.shape)
            except ValueError:
                raise KernelError(f"{label}: Gemm C of shape {c.shape} cannot be broadcast to "
                                  f"the output shape {y.shape}") from None
            if beta == 1.0:
                y += cb
            elif y.dtype.kind == "f":
                y += cb * dt(beta)
            else:
                y += (cb * beta).astype(y.dtype)
        return (y,)

    return kernel
