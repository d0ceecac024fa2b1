"""Lowering of MatMul and Gemm to oneDNN's matmul: batch broadcasting, transposes as strides,
constant weights reordered once, bias and activations fused.

A mixin of ``lowering.Builder``; ops of other families are lowered elsewhere.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import enums as E
from . import primitives as P
from .library import DnnlError
from .program import Mem, Unsupported, Val


class MatmulOps:
    """MatMul and Gemm lowerings (mixed into Builder)."""

    def _matmul(self, a_mem: Mem, a_dims, b_mem_or_val, b_dims, out_dims, post: P.PostOps,
                bias: Val | None, bias_dims, label: str, extra_args=()) -> Mem:
        lib = self.lib
        const_b = isinstance(b_mem_or_val, Val)
        bias_md = None if bias is None else P.plain_md(lib, bias_dims)
        pd = None
        if self.bf16:  # bf16 source and weights, float32 accumulation and result, where oneDNN has the kernel
            w_md = P.any_md(lib, b_dims, E.DT_BF16) if const_b else P.plain_md(lib, b_dims, E.DT_BF16)
            try:
                pd = P.matmul(lib, P.plain_md(lib, a_dims, E.DT_BF16), w_md, bias_md, P.plain_md(lib, out_dims),
                              self._attr(post))
            except DnnlError:
                pd = None
            if pd is not None and pd.is_ref:
                pd = None
            if pd is not None:
                a_mem = self._bf16_copy(a_mem, a_dims, f"{label} A")
                if not const_b:
                    b_mem_or_val = self._bf16_copy(b_mem_or_val, b_dims, f"{label} B")
        if pd is None:
            w_md = P.any_md(lib, b_dims) if const_b else b_mem_or_val.md
            pd = P.matmul(lib, a_mem.md, w_md, bias_md, P.plain_md(lib, out_dims), self._attr(post))
        if const_b:
            wts = self.as_md(b_mem_or_val, pd.md(E.QUERY_WEIGHTS_MD, 0, b_dims), "MatMul weights")
        else:
            wts = b_mem_or_val
        dst = self._new(P.plain_md(lib, out_dims))
        args = [(E.ARG_SRC, a_mem), (E.ARG_WEIGHTS, wts), (E.ARG_DST, dst), *extra_args]
        if bias is not None:
            args.append((E.ARG_BIAS, self.alias(self.plain(bias, "bias"), bias_dims)))
        self._step(pd, args, label)
        return dst

    def _bf16_copy(self, mem: Mem, dims, label: str) -> Mem:
        """A dense bf16 copy of the (possibly strided) float32 view ``mem``, made once per view."""
        for src, copy in self.bf16_copies:
            if src.buf is mem.buf and src.md == mem.md:
                return copy
        copy = self._new_like(mem.buf, P.plain_md(self.lib, dims, E.DT_BF16))
        self._reorder_into(mem, copy, f"{label} to bf16")
        self.bf16_copies.append((mem, copy))
        return copy

    def _matmul_epilogue(self, node: Any, out_shape: tuple[int, ...], allow_bias: bool):
        """Fuse what follows a MatMul/Gemm: an Add of a constant bias over the last axis (as matmul
        bias) then activations. Returns (post-ops, bias Val or None, name of the last fused value)."""
        post = P.PostOps()
        bias = None
        cur = node.outputs[0]
        while True:
            nxt = self._sole_consumer(cur)
            if nxt is None:
                break
            if (allow_bias and bias is None and not len(post) and nxt.op_type == "Add" and len(nxt.inputs) == 2
                    and out_shape):
                other = nxt.inputs[1] if nxt.inputs[0] == cur else nxt.inputs[0]
                arr = self.constant(other)
                if (other == cur or arr is None or arr.dtype != np.float32
                        or not (arr.ndim <= len(out_shape) and arr.size == out_shape[-1]
                                and (arr.ndim == 0 or arr.shape[-1] == out_shape[-1]))):
                    break
                bias = self.get(other)
            elif (act := self._activation(nxt)) is not None and nxt.inputs[0] == cur:
                post.eltwise(*act)
            else:
                break
            self._absorb(nxt)
            cur = nxt.outputs[0]
        return post, bias, cur

    def _flatten_into_fc(self, node: Any, x: Val, shape: tuple[int, ...]) -> bool:
        """Flatten/Reshape of a (N, C, spatial...) value in a layout that would need a copy (channels-last),
        read only by a Gemm/MatMul with constant weights (a classifier head): one inner-product primitive
        reads ``x`` as it is laid out (oneDNN orders the weights to match it once), with the bias and
        activations that follow fused. Returns False (nothing built) when the pattern does not apply."""
        if self.bf16 or len(x.shape) < 3 or len(shape) != 2 or shape[0] != x.shape[0] \
                or x.mem.md.data_type() != E.DT_F32:
            return False
        fc = self._sole_consumer(node.outputs[0])
        if fc is None or fc.op_type not in ("Gemm", "MatMul") or fc.inputs[0] != node.outputs[0]:
            return False
        b = self.constant(fc.inputs[1])
        if b is None or b.ndim != 2 or b.dtype != np.float32:
            return False
        bias = None
        if fc.op_type == "Gemm":
            if fc.attr("transA", 0) or float(fc.attr("alpha", 1.0)) != 1.0:
                return False
            w = b if fc.attr("transB", 0) else b.T
            c_name = fc.inputs[2] if len(fc.inputs) > 2 else ""
            if c_name and float(fc.attr("beta", 1.0)) != 0.0:
                c = self.constant(c_name)
                if (c is None or c.dtype != np.float32 or float(fc.attr("beta", 1.0)) != 1.0
                        or c.size != w.shape[0] or c.shape[-1] != w.shape[0]):
                    return False
                bias = c.reshape(-1)
        else:
            w = b.T
        n_out = w.shape[0]
        if w.shape[1] != shape[1]:
            return False
        lib = self.lib
        w_dims = (n_out, *x.shape[1:])
        out_dims = (shape[0], n_out)
        probe = P.inner_product(lib, x.mem.md, P.any_md(lib, w_dims), None, P.plain_md(lib, out_dims), self._attr())
        if probe.is_ref:
            return False
        self._absorb(fc, count_as=node.op_type)  # counted as the Flatten folded into it
        post, bias_e, cur = self._matmul_epilogue(fc, out_dims, allow_bias=bias is None)
        bias_val = self._const_val(np.ascontiguousarray(bias, np.float32)) if bias is not None else bias_e
        bias_md = None if bias_val is None else P.plain_md(lib, (n_out,))
        pd = P.inner_product(lib, x.mem.md, P.any_md(lib, w_dims), bias_md, P.plain_md(lib, out_dims),
                             self._attr(post))
        wts = self.as_md(self._const_val(np.ascontiguousarray(w, np.float32).reshape(w_dims)),
                         pd.md(E.QUERY_WEIGHTS_MD, 0, w_dims), "inner-product weights")
        dst = self._new(P.plain_md(lib, out_dims))
        args = [(E.ARG_SRC, x.mem), (E.ARG_WEIGHTS, wts), (E.ARG_DST, dst)]
        if bias_val is not None:
            args.append((E.ARG_BIAS, self.alias(self.plain(bias_val, "bias"), (n_out,))))
        self._step(pd, args, fc.label)
        self._set(cur, Val(out_dims, dst))
        return True

    def _op_MatMul(self, node: Any) -> None:
        if self._qdq_group(node, 1):  # DequantizeLinear -> MatMul [-> Relu] [-> QuantizeLinear] in int8
            return
        a, b = self.get(node.inputs[0]), self.get(node.inputs[1])
        if 0 in a.shape or 0 in b.shape or not a.shape or not b.shape:
            raise Unsupported("MatMul of empty or 0-d tensors")
        a_shape = (1, *a.shape) if len(a.shape) == 1 else a.shape
        b_shape = (*b.shape, 1) if len(b.shape) == 1 else b.shape
        r = max(len(a_shape), len(b_shape))
        a_dims = (1,) * (r - len(a_shape)) + a_shape
        b_dims = (1,) * (r - len(b_shape)) + b_shape
        if a_dims[-1] != b_dims[-2]:
            raise Unsupported("MatMul inner dimensions differ")
        try:
            batch = tuple(np.broadcast_shapes(a_dims[:-2], b_dims[:-2]))
        except ValueError:
            raise Unsupported("MatMul batch dimensions do not broadcast") from None
        out_dims = (*batch, a_dims[-2], b_dims[-1])
        out_shape = out_dims[len(out_dims) - (max(len(a.shape), len(b.shape))):]
        if len(a.shape) == 1:
            out_shape = out_shape[:-2] + out_shape[-1:]
        if len(b.shape) == 1:
            out_shape = out_shape[:-1]
        out_shape = tuple(out_shape)
        a_mem = self.alias(self.plain(a, "MatMul A"), a_dims)
        const_b = self.constant(node.inputs[1]) is not None and all(d == 1 for d in b_dims[:-2])
        b_arg = Val(b_dims, self.alias(self.plain(b, "MatMul B"), b_dims)) if const_b else \
            self.alias(self.plain(b, "MatMul B"), b_dims)
        post, bias, cur = self._matmul_epilogue(node, out_shape, allow_bias=len(b.shape) >= 2)
        bias_dims = (1,) * (len(out_dims) - 1) + (out_dims[-1],)
        dst = self._matmul(a_mem, a_dims, b_arg, b_dims, out_dims, post, bias, bias_dims, node.label)
        self._set(cur, Val(out_shape, self.alias(dst, out_shape)))

    def _op_Gemm(self, node: Any) -> None:
        if (not node.attr("transA", 0) and float(node.attr("alpha", 1.0)) == 1.0
                and float(node.attr("beta", 1.0)) == 1.0
                and self._qdq_group(node, 0 if node.attr("transB", 0) else 1, bool(node.attr("transB", 0)))):
            return
        a, b = self.get(node.inputs[0]), self.get(node.inputs[1])
        c_name = node.inputs[2] if len(node.inputs) > 2 else ""
        alpha, beta = float(node.attr("alpha", 1.0)), float(node.attr("beta", 1.0))
        ta, tb = int(node.attr("transA", 0)), int(node.attr("transB", 0))
        if len(a.shape) != 2 or len(b.shape) != 2 or 0 in a.shape or 0 in b.shape:
            raise Unsupported("Gemm needs non-empty 2-D A and B")
        M, K = (a.shape[1], a.shape[0]) if ta else a.shape
        K2, N = (b.shape[1], b.shape[0]) if tb else b.shape
        if K != K2:
            raise Unsupported("Gemm inner dimensions differ")
        lib = self.lib
        a_plain = self.plain(a, "Gemm A")
        a_mem = self._mem(P.strided_md(lib, (M, K), (1, M) if ta else (K, 1)), a_plain.buf)
        b_plain = self.plain(b, "Gemm B")
        b_mem = self._mem(P.strided_md(lib, (K, N), (1, K) if tb else (N, 1)), b_plain.buf)
        b_arg: Any = Val((K, N), b_mem) if self.constant(node.inputs[1]) is not None else b_mem
        post = P.PostOps()
        bias, bias_dims, extra = None, (1, N), []
        c = self.get(c_name) if c_name and beta != 0.0 else None
        if c is not None:
            try:
                np.broadcast_shapes(c.shape, (M, N))
            except ValueError:
                raise Unsupported(f"Gemm C of shape {list(c.shape)} does not broadcast to {[M, N]}") from None
            c_dims = (1,) * (2 - len(c.shape)) + c.shape
            if alpha == 1.0 and beta == 1.0:
                bias, bias_dims = c, c_dims
            else:
                if alpha != 1.0:
                    post.eltwise(E.ELTWISE_LINEAR, alpha, 0.0)
                c_arr = self.constant(c_name)
                if beta != 1.0:
                    if c_arr is not None:
                        c = self._const_val((np.float32(beta) * c_arr).astype(np.float32))
                    else:
                        pd = P.eltwise(lib, E.ELTWISE_LINEAR, self.plain(c).md, self.plain(c).md, beta, 0.0,
                                       self._attr())
                        scaled = self._new(self.plain(c).md)
                        self._step(pd, [(E.ARG_SRC, self.plain(c)), (E.ARG_DST, scaled)], node.label)
                        c = Val(c.shape, scaled)
                c_mem = self.alias(self.plain(c, "Gemm C"), c_dims)
                idx = post.binary(E.BINARY_ADD, c_mem.md)
                extra.append((E.arg_post_op(idx) | E.ARG_SRC_1, c_mem))
        elif alpha != 1.0:
            post.eltwise(E.ELTWISE_LINEAR, alpha, 0.0)
        cur = node.outputs[0]
        if not len(post) and bias is None:
            post, bias_e, cur = self._matmul_epilogue(node, (M, N), allow_bias=True)
            if bias_e is not None:
                bias, bias_dims = bias_e, (1, N)
        dst = self._matmul(a_mem, (M, K), b_arg, (K, N), (M, N), post, bias, bias_dims, node.label, extra)
        self._set(cur, Val((M, N), dst))
