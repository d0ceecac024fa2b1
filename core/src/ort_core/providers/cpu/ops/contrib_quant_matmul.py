"""CPU kernels for onnxruntime's com.microsoft integer matmuls with float or requantized output:
DynamicQuantizeMatMul, MatMulIntegerToFloat and QGemm. (MatMulNBits, with block-quantized weights,
is in contrib_matmul_nbits.py.)

All three multiply 8-bit integers exactly, (A - a_zero_point) @ (B - b_zero_point), with qlinear.py's
helpers (integer-valued float BLAS, int32 wrap-around), then rescale in float32 like onnxruntime:
the int32 accumulator is converted to float32 and multiplied by one float32 multiplier per tensor or
per column, then the float bias is added.

- DynamicQuantizeMatMul(A float32, B int8/uint8, b_scale, b_zero_point?, bias?): A is first quantized
  to uint8 exactly as DynamicQuantizeLinear does (quantize.py's kernel), then
  Y = acc * (a_scale * b_scale) + bias.
- MatMulIntegerToFloat(A, B, a_scale, b_scale, a_zero_point?, b_zero_point?, bias?): the same with A
  already quantized; Y has the scales' type (float32 or float16, computed in float32).
  For both, b_scale and b_zero_point are per tensor, per column ((N,) for a 2-D B) or per batch and
  column (B's shape with 1 in place of K); a_zero_point is per tensor. A scale of another shape is
  multiplied into the output afterwards by broadcasting, bias included, as onnxruntime does; for
  MatMulIntegerToFloat a per-row a_scale (last dimension 1) is such a scale, and a_scale/b_scale
  are swapped first where onnxruntime swaps them (shapes that fit the other operand).
- QGemm(A, a_scale, a_zero_point, B, b_scale, b_zero_point, C?, y_scale?, y_zero_point?; alpha,
  transA, transB): 2-D Gemm on 8-bit A and B, per-tensor a parameters, per-tensor or per-column
  b parameters (scale and zero point of the same shape), C an int32 bias added to the accumulator
  (broadcast from (), (N,), (1, N), (M, 1) or (M, N)). multiplier = alpha * a_scale * b_scale
  (/ y_scale). Without y_zero_point Y is float32 acc * multiplier (y_scale alone divides it);
  with it Y is requantized to y_zero_point's type: round half to even, add the zero point, saturate.
  K = 0 gives C (or 0) scaled, where onnxruntime 1.32 writes bytes into a float output.

For DynamicQuantizeMatMul and MatMulIntegerToFloat, a B that is a constant initializer (with its zero
point, if any) is shifted by its zero point once, at build time, when the factory receives the graph, and
its K split into the blocks qexact.py proves exact in float32 (usually one): the accumulator is then the
exact integer, rounded once to float32 as onnxruntime's int32 accumulator is.
"""

from __future__ import annotations

import numpy as np

from ....errors import KernelError
from ....ir.graph import Node
from ....limits import check_tensor_size
from ..registry import register
from .contrib_matmul_nbits import constant_inputs
from .qexact import add_blocks, dynamic_shifted, k_blocks, shifted
from .qlinear import INT8_TYPES, check_int8, check_zero_point_type, int_matmul, to_int32, zero_point_shifted
from .quantize import dynamic_quantize_linear, saturate_to

_F32 = np.float32
_SCALE_TYPES = (np.dtype(np.float32), np.dtype(np.float16))


def _is_scalar(p: np.ndarray) -> bool:
    """A per-tensor parameter: rank 0, or rank 1 with one element."""
    return p.ndim == 0 or (p.ndim == 1 and p.size == 1)


def _b_param_ok(shape: tuple, b_shape: tuple) -> bool:
    """Whether a scale or zero point of ``shape`` is per tensor or per column of B: (N,) for a 2-D B,
    or B's shape with 1 in place of K."""
    if len(shape) == 0 or shape == (1,):
        return True
    if len(shape) == 1 and len(b_shape) == 2:
        return shape[0] == b_shape[1]
    if len(shape) != len(b_shape) or len(shape) < 2 or shape[-2] != 1:
        return False
    return all(d == bd for i, (d, bd) in enumerate(zip(shape, b_shape)) if i != len(shape) - 2)


def _broadcasts_to(shape: tuple, target: tuple) -> bool:
    """Whether an array of ``shape`` broadcasts to exactly ``target``."""
    try:
        return np.broadcast_shapes(shape, target) == target
    except ValueError:
        return False


def _b_zero_point(label: str, zp, b: np.ndarray):
    """B's zero point shaped to broadcast over B (None when absent)."""
    if zp is None:
        return None
    check_zero_point_type(label, "b_zero_point", zp, b)
    if not _b_param_ok(zp.shape, b.shape):
        raise KernelError(f"{label}: b_zero_point of shape {zp.shape} is neither per tensor nor per column "
                          f"of B {b.shape}")
    return zp.reshape(()) if zp.size == 1 else zp


def _a_zero_point(label: str, zp, a: np.ndarray):
    if zp is None:
        return None
    check_zero_point_type(label, "a_zero_point", zp, a)
    if not _is_scalar(zp):
        raise KernelError(f"{label}: a_zero_point must be a scalar, got shape {zp.shape}")
    return zp.reshape(())


def _shifted_constant_b(node: Node, graph, b_pos: int, zp_pos: int):
    """B minus its zero point in float32 (exact: small integers), when both are constant and
    valid (an invalid one is left for the kernel to report)."""
    consts = constant_inputs(node, graph, (b_pos, zp_pos))
    if consts is None:
        return None
    b, zp = consts
    if b.dtype not in INT8_TYPES or b.ndim < 2 or (zp is not None and (zp.dtype != b.dtype
                                                                  or not _b_param_ok(zp.shape, b.shape))):
        return None
    out = zero_point_shifted(b, None if zp is None else zp.reshape(()) if zp.size == 1 else zp, _F32)
    out.flags.writeable = False
    blocks = k_blocks(np.abs(out.reshape(-1, *out.shape[-2:])).max(axis=0), 255) if out.ndim >= 2 else None
    return out, blocks


def _accumulate(label: str, a, a_zp, b, b_zp, shifted_b) -> np.ndarray:
    """(a - a_zp) @ (b - b_zp) in float32 (wrapped to int32 range where needed), for the float outputs of
    these ops. A constant B, shifted once at build time, takes one float32 BLAS product per exact block of K
    (qexact.py: the exact integer, rounded once to float32); a B fed at run time goes through qlinear.py's
    exact product."""
    if a.ndim == 0 or b.ndim == 0:
        raise KernelError(f"{label}: matmul operands must have rank >= 1, got {a.shape} and {b.shape}")
    k = a.shape[-1]
    if k != b.shape[0 if b.ndim == 1 else -2]:
        raise KernelError(f"{label}: matmul shapes {a.shape} and {b.shape} do not match")
    try:
        batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    except ValueError:
        raise KernelError(f"{label}: matmul batch dimensions of {a.shape} and {b.shape} do not broadcast") from None
    check_tensor_size(label, batch + a.shape[-2:-1] + b.shape[-1:] * (b.ndim > 1), _F32)
    if shifted_b is None:
        acc = int_matmul(label, a, b, a_zp, b_zp)
    elif shifted_b[1] is None:  # no exact split: float32, within a few roundings of the integer
        acc = np.matmul(shifted(a, a_zp), shifted_b[0])
    else:  # exact blocks of K (below 2**24 each, so no int32 wrap), added as integers
        sa, sb = shifted(a, a_zp), shifted_b[0]
        return add_blocks(np.matmul(sa[..., i:j], sb[..., i:j, :]) for i, j in shifted_b[1])
    if k * 255 * 255 >= 2 ** 31:  # an int32 accumulator can wrap
        acc = to_int32(acc)
    return acc.astype(_F32, copy=False)


def _scale_output(label: str, acc, b_shape, a_scale, b_scale, bias, a_scale_in_gemm: bool = True) -> np.ndarray:
    """acc * a_scale * b_scale + bias in float32, onnxruntime's way: scales that are per tensor or per
    column of B scale the accumulator before the bias; any other scale multiplies the result after."""
    a_s, b_s = a_scale.astype(_F32, copy=False), b_scale.astype(_F32, copy=False)
    in_gemm_b = _b_param_ok(b_s.shape, b_shape)
    mult = a_s.reshape(()) if a_scale_in_gemm else _F32(1)
    if in_gemm_b:
        mult = mult * (b_s.reshape(()) if b_s.size == 1 else b_s)
    # acc is this call's own float32 accumulator: scaled in place (a fresh array per pass costs page faults)
    in_place = acc.dtype == _F32 and _broadcasts_to(np.shape(mult), acc.shape)
    y = np.multiply(acc, mult, out=acc) if in_place else acc * mult
    if bias is not None:
        n = b_shape[-1] if len(b_shape) > 1 else 1
        if bias.shape != (n,):
            raise KernelError(f"{label}: bias must have shape ({n},), got {bias.shape}")
        y += bias.astype(_F32, copy=False)
    for late, scale in ((not a_scale_in_gemm, a_s), (not in_gemm_b, b_s)):
        if late:
            if not _broadcasts_to(scale.shape, y.shape):
                raise KernelError(f"{label}: scale of shape {scale.shape} does not broadcast to the output {y.shape}")
            y *= scale
    return y


def _check_scales(label: str, *scales) -> np.dtype:
    dtype = scales[0].dtype
    for s in scales:
        if s.dtype not in _SCALE_TYPES or s.dtype != dtype:
            raise KernelError(f"{label}: scales must all be float32 or all float16, got "
                              f"{', '.join(str(x.dtype) for x in scales)}")
    return dtype


@register("DynamicQuantizeMatMul", since=1, domain="com.microsoft")
def _dynamic_quantize_matmul(node: Node, opset: int, graph=None):
    label = node.label
    quantize = dynamic_quantize_linear(node, 11)
    shifted_b = _shifted_constant_b(node, graph, 1, 3)

    def kernel(a, b, b_scale, b_zp=None, bias=None):
        check_int8(label, "B", b)
        if b_scale.dtype != np.float32 or (bias is not None and bias.dtype != np.float32):
            raise KernelError(f"{label}: b_scale and bias must be float32")
        z = _b_zero_point(label, b_zp, b)
        if shifted_b is not None and shifted_b[1] is not None and a.dtype == np.float32 and a.ndim >= 1 \
                and a.shape[-1] == shifted_b[0].shape[-2]:
            # A's codes minus their zero point straight in float32 (qexact.dynamic_shifted), B prepared
            sa, a_scale, _ = dynamic_shifted(a)
            sb = shifted_b[0]
            acc = add_blocks(np.matmul(sa[..., i:j], sb[..., i:j, :]) for i, j in shifted_b[1])
        else:
            qa, a_scale, a_zp = quantize(a)
            acc = _accumulate(label, qa, a_zp, b, z, shifted_b)
        return (_scale_output(label, acc, b.shape, np.asarray(a_scale), b_scale, bias),)

    return kernel


def _fix_scales(a_scale, b_scale):
    """onnxruntime swaps MatMulIntegerToFloat's scales when a fusion may have mixed them up: a non-scalar
    a_scale that is not per row (last dimension 1), or a b_scale that is not per column."""
    if not _is_scalar(a_scale):
        if a_scale.ndim == 1 or a_scale.shape[-1] != 1:
            return b_scale, a_scale
    elif not _is_scalar(b_scale) and b_scale.ndim > 1 and b_scale.shape[-2] != 1:
        return b_scale, a_scale
    return a_scale, b_scale


@register("MatMulIntegerToFloat", since=1, domain="com.microsoft")
def _matmul_integer_to_float(node: Node, opset: int, graph=None):
    label = node.label
    shifted_b = _shifted_constant_b(node, graph, 1, 5)

    def kernel(a, b, a_scale, b_scale, a_zp=None, b_zp=None, bias=None):
        check_int8(label, "A", a)
        check_int8(label, "B", b)
        out = _check_scales(label, a_scale, b_scale, *(() if bias is None else (bias,)))
        z_a, z_b = _a_zero_point(label, a_zp, a), _b_zero_point(label, b_zp, b)
        acc = _accumulate(label, a, z_a, b, z_b, shifted_b)
        a_s, b_s = _fix_scales(a_scale, b_scale)
        y = _scale_output(label, acc, b.shape, a_s, b_s, bias, a_scale_in_gemm=_is_scalar(a_s))
        return (y.astype(out, copy=False),)

    return kernel


@register("QGemm", since=1, domain="com.microsoft")
def _qgemm(node: Node, opset: int):
    label = node.label
    alpha = _F32(node.attr("alpha", 1.0))
    trans_a, trans_b = bool(node.attr("transA", 0)), bool(node.attr("transB", 0))

    def kernel(a, a_scale, a_zp, b, b_scale, b_zp, c=None, y_scale=None, y_zp=None):
        check_int8(label, "A", a)
        check_int8(label, "B", b)
        if a_zp is None or b_zp is None:
            raise KernelError(f"{label}: a_zero_point and b_zero_point are required")
        if a.ndim != 2 or b.ndim != 2:
            raise KernelError(f"{label}: A and B must be 2-D, got {a.shape} and {b.shape}")
        a, b = (a.T if trans_a else a), (b.T if trans_b else b)
        m, n = a.shape[0], b.shape[1]
        if not (_is_scalar(a_scale) and (y_scale is None or _is_scalar(y_scale))):
            raise KernelError(f"{label}: a_scale and y_scale must be scalars")
        if any(s.dtype != np.float32 for s in (a_scale, b_scale, y_scale) if s is not None):
            raise KernelError(f"{label}: a_scale, b_scale and y_scale must be float32")
        if b_scale.shape != b_zp.shape or not (_is_scalar(b_scale) or b_scale.shape == (n,)):
            raise KernelError(f"{label}: b_scale and b_zero_point must both be scalars or both ({n},), got "
                              f"{b_scale.shape} and {b_zp.shape}")
        acc = int_matmul(label, a, b, _a_zero_point(label, a_zp, a), _b_zero_point(label, b_zp, b))
        if c is not None:
            if c.dtype != np.int32 or c.ndim > 2 or not _broadcasts_to(c.shape, (m, n)):
                raise KernelError(f"{label}: C must be int32 broadcastable to ({m}, {n}), got {c.dtype} {c.shape}")
            acc = acc.astype(np.float64) + c  # exact, then wrapped like the int32 accumulator
        mult = alpha * a_scale.reshape(()) * (b_scale.reshape(()) if b_scale.size == 1 else b_scale)
        if y_scale is not None:
            mult = mult / y_scale.reshape(())
        # a float32 accumulator holds small exact integers; a float64 one is wrapped to int32 first
        y = (acc if acc.dtype == _F32 else to_int32(acc).astype(_F32)) * mult
        if y_zp is None:
            return (y,)
        if y_scale is None or not _is_scalar(y_zp) or y_zp.dtype not in INT8_TYPES:
            raise KernelError(f"{label}: y_zero_point must be an int8 or uint8 scalar with y_scale given")
        return (saturate_to(label, y, y_zp.dtype, zp=y_zp.reshape(())),)

    return kernel
