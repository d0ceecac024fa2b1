"""Lowering of quantized ops to oneDNN's int8 primitives: QLinearConv, QLinearMatMul, ConvInteger,
MatMulInteger, com.microsoft's QLinearAdd/QLinearGlobalAveragePool/QGemm, QDQ groups (DequantizeLinear ->
Conv/MatMul/Gemm [-> BatchNormalization] [-> Relu] -> QuantizeLinear), the QuantizeLinear/DequantizeLinear
at their borders and the Cast of integer sums to float32.

Requantization is written out as post-ops so that it rounds where onnxruntime's does: the int32 sum plus
the int32 bias (an exact float32 integer below 2**24) times M = x_scale * w_scale / y_scale (float32, per
output channel), rounded half to even, plus the output zero point, saturated; oneDNN's own scale and
destination zero-point attributes would round once after adding the zero point. A mixin of
``lowering.Builder``; which nodes are claimed is decided by ``quant_reason`` (used by ``capability``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import TensorProto

from ort_core.plugins import is_onnx_domain

from . import enums as E
from . import primitives as P
from . import views as V
from .library import DnnlError
from .lowering_conv import conv_window
from .program import DT_OF, Mem, RefOnly, Unsupported, Val, dims_of

INT8 = (np.dtype(np.uint8), np.dtype(np.int8))
QUANT_OPS = frozenset(["QuantizeLinear", "DequantizeLinear", "QLinearConv", "QLinearMatMul", "ConvInteger",
                       "MatMulInteger", "Cast", "DynamicQuantizeLinear"])
MS_QUANT_OPS = frozenset(["QLinearAdd", "QLinearGlobalAveragePool", "QGemm"])
"""com.microsoft's quantized ops lowered here (onnxruntime's contrib ops, its semantics)."""
EXACT_F32 = 2 ** 24  # integers up to this magnitude are exact in float32


def _qparams(scale: np.ndarray | None, zp: np.ndarray | None, what: str) -> tuple[np.ndarray, np.ndarray]:
    """(float32 scale, int64 zero point) of a per-tensor or 1-D quantization; Unsupported otherwise."""
    if scale is None:
        raise Unsupported(f"{what} scale is not a constant")
    if scale.dtype != np.float32:
        raise Unsupported(f"{what} scale is {scale.dtype}, not float32")
    if scale.ndim > 1 or (zp is not None and zp.ndim > 1):
        raise Unsupported(f"{what}: blocked quantization (scales of rank > 1)")
    z = np.zeros(scale.shape, np.int64) if zp is None else zp.astype(np.int64)
    return scale, z


def shifted_weights(w: np.ndarray, zp: np.ndarray, axis: int) -> np.ndarray:
    """``w - zp`` as int8 (``zp`` per-tensor or along ``axis``), exact; Unsupported where it leaves int8."""
    shape = [1] * w.ndim
    if zp.size > 1:
        shape[axis] = zp.size
    d = w.astype(np.int32) - zp.astype(np.int32).reshape(shape)
    if d.min(initial=0) < -128 or d.max(initial=0) > 127:
        raise Unsupported("weights minus their zero point leave the int8 range (oneDNN's weights are s8 without "
                          "zero point)")
    return d.astype(np.int8)


class QuantOps:
    """Quantized lowerings (mixed into Builder)."""

    # ------------------------------------------------------------------ helpers

    def _qconst(self, name: str, what: str) -> np.ndarray | None:
        if not name:
            return None
        c = self.constant(name)
        if c is None:
            raise Unsupported(f"{what} ('{name}') is not a constant")
        return c

    def _int_val(self, name: str, what: str) -> Val:
        val = self.get(name)
        if val.mem.md.data_type() not in (E.DT_U8, E.DT_S8):
            raise Unsupported(f"{what} is not uint8/int8")
        return val

    def _bcast_const(self, arr: np.ndarray, rank: int, axis: int) -> Val:
        """A float32 constant of ``arr``'s values along ``axis`` of a rank-``rank`` tensor (1 elsewhere)."""
        shape = [1] * max(rank, 1)
        if arr.size > 1:
            shape[axis] = arr.size
        return self._const_val(np.ascontiguousarray(arr, np.float32).reshape(shape))

    def _requant(self, post: P.PostOps, extra: list, mult: np.ndarray, rank: int, axis: int, act, zp: int | None,
                 shift: np.ndarray | None = None) -> None:
        """Post-ops: times ``mult`` (per tensor, or per channel along ``axis``), plus ``shift`` (per channel: a
        folded BatchNormalization), the activation, and for an integer result rounding half to even then
        adding the zero point ``zp``."""
        if mult.size == 1:
            post.eltwise(E.ELTWISE_LINEAR, float(mult.reshape(-1)[0]), 0.0)
        else:
            m = self._bcast_const(mult, rank, axis)
            idx = post.binary(E.BINARY_MUL, m.mem.md)
            extra.append((E.arg_post_op(idx) | E.ARG_SRC_1, m.mem))
        if shift is not None:
            b = self._bcast_const(shift, rank, axis)
            idx = post.binary(E.BINARY_ADD, b.mem.md)
            extra.append((E.arg_post_op(idx) | E.ARG_SRC_1, b.mem))
        if act is not None:
            post.eltwise(*act)
        if zp is not None:
            post.eltwise(E.ELTWISE_ROUND, 0.0, 0.0)
            if zp:
                post.eltwise(E.ELTWISE_LINEAR, 1.0, float(zp))

    def _zp_arg(self, zp) -> tuple[list[int], list[tuple[int, Mem]]]:
        """The source zero-point attribute and its argument (none when it is 0). ``zp``: an int, or a
        one-element u8/s8 value known at run time (DynamicQuantizeLinear's), converted to int32 per call."""
        if isinstance(zp, Val):
            s32 = self._new(P.plain_md(self.lib, (1,), E.DT_S32))
            src = self._mem(P.plain_md(self.lib, (1,), zp.mem.md.data_type()), zp.mem.buf)
            self._reorder_into(src, s32, "zero point to int32")
            return [E.ARG_SRC], [(E.ARG_ATTR_ZERO_POINTS | E.ARG_SRC, s32)]
        if not zp:
            return [], []
        c = self._const_val(np.array([zp], np.int32))
        return [E.ARG_SRC], [(E.ARG_ATTR_ZERO_POINTS | E.ARG_SRC, c.mem)]

    @staticmethod
    def _mult(x_scale: np.ndarray, w_scale: np.ndarray, y_scale: np.ndarray | None) -> np.ndarray:
        """onnxruntime's requantization multiplier, in its float32 order: (x_scale * w_scale) / y_scale."""
        m = (np.float32(x_scale.reshape(-1)[0]) * w_scale.astype(np.float32)).astype(np.float32)
        if y_scale is not None:
            m = (m / np.float32(y_scale.reshape(-1)[0])).astype(np.float32)
        return m.reshape(-1)

    @staticmethod
    def _bias_f32(b: np.ndarray | None, what: str) -> np.ndarray | None:
        if b is None:
            return None
        if b.dtype != np.int32:
            raise Unsupported(f"{what} bias is {b.dtype}, not int32")
        if np.abs(b.astype(np.int64)).max(initial=0) >= EXACT_F32:
            raise Unsupported(f"{what} bias beyond 2**24 (not exact as oneDNN's float32 bias)")
        return b.astype(np.float32)

    # ------------------------------------------------------------------ QuantizeLinear / DequantizeLinear

    def _qparam(self, node: Any, k: int, rank: int, axis: int, what: str):
        """Input ``k`` of a QuantizeLinear/DequantizeLinear (scale or zero point): (constant array or None,
        float32 Mem broadcast along ``axis`` of a rank-``rank`` tensor, or None when absent, its data type
        (DT_*), its number of elements). A value known only at run time is converted to float32 per call."""
        name = node.inputs[k] if len(node.inputs) > k else ""
        if not name:
            return None, None, None, 0
        c = self.constant(name)
        if c is not None:
            if c.ndim > 1:
                raise Unsupported(f"{node.op_type}: blocked quantization ({what} of rank > 1)")
            if c.size > 1 and c.size != self._axis_len:
                raise Unsupported(f"{node.op_type} per-axis {what} does not match its axis")
            return c, self._bcast_const(c.astype(np.float32), rank, axis).mem, DT_OF.get(c.dtype), c.size
        v = self.get(name)
        if len(v.shape) > 1:
            raise Unsupported(f"{node.op_type}: blocked quantization ({what} of rank > 1)")
        n = int(np.prod(v.shape)) if v.shape else 1
        if n > 1 and n != self._axis_len:
            raise Unsupported(f"{node.op_type} per-axis {what} does not match its axis")
        shape = [1] * rank
        if n > 1:
            shape[axis] = n
        dt = v.mem.md.data_type()
        src = self._mem(P.plain_md(self.lib, (n,), dt), self.as_md(v, P.plain_md(self.lib, dims_of(v.shape), dt)).buf)
        if dt == E.DT_F32:
            return None, self._mem(P.plain_md(self.lib, shape), src.buf), dt, n
        f = self._new(P.plain_md(self.lib, (n,)))
        self._reorder_into(src, f, f"{node.label} {what} to float32")
        return None, self.alias(f, tuple(shape)), dt, n

    def _qaxis(self, node: Any, shape: tuple[int, ...]) -> tuple[int, int]:
        r = len(shape)
        axis = node.attr("axis", 1)
        axis = axis + r if axis < 0 else axis
        self._axis_len = shape[axis] if 0 <= axis < r else -1
        return max(r, 1), (axis if 0 <= axis < r else 0)

    def _op_QuantizeLinear(self, node: Any) -> None:
        x = self.get(node.inputs[0])
        if x.mem.md.data_type() != E.DT_F32:
            raise Unsupported("QuantizeLinear of a value that is not float32")
        rank, axis = self._qaxis(node, x.shape)
        s_arr, s_mem, s_dt, _ = self._qparam(node, 1, rank, axis, "scale")
        if s_dt != E.DT_F32:
            raise Unsupported("QuantizeLinear scale is not float32")
        z_arr, z_mem, z_dt, z_n = self._qparam(node, 2, rank, axis, "zero point")
        out_dt = z_dt if z_dt is not None else {2: E.DT_U8, 3: E.DT_S8}.get(node.attr("output_dtype", 2))
        if out_dt not in (E.DT_U8, E.DT_S8):
            raise Unsupported("QuantizeLinear to a type other than uint8/int8")
        dims = dims_of(x.shape)
        # x / scale (a division, as onnxruntime's), rounded half to even, then the zero point added and
        # saturated by the conversion: one binary primitive with post-ops
        post, extra = P.PostOps(), []
        post.eltwise(E.ELTWISE_ROUND, 0.0, 0.0)
        if z_arr is not None and z_n == 1:
            if int(z_arr.reshape(-1)[0]):
                post.eltwise(E.ELTWISE_LINEAR, 1.0, float(z_arr.reshape(-1)[0]))
        elif z_mem is not None:
            idx = post.binary(E.BINARY_ADD, z_mem.md)
            extra.append((E.arg_post_op(idx) | E.ARG_SRC_1, z_mem))
        pd = P.binary(self.lib, E.BINARY_DIV, x.mem.md, s_mem.md, P.any_md(self.lib, dims, out_dt),
                      self._attr(post))
        src = x.mem
        if pd.is_ref and not self._is_plain(x):
            src = self.plain(x, node.label)
            pd = P.binary(self.lib, E.BINARY_DIV, src.md, s_mem.md, P.any_md(self.lib, dims, out_dt),
                          self._attr(post))
        dst = self._new(pd.md(E.QUERY_DST_MD, 0, dims))
        self._step(pd, [(E.ARG_SRC, src), (E.ARG_SRC_1, s_mem), (E.ARG_DST, dst), *extra], node.label)
        self._set(node.outputs[0], Val(x.shape, dst))

    def _op_DequantizeLinear(self, node: Any) -> None:
        c = self.constant(node.inputs[0])
        scale = self.constant(node.inputs[1])
        zp_arr = self.constant(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else None
        has_zp = len(node.inputs) > 2 and bool(node.inputs[2])
        if c is not None and scale is not None and (zp_arr is not None or not has_zp):
            # quantized weights or bias: dequantized once, as ONNX writes it
            scale, zp = _qparams(scale, zp_arr, "DequantizeLinear")
            axis = node.attr("axis", 1)
            r = c.ndim
            axis = axis + r if axis < 0 else axis
            shape = [1] * r
            if scale.size > 1:
                shape[axis] = scale.size
            f = ((c.astype(np.float32) - zp.astype(np.float32).reshape(shape)) * scale.reshape(shape)) \
                if r else (c.astype(np.float32) - np.float32(zp.reshape(-1)[0])) * scale.reshape(-1)[0]
            self._set(node.outputs[0], self._const_val(np.asarray(f, np.float32)))
            return
        x = self._int_val(node.inputs[0], "DequantizeLinear input")
        rank, axis = self._qaxis(node, x.shape)
        _, s_mem, s_dt, _ = self._qparam(node, 1, rank, axis, "scale")
        if s_dt != E.DT_F32:
            raise Unsupported("DequantizeLinear scale is not float32")
        z_arr, z_mem, z_dt, _ = self._qparam(node, 2, rank, axis, "zero point")
        if z_dt is not None and z_dt != x.mem.md.data_type():
            raise Unsupported("DequantizeLinear zero point of another type than its input")
        # (x - zero point) * scale: the integers converted to float32 (exact; a reorder, as oneDNN 3.2's jit
        # binary takes no integer source with a float32 result), the difference an exact float32 integer, then
        # one rounding, as ONNX writes it
        xf = self._as_float32(x, f"{node.label} to float32")
        if z_mem is not None and (z_arr is None or np.any(z_arr)):
            post = P.PostOps()
            idx = post.binary(E.BINARY_MUL, s_mem.md)
            pd = P.binary(self.lib, E.BINARY_SUB, xf.md, z_mem.md, xf.md, self._attr(post))
            args = [(E.ARG_SRC_1, z_mem), (E.arg_post_op(idx) | E.ARG_SRC_1, s_mem)]
        else:
            pd = P.binary(self.lib, E.BINARY_MUL, xf.md, s_mem.md, xf.md, self._attr())
            args = [(E.ARG_SRC_1, s_mem)]
        dst = self._new(xf.md)
        self._step(pd, [(E.ARG_SRC, xf), (E.ARG_DST, dst), *args], node.label)
        self._set(node.outputs[0], Val(x.shape, dst))

    def _op_DynamicQuantizeLinear(self, node: Any) -> None:
        """ONNX's formula in float32: scale = (max(x, 0) - min(x, 0)) / 255 (1 where that is 0),
        zero_point = round(clip(-min / scale, 0, 255)), y = saturate(round(x / scale) + zero_point), each
        rounding half to even. Reductions, then one-element binaries, then QuantizeLinear's primitive."""
        x = self.get(node.inputs[0])
        if x.mem.md.data_type() != E.DT_F32 or 0 in x.shape:
            raise Unsupported("DynamicQuantizeLinear of an empty or non-float32 value")
        lib = self.lib
        dims = dims_of(x.shape)
        one = (1,) * len(dims)
        src = self.plain(x, node.label) if x.mem.md.strides() is None else x.mem
        ext = {}
        for alg, act in ((E.REDUCTION_MAX, (E.ELTWISE_RELU, 0.0, 0.0)),
                         (E.REDUCTION_MIN, (E.ELTWISE_CLIP, -3.4028234663852886e38, 0.0))):
            post = P.PostOps()
            post.eltwise(*act)  # max(x_max, 0), min(x_min, 0): exact
            if src.md.dims == one:  # one element: oneDNN refuses a reduction to the same shape
                pd = P.eltwise(lib, act[0], src.md, P.plain_md(lib, one), act[1], act[2], self._attr())
            else:
                pd = P.reduction(lib, alg, src.md, P.plain_md(lib, one), self._attr(post))
            ext[alg] = self._new(P.plain_md(lib, one))
            self._step(pd, [(E.ARG_SRC, src), (E.ARG_DST, ext[alg])], node.label)
        mx, mn = ext[E.REDUCTION_MAX], ext[E.REDUCTION_MIN]
        c255 = self._const_val(np.full(one, 255.0, np.float32))
        zero = self._const_val(np.zeros(one, np.float32))
        post = P.PostOps()
        idx = post.binary(E.BINARY_DIV, c255.mem.md)
        d = self._new(P.plain_md(lib, one))
        self._step(P.binary(lib, E.BINARY_SUB, mx.md, mn.md, d.md, self._attr(post)),
                   [(E.ARG_SRC, mx), (E.ARG_SRC_1, mn), (E.ARG_DST, d), (E.arg_post_op(idx) | E.ARG_SRC_1, c255.mem)],
                   node.label)
        # scale = d + (d == 0): 1 for an all-zero input, d itself otherwise (adding 0 is exact)
        post = P.PostOps()
        idx = post.binary(E.BINARY_ADD, d.md)
        scale = self._new(P.plain_md(lib, one))
        self._step(P.binary(lib, E.BINARY_EQ, d.md, zero.mem.md, scale.md, self._attr(post)),
                   [(E.ARG_SRC, d), (E.ARG_SRC_1, zero.mem), (E.ARG_DST, scale),
                    (E.arg_post_op(idx) | E.ARG_SRC_1, d)], node.label)
        # zero point = round(clip(-(min / scale), 0, 255)) as uint8, and as float32 for the quantization
        post = P.PostOps()
        post.eltwise(E.ELTWISE_LINEAR, -1.0, 0.0)
        post.eltwise(E.ELTWISE_CLIP, 0.0, 255.0)
        post.eltwise(E.ELTWISE_ROUND, 0.0, 0.0)
        zpf = self._new(P.plain_md(lib, one))
        self._step(P.binary(lib, E.BINARY_DIV, mn.md, scale.md, zpf.md, self._attr(post)),
                   [(E.ARG_SRC, mn), (E.ARG_SRC_1, scale), (E.ARG_DST, zpf)], node.label)
        post = P.PostOps()
        post.eltwise(E.ELTWISE_ROUND, 0.0, 0.0)
        idx = post.binary(E.BINARY_ADD, zpf.md)
        pd = P.binary(lib, E.BINARY_DIV, src.md, scale.md, P.any_md(lib, dims, E.DT_U8), self._attr(post))
        y = self._new(pd.md(E.QUERY_DST_MD, 0, dims))
        self._step(pd, [(E.ARG_SRC, src), (E.ARG_SRC_1, scale), (E.ARG_DST, y),
                        (E.arg_post_op(idx) | E.ARG_SRC_1, zpf)], node.label)
        self._set(node.outputs[0], Val(x.shape, y))
        outs = list(node.outputs) + ["", ""]
        if outs[1]:
            self._set(outs[1], Val((), self._mem(P.plain_md(lib, (1,)), scale.buf)))
        if outs[2]:
            zp8 = self._new(P.plain_md(lib, (1,), E.DT_U8))
            self._reorder_into(self._mem(P.plain_md(lib, (1,)), zpf.buf), zp8, node.label)
            self._set(outs[2], Val((), zp8))

    def _op_Cast(self, node: Any) -> None:
        """An integer value (an int32 sum of MatMulInteger/ConvInteger, u8/s8) to float32: a reorder, whose
        conversion rounds half to even as numpy's does (exact below 2**24)."""
        x = self.get(node.inputs[0])
        if x.mem.md.data_type() not in (E.DT_S32, E.DT_U8, E.DT_S8) or node.attr("to") != TensorProto.FLOAT:
            raise Unsupported("Cast other than of an integer value to float32")
        self._set(node.outputs[0], Val(x.shape, self._as_float32(x, node.label)))

    def _as_float32(self, x: Any, label: str) -> Any:
        """A new float32 memory holding the integer value ``x`` (a reorder); a strided layout (channels-last
        from an int8 Conv) is kept, so what follows stays channels-last."""
        dims = dims_of(x.shape)
        strides = x.mem.md.strides() if x.shape else None
        src = x.mem if strides is not None else self.as_md(x, P.plain_md(self.lib, dims, x.mem.md.data_type()))
        f32 = P.strided_md(self.lib, dims, strides, E.DT_F32) if strides is not None else P.plain_md(self.lib, dims)
        dst = self._new(f32)
        self._reorder_into(src, dst, label)
        return dst

    # ------------------------------------------------------------------ com.microsoft QOperator ops

    def _to_f32(self, x: Val, label: str) -> Mem:
        """The integers of ``x`` as float32 (exact), in its layout when strided."""
        dims = dims_of(x.shape)
        strides = x.mem.md.strides() if x.shape else None
        src = x.mem if strides is not None else self.plain(x, label)
        f32 = P.strided_md(self.lib, dims, strides, E.DT_F32) if strides is not None else P.plain_md(self.lib, dims)
        dst = self._new(f32)
        self._reorder_into(src, dst, f"{label} to float32")
        return dst

    def _scalar_q(self, node: Any, k: int, what: str) -> tuple[float, int]:
        s_arr = self._qconst(node.inputs[k], f"{what} scale")
        z_arr = self._qconst(node.inputs[k + 1] if len(node.inputs) > k + 1 else "", f"{what} zero point")
        s, z = _qparams(s_arr, z_arr, what)
        if s.size != 1 or z.size != 1:
            raise Unsupported(f"{node.op_type} {what} quantization is not per-tensor")
        return float(s.reshape(-1)[0]), int(z.reshape(-1)[0])

    def _op_QLinearAdd(self, node: Any) -> None:
        """((a - a_zp) * a_scale + (b - b_zp) * b_scale) / c_scale, rounded half to even, + c_zp: the float
        formula of onnxruntime's reference kernel. Its x86 kernels use fixed-point multipliers instead, which
        round a near-tie the other way now and then: results are within one step of onnxruntime's."""
        a, b = self._int_val(node.inputs[0], "QLinearAdd A"), self._int_val(node.inputs[3], "QLinearAdd B")
        a_s, a_z = self._scalar_q(node, 1, "A")
        b_s, b_z = self._scalar_q(node, 4, "B")
        c_s, c_z = self._scalar_q(node, 6, "C")
        c_dt = self._qconst(node.inputs[7], "C zero point").dtype if len(node.inputs) > 7 and node.inputs[7] \
            else np.dtype(np.uint8)
        try:
            shape = tuple(np.broadcast_shapes(a.shape, b.shape))
        except ValueError:
            raise Unsupported("QLinearAdd shapes do not broadcast") from None
        if shape != a.shape:
            if shape != b.shape:
                raise Unsupported("QLinearAdd broadcasting both operands")
            a, b, (a_s, a_z), (b_s, b_z) = b, a, (b_s, b_z), (a_s, a_z)
        dims = dims_of(shape)
        af = self._to_f32(a, node.label)
        bf = Val(b.shape, self._to_f32(b, node.label))
        b_view = self._broadcast_view(bf, shape, node.label) if b.shape != shape else bf.mem
        if b.shape == shape and b_view.md != af.md:
            b_view = self.as_md(bf, af.md, node.label)
        # (a - a_zp) * a_scale + ((b - b_zp) * b_scale) computed as post-ops of a binary subtraction
        post, extra = P.PostOps(), []
        post.eltwise(E.ELTWISE_LINEAR, a_s, 0.0)
        lin = P.PostOps()
        lin.eltwise(E.ELTWISE_LINEAR, b_s, 0.0)
        zb = self._const_val(np.full((1,) * len(dims), b_z, np.float32))
        pd_b = P.binary(self.lib, E.BINARY_SUB, b_view.md, zb.mem.md, b_view.md, self._attr(lin))
        b_term = self._new(b_view.md)
        self._step(pd_b, [(E.ARG_SRC, b_view), (E.ARG_SRC_1, zb.mem), (E.ARG_DST, b_term)], node.label)
        idx = post.binary(E.BINARY_ADD, b_term.md)
        extra.append((E.arg_post_op(idx) | E.ARG_SRC_1, b_term))
        cs = self._const_val(np.full((1,) * len(dims), c_s, np.float32))
        idx = post.binary(E.BINARY_DIV, cs.mem.md)
        extra.append((E.arg_post_op(idx) | E.ARG_SRC_1, cs.mem))
        post.eltwise(E.ELTWISE_ROUND, 0.0, 0.0)
        if c_z:
            post.eltwise(E.ELTWISE_LINEAR, 1.0, float(c_z))
        za = self._const_val(np.full((1,) * len(dims), a_z, np.float32))
        pd = P.binary(self.lib, E.BINARY_SUB, af.md, za.mem.md, P.any_md(self.lib, dims, DT_OF[c_dt]),
                      self._attr(post))
        if pd.is_ref:
            raise Unsupported("oneDNN has only its reference kernel for this QLinearAdd")
        dst = self._new(pd.md(E.QUERY_DST_MD, 0, dims))
        self._step(pd, [(E.ARG_SRC, af), (E.ARG_SRC_1, za.mem), (E.ARG_DST, dst), *extra], node.label)
        self._set(node.outputs[0], Val(shape, dst))

    def _op_QLinearGlobalAveragePool(self, node: Any) -> None:
        """The mean of (x - x_zp) * x_scale over the spatial axes, quantized with y's scale and zero point:
        a float32 average pooling of the integers, then (mean - x_zp) * x_scale / y_scale, rounded, + y_zp.
        onnxruntime sums in int32 and scales once: within one step of it."""
        if node.attr("channels_last", 0):
            raise Unsupported("QLinearGlobalAveragePool channels_last=1")
        x = self._int_val(node.inputs[0], "QLinearGlobalAveragePool x")
        x_s, x_z = self._scalar_q(node, 1, "x")
        y_s, y_z = self._scalar_q(node, 3, "y")
        y_dt = self._qconst(node.inputs[4], "y zero point").dtype if len(node.inputs) > 4 and node.inputs[4] \
            else np.dtype(np.uint8)
        if len(x.shape) < 3 or 0 in x.shape:
            raise Unsupported("QLinearGlobalAveragePool of rank < 3")
        n = len(x.shape) - 2
        y_shape = (*x.shape[:2], *([1] * n))
        xf = Val(x.shape, self._to_f32(x, node.label))
        pd = P.pooling(self.lib, E.POOLING_AVG_EXCLUDE_PADDING, xf.mem.md, P.any_md(self.lib, y_shape), [1] * n,
                       list(x.shape[2:]), [0] * n, [0] * n, [0] * n, self._attr())
        mean = self._new(pd.md(E.QUERY_DST_MD, 0, y_shape))
        self._step(pd, [(E.ARG_SRC, xf.mem), (E.ARG_DST, mean)], node.label)
        post = P.PostOps()
        post.eltwise(E.ELTWISE_LINEAR, x_s / y_s, 0.0)
        post.eltwise(E.ELTWISE_ROUND, 0.0, 0.0)
        if y_z:
            post.eltwise(E.ELTWISE_LINEAR, 1.0, float(y_z))
        z = self._const_val(np.full((1,) * len(y_shape), x_z, np.float32))
        pd = P.binary(self.lib, E.BINARY_SUB, mean.md, z.mem.md, P.any_md(self.lib, y_shape, DT_OF[y_dt]),
                      self._attr(post))
        dst = self._new(pd.md(E.QUERY_DST_MD, 0, y_shape))
        self._step(pd, [(E.ARG_SRC, mean), (E.ARG_SRC_1, z.mem), (E.ARG_DST, dst)], node.label)
        self._set(node.outputs[0], Val(y_shape, dst))

    def _op_QGemm(self, node: Any) -> None:
        """alpha * (A - a_zp)(B - b_zp) + C (int32, in units of a_scale * b_scale), then quantized with y's scale
        and zero point, or float32 (times alpha * a_scale * b_scale) without them."""
        ins = list(node.inputs) + [""] * (9 - len(node.inputs))
        if node.attr("transA", 0):
            raise Unsupported("QGemm transA=1")
        a = self._int_val(ins[0], "QGemm A")
        a_s, a_z = self._scalar_q(node, 1, "A")
        b = self._qconst(ins[3], "QGemm B")
        b_s, b_z = _qparams(self._qconst(ins[4], "b_scale"), self._qconst(ins[5], "b_zero_point"), "b")
        trans_b = bool(node.attr("transB", 0))
        n_out = b.shape[0] if trans_b else b.shape[1]
        if b.ndim != 2 or b_s.size not in (1, n_out) or b_z.size not in (1, n_out):
            raise Unsupported("QGemm B is not 2-D with per-tensor or per-column quantization")
        b_q = shifted_weights(b, b_z, 0 if trans_b else 1)
        alpha = np.float32(node.attr("alpha", 1.0))
        c = self._qconst(ins[6], "QGemm C")
        bias = None
        if c is not None:
            if c.size != n_out:
                raise Unsupported("QGemm C is not a bias over the output columns")
            bias = self._bias_f32(c.reshape(-1), "QGemm")
        acc = (np.float32(a_s) * b_s.astype(np.float32) * alpha).astype(np.float32).reshape(-1)
        if ins[7]:
            y_s, y_z = self._scalar_q(node, 7, "y")
            y_dt = self._qconst(ins[8], "y zero point").dtype if ins[8] else np.dtype(np.uint8)
            mult = (acc / np.float32(y_s)).astype(np.float32)
            self._int8_matmul(node, a, a_z, b_q, bias, mult, None, DT_OF[y_dt], y_z, node.outputs[0], trans_b)
        else:
            self._int8_matmul(node, a, a_z, b_q, bias, acc, None, E.DT_F32, None, node.outputs[0], trans_b)

    # ------------------------------------------------------------------ int8 convolution

    def _int8_conv(self, node: Any, x: Val, x_zp: int, w_q: np.ndarray, bias: np.ndarray | None,
                   mult: np.ndarray | None, act, out_dt: int, y_zp: int | None, out_name: str,
                   shift: np.ndarray | None = None, binaries=()) -> None:
        """A Conv of ``x`` (u8/s8, zero point ``x_zp``: an int or a run-time value) with int8 weights ``w_q``
        (zero point already subtracted), float32 ``bias`` added to the int32 sum, then times ``mult`` (None:
        no scaling), the activation and, for an integer result, rounding and ``y_zp``; ``binaries``: float32
        post-op operands after that; the result is ``out_name``."""
        lib = self.lib
        w_shape = w_q.shape
        group, kernel, strides, dil, pl, pr, out_sp = conv_window(node, x.shape, w_shape)
        M, Cg = w_shape[0], w_shape[1]
        if min(out_sp) <= 0 or 0 in x.shape or x.shape[1] != Cg * group or M % group:
            raise Unsupported(f"{node.op_type} with an empty output or channels that do not match its weights")
        y_shape = (x.shape[0], M, *out_sp)
        post, extra = P.PostOps(), []
        if mult is not None:
            self._requant(post, extra, mult, len(y_shape), 1, act, y_zp, shift)
        self._post_binaries(post, extra, binaries)
        zp_attr, zp_args = self._zp_arg(x_zp)
        w_dims = (group, M // group, Cg, *kernel) if group > 1 else tuple(w_shape)
        w_val = self._const_val(np.ascontiguousarray(w_q, np.int8).reshape(w_dims))
        bias_val = None if bias is None else self._const_val(np.ascontiguousarray(bias, np.float32).reshape(M))
        src_dt = x.mem.md.data_type()
        pd = None
        for dst_md in (P.strided_md(lib, y_shape, V.channels_last_strides(y_shape), out_dt),
                       P.any_md(lib, y_shape, out_dt)):
            try:
                pd = P.convolution(lib, P.any_md(lib, x.shape, src_dt), P.any_md(lib, w_dims, E.DT_S8),
                                   None if bias_val is None else P.plain_md(lib, (M,)), dst_md, strides,
                                   [d - 1 for d in dil], pl, pr, self._attr(post, zp_attr))
            except DnnlError:
                continue
            if not pd.is_ref:
                break
        if pd is None:
            raise Unsupported(f"oneDNN has no int8 convolution for {node.op_type} with these shapes")
        if pd.is_ref:
            raise RefOnly()
        src = self.as_md(x, pd.md(E.QUERY_SRC_MD, 0, x.shape), f"{node.op_type} input")
        wts = self.as_md(w_val, pd.md(E.QUERY_WEIGHTS_MD, 0, w_dims), f"{node.op_type} weights")
        self._int8_step(pd, src, wts, self._new(pd.md(E.QUERY_DST_MD, 0, y_shape)), [*zp_args, *extra], bias_val,
                        node.label, out_name, y_shape)

    def _op_QLinearConv(self, node: Any) -> None:
        ins = list(node.inputs) + [""] * (9 - len(node.inputs))
        x = self._int_val(ins[0], "QLinearConv x")
        x_s, x_zp = _qparams(self._qconst(ins[1], "x_scale"), self._qconst(ins[2], "x_zero_point"), "x")
        w = self._qconst(ins[3], "QLinearConv weights")
        w_s, w_zp = _qparams(self._qconst(ins[4], "w_scale"), self._qconst(ins[5], "w_zero_point"), "w")
        y_s, y_zp = _qparams(self._qconst(ins[6], "y_scale"), self._qconst(ins[7], "y_zero_point"), "y")
        y_dt = self._qconst(ins[7], "y_zero_point")
        y_dt = np.dtype(np.uint8) if y_dt is None else y_dt.dtype
        if x_s.size != 1 or y_s.size != 1 or x_zp.size != 1 or y_zp.size != 1:
            raise Unsupported("QLinearConv x/y quantization is not per-tensor")
        if w_s.size not in (1, w.shape[0]) or w_zp.size not in (1, w.shape[0]):
            raise Unsupported("QLinearConv w_scale is neither per-tensor nor per output channel")
        w_q = shifted_weights(w, w_zp, 0)
        mult = self._mult(x_s, w_s, y_s)
        bias = self._bias_f32(self._qconst(ins[8], "QLinearConv bias"), "QLinearConv")
        self._int8_conv(node, x, int(x_zp.reshape(-1)[0]), w_q, bias, mult, None, DT_OF[y_dt],
                        int(y_zp.reshape(-1)[0]), node.outputs[0])

    def _op_ConvInteger(self, node: Any) -> None:
        ins = list(node.inputs) + [""] * (4 - len(node.inputs))
        x = self._int_val(ins[0], "ConvInteger x")
        w = self._qconst(ins[1], "ConvInteger weights")
        w_zp = self._qconst(ins[3], "w_zero_point")
        zp = self.constant(ins[2])
        if ins[2] and zp is None:  # known at run time (dynamic quantization)
            x_zp = self._int_val(ins[2], "ConvInteger x_zero_point")
            if x_zp.shape not in ((), (1,)):
                raise Unsupported("ConvInteger x_zero_point is not per-tensor")
        else:
            if zp is not None and zp.size != 1:
                raise Unsupported("ConvInteger x_zero_point is not per-tensor")
            x_zp = 0 if zp is None else int(zp.reshape(-1)[0])
        w_zp = np.zeros(1, np.int64) if w_zp is None else w_zp.reshape(-1)
        w_q = shifted_weights(w, w_zp, 0)
        if self._to_float_group(node, len(x.shape), 1, w.shape[0], lambda binaries, out: self._int8_conv(
                node, x, x_zp, w_q, None, None, None, E.DT_F32, None, out, binaries=binaries)):
            return
        if not self.probe:  # a probe lowers the node alone: capability's rules judged its reader and sums
            if isinstance(x_zp, Val):
                raise Unsupported("ConvInteger with a run-time x_zero_point whose sum is not read as float32")
            self._check_exact_sum(w_q, x.mem.md.data_type(), x_zp, (1, 2, 3, 4))
        self._int8_conv(node, x, x_zp, w_q, None, None, None, E.DT_S32, None, node.outputs[0])

    def _check_exact_sum(self, w_q: np.ndarray, src_dt: int, x_zp: int | None, reduce_axes) -> None:
        why = exact_sum_reason(w_q, src_dt == E.DT_U8, x_zp, reduce_axes)
        if why:
            raise Unsupported(why)

    # ------------------------------------------------------------------ int8 matmul

    def _float_tail(self, out: str, rank: int, axis: int, n: int) -> tuple[list, list[tuple[int, Val]], str] | None:
        """What turns an int32 sum (rank ``rank``, ``n`` channels along ``axis``) into float32 in dynamically
        quantized models: a Cast to float32, then up to two Mul/Add with a float32 operand that varies along
        ``axis`` at most (the run-time scale ``x_scale * w_scale``, a bias). Returns (nodes, [(binary alg,
        operand as a rank-``rank`` value)], the last output), or None when ``out`` is not read by such a Cast
        alone."""
        cast = self._sole_consumer(out)
        if cast is None or cast.op_type != "Cast" or not is_onnx_domain(cast.domain) \
                or cast.attr("to") != TensorProto.FLOAT:
            return None
        nodes, ops, cur = [cast], [], cast.outputs[0]
        for _ in range(2):
            nxt = self._sole_consumer(cur)
            if nxt is None or nxt.op_type not in ("Mul", "Add") or not is_onnx_domain(nxt.domain) \
                    or len(nxt.inputs) != 2 or "axis" in nxt.attrs or nxt.attr("broadcast", 0):
                break
            other = nxt.inputs[1] if nxt.inputs[0] == cur else nxt.inputs[0]
            val = self._float_operand(other)
            if val is None or len(val.shape) > rank:
                break
            dims = (1,) * (rank - len(val.shape)) + tuple(val.shape)
            if any(d != 1 for k, d in enumerate(dims) if k != axis) or dims[axis] not in (1, n):
                break
            src = val.mem if val.mem.buf.kind == "const" else self.plain(val, nxt.label)
            ops.append((E.BINARY_MUL if nxt.op_type == "Mul" else E.BINARY_ADD,
                        Val(dims, self._mem(P.plain_md(self.lib, dims), src.buf))))
            nodes.append(nxt)
            cur = nxt.outputs[0]
        return nodes, ops, cur

    def _float_operand(self, name: str) -> Val | None:
        """``name`` as a float32 value (a constant, or computed in this subgraph), else None."""
        c = self.constant(name)
        if c is not None:
            return self._const_val(c) if c.dtype == np.float32 else None
        if name not in self.vals and name not in self.producer:
            return None
        try:
            val = self.get(name)
        except Unsupported:
            return None
        return val if val.mem.md.data_type() == E.DT_F32 else None

    @staticmethod
    def _post_binaries(post: P.PostOps, extra: list, binaries) -> None:
        for alg, val in binaries:
            idx = post.binary(alg, val.mem.md)
            extra.append((E.arg_post_op(idx) | E.ARG_SRC_1, val.mem))

    def _to_float_group(self, node: Any, rank: int, axis: int, n: int, build) -> bool:
        """Lower ``node`` (MatMulInteger, ConvInteger) with its float tail as one step with a float32
        result, through ``build(binaries, out_name)``; False when its sum is not read that way."""
        tail = self._float_tail(node.outputs[0], rank, axis, n)
        if tail is None:
            return False
        nodes, binaries, out = tail
        build(binaries, out)  # oneDNN's float32 result rounds the sum as the Cast would
        for n_ in nodes:
            self._absorb(n_)
        key = f"{node.op_type} to float32"
        self.fused[key] = self.fused.get(key, 0) + 1
        return True

    def _int8_matmul(self, node: Any, a: Val, a_zp, b_q: np.ndarray, bias: np.ndarray | None,
                     mult: np.ndarray | None, act, out_dt: int, y_zp: int | None, out_name: str,
                     trans_b: bool = False, binaries: list[tuple[int, Val]] = ()) -> None:
        """MatMul of ``a`` (u8/s8, rank >= 2, zero point ``a_zp``) and constant int8 ``b_q`` (2-D, zero
        point subtracted; ``trans_b``: given as (N, K)), then as ``_int8_conv``; ``binaries``: float32
        post-op operands (broadcast along the last axis) applied after that."""
        lib = self.lib
        if len(a.shape) < 2 or b_q.ndim != 2 or 0 in a.shape or 0 in b_q.shape:
            raise Unsupported(f"{node.op_type}: A of rank < 2 or B not 2-D")
        b = b_q.T if trans_b else b_q
        K, N = b.shape
        if a.shape[-1] != K:
            raise Unsupported(f"{node.op_type} inner dimensions differ")
        a_dims = tuple(a.shape)
        r = len(a_dims)
        b_dims = (1,) * (r - 2) + (K, N)
        out_dims = (*a_dims[:-1], N)
        post, extra = P.PostOps(), []
        if mult is not None:
            self._requant(post, extra, mult, r, r - 1, act, y_zp)
        self._post_binaries(post, extra, binaries)
        zp_attr, zp_args = self._zp_arg(a_zp)
        a_mem = self.as_md(a, P.plain_md(lib, a_dims, a.mem.md.data_type()), f"{node.op_type} A")
        bias_val = None
        if bias is not None:
            bias_val = self._const_val(np.ascontiguousarray(bias, np.float32).reshape((1,) * (r - 1) + (N,)))
        pd = P.matmul(lib, a_mem.md, P.any_md(lib, b_dims, E.DT_S8),
                      None if bias_val is None else bias_val.mem.md, P.plain_md(lib, out_dims, out_dt),
                      self._attr(post, zp_attr))
        if pd.is_ref:
            raise RefOnly()
        w_val = self._const_val(np.ascontiguousarray(b, np.int8).reshape(b_dims))
        wts = self.as_md(w_val, pd.md(E.QUERY_WEIGHTS_MD, 0, b_dims), f"{node.op_type} weights")
        self._int8_step(pd, a_mem, wts, self._new(P.plain_md(lib, out_dims, out_dt)), [*zp_args, *extra], bias_val,
                        node.label, out_name, out_dims)

    def _int8_step(self, pd: Any, src: Any, wts: Any, dst: Any, more: list, bias_val: Any, label: str,
                   out_name: str, shape: Any) -> None:
        """One int8 convolution / matmul step (source, weights, zero points and post-op arguments, optional
        bias) whose result becomes ``out_name``."""
        args = [(E.ARG_SRC, src), (E.ARG_WEIGHTS, wts), (E.ARG_DST, dst), *more]
        if bias_val is not None:
            args.append((E.ARG_BIAS, bias_val.mem))
        self._step(pd, args, label)
        self._set(out_name, Val(shape, dst))

    def _op_QLinearMatMul(self, node: Any) -> None:
        ins = list(node.inputs)
        a = self._int_val(ins[0], "QLinearMatMul A")
        a_s, a_zp = _qparams(self._qconst(ins[1], "a_scale"), self._qconst(ins[2], "a_zero_point"), "a")
        b = self._qconst(ins[3], "QLinearMatMul B")
        b_s, b_zp = _qparams(self._qconst(ins[4], "b_scale"), self._qconst(ins[5], "b_zero_point"), "b")
        y_s, y_zp = _qparams(self._qconst(ins[6], "y_scale"), self._qconst(ins[7], "y_zero_point"), "y")
        y_dt = self._qconst(ins[7], "y_zero_point").dtype
        if a_s.size != 1 or a_zp.size != 1 or y_s.size != 1 or y_zp.size != 1:
            raise Unsupported("QLinearMatMul a/y quantization is not per-tensor")
        if b.ndim != 2 or b_s.size not in (1, b.shape[1]) or b_zp.size not in (1, b.shape[1]):
            raise Unsupported("QLinearMatMul B is not 2-D with per-tensor or per-column quantization")
        b_q = shifted_weights(b, b_zp, 1)
        self._int8_matmul(node, a, int(a_zp.reshape(-1)[0]), b_q, None, self._mult(a_s, b_s, y_s), None,
                          DT_OF[y_dt], int(y_zp.reshape(-1)[0]), node.outputs[0])

    def _op_MatMulInteger(self, node: Any) -> None:
        ins = list(node.inputs) + [""] * (4 - len(node.inputs))
        a = self._int_val(ins[0], "MatMulInteger A")
        b = self._qconst(ins[1], "MatMulInteger B")
        a_zp = self.constant(ins[2]) if ins[2] else np.zeros(1, np.int64)
        b_zp = self._qconst(ins[3], "b_zero_point")
        if b.ndim != 2:
            raise Unsupported("MatMulInteger B is not 2-D")
        b_q = shifted_weights(b, np.zeros(1, np.int64) if b_zp is None else b_zp.reshape(-1), 1)
        if a_zp is None:  # known at run time (dynamic quantization): bounded by the type's range
            azp = self._int_val(ins[2], "MatMulInteger a_zero_point")
            if azp.shape not in ((), (1,)):
                raise Unsupported("MatMulInteger a_zero_point is not per-tensor")
        else:
            if a_zp.size != 1:
                raise Unsupported("MatMulInteger a_zero_point is not per-tensor")
            azp = int(a_zp.reshape(-1)[0])
        r = max(len(a.shape), 2)
        if self._to_float_group(node, r, r - 1, b.shape[1], lambda binaries, out: self._int8_matmul(
                node, a, azp, b_q, None, None, None, E.DT_F32, None, out, binaries=binaries)):
            return
        if not self.probe:  # as in ConvInteger
            self._check_exact_sum(b_q, a.mem.md.data_type(), None if isinstance(azp, Val) else azp, (0,))
        self._int8_matmul(node, a, azp, b_q, None, None, None, E.DT_S32, None, node.outputs[0])

    # ------------------------------------------------------------------ QDQ groups

    def _dq_of(self, name: str, const_input: bool):
        """(DequantizeLinear node, its integer input, scale, zero point, axis) when ``name`` is made by a
        DequantizeLinear of this subgraph with constant parameters (and a constant input if asked)."""
        dq = self.producer.get(name)
        if dq is None or dq.op_type != "DequantizeLinear" or not is_onnx_domain(dq.domain):
            return None
        scale = self.constant(dq.inputs[1])
        zp = self.constant(dq.inputs[2]) if len(dq.inputs) > 2 and dq.inputs[2] else None
        if scale is None or (len(dq.inputs) > 2 and dq.inputs[2] and zp is None):
            return None
        try:
            scale, zpv = _qparams(scale, zp, "DequantizeLinear")
        except Unsupported:
            return None
        c = self.constant(dq.inputs[0])
        if const_input:
            if c is None:
                return None
        elif c is not None:
            return None
        return dq, dq.inputs[0], scale, zpv, dq.attr("axis", 1)

    def _qdq_tail(self, out: str, conv: bool):
        """What follows a quantized Conv/MatMul/Gemm: an inference BatchNormalization with constant
        parameters (after a Conv), an optional Relu, then a per-tensor QuantizeLinear to u8/s8. Returns
        ([nodes], BatchNormalization constants or None, act, y_scale, y_zp, dtype); y_scale None: a float32
        result, and only the BatchNormalization and Relu are listed."""
        nodes, act, bn = [], None, None
        nxt = self._sole_consumer(out)
        if conv and nxt is not None and nxt.op_type == "BatchNormalization" and is_onnx_domain(nxt.domain) \
                and nxt.inputs[0] == out and (bn := self._bn_constants(nxt)) is not None:
            nodes.append(nxt)
            out = nxt.outputs[0]
            nxt = self._sole_consumer(out)
        if nxt is not None and nxt.op_type == "Relu" and is_onnx_domain(nxt.domain):
            nodes.append(nxt)
            act = (E.ELTWISE_RELU, 0.0, 0.0)
            out = nxt.outputs[0]
            nxt = self._sole_consumer(out)
        if nxt is not None and nxt.op_type == "QuantizeLinear" and is_onnx_domain(nxt.domain) \
                and nxt.inputs[0] == out:
            scale = self.constant(nxt.inputs[1])
            zp = self.constant(nxt.inputs[2]) if len(nxt.inputs) > 2 and nxt.inputs[2] else None
            if scale is not None and scale.dtype == np.float32 and scale.size == 1 and \
                    (zp is None or (zp.dtype in INT8 and zp.size == 1)) and \
                    (len(nxt.inputs) < 3 or not nxt.inputs[2] or zp is not None):
                dt = np.dtype(np.uint8) if zp is None else zp.dtype
                return nodes + [nxt], bn, act, scale, 0 if zp is None else int(zp.reshape(-1)[0]), dt
        return nodes, bn, act, None, None, None

    def _qdq_bias(self, name: str, acc_scale: np.ndarray) -> np.ndarray | None:
        """The bias in units of the int32 sum (x_scale * w_scale): a DequantizeLinear'd int32 bias at that
        scale is its integers exactly; else the float bias divided by it (rounded, as a quantizer would)."""
        if not name:
            return None
        dq = self._dq_of(name, const_input=True)
        if dq is not None:
            _, q, scale, zp, _ = dq
            qv = self.constant(q)
            if qv.dtype == np.int32 and not np.any(zp) and np.allclose(scale.reshape(-1), acc_scale, rtol=1e-6):
                if np.abs(qv.astype(np.int64)).max(initial=0) >= EXACT_F32:
                    return None  # not exact as oneDNN's float32 bias: the group runs as float ops
                return qv.reshape(-1).astype(np.float32)
        f = self.constant(name)
        if f is None or f.dtype != np.float32:
            return None
        q = np.round(f.astype(np.float64).reshape(-1) / acc_scale.astype(np.float64))
        if np.abs(q).max(initial=0) >= EXACT_F32:
            return None
        return q.astype(np.float32)

    def _qdq_group(self, node: Any, w_axis: int, trans_b: bool = False) -> bool:
        """Lower DequantizeLinear -> ``node`` (Conv, MatMul, Gemm) [-> Relu] [-> QuantizeLinear] as one int8
        primitive; False (nothing built) where the pattern or oneDNN does not fit."""
        xd = self._dq_of(node.inputs[0], const_input=False)
        wd = self._dq_of(node.inputs[1], const_input=True)
        if xd is None or wd is None:
            return False
        _, x_name, x_s, x_zp, _ = xd
        _, w_name, w_s, w_zp, w_ax = wd
        w = self.constant(w_name)
        if x_s.size != 1 or w.dtype not in INT8:
            return False
        n_out = w.shape[0] if node.op_type == "Conv" or trans_b else (w.shape[1] if w.ndim == 2 else -1)
        if w_s.size > 1:
            w_ax = w_ax + w.ndim if w_ax < 0 else w_ax
            if w_ax != w_axis or w_s.size != n_out:
                return False
        try:
            x = self._int_val(x_name, "QDQ input")
            w_q = shifted_weights(w, w_zp, w_axis)
        except Unsupported:
            return False
        acc_scale = self._mult(x_s, w_s, None)
        if acc_scale.size == 1 and n_out > 1:
            acc_scale = np.full(n_out, acc_scale[0], np.float32)
        bias = self._qdq_bias(node.inputs[2] if len(node.inputs) > 2 else "", acc_scale)
        if len(node.inputs) > 2 and node.inputs[2] and bias is None:
            return False
        tail, bn, act, y_s, y_zp, y_dt = self._qdq_tail(node.outputs[0], node.op_type == "Conv")
        shift = None
        if bn is not None:  # y = a * conv + c per channel: the conv's scale times a, then c as a shift
            g, b, mean, var, eps = bn
            a = g.astype(np.float64) / np.sqrt(var.astype(np.float64) + eps)
            c = b.astype(np.float64) - mean.astype(np.float64) * a
            if a.size != n_out:
                return False
        if y_s is not None:
            out_dt, out = DT_OF[y_dt], tail[-1].outputs[0]
            mult = self._mult(x_s, w_s, y_s)
            if bn is not None:
                mult = (acc_scale.astype(np.float64) * a / np.float64(y_s.reshape(-1)[0])).astype(np.float32)
                shift = (c / np.float64(y_s.reshape(-1)[0])).astype(np.float32)
        else:
            out_dt, y_zp = E.DT_F32, None
            mult = acc_scale if w_s.size > 1 else acc_scale[:1]
            out = tail[-1].outputs[0] if tail else node.outputs[0]
            if bn is not None:
                mult = (acc_scale.astype(np.float64) * a).astype(np.float32)
                shift = c.astype(np.float32)
        try:
            if node.op_type == "Conv":
                self._int8_conv(node, x, int(x_zp.reshape(-1)[0]), w_q, bias, mult, act, out_dt, y_zp, out, shift)
            else:
                self._int8_matmul(node, x, int(x_zp.reshape(-1)[0]), w_q, bias, mult, act, out_dt, y_zp, out,
                                  trans_b)
        except (Unsupported, RefOnly, DnnlError):
            return False
        # the DequantizeLinear of x and w are read through (their integer inputs): lowered only if another
        # reader needs their float values
        self.fused["DequantizeLinear"] = self.fused.get("DequantizeLinear", 0) + 2
        for n in tail:
            self._absorb(n)
        self.fused["QDQ " + node.op_type] = self.fused.get("QDQ " + node.op_type, 0) + 1
        return True


def exact_sum_reason(w_q: np.ndarray, unsigned: bool, x_zp: int | None, reduce_axes) -> str | None:
    """oneDNN hands its int32 sums to an int32 result through float32: why a sum could pass 2**24 (bounded
    by the weights' absolute sums and the largest |x - zero point|; ``x_zp`` None: unknown), else None."""
    lo, hi = (0, 255) if unsigned else (-128, 127)
    xmax = (hi - lo) if x_zp is None else max(abs(lo - x_zp), abs(hi - x_zp))
    axes = tuple(a for a in reduce_axes if a < w_q.ndim)
    if float(np.abs(w_q.astype(np.int64)).sum(axis=axes).max(initial=0)) * xmax >= EXACT_F32:
        return "its int32 sums could pass 2**24, which oneDNN's int32 result would round"
    return None


def _integer_sum_reason(node: Any, ctx: Any) -> str | None:
    """MatMulInteger / ConvInteger: why oneDNN cannot compute it from its constant weights, else None. Weights
    minus their zero point must fit int8; and unless a Cast to float32 alone reads the int32 sum (then it is
    lowered as one step with a float32 result), the sum must stay exact (see ``exact_sum_reason``)."""
    readers = ctx.readers(node.outputs[0])
    to_float = len(readers) == 1 and readers[0].op_type == "Cast" and is_onnx_domain(readers[0].domain) \
        and readers[0].attr("to") == TensorProto.FLOAT
    ins = list(node.inputs) + [""] * (4 - len(node.inputs))
    conv = node.op_type == "ConvInteger"
    w, w_zp = ctx.constant(ins[1]), ctx.constant(ins[3])
    x_zp = ctx.constant(ins[2]) if ins[2] else np.zeros(1, np.int64)
    if x_zp is None and conv and not to_float:
        return "ConvInteger with a run-time x_zero_point whose sum is not read as float32 (a Cast)"
    if (x_zp is not None and x_zp.size != 1) or (conv and w.ndim < 3) or (not conv and w.ndim != 2):
        return None  # the lowering names it
    try:
        w_q = shifted_weights(w, np.zeros(1, np.int64) if w_zp is None else w_zp.reshape(-1), 0 if conv else 1)
    except Unsupported as e:
        return str(e)
    if to_float:
        return None
    return exact_sum_reason(w_q, ctx.elem(ins[0]) == np.uint8, None if x_zp is None else int(x_zp.reshape(-1)[0]),
                            (1, 2, 3, 4) if conv else (0,))


def quant_reason(node: Any, ctx: Any) -> str | None:
    """Why a quantized op is not lowered whatever its shapes (types, constants, attributes), or None."""
    op = node.op_type

    elem = ctx.elem

    def const(k: int, what: str) -> str | None:
        if len(node.inputs) > k and node.inputs[k] and ctx.constant(node.inputs[k]) is None:
            return f"{op} {what} is not a constant"
        return None

    ins = list(node.inputs)
    if op in MS_QUANT_OPS:
        consts = {"QLinearAdd": (1, 2, 4, 5, 6, 7), "QLinearGlobalAveragePool": (1, 2, 3, 4),
                  "QGemm": (1, 2, 3, 4, 5, 6, 7, 8)}[op]
        for k in consts:
            why = const(k, "quantization parameter, weights or bias")
            if why:
                return why
        data = (0, 3) if op == "QLinearAdd" else (0,)
        if any(elem(ins[k]) not in INT8 for k in data):
            return f"{op} operands are not uint8/int8"
        if op == "QGemm" and elem(ins[3]) not in INT8:
            return "QGemm B is not uint8/int8"
        if op == "QGemm" and node.attr("transA", 0):
            return "QGemm transA=1"
        if op == "QLinearGlobalAveragePool" and node.attr("channels_last", 0):
            return "QLinearGlobalAveragePool channels_last=1"
        return None
    if op == "DynamicQuantizeLinear":
        if elem(ins[0]) != np.float32:
            return "DynamicQuantizeLinear input is not float32"
        return None
    if op == "Cast":
        if node.attr("to") != TensorProto.FLOAT or elem(ins[0]) not in (*INT8, np.dtype(np.int32)):
            return "Cast other than uint8/int8/int32 to float32"
        return None
    if op in ("QuantizeLinear", "DequantizeLinear"):
        if node.attr("block_size", 0):
            return f"{op} with block_size (blocked quantization)"
        if elem(ins[1]) != np.float32:
            return f"{op} scale is not float32"
        zp = elem(ins[2]) if len(ins) > 2 and ins[2] else None
        if zp is not None and zp not in INT8 and not (zp == np.int32 and ctx.constant(ins[0]) is not None):
            return f"{op} zero point is {zp}: only uint8/int8 are computed"
        if op == "QuantizeLinear":
            if elem(ins[0]) != np.float32:
                return "QuantizeLinear input is not float32"
            out = elem(node.outputs[0]) or zp or np.dtype(np.uint8)
            if out not in INT8:
                return f"QuantizeLinear to {out}: only uint8/int8 are computed"
        else:
            x = elem(ins[0])
            const = ctx.constant(ins[0]) is not None and ctx.constant(ins[1]) is not None
            if x not in INT8 and not (x == np.int32 and const):
                return f"DequantizeLinear of {x}: only uint8/int8 (and constant int32) are computed"
        return None
    if op in ("QLinearConv", "QLinearMatMul"):
        for k in range(1, 8):  # scales, zero points and the weights (B)
            why = const(k, "quantization parameter or weights")
            if why:
                return why
        if op == "QLinearConv" and len(ins) > 8 and ins[8]:
            why = const(8, "bias")
            if why:
                return why
        if elem(ins[0]) not in INT8 or elem(ins[3]) not in INT8:
            return f"{op} operands are not uint8/int8"
        return None
    if op in ("ConvInteger", "MatMulInteger"):
        why = const(1, "weights (B)") or const(3, "zero point")
        if len(ins) > 2 and ins[2] and elem(ins[2]) not in INT8:
            why = f"{op} x/a zero point is not uint8/int8"
        if why:
            return why
        if elem(ins[0]) not in INT8 or elem(ins[1]) not in INT8:
            return f"{op} operands are not uint8/int8"
        return _integer_sum_reason(node, ctx)
    return f"{op} is not a quantized op lowered here"
