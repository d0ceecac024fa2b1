"""CPU kernels for attention: Attention (scaled dot-product, opset 23+), ai.onnx.preview
FlexAttention (with score_mod/prob_mod subgraphs) and LinearAttention (recurrent, opset 27).

RotaryEmbedding, TensorScatter and the com.microsoft attention contrib ops are not here.
"""

from __future__ import annotations

import math

import numpy as np

from ....errors import KernelError
from ....ir.graph import Graph, Node
from ....ir.types import np_dtype
from ..registry import outer_scope_names, register

_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)
_NARROW = ("float16", "bfloat16")
_SOFTMAX_PRECISIONS = (1, 10, 11, 16)  # FLOAT, FLOAT16, DOUBLE, BFLOAT16


def _compute_dtype(dtype: np.dtype) -> np.dtype:
    """16-bit floats are computed in float32 (numpy has no BLAS for them); others as they are."""
    return _F32 if dtype.name in _NARROW else np.dtype(dtype)


def _rounder(dtype: np.dtype):
    """x -> x rounded to ``dtype`` but kept in float32, for narrow types; identity otherwise.

    The spec computes each step in the tensor's own type: rounding after the same steps keeps
    16-bit results within the one-ulp tolerance of the reference while BLAS does the products."""
    if dtype.name not in _NARROW:
        return lambda x: x
    return lambda x: x.astype(dtype).astype(_F32)


def _split_heads(x: np.ndarray, heads: int) -> np.ndarray:
    """(B, S, H*D) -> (B, H, S, D) as a view."""
    b, s, hd = x.shape
    return x.reshape(b, s, heads, hd // heads).transpose(0, 2, 1, 3)


def _softmax(x: np.ndarray, dtype: np.dtype, overwrite: bool = False) -> np.ndarray:
    """Softmax over the last axis computed in ``dtype``, returned in x's dtype; a row that is all
    -inf becomes zeros. ``overwrite`` lets it reuse x's memory.

    16-bit dtypes are computed op by op in that dtype (numpy rounds every step), as the spec asks
    when no wider softmax_precision is given: a float32 softmax differs from it by an ulp or two."""
    xs = x.astype(dtype, copy=not overwrite)
    m = np.max(xs, axis=-1, keepdims=True)
    m[np.isneginf(m)] = 0  # exp(-inf - 0) = 0 for fully masked rows instead of NaN
    xs -= m
    np.exp(xs, out=xs)
    s = np.sum(xs, axis=-1, keepdims=True)
    s[s == 0] = 1
    xs /= s
    return xs.astype(x.dtype, copy=False)


# ---------------------------------------------------------------------------------------------
# Attention
# ---------------------------------------------------------------------------------------------

def _attention_mask(node, attn_mask, n_q, n_kv, offset, is_causal, window, nonpad, ct):
    """Additive bias (broadcastable to (B, H, n_q, n_kv)) combining attn_mask, the causal and
    sliding-window frontiers and the nonpad padding; None when nothing masks.

    ``offset`` is the number of valid keys preceding the query block: an int, or a (B,) array
    for an external cache given by ``nonpad_kv_seqlen``."""
    allowed = None
    i = np.arange(n_q).reshape(n_q, 1)
    j = np.arange(n_kv).reshape(1, n_kv)
    if np.ndim(offset):
        i = i + offset.reshape(-1, 1, 1, 1)  # absolute query positions, (B, 1, n_q, 1)
    elif offset:
        i = i + offset
    if is_causal:
        allowed = j <= i
    left, right = window
    if left >= 0:
        inside = i - j <= left
        allowed = inside if allowed is None else allowed & inside
    if right >= 0:
        inside = j - i <= right
        allowed = inside if allowed is None else allowed & inside
    if nonpad is not None:
        valid = (j < nonpad.reshape(-1, 1, 1, 1))  # (B, 1, 1, n_kv)
        allowed = valid if allowed is None else allowed & valid

    additive = None
    if attn_mask is not None:
        if attn_mask.ndim == 0 or attn_mask.shape[-1] > n_kv:
            raise KernelError(f"{node.label}: attn_mask of shape {attn_mask.shape} does not fit "
                              f"{n_q} queries x {n_kv} keys")
        pad = n_kv - attn_mask.shape[-1]
        if attn_mask.dtype == np.bool_:
            m = attn_mask
            if pad:  # a shorter mask leaves the trailing keys out
                m = np.concatenate([m, np.zeros(m.shape[:-1] + (pad,), bool)], axis=-1)
            allowed = m if allowed is None else allowed & m
        else:
            additive = attn_mask.astype(ct)
            if pad:
                additive = np.concatenate(
                    [additive, np.full(additive.shape[:-1] + (pad,), -np.inf, ct)], axis=-1)
    if allowed is None:
        return additive
    return np.where(allowed, ct.type(0) if additive is None else additive, ct.type(-np.inf))


def _attention_factory(node: Node, opset: int):
    label = node.label
    is_causal = bool(node.attr("is_causal", 0))
    q_heads = node.attr("q_num_heads")
    kv_heads = node.attr("kv_num_heads")
    mode = int(node.attr("qk_matmul_output_mode", 0))
    scale_attr = node.attr("scale")
    softcap = float(np.float32(node.attr("softcap", 0.0)))
    precision = node.attr("softmax_precision")
    window = (int(node.attr("left_window_size", -1)), int(node.attr("right_window_size", -1)))
    if mode not in (0, 1, 2, 3):
        raise KernelError(f"{label}: qk_matmul_output_mode must be 0, 1, 2 or 3, got {mode}")
    if precision is not None and int(precision) not in _SOFTMAX_PRECISIONS:
        raise KernelError(f"{label}: softmax_precision must be one of {list(_SOFTMAX_PRECISIONS)} "
                          f"(FLOAT, FLOAT16, DOUBLE, BFLOAT16), got {precision}")
    if min(window) < -1:
        raise KernelError(f"{label}: left/right_window_size must be -1 or nonnegative, got {window}")
    if opset < 25 and window != (-1, -1):
        raise KernelError(f"{label}: sliding windows need opset 25, model uses {opset}")
    sm_dtype = None if precision is None else np_dtype(int(precision))
    wanted = [bool(o) for o in node.outputs] + [False] * (4 - len(node.outputs))
    n_out = len(node.outputs)

    def kernel(q, k, v, attn_mask=None, past_key=None, past_value=None, nonpad_kv_seqlen=None):
        if not q.ndim == k.ndim == v.ndim or q.ndim not in (3, 4):
            raise KernelError(f"{label}: Q, K and V must all be 3-D or all 4-D, got shapes "
                              f"{q.shape}, {k.shape}, {v.shape}")
        if q.dtype.kind != "f" and q.dtype.name != "bfloat16":
            raise KernelError(f"{label}: Q must be a float tensor, got {q.dtype}")
        if q.ndim == 3:
            if q_heads is None or kv_heads is None:
                raise KernelError(f"{label}: 3-D inputs need q_num_heads and kv_num_heads")
            if q.shape[2] % q_heads or k.shape[2] % kv_heads or v.shape[2] % kv_heads:
                raise KernelError(f"{label}: hidden sizes {q.shape[2]}, {k.shape[2]}, {v.shape[2]} "
                                  f"are not divisible by q_num_heads={q_heads} / kv_num_heads={kv_heads}")
            q4, k4, v4 = _split_heads(q, q_heads), _split_heads(k, kv_heads), _split_heads(v, kv_heads)
        else:
            if opset >= 25 and (q_heads is not None or kv_heads is not None):
                raise KernelError(f"{label}: q_num_heads/kv_num_heads must not be set for 4-D inputs")
            q4, k4, v4 = q, k, v
        if (past_key is None) != (past_value is None):
            raise KernelError(f"{label}: past_key and past_value must be given together")
        if past_key is not None and nonpad_kv_seqlen is not None:
            raise KernelError(f"{label}: nonpad_kv_seqlen cannot be combined with past_key/past_value")
        try:
            present_k = k4 if past_key is None else np.concatenate((past_key, k4), axis=2)
            present_v = v4 if past_value is None else np.concatenate((past_value, v4), axis=2)
        except ValueError as e:
            raise KernelError(f"{label}: past key/value of shapes {past_key.shape}/{past_value.shape} "
                              f"do not extend K/V of shapes {k4.shape}/{v4.shape}: {e}") from None
        b, hq, n_q, d = q4.shape
        _, hkv, n_kv, dk = present_k.shape
        if (present_v.shape[:3] != present_k.shape[:3] or dk != d or k4.shape[0] != b
                or hkv == 0 or hq % hkv):
            raise KernelError(f"{label}: incompatible shapes Q {q4.shape}, K {present_k.shape}, "
                              f"V {present_v.shape} (head sizes must agree and q heads must be a "
                              f"multiple of kv heads)")
        dv = present_v.shape[3]
        t1 = q.dtype
        ct = _compute_dtype(t1)
        rt = _rounder(t1)

        # Q and K are each scaled by sqrt(scale) (rounded to T1) to keep the products in range.
        scale = 1.0 / math.sqrt(d) if scale_attr is None else float(scale_attr)
        s = ct.type(t1.type(np.sqrt(np.float32(scale))))
        group = hq // hkv
        qs = rt(np.multiply(q4, s, dtype=ct)).reshape(b, hkv, group * n_q, d)  # grouped per kv head
        ks = rt(np.multiply(present_k, s, dtype=ct))
        scores = rt(np.matmul(qs, ks.transpose(0, 1, 3, 2))).reshape(b, hq, n_q, n_kv)
        raw = scores.copy() if wanted[3] and mode == 0 else None
        if softcap > 0:
            scores = rt(rt(np.tanh(rt(scores / ct.type(softcap)))) * ct.type(softcap))

        offset = 0  # valid keys before the query block: the cached ones
        if past_key is not None:
            offset = past_key.shape[2]
        elif nonpad_kv_seqlen is not None:
            if nonpad_kv_seqlen.shape != (b,):
                raise KernelError(f"{label}: nonpad_kv_seqlen must have shape ({b},), got "
                                  f"{nonpad_kv_seqlen.shape}")
            offset = nonpad_kv_seqlen.astype(np.int64) - n_q
        bias = _attention_mask(node, attn_mask, n_q, n_kv, offset, is_causal, window,
                               nonpad_kv_seqlen, ct)
        if wanted[3] and mode == 1:
            raw = scores.copy()
        masked_rows = None
        if bias is not None:
            try:
                scores = rt(np.add(scores, bias, out=scores))
            except ValueError:
                raise KernelError(f"{label}: attn_mask of shape {attn_mask.shape} does not broadcast "
                                  f"to scores of shape {scores.shape}") from None
            masked_rows = np.isneginf(np.max(bias, axis=-1, keepdims=True))
            if not masked_rows.any():
                masked_rows = None
        if wanted[3] and mode == 2:
            raw = scores.copy()

        probs = _softmax(scores, t1 if sm_dtype is None else sm_dtype, overwrite=True)
        if masked_rows is not None:
            probs = np.where(masked_rows, probs.dtype.type(0), probs)
        probs = probs.astype(t1).astype(ct, copy=False)
        if wanted[3] and mode == 3:
            raw = probs
        y = np.matmul(probs.reshape(b, hkv, group * n_q, n_kv), present_v.astype(ct, copy=False))
        y = y.reshape(b, hq, n_q, dv)
        if q.ndim == 3:
            y = y.transpose(0, 2, 1, 3).reshape(b, n_q, hq * dv)
        outs = [y.astype(t1), present_k if wanted[1] else None, present_v if wanted[2] else None,
                raw.astype(t1) if wanted[3] else None]
        return tuple(outs[:n_out])

    return kernel


@register("Attention", since=23, until=24)
def attention_23_factory(node: Node, opset: int):
    return _attention_factory(node, opset)


@register("Attention", since=25, until=None)
def attention_25_factory(node: Node, opset: int):
    """Opset 25 adds sliding windows and forbids q/kv_num_heads with 4-D inputs."""
    return _attention_factory(node, opset)


# ---------------------------------------------------------------------------------------------
# FlexAttention (ai.onnx.preview)
# ---------------------------------------------------------------------------------------------



def _modifier(node: Node, name: str, outer_names: list[str], bodies):
    """run(x, outer_values) -> the modifier subgraph's one output, or None without one."""
    graph = node.attr(name)
    if not isinstance(graph, Graph):
        return None
    if len(graph.inputs) != 1 or len(graph.outputs) != 1:
        raise KernelError(f"{node.label}: {name} must have exactly one input and one output, got "
                          f"{len(graph.inputs)} and {len(graph.outputs)}")
    body = bodies(graph, node, outer_names)
    return lambda x, outer_values: body.run(body.bind(outer_values), [x])[0]


def _modified(run, x, outer_values, label, what):
    """A modifier subgraph's output, checked to keep the shape and cast to x's dtype."""
    y = np.asarray(run(x, outer_values))
    if y.shape != x.shape:
        raise KernelError(f"{label}: {what} must keep the shape {list(x.shape)}, got {list(y.shape)}")
    return y.astype(x.dtype, copy=False)


@register("FlexAttention", since=1, until=None, domain="ai.onnx.preview")
def flex_attention_factory(node: Node, opset: int, bodies):
    """Scores and probabilities are in softmax_precision (default float32, double for double
    inputs) while score_mod / prob_mod see them; a row that score_mod masks entirely (all -inf)
    yields zeros, as PyTorch's flex_attention does, rather than NaN."""
    label = node.label
    scale_attr = node.attr("scale")
    precision = node.attr("softmax_precision")
    if precision is not None and int(precision) not in _SOFTMAX_PRECISIONS:
        raise KernelError(f"{label}: softmax_precision must be one of {list(_SOFTMAX_PRECISIONS)}, "
                          f"got {precision}")
    sm_dtype = None if precision is None else np_dtype(int(precision))
    outer_names = outer_scope_names(node)
    score_mod = _modifier(node, "score_mod", outer_names, bodies)
    prob_mod = _modifier(node, "prob_mod", outer_names, bodies)

    def kernel(q, k, v, *outer_values):
        if not q.ndim == k.ndim == v.ndim == 4:
            raise KernelError(f"{label}: Q, K and V must be 4-D, got shapes {q.shape}, {k.shape}, "
                              f"{v.shape}")
        b, hq, n_q, d = q.shape
        _, hkv, n_kv, dk = k.shape
        if (v.shape[:3] != k.shape[:3] or dk != d or k.shape[0] != b or hkv == 0 or hq % hkv):
            raise KernelError(f"{label}: incompatible shapes Q {q.shape}, K {k.shape}, V {v.shape}")
        t1 = q.dtype
        ct = _compute_dtype(t1)
        rt = _rounder(t1)
        # scores live in the softmax precision: the given one, else float32 (double for double)
        sdt = sm_dtype if sm_dtype is not None else (_F64 if t1 == _F64 else _F32)
        mt = _compute_dtype(sdt)
        scale = 1.0 / math.sqrt(d) if scale_attr is None else float(scale_attr)
        s = ct.type(t1.type(np.sqrt(np.float32(scale))))
        group = hq // hkv
        qs = rt(np.multiply(q, s, dtype=ct)).reshape(b, hkv, group * n_q, d)
        ks = rt(np.multiply(k, s, dtype=ct))
        scores = rt(np.matmul(qs, ks.transpose(0, 1, 3, 2))).reshape(b, hq, n_q, n_kv).astype(sdt)
        if score_mod is not None:
            scores = _modified(score_mod, scores, outer_values, label, "score_mod")
        probs = _softmax(scores, sdt)
        if prob_mod is not None:
            probs = _modified(prob_mod, probs, outer_values, label, "prob_mod")
        y = np.matmul(probs.astype(mt, copy=False).reshape(b, hkv, group * n_q, n_kv),
                      v.astype(sdt, copy=False).astype(mt, copy=False))
        return (y.reshape(b, hq, n_q, v.shape[3]).astype(sdt, copy=False).astype(v.dtype, copy=False),)

    return kernel


# ---------------------------------------------------------------------------------------------
# LinearAttention
# ---------------------------------------------------------------------------------------------

_UPDATE_RULES = ("linear", "gated", "delta", "gated_delta")


@register("LinearAttention", since=27, until=None)
def linear_attention_factory(node: Node, opset: int):
    """Runs the recurrence one time step at a time (a loop over T, vectorized over batch and
    heads); the chunk_size attribute is a tuning hint that does not change results."""
    label = node.label
    rule = node.attr("update_rule", "gated_delta")
    q_heads, kv_heads = node.attr("q_num_heads"), node.attr("kv_num_heads")
    scale_attr = float(node.attr("scale", 0.0))
    if rule not in _UPDATE_RULES:
        raise KernelError(f"{label}: update_rule must be one of {list(_UPDATE_RULES)}, got {rule!r}")
    if q_heads is None or kv_heads is None:
        raise KernelError(f"{label}: q_num_heads and kv_num_heads are required")
    q_heads, kv_heads = int(q_heads), int(kv_heads)
    if q_heads <= 0 or kv_heads <= 0 or q_heads % kv_heads:
        raise KernelError(f"{label}: q_num_heads ({q_heads}) must be a positive multiple of "
                          f"kv_num_heads ({kv_heads})")
    gated = rule in ("gated", "gated_delta")
    delta = rule in ("delta", "gated_delta")
    group = q_heads // kv_heads

    def kernel(query, key, value, past_state=None, decay=None, beta=None):
        if gated != (decay is not None):
            raise KernelError(f"{label}: update_rule '{rule}' {'requires' if gated else 'forbids'} "
                              f"the decay input")
        if delta != (beta is not None):
            raise KernelError(f"{label}: update_rule '{rule}' {'requires' if delta else 'forbids'} "
                              f"the beta input")
        for name, x in (("query", query), ("key", key), ("value", value)):
            if x.ndim != 3:
                raise KernelError(f"{label}: {name} must be 3-D (B, T, H*D), got shape {x.shape}")
        b, t, _ = query.shape
        if (query.shape[2] % q_heads or key.shape[2] % kv_heads or value.shape[2] % kv_heads
                or key.shape[:2] != (b, t) or value.shape[:2] != (b, t)
                or key.shape[2] // kv_heads != query.shape[2] // q_heads):
            raise KernelError(f"{label}: query {query.shape}, key {key.shape}, value {value.shape} "
                              f"do not fit q_num_heads={q_heads}, kv_num_heads={kv_heads}")
        dk, dv = query.shape[2] // q_heads, value.shape[2] // kv_heads
        # (B, T, H, D) views: step t reads [:, t] as (B, H, D)
        q4 = query.reshape(b, t, kv_heads, group, dk).astype(_F32)
        k4 = key.reshape(b, t, kv_heads, dk).astype(_F32)
        v4 = value.reshape(b, t, kv_heads, dv).astype(_F32)
        if gated:
            if decay.ndim != 3 or decay.shape[:2] != (b, t) or decay.shape[2] not in (kv_heads,
                                                                                    kv_heads * dk):
                raise KernelError(f"{label}: decay must have shape ({b}, {t}, {kv_heads}) or "
                                  f"({b}, {t}, {kv_heads * dk}), got {decay.shape}")
            gate = np.exp(decay.astype(_F32)).reshape(b, t, kv_heads, -1, 1)  # scales state rows
        if delta:
            if beta.ndim != 3 or beta.shape[:2] != (b, t) or beta.shape[2] not in (kv_heads, 1):
                raise KernelError(f"{label}: beta must have shape ({b}, {t}, {kv_heads}) or "
                                  f"({b}, {t}, 1), got {beta.shape}")
            rate = beta.astype(_F32).reshape(b, t, -1, 1)
        if past_state is not None:
            if past_state.shape != (b, kv_heads, dk, dv):
                raise KernelError(f"{label}: past_state shape {past_state.shape} must be "
                                  f"({b}, {kv_heads}, {dk}, {dv})")
            state = past_state.astype(_F32)  # always a fresh copy: the loop updates it in place
            state_dtype = past_state.dtype
        else:
            state = np.zeros((b, kv_heads, dk, dv), _F32)
            state_dtype = query.dtype
        scale = np.float32(scale_attr if scale_attr != 0.0 else 1.0 / math.sqrt(dk))
        out = np.empty((b, t, kv_heads, group, dv), _F32)
        for i in range(t):
            if gated:
                state *= gate[:, i]
            k_t = k4[:, i]
            v_t = v4[:, i]
            if delta:  # v_t <- beta_t * (v_t - S^T k_t)
                v_t = rate[:, i] * (v_t - np.matmul(k_t[:, :, None, :], state)[:, :, 0, :])
            state += k_t[:, :, :, None] * v_t[:, :, None, :]
            np.matmul(q4[:, i], state, out=out[:, i])
        out *= scale
        return (out.reshape(b, t, q_heads * dv).astype(query.dtype), state.astype(state_dtype))

    return kernel
