"""com.microsoft GroupQueryAttention against onnxruntime's CPU kernel: prompt, padded batches, token generation,
static and windowed caches, chunked prefill, rotary embedding, every attribute and optional input/output."""

from __future__ import annotations

import numpy as np
import pytest

from ort_core.errors import KernelError

from .kernel_harness import check_onnxruntime, run_onnxruntime, run_ours

RNG = np.random.default_rng(23)
OP, DOMAIN = "GroupQueryAttention", "com.microsoft"
N, KV, H = 4, 2, 16  # two query heads per kv head


def rnd(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def inputs(b, s, seqlens, total, past=None, kv_rows=None, packed=False, head=H, tail=(), dtype=np.float32):
    """query, key, value, past_key, past_value, seqlens_k, total_sequence_length, then ``tail``; float32
    tensors cast to ``dtype``."""
    rows = s if kv_rows is None else kv_rows
    q, k, v = rnd(b, s, N * head), rnd(b, rows, KV * head), rnd(b, rows, KV * head)
    qkv = [np.concatenate([q, k, v], -1), None, None] if packed else [q, k, v]
    caches = [rnd(b, KV, past, head), rnd(b, KV, past, head)] if past is not None else [None, None]
    ins = qkv + caches + [np.array(seqlens, np.int32), np.array(total, np.int32)] + list(tail)
    return [x.astype(dtype) if isinstance(x, np.ndarray) and x.dtype == np.float32 else x for x in ins]


def attrs_with(**attrs):
    return {"num_heads": N, "kv_num_heads": KV, **attrs}


def check(ins, n_outputs=3, rtol=1e-5, atol=1e-6, **attrs):
    return check_onnxruntime(OP, ins, attrs_with(**attrs), n_outputs=n_outputs, rtol=rtol, atol=atol)


def both(ins, n_outputs=3, **attrs):
    a = attrs_with(**attrs)
    return (run_ours(OP, ins, a, opset=1, n_outputs=n_outputs, domain=DOMAIN),
            run_onnxruntime(OP, ins, a, n_outputs=n_outputs))


def ours(ins, n_outputs=3, **attrs):
    return run_ours(OP, ins, attrs_with(**attrs), opset=1, n_outputs=n_outputs, domain=DOMAIN)


def close(a, b):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("packed", [False, True])
@pytest.mark.parametrize("seqlens", [[4, 4], [4, 1]])  # full, right-padded second entry
def test_prompt(packed, seqlens):
    y, present_k, present_v = check(inputs(2, 5, seqlens, 5, packed=packed))
    assert y.shape == (2, 5, N * H) and present_k.shape == (2, KV, 5, H)


def test_prompt_is_causal_and_heads_share_kv():
    q = np.zeros((1, 2, N * H), np.float32)  # uniform scores: row s averages values 0 .. s
    v = rnd(1, 2, KV * H)
    (y,) = ours([q, rnd(1, 2, KV * H), v, None, None, np.array([1], np.int32), np.array(2, np.int32)], 1)
    vh = v.reshape(2, KV, H)
    close(y.reshape(2, N, H)[0], np.repeat(vh[0], N // KV, 0))
    close(y.reshape(2, N, H)[1], np.repeat(vh.mean(0), N // KV, 0))


@pytest.mark.parametrize("past, total", [(6, 7), (10, 7), (9, 9)])  # growing cache; fixed-size caches
def test_token_generation(past, total):
    check(inputs(2, 1, [6, 3], total, past=past))


def test_token_generation_continues_the_prompt():
    ins = inputs(1, 5, [4], 5)
    y, pk, pv = ours(ins)
    step = [x[:, 4:] for x in ins[:3]] + [pk[:, :, :4], pv[:, :, :4], np.array([4], np.int32), np.array(5, np.int32)]
    y1, pk1, pv1 = ours(step)
    close(y1[:, 0], y[:, 4])
    np.testing.assert_array_equal(pk1, pk)


def test_prompt_with_a_static_cache_and_a_chunk_of_a_prompt():
    check(inputs(2, 5, [4, 2], 5, past=8))  # first prompt: the cache contents are ignored
    check(inputs(1, 3, [6], 7, past=4))  # the next 3 tokens after 4 cached ones


@pytest.mark.parametrize("attrs", [
    {"scale": 0.3}, {"softcap": 1.5}, {"smooth_softmax": 1}, {"causal": 0},
    {"local_window_size": 2}, {"local_window_size": 2, "scale": 0.5}])
@pytest.mark.parametrize("step", ["prompt", "token"])
def test_attributes(attrs, step):
    ins = inputs(2, 5, [4, 2], 5) if step == "prompt" else inputs(2, 1, [6, 3], 7, past=6)
    check(ins, **attrs)


@pytest.mark.parametrize("seqlens", [[4, 4], [4, 2]])
def test_window_with_softcap(seqlens):
    # the padding rows of a prompt (past seqlens_k + 1) are left unspecified: with softcap onnxruntime takes
    # another path whose window ends at the last valid key instead of at the row's own position
    y, *_ = check(inputs(2, 1, [6, 3], 7, past=6), local_window_size=2, softcap=2.0)
    (y, *_), (ry, *_) = both(inputs(2, 5, seqlens, 5), local_window_size=2, softcap=2.0)
    for b, t in enumerate(np.array(seqlens) + 1):
        close(y[b, :t], ry[b, :t])


def test_zero_window_gives_zeros():
    (y,) = check(inputs(2, 5, [4, 4], 5), 1, local_window_size=0)
    assert not y.any()


@pytest.mark.parametrize("bias_shape", [(2, N, 5, 5), (1, 1, 5, 5), (2, 1, 5, 5)])
def test_attention_bias(bias_shape):
    tail = [None, None, None, rnd(*bias_shape)]
    check(inputs(2, 5, [4, 2], 5, tail=tail), local_window_size=3)
    check(inputs(2, 1, [6, 3], 7, past=6, tail=[None, None, None, rnd(bias_shape[0], bias_shape[1], 1, 7)]))


@pytest.mark.parametrize("smooth", [0, 1])
def test_head_sink(smooth):
    sink = [None] * 4 + [rnd(N)]
    y, *_ = check(inputs(2, 5, [4, 4], 5, tail=sink), smooth_softmax=smooth)
    plain, *_ = ours(inputs(2, 5, [4, 4], 5, tail=sink)[:7])
    assert not np.allclose(y, plain)
    check(inputs(2, 1, [6, 3], 7, past=6, tail=sink), smooth_softmax=smooth)


@pytest.mark.parametrize("mode", [1, 2])
def test_output_qk(mode):
    _, _, _, qk = check(inputs(2, 5, [4, 4], 5), 4, qk_output=mode, softcap=3.0)
    assert qk.shape == (2, N, 5, 5)
    if mode == 2:
        close(qk.sum(-1), np.ones((2, N, 5)))
    _, _, _, qk = check(inputs(2, 1, [8, 3], 7, past=10), 4, qk_output=mode)  # keys past total are cut off
    assert qk.shape == (2, N, 1, 7)


@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("packed", [False, True])
def test_rotary(interleaved, packed):
    cos, sin = rnd(20, 8), rnd(20, 8)
    attrs = {"do_rotary": 1, "rotary_interleaved": interleaved}
    check(inputs(2, 5, [4, 2], 5, packed=packed, tail=[cos, sin]), **attrs)
    check(inputs(2, 1, [6, 3], 7, past=6, packed=packed, tail=[cos, sin]), **attrs)
    check(inputs(2, 5, [4, 4], 5, head=32, packed=packed, tail=[cos, sin]), **attrs)  # rotary dim 16 of 32


def test_rotary_position_ids():
    cos, sin = rnd(20, 8), rnd(20, 8)
    pos = np.array([[3, 4, 5, 6, 7], [9, 1, 2, 3, 4]], np.int64)
    check(inputs(2, 5, [4, 4], 5, tail=[cos, sin, pos]), do_rotary=1)  # prompt: offset pos[0, 0] for all
    check(inputs(2, 1, [6, 3], 7, past=6, tail=[cos, sin, pos[:, :1].copy()]), do_rotary=1)
    check(inputs(2, 1, [6, 3], 7, past=6, tail=[cos, sin, pos]), do_rotary=1)  # read as a flat (B, S) array


def test_float16():
    cos, sin = rnd(20, 8), rnd(20, 8)
    tail = [cos, sin, None, rnd(2, 1, 5, 5), rnd(N)]
    check(inputs(2, 5, [4, 2], 5, tail=tail, dtype=np.float16), 4, rtol=1e-3, atol=1e-3, do_rotary=1, qk_output=1)
    check(inputs(2, 1, [6, 3], 7, past=6, dtype=np.float16), rtol=1e-3, atol=1e-3, local_window_size=3)


def test_shared_kv():
    check(inputs(2, 1, [6, 3], 7, past=8, kv_rows=0))  # key/value without rows: everything is cached
    check(inputs(1, 4, [3], 4, past=8, kv_rows=0))


@pytest.mark.parametrize("window", [-1, 2])
def test_query_seqlens(window):
    t, q_len = np.array([7, 5]), np.array([4, 2])
    ins = inputs(2, 4, t - 1, 8, past=8, tail=[None] * 9 + [q_len.astype(np.int32)])
    (y, pk, pv), (ry, rpk, rpv) = both(ins, local_window_size=window)
    for b in range(2):  # rows past the chunk's valid ones and cache rows past T are unspecified
        close(y[b, : q_len[b]], ry[b, : q_len[b]])
        assert not y[b, q_len[b]:].any()
        np.testing.assert_array_equal(pk[b, :, : t[b]], rpk[b, :, : t[b]])
        np.testing.assert_array_equal(pv[b, :, : t[b]], rpv[b, :, : t[b]])


def resident(t, capacity, window):
    gap = capacity - window + 1
    return t if t <= capacity else t - gap * -(-(t - capacity) // gap)


@pytest.mark.parametrize("b, s, seqlens, capacity, window", [
    (2, 1, [2, 4], 6, 4),  # still filling
    (3, 1, [6, 8, 11], 6, 4),  # evicting gaps of 3 rows
    (2, 1, [6, 8], 4, 4),  # capacity == window: one row per step
    (1, 3, [4], 8, 4),  # multi-token step that fits
    (1, 5, [11], 6, 4),  # step larger than the room left: staged
])
def test_sliding_window_cache(b, s, seqlens, capacity, window):
    total = max(seqlens) + 1
    tail = [None, None, None, rnd(b, N, s, total)]
    ins = inputs(b, s, seqlens, total, past=capacity, tail=tail)
    (y, pk, pv), (ry, rpk, rpv) = both(ins, local_window_size=window, sliding_window_cache=1)
    close(y, ry)
    for i, t in enumerate(np.array(seqlens) + 1):
        kept = resident(t, capacity, window)
        np.testing.assert_array_equal(pk[i, :, :kept], rpk[i, :, :kept])
        np.testing.assert_array_equal(pv[i, :, :kept], rpv[i, :, :kept])


def test_sliding_window_cache_matches_a_full_cache():
    """Decoding step by step with a window-sized cache gives the windowed attention over the whole sequence."""
    q, k, v = rnd(1, 9, N * H), rnd(1, 9, KV * H), rnd(1, 9, KV * H)
    full, *_ = ours([q, k, v, None, None, np.array([8], np.int32), np.array(9, np.int32)], local_window_size=3)
    cache = [np.zeros((1, KV, 4, H), np.float32)] * 2
    for t in range(9):
        step = [q[:, t: t + 1], k[:, t: t + 1], v[:, t: t + 1], *cache, np.array([t], np.int32),
                np.array(t + 1, np.int32)]
        y, *cache = ours(step, local_window_size=3, sliding_window_cache=1)
        close(y[:, 0], full[:, t])


def base():
    return inputs(2, 5, [4, 4], 5)


def replaced(index, value, ins=None):
    ins = list(base() if ins is None else ins)
    ins += [None] * (index + 1 - len(ins))
    ins[index] = value
    return ins


@pytest.mark.parametrize("ins, message", [
    (lambda: replaced(1, rnd(2, 5, 3 * H)), "do not fit"),
    (lambda: replaced(2, None), "both given or both omitted"),
    (lambda: replaced(0, rnd(2, 5, N * H).astype(np.float64)), "float32 or float16"),
    (lambda: replaced(4, rnd(2, KV, 8, H), replaced(3, rnd(2, 1, 8, H))), "past_key/past_value must be"),
    (lambda: replaced(3, rnd(2, KV, 8, H)), "both given or both omitted"),
    (lambda: replaced(5, np.array([5, 4], np.int32)), "out of range"),
    (lambda: replaced(5, np.array([4, 4], np.int64)), "seqlens_k must be int32"),
    (lambda: replaced(6, np.array(7, np.int32)), "growing cache"),
    (lambda: inputs(2, 2, [6, 0], 7, past=8), "too small for sequence_length"),
    (lambda: inputs(2, 1, [7, 3], 8, past=3, kv_rows=1), "growing cache"),
    (lambda: inputs(2, 1, [6, 3], 7, past=6, kv_rows=2), "query's 1 rows"),
    (lambda: replaced(10, rnd(2, N, 5, 4)), "attention_bias must be"),
    (lambda: replaced(10, rnd(3, N, 5, 5)), "attention_bias must be"),
    (lambda: replaced(11, rnd(N + 1)), "head_sink must be"),
    (lambda: replaced(9, np.zeros((2, 3), np.int64)), "position_ids must be"),
    (lambda: replaced(14, np.ones(H, np.float32)), "q_norm_weight"),
    (lambda: replaced(16, np.array([4, 4], np.int32)), "query_seqlens needs past_key"),
])
def test_bad_inputs(ins, message):
    with pytest.raises(KernelError, match=message) as info:
        ours(ins())
    assert "GroupQueryAttention" in str(info.value)


def test_bad_rotary_inputs():
    with pytest.raises(KernelError, match="needs cos_cache and sin_cache"):
        ours(base(), do_rotary=1)
    with pytest.raises(KernelError, match="head_size / 2"):
        ours(base() + [rnd(20, 12), rnd(20, 12)], do_rotary=1)
    with pytest.raises(KernelError, match="rotary positions"):
        ours(base() + [rnd(4, 8), rnd(4, 8)], do_rotary=1)


@pytest.mark.parametrize("attrs, n_outputs, message", [
    ({"num_heads": 3}, 3, "positive multiple of kv_num_heads"),
    ({"causal": 0, "local_window_size": 2}, 3, "must be -1 when causal is 0"),
    ({"causal": 2}, 3, "causal must be one of"),
    ({"qk_output": 3}, 4, "qk_output must be one of"),
    ({"qk_output": 1}, 3, "needs the output_qk output"),
    ({"k_quant_type": "PER_TENSOR", "v_quant_type": "PER_TENSOR"}, 3, "k_quant_type='PER_TENSOR'"),
    ({"sliding_window_cache": 1}, 3, "needs local_window_size > 0"),
    ({"sliding_window_cache": 1, "local_window_size": 2, "qk_output": 1}, 4, "not implemented"),
])
def test_bad_attributes(attrs, n_outputs, message):
    with pytest.raises(KernelError, match=message):
        ours(base(), n_outputs, **attrs)


def test_sliding_cache_below_window():
    with pytest.raises(KernelError, match="below local_window_size"):
        ours(inputs(1, 1, [5], 6, past=3), local_window_size=4, sliding_window_cache=1)
