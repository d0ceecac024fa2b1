"""Attention, FlexAttention and LinearAttention kernels against onnx's reference evaluator and
numpy formulas, including masks, caches, windows, 16-bit types and error cases."""

from __future__ import annotations

import math
import threading

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper
from onnx.reference import ReferenceEvaluator

import ort_core as ort
from ort_core.errors import KernelError
from ort_core.session import CHECK_OUTPUTS_KEY

from .kernel_harness import check, run_ours, run_reference

RNG = np.random.default_rng(1234)


def rand(*shape, dtype=np.float32):
    return RNG.random(shape).astype(dtype)


def naive_attention(q, k, v, bias=None, scale=None):
    """softmax(Q K^T * scale + bias) V in float64, 4-D, equal head counts."""
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = q @ k.swapaxes(-1, -2) * scale
    if bias is not None:
        s = s + bias
    s = np.exp(s - s.max(-1, keepdims=True))
    return (s / s.sum(-1, keepdims=True)) @ v


# --------------------------------------------------------------------------------- Attention

CASES_4D = {
    "plain": ([rand(2, 3, 4, 8), rand(2, 3, 6, 8), rand(2, 3, 6, 8)], {}),
    "gqa": ([rand(2, 8, 4, 8), rand(2, 2, 6, 8), rand(2, 2, 6, 5)], {}),
    "scaled_causal": ([rand(1, 2, 5, 8), rand(1, 2, 5, 8), rand(1, 2, 5, 8)], {"scale": 0.3, "is_causal": 1}),
    "cross_causal": ([rand(1, 2, 3, 8), rand(1, 2, 7, 8), rand(1, 2, 7, 4)], {"is_causal": 1}),
    "mask_2d": ([rand(2, 3, 4, 8), rand(2, 3, 6, 8), rand(2, 3, 6, 8), rand(4, 6)], {}),
    "mask_3d_causal": ([rand(2, 3, 4, 8), rand(2, 3, 6, 8), rand(2, 3, 6, 8), rand(3, 4, 6)], {"is_causal": 1}),
    "mask_4d": ([rand(2, 3, 4, 8), rand(2, 3, 6, 8), rand(2, 3, 6, 8), rand(2, 3, 4, 6)], {}),
    "mask_bool": ([rand(2, 3, 4, 8), rand(2, 3, 6, 8), rand(2, 3, 6, 8), RNG.random((4, 6)) > 0.3], {}),
    "softcap": ([rand(2, 3, 4, 8) * 4, rand(2, 3, 6, 8), rand(2, 3, 6, 8)], {"softcap": 2.0}),
    "double": ([rand(1, 2, 3, 4, dtype=np.float64), rand(1, 2, 5, 4, dtype=np.float64),
                rand(1, 2, 5, 4, dtype=np.float64)], {"is_causal": 1}),
}


@pytest.mark.parametrize("name", sorted(CASES_4D))
def test_attention_4d_matches_reference(name):
    inputs, attrs = CASES_4D[name]
    check("Attention", inputs, attrs, opset=23)


def test_attention_plain_matches_numpy_formula():
    q, k, v = rand(2, 3, 4, 8), rand(2, 3, 6, 8), rand(2, 3, 6, 8)
    (y,) = run_ours("Attention", [q, k, v], opset=23)
    np.testing.assert_allclose(y, naive_attention(q, k, v), rtol=1e-5)


def test_attention_causal_is_lower_triangular_without_cache():
    q, k, v = rand(1, 1, 4, 8), rand(1, 1, 4, 8), np.eye(4, dtype=np.float32).reshape(1, 1, 4, 4)
    (y,) = run_ours("Attention", [q, k, v], {"is_causal": 1}, opset=23)
    # with V = I the output rows are the attention weights: nothing above the diagonal
    assert np.all(np.triu(y[0, 0], 1) == 0)
    np.testing.assert_allclose(y[0, 0].sum(-1), 1, rtol=1e-6)


def test_attention_3d_with_heads_and_cache():
    q, k, v = rand(2, 4, 3 * 8), rand(2, 4, 3 * 8), rand(2, 4, 3 * 6)
    past_k, past_v = rand(2, 3, 5, 8), rand(2, 3, 5, 6)
    attrs = {"q_num_heads": 3, "kv_num_heads": 3, "is_causal": 1, "qk_matmul_output_mode": 2}
    outs = check("Attention", [q, k, v, None, past_k, past_v], attrs, opset=23, n_outputs=4)
    assert outs[0].shape == (2, 4, 18) and outs[1].shape == (2, 3, 9, 8) and outs[3].shape == (2, 3, 4, 9)
    np.testing.assert_array_equal(outs[1][:, :, :5], past_k)


@pytest.mark.parametrize("mode", [0, 1, 2, 3])
def test_attention_qk_matmul_output_modes(mode):
    inputs = [rand(1, 2, 3, 8), rand(1, 2, 5, 8), rand(1, 2, 5, 8), rand(3, 5)]
    check("Attention", inputs, {"qk_matmul_output_mode": mode}, opset=23, n_outputs=4)


def test_attention_mode0_with_softcap_is_the_raw_product():
    # the spec (and its function body): mode 0 is the raw scaled Q K^T, before the softcap
    q, k, v = rand(1, 1, 3, 4) * 3, rand(1, 1, 5, 4), rand(1, 1, 5, 4)
    y, _, _, qk = run_ours("Attention", [q, k, v], {"softcap": 1.0}, opset=23, n_outputs=4)
    np.testing.assert_allclose(qk, q @ k.swapaxes(-1, -2) / 2, rtol=1e-6)
    capped = np.tanh(q.astype(np.float64) @ k.swapaxes(-1, -2) / 2)
    e = np.exp(capped - capped.max(-1, keepdims=True))
    np.testing.assert_allclose(y, (e / e.sum(-1, keepdims=True)) @ v, rtol=1e-5)


def test_attention_fully_masked_row_is_zero():
    q, k, v = rand(1, 2, 2, 8), rand(1, 2, 3, 8), rand(1, 2, 3, 8)
    mask = np.array([[False, False, False], [True, True, False]])
    y, _, _, probs = run_ours("Attention", [q, k, v, mask], {"qk_matmul_output_mode": 3},
                              opset=23, n_outputs=4)
    assert np.all(y[:, :, 0] == 0) and np.all(probs[:, :, 0] == 0)
    assert np.all(np.isfinite(y))
    np.testing.assert_allclose(y[:, :, 1], naive_attention(q, k, v, np.where(mask, 0, -np.inf)[1])[:, :, 1],
                               rtol=1e-5)


def test_attention_short_mask_is_padded_as_masked():
    q, k, v = rand(1, 1, 2, 4), rand(1, 1, 4, 4), rand(1, 1, 4, 4)
    (y,) = run_ours("Attention", [q, k, v, np.zeros((2, 2), np.float32)], opset=23)
    np.testing.assert_allclose(y, naive_attention(q[..., :, :], k[:, :, :2], v[:, :, :2]), rtol=1e-5)


def test_attention_nonpad_kv_seqlen_opset24():
    q, k, v = rand(2, 4, 1, 8), rand(2, 2, 6, 8), rand(2, 2, 6, 8)
    nonpad = np.array([3, 6], np.int64)
    outs = check("Attention", [q, k, v, None, None, None, nonpad], {"is_causal": 1}, opset=24)
    # batch 0 sees keys 0..2 only
    kk, vv = np.repeat(k, 2, axis=1), np.repeat(v, 2, axis=1)
    np.testing.assert_allclose(outs[0][0], naive_attention(q[:1], kk[:1, :, :3], vv[:1, :, :3])[0], rtol=1e-5)


def test_attention_nonpad_negative_offset_rows_are_zero():
    q, k, v = rand(1, 1, 4, 8), rand(1, 1, 4, 8), rand(1, 1, 4, 8)
    (y,) = check("Attention", [q, k, v, None, None, None, np.array([2], np.int64)], {"is_causal": 1}, opset=24)
    assert np.all(y[0, 0, :2] == 0) and np.all(y[0, 0, 2:] != 0)


@pytest.mark.parametrize("window", [(2, 0), (1, 1), (0, -1), (-1, 2)])
def test_attention_sliding_windows_opset25(window):
    q, k, v = rand(1, 2, 5, 8), rand(1, 2, 7, 8), rand(1, 2, 7, 8)
    attrs = {"left_window_size": window[0], "right_window_size": window[1]}
    check("Attention", [q, k, v, RNG.random((5, 7)) > 0.2], attrs, opset=25)
    check("Attention", [q, k, v, None, rand(1, 2, 3, 8), rand(1, 2, 3, 8)], {**attrs, "is_causal": 1},
          opset=25, n_outputs=3)


@pytest.mark.parametrize("precision", [T.FLOAT, T.DOUBLE, T.FLOAT16])
def test_attention_softmax_precision(precision):
    inputs = [rand(1, 2, 3, 8), rand(1, 2, 4, 8), rand(1, 2, 4, 8), rand(3, 4)]
    check("Attention", inputs, {"softmax_precision": precision, "qk_matmul_output_mode": 3},
          opset=24, n_outputs=4, rtol=1e-3)


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
def test_attention_16bit_agrees_with_reference_bit_for_bit(dtype):
    # 16-bit types follow the spec's per-step rounding (softmax in the input type)
    q, k, v = rand(2, 4, 4, 8, dtype=dtype), rand(2, 2, 6, 8, dtype=dtype), rand(2, 2, 6, 8, dtype=dtype)
    attrs = {"is_causal": 1}
    ours = run_ours("Attention", [q, k, v], attrs, opset=23)[0]
    ref = run_reference("Attention", [q, k, v], attrs, opset=23)[0]
    assert ours.dtype == ref.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(ours.astype(np.float32), ref.astype(np.float32))


def test_attention_does_not_modify_inputs_and_is_thread_safe():
    q, k, v, mask = rand(2, 4, 8, 16), rand(2, 2, 8, 16), rand(2, 2, 8, 16), rand(8, 8)
    copies = [x.copy() for x in (q, k, v, mask)]
    expected = run_ours("Attention", [q, k, v, mask], {"is_causal": 1}, opset=23)[0]
    results = []

    def work():
        results.append(run_ours("Attention", [q, k, v, mask], {"is_causal": 1}, opset=23)[0])

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for r in results:
        np.testing.assert_array_equal(r, expected)
    for a, b in zip((q, k, v, mask), copies):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("inputs, attrs, opset, match", [
    ([rand(1, 4, 8), rand(1, 4, 8), rand(1, 4, 8)], {}, 23, "q_num_heads"),
    ([rand(1, 2, 3, 8), rand(1, 2, 3, 8), rand(1, 2, 3, 8)], {"q_num_heads": 2, "kv_num_heads": 2}, 25,
     "must not be set"),
    ([rand(1, 3, 3, 8), rand(1, 2, 3, 8), rand(1, 2, 3, 8)], {}, 23, "multiple of kv heads"),
    ([rand(1, 2, 3, 8), rand(1, 2, 3, 4), rand(1, 2, 3, 8)], {}, 23, "incompatible shapes"),
    ([rand(1, 2, 3, 8), rand(1, 2, 3, 8), rand(1, 2, 3, 8), None, rand(1, 2, 1, 8)], {}, 23, "together"),
    ([rand(1, 2, 3, 8), rand(1, 2, 3, 8), rand(1, 2, 3, 8), rand(3, 5)], {}, 23, "does not fit"),
    ([rand(1, 2, 3, 8), rand(1, 2, 3, 8), rand(1, 2, 3, 8), None, rand(1, 2, 1, 8), rand(1, 2, 1, 8),
      np.array([3], np.int64)], {}, 24, "cannot be combined"),
])
def test_attention_errors(inputs, attrs, opset, match):
    with pytest.raises(KernelError, match=match):
        run_ours("Attention", inputs, attrs, opset=opset)


@pytest.mark.parametrize("attrs, opset, match", [
    ({"qk_matmul_output_mode": 4}, 23, "qk_matmul_output_mode"),
    ({"softmax_precision": T.INT32}, 23, "softmax_precision"),
    ({"left_window_size": 2}, 24, "opset 25"),
    ({"right_window_size": -3}, 25, "nonnegative"),
])
def test_attention_attribute_errors(attrs, opset, match):
    with pytest.raises(KernelError, match=match):
        run_ours("Attention", [rand(1, 1, 2, 4)] * 3, attrs, opset=opset)


# ----------------------------------------------------------------------------- FlexAttention

PREVIEW = "ai.onnx.preview"


def _flex_model(dtype, attrs, score_mod=None, prob_mod=None):
    node = helper.make_node("FlexAttention", ["Q", "K", "V"], ["Y"], domain=PREVIEW, **attrs)
    for name, g in (("score_mod", score_mod), ("prob_mod", prob_mod)):
        if g is not None:
            node.attribute.append(helper.make_attribute(name, g))
    graph = helper.make_graph([node], "flex", [helper.make_tensor_value_info(n, dtype, None) for n in "QKV"],
                              [helper.make_tensor_value_info("Y", dtype, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 26), helper.make_opsetid(PREVIEW, 1)])
    model.ir_version = onnx.IR_VERSION
    return model


def _causal_score_mod(elem=T.FLOAT):
    nodes = [
        helper.make_node("Shape", ["s"], ["shape"]),
        helper.make_node("Gather", ["shape", "i2"], ["L"], axis=0),
        helper.make_node("Gather", ["shape", "i3"], ["S"], axis=0),
        helper.make_node("Range", ["zero", "L", "one"], ["qr"]),
        helper.make_node("Unsqueeze", ["qr", "one_1d"], ["qi"]),
        helper.make_node("Range", ["zero", "S", "one"], ["ki"]),
        helper.make_node("GreaterOrEqual", ["qi", "ki"], ["keep"]),
        helper.make_node("Where", ["keep", "s", "ninf"], ["out"]),
    ]
    inits = [helper.make_tensor("i2", T.INT64, [], [2]), helper.make_tensor("i3", T.INT64, [], [3]),
             helper.make_tensor("zero", T.INT64, [], [0]), helper.make_tensor("one", T.INT64, [], [1]),
             helper.make_tensor("one_1d", T.INT64, [1], [1]), helper.make_tensor("ninf", elem, [], [-np.inf])]
    return helper.make_graph(nodes, "causal", [helper.make_tensor_value_info("s", elem, None)],
                             [helper.make_tensor_value_info("out", elem, None)], inits)


def _scale_prob_mod(factor):
    return helper.make_graph([helper.make_node("Mul", ["p", "c"], ["out"])], "scale",
                             [helper.make_tensor_value_info("p", T.FLOAT, None)],
                             [helper.make_tensor_value_info("out", T.FLOAT, None)],
                             [helper.make_tensor("c", T.FLOAT, [], [factor])])


def _run_flex(model, feeds):
    so = ort.SessionOptions()
    so.add_session_config_entry(CHECK_OUTPUTS_KEY, "1")
    ours = ort.InferenceSession(model.SerializeToString(), so).run(None, feeds)[0]
    ref = ReferenceEvaluator(model).run(None, feeds)[0]
    return ours, ref


@pytest.mark.parametrize("name", ["plain", "gqa", "scaled", "causal_mod", "prob_mod", "fp16", "double"])
def test_flex_attention_matches_reference(name):
    dtype, elem, attrs, score_mod, prob_mod = np.float32, T.FLOAT, {}, None, None
    hkv = 2
    if name == "gqa":
        hkv = 1
    elif name == "scaled":
        attrs = {"scale": 0.2}
    elif name == "causal_mod":
        score_mod = _causal_score_mod()
    elif name == "prob_mod":
        prob_mod = _scale_prob_mod(0.5)
    elif name == "fp16":
        dtype, elem = np.float16, T.FLOAT16
    elif name == "double":
        dtype, elem = np.float64, T.DOUBLE
        score_mod = _causal_score_mod(T.DOUBLE)
    feeds = {"Q": rand(2, 2, 4, 8, dtype=dtype), "K": rand(2, hkv, 5, 8, dtype=dtype),
             "V": rand(2, hkv, 5, 6, dtype=dtype)}
    ours, ref = _run_flex(_flex_model(elem, attrs, score_mod, prob_mod), feeds)
    assert ours.dtype == ref.dtype and ours.shape == ref.shape == (2, 2, 4, 6)
    np.testing.assert_allclose(ours.astype(np.float64), ref.astype(np.float64), rtol=1e-3 if name == "fp16" else 1e-6)


def test_flex_attention_causal_mod_matches_numpy():
    q, k, v = rand(1, 2, 4, 8), rand(1, 2, 4, 8), rand(1, 2, 4, 8)
    ours, _ = _run_flex(_flex_model(T.FLOAT, {}, _causal_score_mod()), {"Q": q, "K": k, "V": v})
    bias = np.where(np.tril(np.ones((4, 4), bool)), 0, -np.inf)
    np.testing.assert_allclose(ours, naive_attention(q, k, v, bias), rtol=1e-5)


def test_flex_attention_errors():
    q = rand(1, 2, 3, 8)
    with pytest.raises(KernelError, match="4-D"):
        run_ours("FlexAttention", [q[0], q[0], q[0]], opset=1, domain=PREVIEW)
    with pytest.raises(KernelError, match="incompatible"):
        run_ours("FlexAttention", [q, rand(1, 2, 3, 4), q], opset=1, domain=PREVIEW)
    with pytest.raises(KernelError, match="softmax_precision"):
        run_ours("FlexAttention", [q, q, q], {"softmax_precision": T.INT8}, opset=1, domain=PREVIEW)


# --------------------------------------------------------------------------- LinearAttention

def _linear_inputs(rule, b=2, t=5, hq=4, hkv=2, dk=4, dv=3, past=False, per_head_decay=False, dtype=np.float32):
    q, k, v = rand(b, t, hq * dk, dtype=dtype), rand(b, t, hkv * dk, dtype=dtype), rand(b, t, hkv * dv, dtype=dtype)
    k = (k / np.linalg.norm(k.astype(np.float32).reshape(b, t, hkv, dk), axis=-1).repeat(dk, -1)).astype(dtype)
    state = rand(b, hkv, dk, dv, dtype=dtype) if past else None
    decay = -rand(b, t, hkv if per_head_decay else hkv * dk, dtype=dtype) if "gated" in rule else None
    beta = rand(b, t, hkv, dtype=dtype) if "delta" in rule else None
    return [q, k, v, state, decay, beta], {"update_rule": rule, "q_num_heads": hq, "kv_num_heads": hkv}


@pytest.mark.parametrize("rule", ["linear", "gated", "delta", "gated_delta"])
@pytest.mark.parametrize("past", [False, True])
def test_linear_attention_matches_reference(rule, past):
    inputs, attrs = _linear_inputs(rule, past=past)
    check("LinearAttention", inputs, attrs, opset=27, n_outputs=2, rtol=1e-5)


def test_linear_attention_variants():
    inputs, attrs = _linear_inputs("gated_delta", hq=4, hkv=1, per_head_decay=True)
    check("LinearAttention", inputs, {**attrs, "scale": 0.7}, opset=27, n_outputs=2, rtol=1e-5)
    inputs, attrs = _linear_inputs("gated", dtype=np.float16, past=True)
    check("LinearAttention", inputs, attrs, opset=27, n_outputs=2, rtol=1e-3)


def test_linear_attention_linear_rule_matches_formula():
    # o_t = scale * q_t^T sum_{s<=t} k_s v_s^T
    inputs, attrs = _linear_inputs("linear", b=1, hq=1, hkv=1)
    q, k, v = (x[0] for x in inputs[:3])
    y, state = run_ours("LinearAttention", inputs, attrs, opset=27, n_outputs=2)
    s = np.cumsum(k[:, :, None] * v[:, None, :], axis=0)
    np.testing.assert_allclose(y[0], np.einsum("td,tdm->tm", q, s) / 2, rtol=1e-5)
    np.testing.assert_allclose(state[0, 0], s[-1], rtol=1e-5)


@pytest.mark.parametrize("rule, drop, match", [
    ("gated", 4, "requires the decay"),
    ("delta", 5, "requires the beta"),
])
def test_linear_attention_missing_inputs(rule, drop, match):
    inputs, attrs = _linear_inputs(rule)
    inputs[drop] = None
    with pytest.raises(KernelError, match=match):
        run_ours("LinearAttention", inputs, attrs, opset=27, n_outputs=2)


def test_linear_attention_errors():
    inputs, attrs = _linear_inputs("linear")
    with pytest.raises(KernelError, match="forbids the decay"):
        run_ours("LinearAttention", inputs[:4] + [rand(2, 5, 2)], attrs, opset=27, n_outputs=2)
    with pytest.raises(KernelError, match="update_rule"):
        run_ours("LinearAttention", inputs, {**attrs, "update_rule": "fancy"}, opset=27, n_outputs=2)
    with pytest.raises(KernelError, match="positive multiple"):
        run_ours("LinearAttention", inputs, {**attrs, "q_num_heads": 3}, opset=27, n_outputs=2)
    with pytest.raises(KernelError, match="past_state shape"):
        run_ours("LinearAttention", inputs[:3] + [rand(2, 2, 4, 4)], attrs, opset=27, n_outputs=2)
