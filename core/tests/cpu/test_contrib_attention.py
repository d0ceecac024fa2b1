"""com.microsoft Attention and MultiHeadAttention on the CPU provider against onnxruntime's CPU kernels."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import helper

from ort_core.errors import KernelError
from ort_core.ir.types import elem_type_of

from .kernel_harness import check_onnxruntime, run_ours

MS = "com.microsoft"
B, S, N, H = 2, 5, 4, 4
D = N * H


def _rand(*shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def _mask01(shape, seed=1):
    m = np.random.default_rng(seed).integers(0, 2, shape).astype(np.int32)
    m[..., 0] = 1
    return m


def _run_typed(op, inputs, attrs, out_types):
    """onnxruntime's outputs for one node whose outputs are declared with types (MultiHeadAttention's qk output
    has its own type parameter, which onnxruntime cannot infer from an untyped output)."""
    ort = pytest.importorskip("onnxruntime")
    names = [f"x{i}" if x is not None else "" for i, x in enumerate(inputs)]
    outs = [f"y{i}" for i in range(len(out_types))]
    node = helper.make_node(op, names, outs, domain=MS, **attrs)
    g_in = [helper.make_tensor_value_info(n, elem_type_of(x.dtype), x.shape) for n, x in zip(names, inputs)
            if x is not None]
    g_out = [helper.make_tensor_value_info(o, t, None) for o, t in zip(outs, out_types)]
    model = helper.make_model(helper.make_graph([node], "t", g_in, g_out),
                              opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(MS, 1)])
    model.ir_version = 8
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, {n: x for n, x in zip(names, inputs) if x is not None})


def _close(ours, theirs, rtol=1e-5, atol=1e-6):
    assert len(ours) == len(theirs)
    for i, (a, b) in enumerate(zip(ours, theirs)):
        assert a.dtype == b.dtype and a.shape == b.shape, f"output {i}: {a.dtype}{a.shape} vs {b.dtype}{b.shape}"
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, err_msg=f"output {i}")


# ---------------------------------------------------------------------------------------------
# Attention
# ---------------------------------------------------------------------------------------------

def _attn_inputs(c=D, width=3 * D, seq=S, seed=0):
    return _rand(B, seq, c, seed=seed), _rand(c, width, seed=seed + 1) * 0.5, _rand(width, seed=seed + 2)


def test_attention_plain_and_no_bias():
    x, w, b = _attn_inputs()
    out = check_onnxruntime("Attention", [x, w, b], {"num_heads": N})[0]
    assert out.shape == (B, S, D) and out.dtype == np.float32
    check_onnxruntime("Attention", [x, w, None], {"num_heads": N})


@pytest.mark.parametrize("mask", [
    np.array([3, 5], np.int32),  # key lengths
    np.array([4, 5, 1, 2], np.int32),  # end positions then start positions
    np.array([2, 4, 0, 9, 9, 0, 9, 9], np.int32),  # (3B + 2): the key lengths come first
    _mask01((B, S)),
    _mask01((B, S, S)),
    np.ones((B, 1), np.int32), np.zeros((1, 1), np.int32),  # masks nothing
], ids=["1d-lengths", "1d-end-start", "1d-3b+2", "2d", "3d", "2d-dummy", "2d-dummy-1x1"])
def test_attention_masks(mask):
    x, w, b = _attn_inputs()
    check_onnxruntime("Attention", [x, w, b, mask], {"num_heads": N})
    check_onnxruntime("Attention", [x, w, b, mask], {"num_heads": N, "unidirectional": 1})


def test_attention_attributes():
    x, w, b = _attn_inputs()
    mask = _mask01((B, S))
    # a mild filter value leaves masked keys some weight, so the value itself is checked
    base = check_onnxruntime("Attention", [x, w, b, mask], {"num_heads": N, "mask_filter_value": -1.5})[0]
    scaled = check_onnxruntime("Attention", [x, w, b, mask], {"num_heads": N, "scale": 0.3})[0]
    assert not np.allclose(base, scaled)
    check_onnxruntime("Attention", [x, w, b], {"num_heads": 2, "unidirectional": 1})
    # causally hidden keys get float32's lowest, not mask_filter_value
    check_onnxruntime("Attention", [x, w, b, mask], {"num_heads": N, "unidirectional": 1, "mask_filter_value": -1.0})
    # different V hidden size, and an input wider than the heads (pruned model)
    x, w, b = _attn_inputs(c=24, width=2 * D + 8)
    out = check_onnxruntime("Attention", [x, w, b], {"num_heads": N, "qkv_hidden_sizes": [D, D, 8]})[0]
    assert out.shape == (B, S, 8)


@pytest.mark.parametrize("unidirectional", [0, 1])
@pytest.mark.parametrize("seq", [1, 3])
def test_attention_past_present(unidirectional, seq):
    x, w, b = _attn_inputs(seq=seq)
    past = _rand(2, B, N, 4, H, seed=7)
    attrs = {"num_heads": N, "unidirectional": unidirectional}
    out, present = check_onnxruntime("Attention", [x, w, b, None, past], attrs, n_outputs=2)
    assert present.shape == (2, B, N, 4 + seq, H)
    np.testing.assert_array_equal(present[:, :, :, :4], past)
    check_onnxruntime("Attention", [x, w, b, _mask01((B, 4 + seq)), past], attrs, n_outputs=2)
    # present without past; past_sequence_length and share_buffer are ignored without a past
    check_onnxruntime("Attention", [x, w, b, None, None, None, np.array([2], np.int32)],
                      {**attrs, "past_present_share_buffer": 1}, n_outputs=2)


@pytest.mark.parametrize("shape", [(1, 1, S, S), (B, 1, S, S), (1, N, S, S), (B, N, S, S)])
def test_attention_bias_broadcast(shape):
    x, w, b = _attn_inputs()
    check_onnxruntime("Attention", [x, w, b, _mask01((B, S)), None, _rand(*shape, seed=3)],
                      {"num_heads": N, "unidirectional": 1})


@pytest.mark.parametrize("extras", ["none", "mask+bias", "one-row-far-below"])
def test_long_attention_runs_by_query_blocks_and_matches_onnxruntime(extras, monkeypatch):
    """Past 2 * _ATTEND_BLOCK scores the kernel works by blocks of query rows (several blocks per head
    here), normalizing after the product with v; a row whose scores all lie far below the block's maximum
    (a large negative attention_bias on it) takes the per-row shift instead."""
    from ort_core.providers.cpu.ops import contrib_attention

    monkeypatch.setattr(contrib_attention, "_ATTEND_BLOCK", 1 << 12)  # 40-row blocks, 4 per head
    b, seq, heads = 2, 100, 2
    x, w, bias = _rand(b, seq, 16, seed=3), _rand(16, 48, seed=4) * 0.5, _rand(48, seed=5)
    inputs = [x, w, bias]
    if extras == "mask+bias":
        inputs += [np.array([70, 100], np.int32), None, _rand(b, 1, seq, seq, seed=6)]
    elif extras == "one-row-far-below":
        far = np.zeros((1, 1, seq, seq), np.float32)
        far[0, 0, 7] = -2000.0  # exp(-2000 + ...) vanishes against the block's maximum
        inputs += [None, None, far]
    out = check_onnxruntime("Attention", inputs, {"num_heads": heads}, rtol=1e-4, atol=1e-5)[0]
    assert out.shape == (b, seq, 16) and np.isfinite(out).all()


def test_attention_float16():
    x, w, b = (t.astype(np.float16) for t in _attn_inputs())
    past = _rand(2, B, N, 3, H, seed=4, dtype=np.float16)
    out, present = check_onnxruntime("Attention", [x, w, b, _mask01((B, S + 3)), past], {"num_heads": N},
                                     n_outputs=2, rtol=2e-3, atol=2e-3)
    assert out.dtype == present.dtype == np.float16


def test_attention_errors():
    x, w, b = _attn_inputs()
    past = _rand(2, B, N, 4, H)
    with pytest.raises(KernelError, match="test_Attention.*do_rotary"):
        run_ours("Attention", [x, w, b], {"num_heads": N, "do_rotary": 1}, domain=MS)
    with pytest.raises(KernelError, match="test_Attention.*past_present_share_buffer"):
        run_ours("Attention", [x, w, b, None, past], {"num_heads": N, "past_present_share_buffer": 1}, n_outputs=2,
                 domain=MS)
    with pytest.raises(KernelError, match="num_heads"):
        run_ours("Attention", [x, w, b], {}, domain=MS)
    with pytest.raises(KernelError, match="qkv_hidden_sizes"):
        run_ours("Attention", [x, w, b], {"num_heads": N, "qkv_hidden_sizes": [8, 4, 4]}, domain=MS)
    cases = [
        ([x, w, b, np.ones((B, 1, S, S), np.int32)], 1, "4-D masks"),
        ([x, w, b, np.ones((B, S + 1), np.int32)], 1, "mask of shape"),
        ([x, w, b, np.ones((B, S), np.int64)], 1, "int32"),
        ([x, w[:, :-1], b[:-1]], 1, "split"),
        ([x, w[:-1], b], 1, "weights"),
        ([x, w, b[:-1]], 1, "bias"),
        ([x, w, b, None, past], 1, "present output"),
        ([x, w, b, None, past, _rand(B, N, S, S + 4)], 2, "attention_bias"),
        ([x, w, b, None, past[:, :, :2]], 2, "past must have shape"),
        ([x, w, b, None, None, _rand(S, S)], 1, "attention_bias must have shape"),
        ([x.astype(np.float64), w, b], 1, "float32 or float16"),
        ([x, w.astype(np.float16), b], 1, "expected float32"),
    ]
    for inputs, n_out, message in cases:
        with pytest.raises(KernelError, match=f"test_Attention.*{message}"):
            run_ours("Attention", inputs, {"num_heads": N}, n_outputs=n_out, domain=MS)


# ---------------------------------------------------------------------------------------------
# MultiHeadAttention
# ---------------------------------------------------------------------------------------------

L = 6


def _qkv(seq=S, kv=L, dv=D, seed=10):
    return _rand(B, seq, D, seed=seed), _rand(B, kv, D, seed=seed + 1), _rand(B, kv, dv, seed=seed + 2)


@pytest.mark.parametrize("unidirectional", [0, 1])
def test_mha_separate_qkv(unidirectional):
    q, k, v = _qkv()
    attrs = {"num_heads": N, "unidirectional": unidirectional}
    out, pk, pv = check_onnxruntime("MultiHeadAttention", [q, k, v], attrs, n_outputs=3)
    assert out.shape == (B, S, D) and pk.shape == pv.shape == (B, N, L, H)
    bias = _rand(3 * D, seed=3)
    check_onnxruntime("MultiHeadAttention", [q, k, v, bias], attrs, n_outputs=3)
    q, k, v = _qkv(dv=2 * D)  # V wider than Q and K
    out = check_onnxruntime("MultiHeadAttention", [q, k, v, _rand(4 * D, seed=4)], attrs, n_outputs=3)[0]
    assert out.shape == (B, S, 2 * D)
    check_onnxruntime("MultiHeadAttention", [q, k, v, None, _mask01((B, L))],
                      {**attrs, "scale": 0.7, "mask_filter_value": -2.0})


def test_mha_bnsh_key_value():
    q = _rand(B, S, D, seed=1)
    k, v = _rand(B, N, L, H, seed=2), _rand(B, N, L, H, seed=3)
    check_onnxruntime("MultiHeadAttention", [q, k, v], {"num_heads": N}, n_outputs=3)
    # the bias applies to the query only; past is prepended to the 4-D key and value
    check_onnxruntime("MultiHeadAttention", [q, k, v, _rand(3 * D, seed=4)], {"num_heads": N}, n_outputs=3)
    past = [_rand(B, N, 3, H, seed=5), _rand(B, N, 3, H, seed=6)]
    check_onnxruntime("MultiHeadAttention", [q, k, v, None, None, None, *past], {"num_heads": N}, n_outputs=3)


@pytest.mark.parametrize("unidirectional", [0, 1])
def test_mha_past(unidirectional):
    q, k, v = _qkv(seq=3, kv=3)
    past = [_rand(B, N, 4, H, seed=5), _rand(B, N, 4, H, seed=6)]
    attrs = {"num_heads": N, "unidirectional": unidirectional}
    _, pk, pv = check_onnxruntime("MultiHeadAttention", [q, k, v, _rand(3 * D), None, None, *past], attrs,
                                  n_outputs=3)
    assert pk.shape == (B, N, 7, H)
    np.testing.assert_array_equal(pv[:, :, :4], past[1])
    # onnxruntime's CPU kernel drops the past when the presents are not asked for: refused here
    for n_out in (1, 2):
        with pytest.raises(KernelError, match="test_MultiHeadAttention.*present_key and present_value"):
            run_ours("MultiHeadAttention", [q, k, v, None, None, None, *past], attrs, opset=1, n_outputs=n_out,
                     domain=MS)


@pytest.mark.parametrize("mask", [
    np.array([5, 7], np.int32), np.array([2, 6, 0, 9, 9, 0, 9, 9], np.int32), _mask01((B, 4 + L)),
    _mask01((B, S, 4 + L)),
], ids=["1d", "1d-3b+2", "2d", "3d"])
def test_mha_masks_and_bias(mask):
    q, k, v = _qkv()
    past = [_rand(B, N, 4, H, seed=5), _rand(B, N, 4, H, seed=6)]
    for shape in [(1, 1, S, 4 + L), (B, N, S, 4 + L), (1, N, S, 4 + L)]:
        check_onnxruntime("MultiHeadAttention", [q, k, v, None, mask, _rand(*shape, seed=8), *past],
                          {"num_heads": N, "unidirectional": 1}, n_outputs=3)


def test_mha_qk_output():
    q, k, v = _qkv()
    inputs = [q, k, v, _rand(3 * D), _mask01((B, L)), _rand(B, 1, S, L, seed=8)]
    attrs = {"num_heads": N, "unidirectional": 1, "scale": 0.4}
    f = onnx.TensorProto.FLOAT
    ours = run_ours("MultiHeadAttention", inputs, attrs, opset=1, n_outputs=4, domain=MS)
    _close(ours, _run_typed("MultiHeadAttention", inputs, attrs, [f] * 4))
    assert ours[3].shape == (B, N, S, L)


def test_mha_shared_buffer_and_beams():
    f = onnx.TensorProto.FLOAT
    longest = 9
    past = [_rand(B, N, longest, H, seed=5), _rand(B, N, longest, H, seed=6)]
    for seq, kv, length in [(3, 4, 2), (3, 4, 5), (1, 1, 0)]:
        q, k, v = _qkv(seq, kv)
        inputs = [q, k, v, _rand(3 * D), _mask01((B, length + kv)), None, *past, np.array([length], np.int32)]
        ours = run_ours("MultiHeadAttention", inputs, {"num_heads": N}, opset=1, n_outputs=4, domain=MS)
        _close(ours, _run_typed("MultiHeadAttention", inputs, {"num_heads": N}, [f] * 4))
        assert ours[1].shape == (B, N, longest, H)
    # beam search: 1 batch x 2 beams, one new token; the indirection picks the beam of each cached position
    q, k, v = _qkv(1, 1)
    beams = np.random.default_rng(3).integers(0, 2, (1, 2, longest)).astype(np.int32)
    inputs = [q, k, v, None, None, None, *past, np.array(6, np.int32), beams]
    ours = run_ours("MultiHeadAttention", inputs, {"num_heads": N}, opset=1, n_outputs=4, domain=MS)
    _close(ours, _run_typed("MultiHeadAttention", inputs, {"num_heads": N}, [f] * 4))
    plain = run_ours("MultiHeadAttention", inputs[:-1], {"num_heads": N}, opset=1, n_outputs=3, domain=MS)[0]
    assert not np.allclose(plain, ours[0])
    # without past_sequence_length the indirection is checked and ignored
    check_onnxruntime("MultiHeadAttention", [q, k, v, None, None, None, past[0][:, :, :3], past[1][:, :, :3], None,
                                             beams], {"num_heads": N}, n_outputs=3)


def test_mha_packed_layouts_match_unpacked():
    """onnxruntime's CPU kernel refuses packed QKV and packed KV; ours unpacks them, checked against the same
    data given unpacked to onnxruntime."""
    q, k, v = _qkv(seq=S, kv=S)
    split = [t.reshape(B, S, N, 1, H) for t in (q, k, v)]
    packed_qkv = np.concatenate(split, axis=3)
    packed_kv = np.concatenate(split[1:], axis=3)
    attrs = {"num_heads": N, "unidirectional": 1}
    want = check_onnxruntime("MultiHeadAttention", [q, k, v, _rand(3 * D)], attrs, n_outputs=3)
    got = run_ours("MultiHeadAttention", [packed_qkv, None, None, _rand(3 * D)], attrs, opset=1, n_outputs=3,
                   domain=MS)
    _close(got, want)
    want = check_onnxruntime("MultiHeadAttention", [q, k, v], attrs, n_outputs=3)
    _close(run_ours("MultiHeadAttention", [q, packed_kv], attrs, opset=1, n_outputs=3, domain=MS), want)


def test_mha_float16():
    q, k, v = (t.astype(np.float16) for t in _qkv())
    past = [_rand(B, N, 2, H, seed=5, dtype=np.float16), _rand(B, N, 2, H, seed=6, dtype=np.float16)]
    outs = check_onnxruntime("MultiHeadAttention", [q, k, v, _rand(3 * D, dtype=np.float16), _mask01((B, 2 + L)),
                                                    None, *past], {"num_heads": N}, n_outputs=3, rtol=2e-3,
                             atol=2e-3)
    assert all(o.dtype == np.float16 for o in outs)


def test_mha_errors():
    q, k, v = _qkv()
    past = [_rand(B, N, 4, H), _rand(B, N, 4, H)]
    one, two = [q[:, :1], k[:, :1], v[:, :1]], np.array(2, np.int32)  # one token, 2 cached: beam search
    cases = [
        ([_rand(B, S, 3 * D)], "packed QKV of shape"),
        ([q, k], "needs a value"),
        ([q, k[..., :-1], v], "key and value must be"),
        ([q, k, v, _rand(3 * D + 1)], "bias must have shape"),
        ([q, _rand(B, L, N, 2, H), None, _rand(3 * D)], "packed KV"),
        ([q, k, v, None, np.array([1, 2, 3, 4], np.int32)], "mask of shape"),
        ([q, k, v, None, np.ones((B, 1), np.int32)], "mask of shape"),
        ([q, k, v, None, None, _rand(S, L)], "attention_bias must have shape"),
        ([q, k, v, None, None, None, past[0]], "given together"),
        ([q, k, v, None, None, None, past[0][:, :, :, :-1], past[1]], "past_key must have shape"),
        ([q, k, v, None, None, None, *past, np.array([3], np.int32)], "past_sequence_length"),
        ([q, k, v, None, None, None, *past, np.array([1, 2], np.int32)], "one int32 value"),
        ([q, k, v, None, None, None, None, None, None, np.zeros((3, 1, 9), np.int32)], "cache_indirection"),
        ([*one, None, None, None, *past, two, np.zeros((1, 2, 5), np.int32)], "max_sequence_length 4"),
        ([*one, None, None, None, *past, two, np.full((1, 2, 4), 2, np.int32)], "beam indices outside"),
        ([q.astype(ml_dtypes.bfloat16), k, v], "float32 or float16"),
    ]
    for inputs, message in cases:
        with pytest.raises(KernelError, match=f"test_MultiHeadAttention.*{message}"):
            run_ours("MultiHeadAttention", inputs, {"num_heads": N}, opset=1, n_outputs=3, domain=MS)
