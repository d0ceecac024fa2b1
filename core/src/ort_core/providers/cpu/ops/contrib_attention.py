"""CPU kernels for onnxruntime's com.microsoft attention contrib ops ``Attention`` and ``MultiHeadAttention``,
with the semantics of onnxruntime's CPU kernels (checked against onnxruntime 1.32). QAttention, the quantized
Attention, is in contrib_qattention.py and shares the helpers here.

Both compute, per head, softmax(scale * q k^T + attention_bias + mask) v and merge the heads back into
(B, S, N * H_v). ``scale`` defaults to 1/sqrt(H) (0 also means the default). The mask is additive and built the
way onnxruntime builds it: a masked-out key gets ``mask_filter_value`` (default -10000, not -inf, so a row whose
keys are all masked is a plain softmax of its scores), and with ``unidirectional`` a query at position i (after
P cached positions) sees keys j <= P + i only, the later ones set to float32's lowest value (when S > 1; as in
onnxruntime, the last query is left unmasked, which shows when there are more new keys than queries). Key
masks (int32) come as 1-D key lengths (B) (or the first B entries of a (3B + 2) vector), 1-D (2B) end positions
then start positions (Attention only), 2-D (B, T) or 3-D (B, S, T) with 0 = masked; Attention also ignores a
(B or 1, 1) mask. attention_bias is 4-D (B or 1, N or 1, S, T). float32 and float16 (computed in float32 as
onnxruntime does, rounded at the end); bfloat16 is refused like onnxruntime's CPU provider refuses it.

Attention(input (B, S, C), weights (C, D + D + D_v), bias?, mask_index?, past?, attention_bias?,
past_sequence_length?) -> (output (B, S, D_v), present?): one GEMM projects Q, K and V (``qkv_hidden_sizes``
gives D, D, D_v, else the weights' width splits in three); past (2, B, N, P, H) is prepended to K and V and
present (2, B, N, P + S, H) returned. Refused as onnxruntime's CPU kernel refuses them: do_rotary=1,
past_present_share_buffer=1 with a past, 4-D (Megatron) masks, past together with attention_bias.

MultiHeadAttention(query, key?, value?, bias?, key_padding_mask?, attention_bias?, past_key?, past_value?,
past_sequence_length?, cache_indirection?) -> (output, present_key?, present_value?, qk?): query (B, S, D) with
key/value (B, L, D)/(B, L, D_v) (bias (D + D + D_v) added to each), or key/value already (B, N, L, H) (bias
then applies to the query only), or packed KV key (B, L, N, 2, H), or packed QKV query (B, S, N, 3, H). The
two packed layouts are refused by onnxruntime's CPU kernel (its CUDA kernel takes them); here they are unpacked
and run. past_key/past_value (B, N, P, H) are prepended and present_key/present_value returned (both outputs are
required with a past: onnxruntime's CPU kernel drops the past without them, a silent wrong answer); with
past_sequence_length the past tensors are instead a (B, N, M, H) buffer whose first P entries are valid: the new
keys go to P..P+L of a copy and present keeps the buffer's shape (M). In that mode with S == 1 and a
cache_indirection (batch, beams, M), past position t of beam row b is read from the beam that the indirection
names within b's batch (beam search); elsewhere cache_indirection is checked and ignored, as onnxruntime does.
qk is the scaled, biased and masked q k^T before the softmax, (B, N, S, T).
"""

from __future__ import annotations

import math

import numpy as np

from ....errors import KernelError
from ....ir.graph import Node
from ..blocks import spans
from ..registry import register
from .activation import softmax_last_axis, softmax_rows_inplace

DOMAIN = "com.microsoft"
_F32 = np.dtype(np.float32)
_FLOATS = (_F32, np.dtype(np.float16))
_LOWEST = np.finfo(np.float32).min  # onnxruntime's value for causally hidden keys


class HeadAttrs:
    """The attributes every attention contrib op shares, read once in the factory."""

    def __init__(self, node: Node):
        self.label = node.label
        heads = node.attr("num_heads")
        if heads is None or int(heads) <= 0:
            raise KernelError(f"{self.label}: attribute num_heads must be a positive integer, got {heads}")
        self.heads = int(heads)
        self.scale = float(np.float32(node.attr("scale", 0.0)))
        self.filter_value = np.float32(node.attr("mask_filter_value", -10000.0))
        self.causal = int(node.attr("unidirectional", 0)) == 1

    def scale_for(self, head_size: int) -> np.float32:
        return np.float32(self.scale if self.scale != 0.0 else 1.0 / math.sqrt(head_size))


def check_float(label: str, name: str, x: np.ndarray, dtype=None) -> None:
    """x must be float32 or float16 (and of ``dtype`` when given)."""
    if x.dtype not in _FLOATS:
        raise KernelError(f"{label}: input '{name}' must be float32 or float16 (onnxruntime's CPU kernels), "
                          f"got {x.dtype}")
    if dtype is not None and x.dtype != dtype:
        raise KernelError(f"{label}: input '{name}' has type {x.dtype}, expected {dtype}")


def mask_bias(attrs: HeadAttrs, mask, batch: int, q_len: int, past_len: int, total: int,
              two_b: bool = False, dummy: bool = False):
    """The additive float32 mask, (B or 1, 1, S or 1, T), from a key mask in one of onnxruntime's formats merged
    with the causal frontier; None when nothing is masked. ``two_b`` accepts 1-D (2B) end/start positions and
    ``dummy`` a (B or 1, 1) mask that masks nothing (Attention's formats)."""
    label = attrs.label
    padded = None  # bool, (B, 1 or S, T)
    if mask is not None:
        if mask.dtype != np.int32:
            raise KernelError(f"{label}: the mask must be int32, got {mask.dtype}")
        keys = np.arange(total)
        if mask.ndim == 1 and (mask.shape[0] in (batch, 3 * batch + 2) or (two_b and mask.shape[0] == 2 * batch)):
            padded = keys >= mask[:batch, None]  # right padding: key lengths (end positions)
            if mask.shape[0] == 2 * batch:  # then start positions: left padding
                padded |= keys < np.minimum(mask[batch:, None], total)
            padded = padded[:, None, :]
        elif mask.shape in ((batch, total), (batch, q_len, total)):
            padded = mask <= 0
            if mask.ndim == 2:
                padded = padded[:, None, :]
        elif not (dummy and mask.ndim == 2 and mask.shape[1] == 1 and mask.shape[0] in (1, batch)):
            formats = "(B), (3B+2), " + ("(2B), " if two_b else "") + "(B, T) or (B, S, T)"
            raise KernelError(f"{label}: mask of shape {mask.shape} is none of {formats} with B={batch}, "
                              f"S={q_len}, T={total}" + (" (4-D masks are not supported by onnxruntime's CPU "
                                                         "kernel)" if mask.ndim == 4 else ""))
    bias = None if padded is None else np.where(padded, attrs.filter_value, np.float32(0))
    if attrs.causal and q_len > 1:
        future = np.arange(total) > np.arange(past_len, past_len + q_len)[:, None]  # (S, T)
        future[-1] = False  # onnxruntime leaves the last query unmasked (it matters when L > S)
        bias = np.where(future, _LOWEST, np.float32(0) if bias is None else bias)
    if bias is None:
        return None
    return bias.reshape((bias.shape[0] if bias.ndim == 3 else 1, 1) + bias.shape[-2:])


def check_attention_bias(label: str, ab, batch: int, heads: int, q_len: int, total: int, dtype) -> None:
    if ab is None:
        return
    if ab.ndim != 4 or ab.shape[0] not in (1, batch) or ab.shape[1] not in (1, heads) or ab.shape[2:] != (q_len, total):
        raise KernelError(f"{label}: attention_bias must have shape (B or 1, N or 1, S, T) = ({batch} or 1, "
                          f"{heads} or 1, {q_len}, {total}), got {ab.shape}")
    check_float(label, "attention_bias", ab, dtype)


def split_heads(x: np.ndarray, heads: int) -> np.ndarray:
    """(B, S, N*H) -> (B, N, S, H) view."""
    b, s, d = x.shape
    return x.reshape(b, s, heads, d // heads).transpose(0, 2, 1, 3)


_ATTEND_BLOCK = 1 << 20  # scores of one (batch, head, query rows) block (4 MiB of scratch): Whisper-tiny's
# attention took 27.6 / 22.8 / 19.2 / 16.4 ms at 2**16 / 2**17 / 2**18 / 2**20 (BLAS runs larger blocks
# faster; a whole head, 2**22, 16.0)
_MIN_ROW_SUM = float(np.exp(-60.0))  # a row sum below this after the block's shift: shift by row maxima


def attend(q, k, v, scale, bias=None, attention_bias=None, want_qk=False):
    """Scaled dot-product attention of float32 (B, N, S, H) q over (B, N, T, H) k and (B, N, T, H_v) v (views
    are fine): ((B, S, N * H_v) output, the pre-softmax scores if ``want_qk`` else None). The scale goes on q
    (cheaper than on the scores); BLAS gets the strided head views as they are. Large attention (Whisper's
    1500 frames) runs by blocks of query rows per head (_attend_blocks)."""
    b, n, s, _ = q.shape
    t, hv = k.shape[2], v.shape[3]
    out = np.empty((b, s, n, hv), _F32)
    if want_qk or b * n * s * t < 2 * _ATTEND_BLOCK:
        scores = np.matmul(np.multiply(q, scale), k.swapaxes(2, 3))
        if attention_bias is not None:
            scores += attention_bias
        if bias is not None:
            scores += bias
        qk = scores.copy() if want_qk else None
        np.matmul(softmax_last_axis(scores), v, out=out.transpose(0, 2, 1, 3))
        return out.reshape(b, s, n * hv), qk
    _attend_blocks(q, k, v, scale, [e for e in (attention_bias, bias) if e is not None], out.transpose(0, 2, 1, 3))
    return out.reshape(b, s, n * hv), None


def _attend_blocks(q, k, v, scale, extras: list, out) -> None:
    """Attention into ``out`` (B, N, S, H_v) by blocks of query rows per head: each block's scores (about
    _ATTEND_BLOCK of them, in scratch made once) go through exp and the product with v, and are normalized
    after that product (S x H_v values, not S x T; row sums as one BLAS product). ``extras``: additive
    (B|1, N|1, S|1, T) biases. The exps are shifted by the block's maximum, or by row maxima when some row would
    vanish."""
    t = k.shape[2]
    rows = max(1, _ATTEND_BLOCK // t)
    ones, floor = np.ones(t, _F32), np.float32(_MIN_ROW_SUM)
    scores_buf, q_buf = np.empty((rows, t), _F32), np.empty((rows, q.shape[3]), _F32)

    def block_scores(i: int, h: int, start: int, stop: int) -> np.ndarray:
        qs = np.multiply(q[i, h, start:stop], scale, out=q_buf[:stop - start])
        scores = np.matmul(qs, k[i, h].T, out=scores_buf[:stop - start])
        for extra in extras:
            picked = slice(start, stop) if extra.shape[2] > 1 else slice(None)
            scores += extra[min(i, extra.shape[0] - 1), min(h, extra.shape[1] - 1), picked]
        return scores

    for i in range(q.shape[0]):
        for h in range(q.shape[1]):
            for start, stop in spans(q.shape[2], rows):
                scores, o = block_scores(i, h, start, stop), out[i, h, start:stop]
                top = np.max(scores)
                if np.isfinite(top):
                    np.subtract(scores, top, out=scores)
                    np.exp(scores, out=scores)
                    total = np.matmul(scores, ones)  # row sums as one BLAS call (numpy's are 4x slower)
                    if np.min(total) >= floor:
                        np.matmul(scores, v[i, h], out=o)
                        o /= total[:, None]
                        continue
                    scores = block_scores(i, h, start, stop)
                np.matmul(softmax_rows_inplace(scores), v[i, h], out=o)


def concat_past(label: str, past_k, past_v, k, v, names=("past_key", "past_value")) -> tuple:
    """past (B, N, P, H) before the new (B, N, L, H) keys and values: two new float32 arrays."""
    b, n, _, h = k.shape
    hv = v.shape[3]
    if past_k.shape[:2] != (b, n) or past_k.ndim != 4 or past_k.shape[3] != h:
        raise KernelError(f"{label}: {names[0]} must have shape ({b}, {n}, P, {h}), got {past_k.shape}")
    if past_v.shape != past_k.shape[:3] + (hv,):
        raise KernelError(f"{label}: {names[1]} must have shape {past_k.shape[:3] + (hv,)}, got {past_v.shape}")
    return np.concatenate((past_k, k), axis=2, dtype=_F32), np.concatenate((past_v, v), axis=2, dtype=_F32)


# ---------------------------------------------------------------------------------------------
# Attention
# ---------------------------------------------------------------------------------------------

def attention_options(node: Node, past_index: int) -> tuple:
    """(attrs, wants present) for Attention-like nodes, refusing what onnxruntime's CPU kernels refuse."""
    attrs = HeadAttrs(node)
    label = node.label
    if int(node.attr("do_rotary", 0)) != 0 and node.op_type == "Attention":
        raise KernelError(f"{label}: do_rotary=1 is not supported (onnxruntime's CPU Attention kernel does not "
                          f"implement rotary embedding either)")
    has_past = len(node.inputs) > past_index and bool(node.inputs[past_index])
    if int(node.attr("past_present_share_buffer", 0)) != 0 and has_past:
        raise KernelError(f"{label}: past_present_share_buffer=1 with a past input is not supported (onnxruntime's "
                          f"CPU kernel does not pass past_sequence_length to it)")
    return attrs, len(node.outputs) > 1 and bool(node.outputs[1])


def attention_core(attrs: HeadAttrs, qkv: np.ndarray, sizes: tuple, batch: int, seq: int, mask, past,
                   attention_bias, want_present: bool, dtype) -> tuple:
    """Attention after the projection: qkv (B*S, D + D + D_v) float32 -> (output, present or None) in dtype."""
    label, heads = attrs.label, attrs.heads
    dq, dk, dv = sizes
    q = split_heads(qkv[:, :dq].reshape(batch, seq, dq), heads)
    k = split_heads(qkv[:, dq:dq + dk].reshape(batch, seq, dk), heads)
    v = split_heads(qkv[:, dq + dk:].reshape(batch, seq, dv), heads)
    present = None
    past_len = 0
    if past is not None or want_present:
        if dk != dv:
            raise KernelError(f"{label}: past/present need equal K and V hidden sizes, got {dk} and {dv}")
        if past is not None:
            check_float(label, "past", past, dtype)
            if past.ndim != 5 or past.shape[:3] != (2, batch, heads) or past.shape[4] != dk // heads:
                raise KernelError(f"{label}: past must have shape (2, {batch}, {heads}, P, {dk // heads}), "
                                  f"got {past.shape}")
            if not want_present:
                raise KernelError(f"{label}: a past input needs the present output")
            if attention_bias is not None:
                raise KernelError(f"{label}: past and attention_bias cannot be used together (onnxruntime)")
            past_len = past.shape[3]
        present = np.empty((2, batch, heads, past_len + seq, dk // heads), _F32)
        if past_len:
            present[:, :, :, :past_len] = past
        present[0, :, :, past_len:] = k
        present[1, :, :, past_len:] = v
        k, v = present[0], present[1]
    total = past_len + seq
    bias = mask_bias(attrs, mask, batch, seq, past_len, total, two_b=True, dummy=True)
    check_attention_bias(label, attention_bias, batch, heads, seq, total, dtype)
    out, _ = attend(q, k, v, attrs.scale_for(dq // heads), bias, attention_bias)
    return out.astype(dtype, copy=False), None if present is None else present.astype(dtype, copy=False)


def _qkv_sizes(node: Node, heads: int):
    sizes = node.attr("qkv_hidden_sizes")
    if sizes is None:
        return None
    sizes = tuple(int(s) for s in sizes)
    if len(sizes) != 3 or min(sizes) <= 0 or any(s % heads for s in sizes) or sizes[0] != sizes[1]:
        raise KernelError(f"{node.label}: qkv_hidden_sizes must be 3 positive multiples of num_heads={heads} with "
                          f"equal Q and K sizes, got {list(sizes)}")
    return sizes


@register("Attention", since=1, domain=DOMAIN)
def attention_factory(node: Node, opset: int):
    attrs, want_present = attention_options(node, past_index=4)
    label, heads = attrs.label, attrs.heads
    fixed_sizes = _qkv_sizes(node, heads)
    n_out = len(node.outputs)

    def kernel(x, weights, bias=None, mask_index=None, past=None, attention_bias=None, past_sequence_length=None):
        check_float(label, "input", x)
        check_float(label, "weights", weights, x.dtype)
        if x.ndim != 3 or weights.ndim != 2 or weights.shape[0] != x.shape[2]:
            raise KernelError(f"{label}: expected input (B, S, C) and weights (C, D + D + D_v), got {x.shape} "
                              f"and {weights.shape}")
        width = weights.shape[1]
        sizes = fixed_sizes or (width // 3,) * 3
        if sum(sizes) != width or not sizes[0] or sizes[0] % heads:
            wanted = f"qkv_hidden_sizes {list(fixed_sizes)}" if fixed_sizes else \
                f"three equal multiples of num_heads={heads}"
            raise KernelError(f"{label}: the weights' width {width} does not split into Q, K, V hidden sizes: "
                              f"{wanted}")
        if bias is not None:
            check_float(label, "bias", bias, x.dtype)
            if bias.shape != (width,):
                raise KernelError(f"{label}: bias must have shape ({width},), got {bias.shape}")
        batch, seq, width_in = x.shape
        qkv = np.matmul(x.reshape(batch * seq, width_in).astype(_F32, copy=False), weights.astype(_F32, copy=False))
        if bias is not None:
            qkv += bias
        out, present = attention_core(attrs, qkv, sizes, batch, seq, mask_index, past, attention_bias,
                                      want_present, x.dtype)
        return (out, present)[:n_out]

    return kernel


# ---------------------------------------------------------------------------------------------
# MultiHeadAttention
# ---------------------------------------------------------------------------------------------

def _mha_qkv(label: str, heads: int, query, key, value, bias):
    """query, key, value in one of the layouts -> float32 (B, N, S, H) q, (B, N, L, H) k, (B, N, L, H_v) v."""
    if query.ndim == 5:  # packed QKV (B, S, N, 3, H)
        if key is not None or value is not None or query.shape[2:4] != (heads, 3):
            raise KernelError(f"{label}: a 5-D query is packed QKV (B, S, {heads}, 3, H) without key and value, "
                              f"got query {query.shape}")
        qkv = query.astype(_F32).transpose(3, 0, 2, 1, 4)  # (3, B, N, S, H), a new array: bias may go in place
        if bias is not None:
            if bias.shape != (3 * heads * query.shape[4],):
                raise KernelError(f"{label}: bias must have shape ({3 * heads * query.shape[4]},), got {bias.shape}")
            qkv += bias.reshape(3, 1, heads, 1, -1)
        return qkv[0], qkv[1], qkv[2]
    if query.ndim != 3:
        raise KernelError(f"{label}: query must be 3-D (B, S, D) or packed QKV (B, S, N, 3, H), got {query.shape}")
    batch, _, hidden = query.shape
    if hidden % heads:
        raise KernelError(f"{label}: query hidden size {hidden} is not a multiple of num_heads={heads}")
    size = hidden // heads
    if key is None:
        raise KernelError(f"{label}: a 3-D query needs key and value (packed QKV of shape (B, S, 3D) is not "
                          f"supported by MultiHeadAttention)")
    if key.ndim == 5:  # packed KV (B, L, N, 2, H)
        if value is not None or key.shape[0] != batch or key.shape[2:] != (heads, 2, size):
            raise KernelError(f"{label}: a 5-D key is packed KV ({batch}, L, {heads}, 2, {size}) without value, "
                              f"got key {key.shape}")
        if bias is not None:
            raise KernelError(f"{label}: bias is not allowed with packed KV")
        kv = key.transpose(3, 0, 2, 1, 4)
        k, v = kv[0], kv[1]
        bias_q = None
    elif value is None:
        raise KernelError(f"{label}: key of shape {key.shape} needs a value input")
    elif key.ndim == 4:  # already (B, N, L, H): bias goes to the query only
        if key.shape[:2] != (batch, heads) or key.shape[3] != size or value.ndim != 4 or \
                value.shape[:3] != key.shape[:3]:
            raise KernelError(f"{label}: 4-D key and value must be ({batch}, {heads}, L, {size}) and "
                              f"({batch}, {heads}, L, H_v), got {key.shape} and {value.shape}")
        k, v = key, value
        bias_q = bias
        if bias is not None and bias.shape != (2 * hidden + heads * value.shape[3],):
            raise KernelError(f"{label}: bias must have shape ({2 * hidden + heads * value.shape[3]},), got "
                              f"{bias.shape}")
    elif key.ndim == 3:
        if key.shape[0] != batch or key.shape[2] != hidden or value.ndim != 3 or value.shape[:2] != key.shape[:2] \
                or value.shape[2] % heads:
            raise KernelError(f"{label}: key and value must be ({batch}, L, {hidden}) and ({batch}, L, D_v) with D_v "
                              f"a multiple of num_heads={heads}, got {key.shape} and {value.shape}")
        if bias is not None:
            if bias.shape != (2 * hidden + value.shape[2],):
                raise KernelError(f"{label}: bias must have shape ({2 * hidden + value.shape[2]},), got {bias.shape}")
            key = np.add(key, bias[hidden:2 * hidden], dtype=_F32)
            value = np.add(value, bias[2 * hidden:], dtype=_F32)
        k, v = split_heads(key, heads), split_heads(value, heads)
        bias_q = bias
    else:
        raise KernelError(f"{label}: key must be 3-D (B, L, D), 4-D (B, N, L, H) or packed KV (B, L, N, 2, H), "
                          f"got {key.shape}")
    q = np.add(query, bias_q[:hidden], dtype=_F32) if bias_q is not None else query
    return split_heads(q, heads), k, v


def _gather_beams(label: str, past, ci, past_len: int):
    """The first past_len positions of a (B, N, M, H) buffer, position t of row b taken from the beam that
    cache_indirection (batch, beams, M) names within b's batch: (B, N, past_len, H)."""
    rows = past.shape[0]
    beams = ci.shape[1]
    picked = ci.reshape(rows, -1)[:, :past_len]
    if picked.size and (picked.min() < 0 or picked.max() >= beams):
        raise KernelError(f"{label}: cache_indirection holds beam indices outside 0..{beams - 1}")
    src = (np.arange(rows) // beams * beams)[:, None] + picked  # (B, P): the rows to read
    return past[src, :, np.arange(past_len)].transpose(0, 2, 1, 3)


@register("MultiHeadAttention", since=1, domain=DOMAIN)
def multi_head_attention_factory(node: Node, opset: int):
    attrs = HeadAttrs(node)
    label, heads = attrs.label, attrs.heads
    wanted = [len(node.outputs) > i and bool(node.outputs[i]) for i in range(4)]
    n_out = len(node.outputs)
    if any(len(node.inputs) > i and node.inputs[i] for i in (6, 7)) and not (wanted[1] and wanted[2]):
        raise KernelError(f"{label}: past_key/past_value need both present_key and present_value outputs "
                          f"(onnxruntime's CPU kernel silently drops the past without them)")

    def kernel(query, key=None, value=None, bias=None, key_padding_mask=None, attention_bias=None, past_key=None,
               past_value=None, past_sequence_length=None, cache_indirection=None):
        check_float(label, "query", query)
        for name, x in (("key", key), ("value", value), ("bias", bias), ("past_key", past_key),
                        ("past_value", past_value)):
            if x is not None:
                check_float(label, name, x, query.dtype)
        dtype = query.dtype
        q, k, v = _mha_qkv(label, heads, query, key, value, bias)
        batch, _, q_len, size = q.shape
        kv_len = k.shape[2]
        if cache_indirection is not None:
            ci = cache_indirection
            if ci.dtype != np.int32 or ci.ndim != 3 or ci.shape[0] * ci.shape[1] != batch:
                raise KernelError(f"{label}: cache_indirection must be int32 (batch, beams, max_sequence_length) "
                                  f"with batch * beams = {batch}, got {ci.dtype} {ci.shape}")
        if (past_key is None) != (past_value is None):
            raise KernelError(f"{label}: past_key and past_value must be given together")
        past_len = 0
        if past_key is None:
            present_k, present_v = k, v
        elif past_sequence_length is None:
            present_k, present_v = concat_past(label, past_key, past_value, k, v)
            past_len = past_key.shape[2]
            k, v = present_k, present_v
        else:  # shared buffer: past is (B, N, M, H) of which the first past_sequence_length entries are valid
            psl = past_sequence_length
            if psl.size != 1 or psl.dtype != np.int32:
                raise KernelError(f"{label}: past_sequence_length must be one int32 value, got {psl.dtype} "
                                  f"{psl.shape}")
            past_len = int(psl.reshape(()))
            present_k, present_v = concat_past(label, past_key, past_value, k[:, :, :0], v[:, :, :0])  # copies
            longest = past_key.shape[2]
            if past_len < 0 or past_len + kv_len > longest:
                raise KernelError(f"{label}: past_sequence_length ({past_len}) plus kv_sequence_length ({kv_len}) "
                                  f"must lie within 0..max_sequence_length ({longest})")
            present_k[:, :, past_len:past_len + kv_len] = k
            present_v[:, :, past_len:past_len + kv_len] = v
            k, v = present_k[:, :, :past_len + kv_len], present_v[:, :, :past_len + kv_len]
            if cache_indirection is not None and q_len == 1:
                if kv_len != 1 or cache_indirection.shape[2] != longest:
                    raise KernelError(f"{label}: cache_indirection needs one new key and a last dimension of "
                                      f"max_sequence_length {longest}; got {kv_len} keys and shape "
                                      f"{cache_indirection.shape}")
                k = np.concatenate((_gather_beams(label, past_key, cache_indirection, past_len), k[:, :, -1:]), 2)
                v = np.concatenate((_gather_beams(label, past_value, cache_indirection, past_len), v[:, :, -1:]), 2)
        total = past_len + kv_len
        bias_mask = mask_bias(attrs, key_padding_mask, batch, q_len, past_len, total)
        check_attention_bias(label, attention_bias, batch, heads, q_len, total, dtype)
        out, qk = attend(q, k, v, attrs.scale_for(size), bias_mask, attention_bias, wanted[3])
        fresh = past_key is not None  # else the presents are views of the inputs (or of their biased copies)
        outs = (out.astype(dtype, copy=False),
                present_k.astype(dtype, copy=not fresh) if wanted[1] else None,
                present_v.astype(dtype, copy=not fresh) if wanted[2] else None,
                qk.astype(dtype, copy=False) if wanted[3] else None)
        return outs[:n_out]

    return kernel
