"""Lowering of the convolution family: Conv with folded BatchNormalization and post-ops (activations,
a residual sum), standalone BatchNormalization, and pooling.

A mixin of ``lowering.Builder`` (it uses the builder's storage and fusion helpers); ops of other
families are lowered elsewhere.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ort_core.plugins import is_onnx_domain

from . import enums as E
from . import primitives as P
from . import views as V
from .library import DnnlError
from .program import RefOnly, Unsupported, Val


def conv_window(node: Any, x_shape, w_shape) -> tuple:
    """(group, kernel, strides, dilations, pad_l, pad_r, out_spatial) of a Conv-like ``node`` over an input of
    ``x_shape`` with weights of ``w_shape``; Unsupported for ranks oneDNN does not take or a kernel_shape that
    disagrees with the weights."""
    if len(x_shape) < 3 or len(x_shape) > 5 or len(w_shape) != len(x_shape):
        raise Unsupported(f"{node.op_type} on rank {len(x_shape)} input")
    group = int(node.attr("group", 1))
    n_sp = len(x_shape) - 2
    kernel = list(node.attr("kernel_shape", w_shape[2:]))
    strides = list(node.attr("strides", [1] * n_sp))
    dil = list(node.attr("dilations", [1] * n_sp))
    pads = list(node.attr("pads", [0] * (2 * n_sp)))
    if list(kernel) != list(w_shape[2:]):
        raise Unsupported(f"{node.op_type} kernel_shape differs from the weights' shape")
    pl, pr, out_sp = conv_geometry(x_shape[2:], kernel, strides, dil, pads, node.attr("auto_pad", "NOTSET"))
    return group, kernel, strides, dil, pl, pr, out_sp


def conv_geometry(x_spatial, kernel, strides, dilations, pads, auto_pad: str):
    """(pad_l, pad_r, out_spatial) of an ONNX Conv/Pool along each spatial axis (floor rounding)."""
    n = len(x_spatial)
    if isinstance(auto_pad, bytes):
        auto_pad = auto_pad.decode()
    pl, pr, out = [], [], []
    for i in range(n):
        k_eff = (kernel[i] - 1) * dilations[i] + 1
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            o = -(-x_spatial[i] // strides[i])
            total = max((o - 1) * strides[i] + k_eff - x_spatial[i], 0)
            small = total // 2
            lo, hi = (small, total - small) if auto_pad == "SAME_UPPER" else (total - small, small)
        elif auto_pad == "VALID":
            lo = hi = 0
        else:
            lo, hi = pads[i], pads[i + n]
        o = (x_spatial[i] + lo + hi - k_eff) // strides[i] + 1
        pl.append(lo)
        pr.append(hi)
        out.append(o)
    return pl, pr, out



def fold_batch_norm(w: np.ndarray, b: np.ndarray | None, scale, shift, mean, var, eps: float, M: int):
    """Weights and bias of Conv followed by inference BatchNormalization, as one Conv."""
    factor = (scale.astype(np.float64) / np.sqrt(var.astype(np.float64) + eps))
    w2 = (w.astype(np.float64) * factor.reshape((M,) + (1,) * (w.ndim - 1))).astype(np.float32)
    b0 = np.zeros(M, np.float64) if b is None else b.astype(np.float64)
    b2 = ((b0 - mean) * factor + shift).astype(np.float32)
    return w2, b2


class ConvOps:
    """Conv, BatchNormalization and pooling lowerings (mixed into Builder)."""

    def _op_Conv(self, node: Any) -> None:
        if self._qdq_group(node, 0):  # DequantizeLinear -> Conv [-> Relu] [-> QuantizeLinear] in int8
            return
        x = self.get(node.inputs[0])
        w_name = node.inputs[1]
        b_name = node.inputs[2] if len(node.inputs) > 2 else ""
        w_arr = self.constant(w_name)
        w_shape = tuple(w_arr.shape) if w_arr is not None else self.get(w_name).shape
        b_arr = self.constant(b_name) if b_name else None
        group, kernel, strides, dil, pl, pr, out_sp = conv_window(node, x.shape, w_shape)
        if min(out_sp) <= 0 or 0 in x.shape:
            raise Unsupported("Conv with an empty input or output")
        M, Cg = w_shape[0], w_shape[1]
        if x.shape[1] != Cg * group or M % group:
            raise Unsupported("Conv channels do not match its weights and groups")
        y_shape = (x.shape[0], M, *out_sp)

        full = self._conv_chain(node, w_arr is not None and (not b_name or b_arr is not None), y_shape)
        # precision=bf16: bf16 source and weights (f32 accumulation) where oneDNN has a native kernel for
        # them, else this Conv stays float32; a fusion only the reference kernel offers is dropped
        found = None
        for dt in ((E.DT_BF16, E.DT_F32) if self.bf16 else (E.DT_F32,)):
            chain = full
            while found is None:
                try:
                    found = self._conv_with(node, chain, x, w_arr, w_shape, b_name, b_arr, group, kernel, strides,
                                            dil, pl, pr, y_shape, dt)
                except (DnnlError, RefOnly):
                    cut = [i for i, (kind, _, _) in enumerate(chain) if kind == "add"]
                    if not cut:
                        if dt == E.DT_F32:
                            raise
                        break
                    chain = chain[:cut[0]]  # without the residual Add (and what follows it)
            if found is not None:
                break
        pd, args, dst, cur = found
        for _, nxt, _ in chain:
            self._absorb(nxt)
        self._step(pd, args, node.label)
        self._set(cur, Val(y_shape, dst))

    def _conv_chain(self, node: Any, const_params: bool, y_shape) -> list[tuple[str, Any, Any]]:
        """The nodes after a Conv that fold into it: ('bn', node, constants) for an inference
        BatchNormalization (constant weights only), ('act', node, (alg, alpha, beta)) for activations,
        ('add', node, other value name) for one residual Add of the output's shape."""
        chain: list[tuple[str, Any, Any]] = []
        cur = node.outputs[0]
        seen_add = False
        while True:
            nxt = self._sole_consumer(cur)
            if nxt is None:
                break
            if nxt.op_type == "BatchNormalization" and not chain and const_params and nxt.inputs[0] == cur:
                bn = self._bn_constants(nxt)
                if bn is None:
                    break
                chain.append(("bn", nxt, bn))
            elif (act := self._activation(nxt)) is not None and nxt.inputs[0] == cur:
                chain.append(("act", nxt, act))
            elif not seen_add and (other := self._same_shape_other(nxt, cur, y_shape)) is not None:
                chain.append(("add", nxt, other))
                seen_add = True
            else:
                break
            cur = nxt.outputs[0]
        return chain

    def _conv_with(self, node, chain, x, w_arr, w_shape, b_name, b_arr, group, kernel, strides, dil, pl, pr,
                   y_shape, dt=E.DT_F32):
        """Primitive descriptor and arguments of a Conv with ``chain`` fused into it; ``dt`` is the data
        type of its source, weights and (unless it sums in place onto a residual) destination."""
        lib = self.lib
        M, Cg = w_shape[0], w_shape[1]
        post = P.PostOps()
        res_val, in_place = None, False
        cur = node.outputs[0]
        for kind, nxt, payload in chain:
            if kind == "bn":
                w_arr, b_arr = fold_batch_norm(w_arr, b_arr, *payload, M)
            elif kind == "act":
                post.eltwise(*payload)
            else:
                res_val = self.get(payload)
                in_place = self._can_overwrite(res_val, nxt)
                post.sum()  # onto the residual itself, or onto a copy of it when it is read later
            cur = nxt.outputs[0]
        w_dims = (group, M // group, Cg, *kernel) if group > 1 else tuple(w_shape)
        if w_arr is not None:
            w_val = self._const_val(np.ascontiguousarray(w_arr, np.float32).reshape(w_dims))
        else:
            wv = self.get(node.inputs[1])
            w_val = Val(w_dims, self.alias(self.plain(wv, "Conv weights"), w_dims))
        bias = None
        if b_arr is not None:
            bias = self._const_val(np.ascontiguousarray(b_arr, np.float32).reshape(M))
        elif b_name:
            bias = self.get(b_name)
        bias_md = None if bias is None else P.plain_md(lib, (M,))
        # channels-last results first: oneDNN's brgemm convolutions (its fastest on AVX-512) read and write
        # them, and a network that starts channels-last stays so — left to itself, oneDNN gives the first
        # conv (3 input channels) and what follows it a blocked layout, and every conv summing onto that
        # residual a slower kernel, with reorders in between
        if in_place:
            dsts = [res_val.mem.md]
        else:
            dsts = [P.strided_md(lib, y_shape, V.channels_last_strides(y_shape), dt), P.any_md(lib, y_shape, dt)]
        for dst_md in dsts:
            pd = P.convolution(lib, P.any_md(lib, x.shape, dt), P.any_md(lib, w_dims, dt), bias_md, dst_md, strides,
                               [d - 1 for d in dil], pl, pr, self._attr(post))
            if not pd.is_ref:
                break
        if (res_val is not None or dt != E.DT_F32) and pd.is_ref:
            raise RefOnly()
        src = self.as_md(x, pd.md(E.QUERY_SRC_MD, 0, x.shape), "Conv input")
        wts = self.as_md(w_val, pd.md(E.QUERY_WEIGHTS_MD, 0, w_dims), "Conv weights")
        dst = res_val.mem if in_place else self._new(pd.md(E.QUERY_DST_MD, 0, y_shape))
        if res_val is not None and not in_place:
            self._reorder_into(res_val.mem, dst, "residual copied into the Conv output")
        args = [(E.ARG_SRC, src), (E.ARG_WEIGHTS, wts), (E.ARG_DST, dst)]
        if bias is not None:
            args.append((E.ARG_BIAS, self.plain(bias, "Conv bias")))
        return pd, args, dst, cur

    def _bn_constants(self, node: Any):
        """(scale, shift, mean, var, epsilon) of an inference BatchNormalization with constant
        float32 parameters, else None."""
        if len(node.inputs) != 5 or any(o for o in node.outputs[1:]) or node.attr("training_mode", 0):
            return None
        if node.attr("spatial", 1) != 1:
            return None
        vals = [self.constant(n) for n in node.inputs[1:5]]
        if any(v is None or v.dtype != np.float32 or v.ndim != 1 for v in vals):
            return None
        return (*vals, float(node.attr("epsilon", 1e-5)))

    def _op_BatchNormalization(self, node: Any) -> None:
        x = self.get(node.inputs[0])
        if len(x.shape) < 2 or node.attr("training_mode", 0) or any(o for o in node.outputs[1:]):
            raise Unsupported("BatchNormalization in training mode or on rank < 2")
        if node.attr("spatial", 1) != 1:
            raise Unsupported("BatchNormalization spatial=0")
        params = [self.get(n) for n in node.inputs[1:5]]
        C = x.shape[1]
        if any(p.shape != (C,) for p in params):
            raise Unsupported("BatchNormalization parameters are not of shape (C,)")
        flags = E.USE_GLOBAL_STATS | E.USE_SCALE | E.USE_SHIFT
        relu = self._sole_consumer(node.outputs[0])
        if relu is None or relu.op_type != "Relu" or not is_onnx_domain(relu.domain):
            relu = None
        else:  # DenseNet's pre-activation BN -> Relu: one pass (oneDNN's fused ReLU) instead of two
            flags |= E.FUSE_NORM_RELU
        eps = float(node.attr("epsilon", 1e-5))
        pd, src = self._native(x, lambda s, dt: P.batch_norm(self.lib, s.md, P.any_md(self.lib, x.shape, dt), eps,
                                                             flags, self._attr()), node.label)
        dst = self._new(pd.md(E.QUERY_DST_MD, 0, x.shape))
        scale, shift, mean, var = (self.plain(p, "BatchNormalization parameter") for p in params)
        self._step(pd, [(E.ARG_SRC, src), (E.ARG_DST, dst), (E.ARG_MEAN, mean), (E.ARG_VARIANCE, var),
                        (E.ARG_SCALE, scale), (E.ARG_SHIFT, shift)], node.label)
        out = node.outputs[0]
        if relu is not None:
            self._absorb(relu)
            out = relu.outputs[0]
        self._set(out, Val(x.shape, dst))

    def _pool(self, node: Any, alg: int, kernel, strides, dil, pads, auto_pad, ceil: bool) -> None:
        x = self.get(node.inputs[0])
        if len(x.shape) < 3 or len(x.shape) > 5:
            raise Unsupported(f"pooling on rank {len(x.shape)}")
        sp = x.shape[2:]
        pl, pr, out_sp = conv_geometry(sp, kernel, strides, dil, pads, auto_pad)
        if ceil:
            out_sp = []
            for i in range(len(sp)):
                k_eff = (kernel[i] - 1) * dil[i] + 1
                o = -(-(sp[i] + pl[i] + pr[i] - k_eff) // strides[i]) + 1
                if (o - 1) * strides[i] >= sp[i] + pl[i]:
                    o -= 1
                extra = (o - 1) * strides[i] + k_eff - (sp[i] + pl[i] + pr[i])
                if extra > 0:
                    if alg == E.POOLING_AVG_INCLUDE_PADDING:
                        raise Unsupported("ceil_mode with count_include_pad=1 past the padded input")
                    pr[i] += extra
                out_sp.append(o)
        if min(out_sp) <= 0 or 0 in x.shape:
            raise Unsupported("pooling with an empty input or output")
        y_shape = (*x.shape[:2], *out_sp)
        dt = x.mem.md.data_type()
        if dt in (E.DT_U8, E.DT_S8):  # a quantized value: pooled as it is (channels-last), never via float
            for md in (x.mem.md, P.strided_md(self.lib, x.shape, V.channels_last_strides(x.shape), dt)):
                pd = P.pooling(self.lib, alg, md, P.any_md(self.lib, y_shape, dt), strides, kernel,
                               [d - 1 for d in dil], pl, pr, self._attr())
                if not pd.is_ref:
                    break
            if pd.is_ref:
                raise Unsupported("oneDNN has only its reference pooling for this quantized value")
            dst = self._new(pd.md(E.QUERY_DST_MD, 0, y_shape))
            self._step(pd, [(E.ARG_SRC, self.as_md(x, md, node.label)), (E.ARG_DST, dst)], node.label)
            self._set(node.outputs[0], Val(y_shape, dst))
            return
        pd, src = self._native(x, lambda s, dt: P.pooling(self.lib, alg, s.md, P.any_md(self.lib, y_shape, dt),
                                                          strides, kernel, [d - 1 for d in dil], pl, pr,
                                                          self._attr()), node.label)
        dst = self._new(pd.md(E.QUERY_DST_MD, 0, y_shape))
        self._step(pd, [(E.ARG_SRC, src), (E.ARG_DST, dst)], node.label)
        self._set(node.outputs[0], Val(y_shape, dst))

    def _pool_attrs(self, node: Any, n: int):
        kernel = list(node.attr("kernel_shape"))
        return (kernel, list(node.attr("strides", [1] * n)), list(node.attr("dilations", [1] * n)),
                list(node.attr("pads", [0] * (2 * n))), node.attr("auto_pad", "NOTSET"),
                bool(node.attr("ceil_mode", 0)))

    def _op_MaxPool(self, node: Any) -> None:
        if len(node.outputs) > 1 and node.outputs[1]:
            raise Unsupported("MaxPool with Indices output")
        n = len(self.get(node.inputs[0]).shape) - 2
        self._pool(node, E.POOLING_MAX, *self._pool_attrs(node, n))

    def _op_AveragePool(self, node: Any) -> None:
        n = len(self.get(node.inputs[0]).shape) - 2
        alg = E.POOLING_AVG_INCLUDE_PADDING if node.attr("count_include_pad", 0) else E.POOLING_AVG_EXCLUDE_PADDING
        self._pool(node, alg, *self._pool_attrs(node, n))

    def _global_pool(self, node: Any, alg: int) -> None:
        x = self.get(node.inputs[0])
        n = len(x.shape) - 2
        self._pool(node, alg, list(x.shape[2:]), [1] * n, [1] * n, [0] * (2 * n), "NOTSET", False)

    def _op_GlobalAveragePool(self, node: Any) -> None:
        self._global_pool(node, E.POOLING_AVG_EXCLUDE_PADDING)

    def _op_GlobalMaxPool(self, node: Any) -> None:
        self._global_pool(node, E.POOLING_MAX)
