"""CPU kernel for onnxruntime's GroupQueryAttention contrib op (domain com.microsoft), as onnxruntime's CPU computes it.

query (B, S, N*H), or Q, K and V packed as (B, S, (N + 2 KV) H) with key/value omitted; key/value (B, S, KV*H);
past_key/past_value (B, KV, P, H); seqlens_k[b] + 1 = T_b, the keys of batch entry b after this step;
total_sequence_length, the longest T (only an upper bound with query_seqlens). Query head n reads kv head
n // (N / KV). The present caches are (B, KV, max(total, P), H): the P_b rows of the past that precede this step,
then the new rows, zeros after. S == total is the first prompt: nothing comes from the past and rows past T_b are
padding; otherwise (token generation, or a chunk of a longer prompt, for any batch size) P_b = T_b - S. Key j is
open to query row s iff j < T_b, j <= P_b + s (causal=1) and j > P_b + s - local_window_size (when >= 0), as
onnxruntime's float32 path has it (its other path ends a padding row's window at T_b instead). Scores are
scale * q.k (default 1/sqrt(H)), then softcap * tanh(x / softcap) (softcap > 0), then + attention_bias
(B|1, N|1, S, total); softmax over the open keys, with exp(head_sink[n]) (exp(0) for smooth_softmax) added to
the denominator; a row with no open key is zero. output_qk (B, N, S, total) holds the scores before (qk_output=1)
or after (2) the softmax, zero where closed. do_rotary turns Q and K's first 2 * cos_cache.shape[1] channels at
positions P_b + s (first prompt: position_ids[0, 0] + s; position_ids otherwise, read as a flat (B, S) array).
key/value with no rows (shared KV) read T_b rows of the past and append nothing. query_seqlens (chunked prefill)
counts the valid rows Q_b of a right-padded chunk: P_b = T_b - Q_b, only valid rows enter the cache, padding
rows of the output are zero. sliding_window_cache keeps window-sized caches of capacity C = past length: rows
[0, L(T)) hold positions T - L(T) .. T - 1, L(T) = T if T <= C else T - G ceil((T - C) / G), G = C - W + 1.
float32 and float16 (computed in float32 on values rounded to float16 where onnxruntime stores them).
Not here: the quantized KV cache (k_quant_type / v_quant_type other than NONE) and q/k_norm_weight (which
onnxruntime's CPU refuses too); both raise KernelError.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ....errors import KernelError
from ....limits import check_tensor_size
from ..registry import register
from .contrib_rotary import FLOATS, rotate

DOMAIN = "com.microsoft"
_F32 = np.dtype(np.float32)


@dataclass(frozen=True)
class _Attrs:
    heads: int
    kv_heads: int
    scale: float  # 0: 1 / sqrt(head_size)
    softcap: float
    window: int  # < 0: none
    causal: bool
    rotary: bool
    interleaved: bool
    smooth: bool
    qk_output: int
    sliding_cache: bool


def _attributes(node) -> _Attrs:
    label = node.label

    def flag(name, default=0, allowed=(0, 1)):
        value = int(node.attr(name, default))
        if value not in allowed:
            raise KernelError(f"{label}: attribute {name} must be one of {list(allowed)}, got {value}")
        return value

    heads, kv_heads = int(node.attr("num_heads", 0)), int(node.attr("kv_num_heads", 0))
    if heads <= 0 or kv_heads <= 0 or heads % kv_heads:
        raise KernelError(f"{label}: num_heads ({heads}) must be a positive multiple of kv_num_heads ({kv_heads})")
    attrs = _Attrs(heads, kv_heads, float(np.float32(node.attr("scale", 0.0))),
                   float(np.float32(node.attr("softcap", 0.0))), int(node.attr("local_window_size", -1)),
                   bool(flag("causal", 1)), bool(flag("do_rotary")), bool(flag("rotary_interleaved")),
                   flag("smooth_softmax", -1, (-1, 0, 1)) == 1, flag("qk_output", 0, (0, 1, 2)),
                   bool(flag("sliding_window_cache")))
    if not attrs.causal and attrs.window != -1:
        raise KernelError(f"{label}: local_window_size must be -1 when causal is 0, got {attrs.window}")
    if attrs.sliding_cache and attrs.window <= 0:
        raise KernelError(f"{label}: sliding_window_cache=1 needs local_window_size > 0, got {attrs.window}")
    for name in ("k_quant_type", "v_quant_type"):
        quant = node.attr(name, "NONE")
        quant = quant.decode() if isinstance(quant, bytes) else str(quant)
        if quant != "NONE":
            raise KernelError(f"{label}: {name}={quant!r}: the quantized KV cache is not implemented in ort-core")
    if int(node.attr("kv_cache_bit_width", 0)) != 0:
        raise KernelError(f"{label}: kv_cache_bit_width must be 0 without KV cache quantization")
    return attrs


@dataclass
class _Steps:
    """Per batch entry (int64 arrays of shape (B,)): the cache rows of this step."""

    past_rows: np.ndarray  # rows taken from the front of past_key / past_value
    new_rows: np.ndarray  # rows of key / value appended after them
    keys: np.ndarray  # keys open to attention: [0, keys)
    offset: np.ndarray  # causal offset: query row s sits at key index offset + s
    first_pos: np.ndarray  # absolute position of key index 0 (attention_bias column)
    positions: np.ndarray  # absolute position of query row 0 (rotary)
    valid: np.ndarray | None  # valid query rows (query_seqlens), None: all
    capacity: int  # present_key's sequence length
    kept: np.ndarray | None  # sliding cache: rows kept in present (the most recent ones), None otherwise


def _window_rows(t: np.ndarray, capacity: int, window: int) -> np.ndarray:
    """Rows L(T) a sliding cache of ``capacity`` keeps after T tokens: whole gaps of C - W + 1 are evicted."""
    gap = capacity - window + 1
    over = np.maximum(t - capacity, 0)
    return np.where(t <= capacity, t, t - gap * (-(-over // gap)))


def _steps(label, a: _Attrs, s: int, n_kv: int, past_len: int | None, seqlens, total: int, query_seqlens) -> _Steps:
    """The cache geometry of this step, with onnxruntime's consistency checks on seqlens_k and the lengths."""
    b = seqlens.shape[0]
    t = seqlens.astype(np.int64) + 1
    has_past = past_len is not None
    past_len = past_len or 0
    if (t < 1).any():
        raise KernelError(f"{label}: seqlens_k must be >= 0, got {seqlens.tolist()}")
    if query_seqlens is not None:
        if not has_past or not a.causal or n_kv != s:
            raise KernelError(f"{label}: query_seqlens needs past_key/past_value, causal=1 and key/value rows "
                              f"for every query row")
        if query_seqlens.dtype != np.int32 or query_seqlens.shape != (b,):
            raise KernelError(f"{label}: query_seqlens must be int32 of shape ({b},), got {query_seqlens.dtype} "
                              f"{query_seqlens.shape}")
        valid = query_seqlens.astype(np.int64)
        if (valid < 0).any() or (valid > np.minimum(s, t)).any() or (t > total).any():
            raise KernelError(f"{label}: query_seqlens {valid.tolist()} must lie in [0, min(sequence_length {s}, "
                              f"seqlens_k + 1)] and seqlens_k + 1 {t.tolist()} within total_sequence_length {total}")
    else:
        valid = None
    first = valid is None and s == total
    if (not first or a.sliding_cache) and valid is None and (t < s).any():
        raise KernelError(f"{label}: seqlens_k {seqlens.tolist()} is too small for sequence_length {s}")
    count = np.full(b, s, np.int64) if valid is None else valid
    before = t - count  # tokens before this step (unless the first prompt)

    if a.sliding_cache:
        if not has_past or n_kv == 0:
            raise KernelError(f"{label}: sliding_window_cache=1 needs past_key/past_value and new key/value rows")
        if past_len < a.window:
            raise KernelError(f"{label}: the sliding cache capacity {past_len} is below local_window_size {a.window}")
        resident = _window_rows(before, past_len, a.window)
        return _Steps(resident, count, resident + count, resident, before - resident, before,
                      valid, past_len, _window_rows(t, past_len, a.window))

    capacity = max(total, past_len)
    if (t > capacity).any():
        raise KernelError(f"{label}: seqlens_k {seqlens.tolist()} out of range [0, {capacity})")
    if valid is None and total != past_len + n_kv and total > past_len:
        raise KernelError(f"{label}: total_sequence_length {total} must be past length {past_len} + kv length {n_kv} "
                          f"(growing cache) or at most the past length (fixed-size cache)")
    zeros = np.zeros(b, np.int64)
    if valid is not None:
        if (before > past_len).any() or (before + s > capacity).any():
            raise KernelError(f"{label}: with query_seqlens, cached tokens {before.tolist()} must fit past_key "
                              f"({past_len} rows) and leave room for the chunk of {s} in {capacity} rows")
        return _Steps(before, valid, t, before, zeros, before, valid, capacity, None)
    offset = zeros if first else before  # without a past only the first prompt passes the check above
    if n_kv == 0:  # shared KV: the whole sequence is in the past buffer
        return _Steps(t, zeros, t, offset, zeros, offset, None, capacity, None)
    if not first and (before > past_len).any():
        raise KernelError(f"{label}: seqlens_k {seqlens.tolist()} needs more rows than past_key's {past_len}")
    return _Steps(offset, np.full(b, n_kv, np.int64), t, offset, zeros, offset, None, capacity, None)


def _place(out: np.ndarray, src: np.ndarray, dst_start: np.ndarray, src_start: np.ndarray, count: np.ndarray) -> None:
    """out[b, :, dst_start[b] + r] = src[b, :, src_start[b] + r] for r < count[b], on (B, KV, rows, H) arrays:
    one slice copy when every batch entry moves the same rows, else one masked or fancy-indexed copy."""
    if not count.any():
        return
    if (dst_start == dst_start[0]).all() and (src_start == src_start[0]).all() and (count == count[0]).all():
        d, r, c = int(dst_start[0]), int(src_start[0]), int(count[0])
        out[:, :, d: d + c] = src[:, :, r: r + c]
    elif not dst_start.any() and not src_start.any():  # ragged prefixes: a masked copy of the longest
        c = int(count.max())
        np.copyto(out[:, :, :c], src[:, :, :c], where=(np.arange(c) < count[:, None])[:, None, :, None])
    else:
        b, r = np.nonzero(np.arange(int(count.max())) < count[:, None])
        out[b, :, dst_start[b] + r] = src[b, :, src_start[b] + r]


def _caches(label, steps: _Steps, past, new, length: int) -> np.ndarray:
    """(B, KV, length, H): past_rows rows of past, then new_rows rows of new, zeros after."""
    bsz, kv, _, head = new.shape
    check_tensor_size(label, (bsz, kv, length, head), new.dtype, "present cache")
    out = np.zeros((bsz, kv, length, head), new.dtype)
    zeros = np.zeros(bsz, np.int64)
    if past is not None:
        _place(out, past, zeros, zeros, steps.past_rows)
    _place(out, new, steps.past_rows, zeros, steps.new_rows)
    return out


def _rope_positions(label, steps: _Steps, first: bool, position_ids, b: int, s: int, max_pos: int) -> np.ndarray:
    """(B, S) rotary positions of the query rows."""
    if position_ids is not None:
        flat = position_ids.reshape(-1)
        pos = (flat[0] + np.arange(s)).reshape(1, s).repeat(b, 0) if first and flat.size else \
            flat[: b * s].reshape(b, s)
    else:
        pos = steps.positions[:, None] + np.arange(s)
    if pos.size and (pos.min() < 0 or pos.max() >= max_pos):
        raise KernelError(f"{label}: rotary positions [{pos.min()}, {pos.max()}] leave the caches' {max_pos} rows")
    return pos


def _split(label, a: _Attrs, query, key, value):
    """BNSH views (B, N, S, H), (B, KV, S_kv, H) x 2 of the (possibly packed) inputs."""
    if query.ndim != 3 or query.dtype not in FLOATS:
        raise KernelError(f"{label}: query must be 3-D float32 or float16, got {query.dtype} {query.shape}")
    b, s, width = query.shape
    if key is None and value is None:
        groups = a.heads + 2 * a.kv_heads
        if width % groups:
            raise KernelError(f"{label}: packed QKV width {width} is not a multiple of num_heads + 2 * kv_num_heads "
                              f"= {groups}")
        qkv = query.reshape(b, s, groups, width // groups).transpose(0, 2, 1, 3)
        return qkv[:, : a.heads], qkv[:, a.heads: a.heads + a.kv_heads], qkv[:, a.heads + a.kv_heads:]
    if key is None or value is None:
        raise KernelError(f"{label}: key and value must be both given or both omitted (packed QKV)")
    head = width // a.heads
    if width % a.heads or key.ndim != 3 or key.shape[0] != b or key.shape[2] != a.kv_heads * head \
            or value.shape != key.shape:
        raise KernelError(f"{label}: query {query.shape}, key {key.shape} and value {value.shape} do not fit "
                          f"num_heads={a.heads}, kv_num_heads={a.kv_heads} (B, S, heads * head_size)")
    if key.dtype != query.dtype or value.dtype != query.dtype:
        raise KernelError(f"{label}: key/value must have query's type {query.dtype}, got {key.dtype}/{value.dtype}")

    def bnsh(x, n):
        return x.reshape(b, x.shape[1], n, head).transpose(0, 2, 1, 3)

    return bnsh(query, a.heads), bnsh(key, a.kv_heads), bnsh(value, a.kv_heads)


def _check_optional(label, a: _Attrs, dtype, b, s, total, head, cos_cache, sin_cache, position_ids, attention_bias,
                    head_sink):
    if position_ids is not None and (position_ids.dtype != np.int64 or position_ids.ndim != 2
                                     or position_ids.shape[0] != b or position_ids.shape[1] < s):
        raise KernelError(f"{label}: position_ids must be int64 of shape ({b}, >= {s}), got {position_ids.dtype} "
                          f"{position_ids.shape}")
    if a.rotary:
        if cos_cache is None or sin_cache is None:
            raise KernelError(f"{label}: do_rotary=1 needs cos_cache and sin_cache")
        if cos_cache.ndim != 2 or cos_cache.shape != sin_cache.shape or cos_cache.dtype != dtype \
                or sin_cache.dtype != dtype or not 0 < cos_cache.shape[1] <= head // 2:
            raise KernelError(f"{label}: cos_cache/sin_cache must be {dtype} of one shape (max_position, <= "
                              f"head_size / 2 = {head // 2}), got {cos_cache.shape} and {sin_cache.shape}")
    elif (cos_cache is None) != (sin_cache is None):
        raise KernelError(f"{label}: cos_cache and sin_cache must be both given or both omitted")
    if attention_bias is not None:
        shape = attention_bias.shape
        if attention_bias.dtype != dtype or attention_bias.ndim != 4 or shape[0] not in (1, b) \
                or shape[1] not in (1, a.heads) or shape[2] != s or shape[3] != total:
            raise KernelError(f"{label}: attention_bias must be {dtype} of shape (1|{b}, 1|{a.heads}, {s}, {total}), "
                              f"got {attention_bias.dtype} {shape}")
    if head_sink is not None and (head_sink.shape != (a.heads,) or head_sink.dtype != dtype):
        raise KernelError(f"{label}: head_sink must be {dtype} of shape ({a.heads},), got {head_sink.dtype} "
                          f"{head_sink.shape}")


def _attend(label, a: _Attrs, q, keys, values, steps: _Steps, bias, head_sink, total: int):
    """(output (B, S, N*H) float32, output_qk (B, N, S, total) or None) of q (B, N, S, H) against keys/values
    (B, KV, K, H), all float32; grouped query heads share one batched matmul per kv head."""
    b, n, s, head = q.shape
    kv, width = keys.shape[1], keys.shape[2]
    check_tensor_size(label, (b, n, s, width), _F32, "attention scores")
    q = q * np.float32(a.scale or 1.0 / math.sqrt(head))  # on q: cheaper than on the scores when width > head
    scores = np.matmul(q.reshape(b, kv, n // kv * s, head), keys.transpose(0, 1, 3, 2)).reshape(b, n, s, width)
    j = np.arange(width)
    row = steps.offset[:, None, None, None] + np.arange(s)[:, None]  # key index of each query row, (B, 1, S, 1)
    open_ = j < steps.keys[:, None, None, None]
    if a.causal:
        open_ = open_ & (j <= row)
    if a.window >= 0:
        open_ = open_ & (j > row - a.window)
    if a.softcap > 0:
        scores /= np.float32(a.softcap)
        np.tanh(scores, out=scores)
        scores *= np.float32(a.softcap)
    if bias is not None:
        last = int((steps.first_pos + steps.keys).max(initial=0))
        if last > bias.shape[3]:
            raise KernelError(f"{label}: keys up to position {last - 1} pass attention_bias's {bias.shape[3]} columns")
        cols = np.minimum(steps.first_pos[:, None] + j, bias.shape[3] - 1)
        scores += np.take_along_axis(bias.astype(_F32, copy=False), cols[:, None, None, :], axis=3)
    qk = None
    if a.qk_output == 1:
        qk = np.where(open_, scores, np.float32(0))
    np.copyto(scores, np.float32(-np.inf), where=~open_)
    top = np.max(scores, axis=-1, keepdims=True) if width else np.zeros((b, n, s, 1), _F32)
    sink = None
    if head_sink is not None or a.smooth:
        sink = np.zeros((1, n, 1, 1), _F32) if head_sink is None else head_sink.astype(_F32).reshape(1, n, 1, 1)
        top = np.maximum(top, sink)
    top[np.isneginf(top)] = 0  # a row with no open key: all exp() are 0
    scores -= top
    np.exp(scores, out=scores)
    total_exp = np.sum(scores, axis=-1, keepdims=True)
    if sink is not None:
        total_exp += np.exp(sink - top) * (total_exp > 0)
    total_exp[total_exp == 0] = 1
    scores /= total_exp
    if a.qk_output == 2:
        qk = scores
    out = np.matmul(scores.reshape(b, kv, n // kv * s, width), values).reshape(b, n, s, head)
    out = out.transpose(0, 2, 1, 3).reshape(b, s, n * head)
    if steps.valid is not None:
        out[np.arange(s) >= steps.valid[:, None]] = 0  # padding rows of a chunk
    if qk is not None:
        full = np.zeros((b, n, s, total), _F32)
        cut = min(total, width)
        full[..., :cut] = qk[..., :cut]
        qk = full
    return out, qk


@register("GroupQueryAttention", since=1, domain=DOMAIN)
def group_query_attention_factory(node, opset):
    label = node.label
    a = _attributes(node)
    outputs = list(node.outputs) + [""] * (4 - len(node.outputs))
    wanted = [bool(o) for o in outputs]
    if a.qk_output and not wanted[3]:
        raise KernelError(f"{label}: qk_output={a.qk_output} needs the output_qk output")
    if a.qk_output and a.sliding_cache:
        raise KernelError(f"{label}: qk_output is not implemented with sliding_window_cache=1 (as in onnxruntime)")
    n_out = len(node.outputs)

    def kernel(query, key=None, value=None, past_key=None, past_value=None, seqlens_k=None,
               total_sequence_length=None, cos_cache=None, sin_cache=None, position_ids=None, attention_bias=None,
               head_sink=None, k_scale=None, v_scale=None, q_norm_weight=None, k_norm_weight=None,
               query_seqlens=None):
        if q_norm_weight is not None or k_norm_weight is not None:
            raise KernelError(f"{label}: q_norm_weight / k_norm_weight are not supported (nor by onnxruntime's CPU)")
        q4, k4, v4 = _split(label, a, query, key, value)
        b, _, s, head = q4.shape
        dtype = query.dtype
        if seqlens_k is None or total_sequence_length is None:
            raise KernelError(f"{label}: seqlens_k and total_sequence_length are required")
        if seqlens_k.dtype != np.int32 or seqlens_k.size != b or seqlens_k.ndim == 0:
            raise KernelError(f"{label}: seqlens_k must be int32 with {b} elements, got {seqlens_k.dtype} "
                              f"{seqlens_k.shape}")
        if total_sequence_length.dtype != np.int32 or total_sequence_length.size != 1:
            raise KernelError(f"{label}: total_sequence_length must be one int32, got "
                              f"{total_sequence_length.dtype} {total_sequence_length.shape}")
        total = int(total_sequence_length.reshape(-1)[0])
        if total <= 0:
            raise KernelError(f"{label}: total_sequence_length must be positive, got {total}")
        if (past_key is None) != (past_value is None):
            raise KernelError(f"{label}: past_key and past_value must be both given or both omitted")
        if past_key is not None:
            if past_key.dtype != dtype or past_value.dtype != dtype:
                raise KernelError(f"{label}: past_key/past_value must have query's type {dtype} (quantized caches are "
                                  f"not implemented), got {past_key.dtype}/{past_value.dtype}")
            if past_key.ndim != 4 or past_key.shape[:2] != (b, a.kv_heads) or past_key.shape[3] != head \
                    or past_value.shape != past_key.shape:
                raise KernelError(f"{label}: past_key/past_value must be ({b}, {a.kv_heads}, past, {head}), got "
                                  f"{past_key.shape}/{past_value.shape}")
        if wanted[3]:
            check_tensor_size(label, (b, a.heads, s, total), dtype, "output_qk")
        n_kv = k4.shape[2]
        if n_kv not in (s, 0) or (n_kv == 0 and past_key is None):
            raise KernelError(f"{label}: key/value must have the query's {s} rows (or none, with a past), got {n_kv}")
        _check_optional(label, a, dtype, b, s, total, head, cos_cache, sin_cache, position_ids, attention_bias,
                        head_sink)
        steps = _steps(label, a, s, n_kv, None if past_key is None else past_key.shape[2],
                       seqlens_k.reshape(-1), total, query_seqlens)

        if a.rotary:
            first = query_seqlens is None and s == total
            pos = _rope_positions(label, steps, first, position_ids, b, s, cos_cache.shape[0])
            cos, sin = cos_cache[pos][:, None], sin_cache[pos][:, None]  # (B, 1, S, half): shared by all heads
            q4 = rotate(q4, cos, sin, a.interleaved)
            if n_kv:
                k4 = rotate(k4, cos, sin, a.interleaved)

        if a.sliding_cache:
            length = int((steps.past_rows + steps.new_rows).max(initial=0))
            window = _caches(label, steps, past_key, k4, length), _caches(label, steps, past_value, v4, length)
            present = []
            for rows in window:  # the most recent kept rows, moved to the front
                present.append(np.zeros(rows.shape[:2] + (steps.capacity, head), dtype))
                _place(present[-1], rows, np.zeros(b, np.int64), steps.keys - steps.kept, steps.kept)
        else:
            window = present = [_caches(label, steps, past_key, k4, steps.capacity),
                                _caches(label, steps, past_value, v4, steps.capacity)]
        width = int(steps.keys.max(initial=0))
        keys, values = (c[:, :, :width].astype(_F32, copy=False) for c in window)
        out, qk = _attend(label, a, q4.astype(_F32), keys, values, steps, attention_bias, head_sink, total)
        if wanted[3] and qk is None:
            qk = np.zeros((b, a.heads, s, total), _F32)
        results = [out.astype(dtype, copy=False), present[0] if wanted[1] else None,
                   present[1] if wanted[2] else None, qk.astype(dtype, copy=False) if wanted[3] else None]
        return tuple(results[:n_out])

    return kernel
