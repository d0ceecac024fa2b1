"""Transformer fusions of the CPU provider (LayerNorm, SkipLayerNorm, Gelu, FastGelu, Attention).

Each pattern is built the way PyTorch exports it and run with optimizations off and on: the outputs
must agree and the fused op must (or, for the negative cases, must not) appear.
"""

from __future__ import annotations

import math
import os
import tempfile

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import ort_core as ort

from .conftest import make_model

F = TensorProto.FLOAT


class Builder:
    """Tiny graph builder: ``b.op("Add", a, c)`` returns the new value's name; constants from arrays."""

    def __init__(self, opset=17, seed=0):
        self.nodes, self.inits, self.opset, self.n = [], [], opset, 0
        self.rng = np.random.default_rng(seed)

    def name(self, base="v"):
        self.n += 1
        return f"{base}{self.n}"

    def const(self, value, dtype=np.float32):
        name = self.name("c")
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype), name))
        return name

    def weight(self, *shape, scale=0.1):
        return self.const(self.rng.standard_normal(shape) * scale)

    def op(self, op_type, *inputs, n_out=1, **attrs):
        outs = [self.name() for _ in range(n_out)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=self.name(op_type.lower()), **attrs))
        return outs[0] if n_out == 1 else outs

    def reduce_mean(self, x):
        if self.opset >= 18:
            return self.op("ReduceMean", x, self.const([-1], np.int64))
        return self.op("ReduceMean", x, axes=[-1])

    def layer_norm(self, x, width, square="Pow", swap=False, affine=True, eps=1e-5):
        m = self.reduce_mean(x)
        d = self.op("Sub", x, m)
        p = self.op("Pow", d, self.const(2.0)) if square == "Pow" else self.op("Mul", d, d)
        v = self.reduce_mean(p)
        e = self.op("Add", self.const(eps), v) if swap else self.op("Add", v, self.const(eps))
        n = self.op("Div", d, self.op("Sqrt", e))
        if not affine:
            return n
        gamma = self.const(1 + self.rng.standard_normal(width) * 0.1)
        beta = self.const(self.rng.standard_normal(width) * 0.1)
        n = self.op("Mul", gamma, n) if swap else self.op("Mul", n, gamma)
        return self.op("Add", beta, n) if swap else self.op("Add", n, beta)

    def gelu(self, x, form=0):
        if form == 0:  # HF: x * 0.5 * (1 + erf(x / sqrt2))
            one = self.op("Add", self.op("Erf", self.op("Div", x, self.const(math.sqrt(2.0)))), self.const(1.0))
            return self.op("Mul", self.op("Mul", x, self.const(0.5)), one)
        if form == 1:  # ((1 + erf(x * 1/sqrt2)) * x) * 0.5
            one = self.op("Add", self.const(1.0), self.op("Erf", self.op("Mul", self.const(1 / math.sqrt(2)), x)))
            return self.op("Mul", self.op("Mul", one, x), self.const(0.5))
        one = self.op("Add", self.op("Erf", self.op("Div", x, self.const(math.sqrt(2.0)))), self.const(1.0))
        return self.op("Mul", x, self.op("Mul", one, self.const(0.5)))  # x * ((1 + erf) * 0.5)

    def fast_gelu(self, x):  # GPT-2: 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))
        cube = self.op("Mul", self.op("Pow", x, self.const(3.0)), self.const(0.044715))
        inner = self.op("Mul", self.op("Add", x, cube), self.const(math.sqrt(2.0 / math.pi)))
        one = self.op("Add", self.op("Tanh", inner), self.const(1.0))
        return self.op("Mul", self.op("Mul", self.const(0.5), x), one)

    def linear(self, x, n_in, n_out):
        return self.op("Add", self.op("MatMul", x, self.weight(n_in, n_out)), self.weight(n_out))

    def heads(self, p, h, d, perm, shape=None):
        shape = self.const(shape or [0, 0, h, d], np.int64)
        return self.op("Transpose", self.op("Reshape", p, shape), perm=perm)

    def attention(self, x, hidden, h, mask=None, causal=None, packed=False, scale_q=False, k_pair=False):
        d = hidden // h
        if packed:
            q, k, v = self.op("Split", self.linear(x, hidden, 3 * hidden), n_out=3, axis=2,
                              **({"num_outputs": 3} if self.opset >= 18 else {}))
        else:
            q, k, v = (self.linear(x, hidden, hidden) for _ in range(3))
        qh = self.heads(q, h, d, [0, 2, 1, 3])
        if k_pair:
            kh = self.op("Transpose", self.heads(k, h, d, [0, 2, 1, 3]), perm=[0, 1, 3, 2])
        else:
            kh = self.heads(k, h, d, [0, 2, 3, 1])
        vh = self.heads(v, h, d, [0, 2, 1, 3])
        if scale_q:
            qh = self.op("Mul", qh, self.const(1 / math.sqrt(d)))
        s = self.op("MatMul", qh, kh)
        if not scale_q:
            s = self.op("Div", s, self.const(math.sqrt(d)))
        if causal is not None:
            s = self.op("Where", causal, s, self.const(-10000.0))
        if mask is not None:
            s = self.op("Add", s, mask)
        ctx = self.op("MatMul", self.op("Softmax", s, axis=-1), vh)
        return self.op("Reshape", self.op("Transpose", ctx, perm=[0, 2, 1, 3]), self.const([0, 0, hidden], np.int64))

    def shape_dim(self, src, i):
        """Unsqueeze(Gather(Shape(src), i), [0]): dim i of src as a 1-D value."""
        g = self.op("Gather", self.op("Shape", src), self.const(i, np.int64), axis=0)
        return self.op("Unsqueeze", g, self.const([0], np.int64))

    def dynamic_attention(self, x, hidden, h, batch_dim=0):
        """Whisper's export (transformers' SDPA path): reshape targets read off Shape(x), and the scale
        Sqrt(1 / Sqrt(head size)) read off Shape(q) applied to q and to k^T."""
        d = hidden // h
        q, v = self.linear(x, hidden, hidden), self.linear(x, hidden, hidden)
        k = self.op("MatMul", x, self.weight(hidden, hidden))
        batch, seq = self.shape_dim(x, batch_dim), self.shape_dim(x, 1)

        def heads(p, perm, seq_dim):
            target = self.op("Concat", batch, seq_dim, self.const([h], np.int64), self.const([d], np.int64), axis=0)
            return self.op("Transpose", self.op("Reshape", p, target), perm=perm)

        qh = heads(q, [0, 2, 1, 3], seq)
        kh = heads(k, [0, 2, 3, 1], self.const([-1], np.int64))
        vh = heads(v, [0, 2, 1, 3], self.const([-1], np.int64))
        last = self.op("Slice", self.op("Shape", qh), self.const([-1], np.int64), self.const([2 ** 62], np.int64))
        root = self.op("Sqrt", self.op("Cast", last, to=F))
        scale = self.op("Sqrt", self.op("Div", self.const(1.0), root))
        scores = self.op("MatMul", self.op("Mul", qh, scale), self.op("Mul", kh, scale))
        ctx = self.op("MatMul", self.op("Softmax", scores, axis=-1), vh)
        target = self.op("Concat", batch, seq, self.const([hidden], np.int64), axis=0)
        return self.op("Reshape", self.op("Transpose", ctx, perm=[0, 2, 1, 3]), target)

    def model(self, inputs, outputs):
        return make_model(self.nodes, [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                          [helper.make_tensor_value_info(n, F, None) for n in outputs], self.inits, opset=self.opset)


def run_both(model, feeds):
    off = ort.SessionOptions()
    off.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    ref = ort.InferenceSession(model.SerializeToString(), off).run(None, feeds)
    sess = ort.InferenceSession(model.SerializeToString())
    got = sess.run(None, feeds)
    assert len(ref) == len(got)
    for a, b in zip(ref, got):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5)
    return [op for a in sess.get_provider_graph_assignment_info() for op in a.op_types], ref


def rand(*shape, seed=1):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# ------------------------------------------------------------------------------------------ LayerNorm

@pytest.mark.parametrize("opset", [13, 17, 18])
@pytest.mark.parametrize("square,swap", [("Pow", False), ("Mul", True)])
def test_layer_norm_chain_is_fused(opset, square, swap):
    b = Builder(opset)
    y = b.layer_norm("x", 16, square=square, swap=swap)
    ops, _ = run_both(b.model([("x", F, [2, 3, 16])], [y]), {"x": rand(2, 3, 16) * 3 + 1})
    assert ops == (["LayerNormalization"])


def test_layer_norm_without_affine_is_fused():
    b = Builder()
    y = b.layer_norm("x", 8, affine=False)
    assert run_both(b.model([("x", F, [4, 8])], [y]), {"x": rand(4, 8)})[0] == ["LayerNormalization"]


def test_layer_norm_over_other_axis_or_with_extra_reader_is_not_fused():
    b = Builder()
    m = b.op("ReduceMean", "x", axes=[1])
    d = b.op("Sub", "x", m)
    v = b.op("ReduceMean", b.op("Pow", d, b.const(2.0)), axes=[1])
    y = b.op("Div", d, b.op("Sqrt", b.op("Add", v, b.const(1e-5))))
    assert "LayerNormalization" not in run_both(b.model([("x", F, [2, 5, 8])], [y]), {"x": rand(2, 5, 8)})[0]
    b = Builder()
    y = b.layer_norm("x", 8)
    extra = b.nodes[1].output[0]  # the centered value, read by a graph output too
    ops, _ = run_both(b.model([("x", F, [2, 8])], [y, extra]), {"x": rand(2, 8)})
    assert "LayerNormalization" not in ops and "ReduceMean" in ops


def test_layer_norm_with_wrong_exponent_is_not_fused():
    b = Builder()
    m = b.reduce_mean("x")
    d = b.op("Sub", "x", m)
    v = b.reduce_mean(b.op("Pow", d, b.const(3.0)))
    y = b.op("Div", d, b.op("Sqrt", b.op("Add", v, b.const(10.0))))
    ops, _ = run_both(b.model([("x", F, [2, 8])], [y]), {"x": np.abs(rand(2, 8))})
    assert "LayerNormalization" not in ops and "ReduceMean" in ops


# ------------------------------------------------------------------------------------- SkipLayerNorm

def test_skip_layer_norm_with_bias_and_sum_read_elsewhere():
    b = Builder()
    dense = b.op("MatMul", "x", b.weight(16, 16))
    s = b.op("Add", b.op("Add", dense, b.weight(16)), "skip")
    y = b.layer_norm(s, 16)
    nxt = b.op("Add", s, y)  # the next residual reads the sum
    ops, _ = run_both(b.model([("x", F, [2, 3, 16]), ("skip", F, [2, 3, 16])], [nxt]),
                      {"x": rand(2, 3, 16), "skip": rand(2, 3, 16, seed=2)})
    assert sorted(ops) == ["Add", "MatMul", "SkipLayerNormalization"]


def test_skip_layer_norm_on_native_layer_norm_and_broadcast_skip():
    b = Builder()
    s = b.op("Add", "x", "pos")
    y = b.op("LayerNormalization", s, b.weight(8), b.weight(8), epsilon=1e-6)
    ops, _ = run_both(b.model([("x", F, [2, 3, 8]), ("pos", F, [3, 8])], [y]),
                      {"x": rand(2, 3, 8), "pos": rand(3, 8, seed=3)})
    assert ops == ["SkipLayerNormalization"]


# ------------------------------------------------------------------------------------------ GELU

@pytest.mark.parametrize("form", [0, 1, 2])
def test_erf_gelu_forms_are_fused(form):
    b = Builder()
    y = b.gelu(b.linear("x", 8, 12), form)
    ops, _ = run_both(b.model([("x", F, [3, 8])], [y]), {"x": rand(3, 8) * 3})
    assert sorted(ops) == ["BiasGelu", "MatMul"]  # the bias joins the GELU, as onnxruntime fuses it


def test_tanh_gelu_is_fused():
    b = Builder()
    y = b.fast_gelu("x")
    assert run_both(b.model([("x", F, [4, 10])], [y]), {"x": rand(4, 10) * 3})[0] == ["FastGelu"]


def test_gelu_with_wrong_constant_or_extra_reader_is_not_fused():
    b = Builder()
    one = b.op("Add", b.op("Erf", b.op("Div", "x", b.const(1.5))), b.const(1.0))
    y = b.op("Mul", b.op("Mul", "x", b.const(0.5)), one)
    ops = run_both(b.model([("x", F, [4])], [y]), {"x": rand(4)})[0]
    assert "Gelu" not in ops and "Erf" in ops
    b = Builder()
    y = b.gelu("x")
    erf = next(n.output[0] for n in b.nodes if n.op_type == "Erf")
    ops, _ = run_both(b.model([("x", F, [4])], [y, erf]), {"x": rand(4)})
    assert "Gelu" not in ops and "Erf" in ops


# ------------------------------------------------------------------------------------- Attention

@pytest.mark.parametrize("scale_q,k_pair", [(False, False), (True, True)])
def test_bert_attention_is_fused(scale_q, k_pair):
    b = Builder()
    y = b.attention("x", 16, 4, mask="mask", scale_q=scale_q, k_pair=k_pair)
    mask = np.where(np.arange(5) < np.array([[5], [3]]), 0.0, -10000.0).astype(np.float32).reshape(2, 1, 1, 5)
    ops, _ = run_both(b.model([("x", F, [2, 5, 16]), ("mask", F, [2, 1, 1, 5])], [y]),
                      {"x": rand(2, 5, 16), "mask": mask})
    assert ops == ["SelfAttention"]


@pytest.mark.parametrize("opset", [17, 18])
def test_gpt2_attention_with_packed_qkv_and_causal_mask_is_fused(opset):
    b = Builder(opset)
    causal = b.const(np.tril(np.ones((6, 6), bool)).reshape(1, 1, 6, 6), bool)
    y = b.attention("x", 16, 2, causal=causal, packed=True)
    ops, _ = run_both(b.model([("x", F, [1, 6, 16])], [y]), {"x": rand(1, 6, 16)})
    assert ops == ["Attention"]


@pytest.mark.parametrize("mask_shape", [None, (2, 1, 5, 5), (1, 4, 5, 5), (2, 4, 5, 5)])
def test_attention_masks_onnxruntime_takes_make_its_contrib_attention(mask_shape):
    """No mask, or an additive one of shape (B or 1, H or 1, S, S): onnxruntime's Attention (its
    attention_bias); a (B, 1, 1, S) mask, which that op cannot take, stays ort-core's SelfAttention."""
    b = Builder()
    y = b.attention("x", 16, 4, mask="mask" if mask_shape else None)
    inputs, feeds = [("x", F, [2, 5, 16])], {"x": rand(2, 5, 16)}
    if mask_shape:
        inputs.append(("mask", F, list(mask_shape)))
        feeds["mask"] = np.where(rand(*mask_shape, seed=5) > 0.5, -10000.0, 0.0).astype(np.float32)
    model = b.model(inputs, [y])
    ops, ref = run_both(model, feeds)
    assert ops == ["Attention"]
    theirs = _onnxruntime_runs_the_optimized_model(model, feeds)
    np.testing.assert_allclose(theirs[0], ref[0], rtol=1e-4, atol=1e-5)


def _onnxruntime_runs_the_optimized_model(model, feeds):
    """The model as ort-core's optimizer saves it, run by onnxruntime (one vocabulary of fused ops)."""
    onnxruntime = pytest.importorskip("onnxruntime")
    with tempfile.TemporaryDirectory() as tmp:
        so = ort.SessionOptions()
        so.optimized_model_filepath = os.path.join(tmp, "optimized.onnx")
        ort.InferenceSession(model.SerializeToString(), so)
        saved = onnx.load(so.optimized_model_filepath)
        assert not [n.op_type for n in saved.graph.node if n.domain == "ort_core"]
        return onnxruntime.InferenceSession(so.optimized_model_filepath,
                                            providers=["CPUExecutionProvider"]).run(None, feeds)


def test_gpt2_blocks_saved_after_fusion_run_in_onnxruntime():
    """Attention (unidirectional), SkipLayerNormalization, LayerNormalization and FastGelu as onnxruntime
    defines them: the saved optimized model gives onnxruntime the same results."""
    model, feeds = gpt2_model(), {"x": rand(1, 6, 32)}
    ops, ref = run_both(model, feeds)
    assert ops.count("Attention") == 2 and "SelfAttention" not in ops
    theirs = _onnxruntime_runs_the_optimized_model(model, feeds)
    np.testing.assert_allclose(theirs[0], ref[0], rtol=1e-4, atol=1e-4)


def test_attention_with_probabilities_read_elsewhere_or_cross_inputs_is_not_fused():
    b = Builder()
    y = b.attention("x", 8, 2)
    probs = next(n.output[0] for n in b.nodes if n.op_type == "Softmax")
    ops, _ = run_both(b.model([("x", F, [1, 3, 8])], [y, probs]), {"x": rand(1, 3, 8)})
    assert "Attention" not in ops and "Softmax" in ops
    b = Builder()
    y = b.attention("x", 8, 2)
    k_matmul = [n for n in b.nodes if n.op_type == "MatMul"][1]
    k_matmul.input[0] = "memory"  # keys and values from elsewhere: cross-attention
    ops, _ = run_both(b.model([("x", F, [1, 3, 8]), ("memory", F, [1, 3, 8])], [y]),
                      {"x": rand(1, 3, 8), "memory": rand(1, 3, 8, seed=4)})
    assert "Attention" not in ops and "Softmax" in ops


def test_attention_reshape_that_mixes_batch_and_sequence_is_not_fused():
    b = Builder()
    q, k, v = (b.linear("x", 8, 8) for _ in range(3))
    qh = b.heads(q, 2, 4, [0, 2, 1, 3], shape=[1, 4, 2, 4])  # (2, 2, 8) read as (1, 4, ...)
    kh = b.heads(k, 2, 4, [0, 2, 3, 1], shape=[1, 4, 2, 4])
    vh = b.heads(v, 2, 4, [0, 2, 1, 3], shape=[1, 4, 2, 4])
    ctx = b.op("MatMul", b.op("Softmax", b.op("MatMul", qh, kh), axis=-1), vh)
    y = b.op("Reshape", b.op("Transpose", ctx, perm=[0, 2, 1, 3]), b.const([0, 0, 8], np.int64))
    ops, _ = run_both(b.model([("x", F, [2, 2, 8])], [y]), {"x": rand(2, 2, 8)})
    assert "Attention" not in ops


# ------------------------------------------------------------------------------------ whole blocks

def bert_layer(b, x, hidden=32, heads=4, ffn=64):
    a = b.attention(x, hidden, heads, mask="mask")
    h = b.layer_norm(b.op("Add", b.op("Add", b.op("MatMul", a, b.weight(hidden, hidden)), b.weight(hidden)), x),
                     hidden)
    f = b.linear(b.gelu(b.linear(h, hidden, ffn)), ffn, hidden)
    return b.layer_norm(b.op("Add", f, h), hidden)


def gpt2_block(b, x, causal, hidden=32, heads=4):
    a = b.attention(b.layer_norm(x, hidden), hidden, heads, causal=causal, packed=True)
    h = b.op("Add", x, b.linear(a, hidden, hidden))
    return b.op("Add", h, b.linear(b.fast_gelu(b.linear(b.layer_norm(h, hidden), hidden, 4 * hidden)),
                                   4 * hidden, hidden))


def bert_model(layers=2, batch=2, seq=7):
    b = Builder()
    x = "x"
    for _ in range(layers):
        x = bert_layer(b, x)
    return b.model([("x", F, [batch, seq, 32]), ("mask", F, [batch, 1, 1, seq])], [x])


def gpt2_model(layers=2, seq=6):
    b = Builder()
    causal = b.const(np.tril(np.ones((seq, seq), bool)).reshape(1, 1, seq, seq), bool)
    x = "x"
    for _ in range(layers):
        x = gpt2_block(b, x, causal)
    return b.model([("x", F, [1, seq, 32])], [b.layer_norm(x, 32)])


def _bert_feeds(batch=2, seq=7):
    lengths = np.array([[seq], [seq - 3]])[:batch]
    mask = np.where(np.arange(seq) < lengths, 0.0, -10000.0).astype(np.float32).reshape(batch, 1, 1, seq)
    return {"x": rand(batch, seq, 32), "mask": mask}


def test_bert_layers_fuse_into_attention_skip_layer_norm_and_gelu():
    ops, _ = run_both(bert_model(), _bert_feeds())
    assert sorted(set(ops)) == ["BiasGelu", "MatMul", "SelfAttention", "SkipLayerNormalization"]  # biases absorbed
    assert ops.count("SelfAttention") == 2 and ops.count("SkipLayerNormalization") == 4 and ops.count("BiasGelu") == 2


def test_gpt2_blocks_fuse_into_attention_skip_layer_norm_and_fast_gelu():
    ops, _ = run_both(gpt2_model(), {"x": rand(1, 6, 32)})
    assert ops.count("Attention") == 2 and ops.count("FastGelu") == 2
    assert ops.count("SkipLayerNormalization") == 4 and ops.count("LayerNormalization") == 1  # all but the first


@pytest.mark.parametrize("make,feeds", [(bert_model, _bert_feeds), (gpt2_model, lambda: {"x": rand(1, 6, 32)})])
def test_fused_blocks_match_onnxruntime(make, feeds):
    onnxruntime = pytest.importorskip("onnxruntime")
    model, f = make(), feeds()
    want = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, f)
    got = ort.InferenceSession(model.SerializeToString()).run(None, f)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-4)


def test_tanh_gelu_with_wrong_coefficient_is_not_fused():
    b = Builder()
    cube = b.op("Mul", b.op("Pow", "x", b.const(3.0)), b.const(0.05))
    inner = b.op("Mul", b.op("Add", "x", cube), b.const(math.sqrt(2.0 / math.pi)))
    y = b.op("Mul", b.op("Mul", b.const(0.5), "x"), b.op("Add", b.op("Tanh", inner), b.const(1.0)))
    ops = run_both(b.model([("x", F, [4, 10])], [y]), {"x": rand(4, 10)})[0]
    assert "FastGelu" not in ops and "Tanh" in ops


def test_attention_with_softmax_over_other_axis_is_not_fused():
    b = Builder()
    y = b.attention("x", 8, 2)
    next(n for n in b.nodes if n.op_type == "Softmax").attribute[0].i = 2
    ops, _ = run_both(b.model([("x", F, [1, 3, 8])], [y]), {"x": rand(1, 3, 8)})
    assert "Attention" not in ops and "Softmax" in ops


def test_symbolic_batch_and_sequence_still_fuse():
    b = Builder()
    y = b.layer_norm(b.op("Add", b.attention("x", 16, 2, mask="mask"), "x"), 16)
    model = b.model([("x", F, ["B", "S", 16]), ("mask", F, ["B", 1, 1, "S"])], [y])
    mask = np.zeros((3, 1, 1, 4), np.float32)
    mask[1, ..., 2:] = -10000.0
    ops, _ = run_both(model, {"x": rand(3, 4, 16), "mask": mask})
    assert ops == ["SelfAttention", "SkipLayerNormalization"]


@pytest.mark.parametrize("dims", [["B", "S", 16], [2, 6, 16]])
def test_attention_whose_shapes_and_scale_come_from_shape_reads_is_fused(dims):
    """Reshape targets Concat(Shape(x)[0], Shape(x)[1], heads, size) and a scale computed from Shape(q)
    (Whisper's export): the scale folds once its dims are known, the fused node reads none of the shape
    computations, and they go with the pattern."""
    b = Builder()
    y = b.dynamic_attention("x", 16, 2)
    ops, _ = run_both(b.model([("x", F, dims)], [y]), {"x": rand(2, 6, 16)})
    assert ops == ["Attention"]


def test_attention_reading_a_wrong_dim_off_the_shape_is_not_fused():
    """A reshape target taking x's dim 1 where the batch goes is no head split of x: left alone (fed a
    square batch, so that it runs)."""
    b = Builder()
    y = b.dynamic_attention("x", 16, 2, batch_dim=1)
    ops, _ = run_both(b.model([("x", F, ["B", "S", 16])], [y]), {"x": rand(3, 3, 16)})
    assert "Attention" not in ops and "Softmax" in ops


def test_float64_chains_fuse_and_float16_chains_do_not():
    for dtype, elem in ((np.float64, TensorProto.DOUBLE), (np.float16, TensorProto.FLOAT16)):
        b = Builder()
        y = b.layer_norm("x", 8)
        for init in b.inits:
            if init.data_type == F:
                init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init).astype(dtype), init.name))
        model = b.model([("x", elem, [2, 8])], [y])
        model.graph.output[0].type.tensor_type.elem_type = elem
        off = ort.SessionOptions()
        off.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        x = rand(2, 8).astype(dtype)
        want = ort.InferenceSession(model.SerializeToString(), off).run(None, {"x": x})[0]
        sess = ort.InferenceSession(model.SerializeToString())
        np.testing.assert_allclose(sess.run(None, {"x": x})[0], want, rtol=1e-3 if dtype == np.float16 else 1e-6)
        ops = [op for a in sess.get_provider_graph_assignment_info() for op in a.op_types]
        assert ("LayerNormalization" in ops) == (dtype == np.float64)


def test_only_nodes_on_the_cpu_provider_are_fused():
    from ort_core.ir.load import load_model
    from ort_core.optimizer.cpu_fusion import fuse_nodes

    model = load_model(bert_model(layers=1), infer_shapes="in_process")
    softmax = {n.id for n in model.graph.nodes if n.op_type == "Softmax"}
    fuse_nodes(model, {n.id for n in model.graph.nodes} - softmax)  # as if another provider took Softmax
    ops = [n.op_type for n in model.graph.nodes]
    assert "Attention" not in ops and "Softmax" in ops
    assert ops.count("SkipLayerNormalization") == 2 and "BiasGelu" in ops


def test_attention_with_computed_mask_added_first_and_old_opset_is_fused():
    b = Builder(opset=12)
    ext = b.op("Mul", b.op("Sub", b.const(1.0), b.op("Unsqueeze", "keep", axes=[1, 2])), b.const(-10000.0))
    y = b.attention("x", 16, 4)
    add = next(n for n in b.nodes if n.op_type == "Softmax")
    s = b.op("Add", ext, add.input[0])  # the mask as the first operand
    add.input[0] = s
    b.nodes.insert(b.nodes.index(add), b.nodes.pop())
    keep = np.ones((2, 5), np.float32)
    keep[1, 3:] = 0
    model = b.model([("x", F, [2, 5, 16]), ("keep", F, [2, 5])], [y])
    feeds = {"x": rand(2, 5, 16), "keep": keep}
    ops, ref = run_both(model, feeds)
    # (1 - keep[:, None, None, :]) * c is onnxruntime's 2-D mask_index with mask_filter_value c
    assert "Attention" in ops and "Cast" in ops and "SelfAttention" not in ops and "Softmax" not in ops
    np.testing.assert_allclose(_onnxruntime_runs_the_optimized_model(model, feeds)[0], ref[0], rtol=1e-4, atol=1e-5)


def test_bert_key_mask_of_int64_ids_becomes_the_attention_mask_index():
    """As PyTorch exports BERT at opset 13+: an int64 (B, S) attention_mask, two Unsqueezes with axes
    inputs, a Cast to float, (1 - m) * finfo.min; both layers share one Cast to int32."""
    b = Builder(opset=14)
    m4 = b.op("Unsqueeze", b.op("Unsqueeze", "attention_mask", b.const([1], np.int64)), b.const([2], np.int64))
    ext = b.op("Mul", b.op("Sub", b.const(1.0), b.op("Cast", m4, to=TensorProto.FLOAT)),
               b.const(float(np.finfo(np.float32).min)))
    x = "x"
    for _ in range(2):
        x = b.attention(x, 16, 4, mask=ext)
    model = b.model([("x", F, [2, 6, 16]), ("attention_mask", TensorProto.INT64, [2, 6])], [x])
    mask = np.ones((2, 6), np.int64)
    mask[1, 4:] = 0
    feeds = {"x": rand(2, 6, 16), "attention_mask": mask}
    ops, ref = run_both(model, feeds)
    # one Cast to int32 for both layers; the model's Cast to float fed only the masks replaced, and went with them
    assert ops.count("Attention") == 2 and "SelfAttention" not in ops and ops.count("Cast") == 1
    np.testing.assert_allclose(_onnxruntime_runs_the_optimized_model(model, feeds)[0], ref[0], rtol=1e-4, atol=1e-4)


def test_a_provider_declaring_gelu_only_gets_gelu_and_keeps_the_bias_add():
    """Fused ops made for a provider's declared set (early fusion): with only com.microsoft::Gelu allowed, the
    bias Add before the erf chain stays a standard node rather than making a BiasGelu nobody declared."""
    from ort_core.ir.load import load_model
    from ort_core.optimizer.cpu_fusion import fuse_nodes

    model = load_model(bert_model(layers=1), infer_shapes="in_process")
    every = {n.id for n in model.graph.nodes}
    n_add = sum(n.op_type == "Add" for n in model.graph.nodes)
    fuse_nodes(model, every, frozenset({"com.microsoft::Gelu"}))
    ops = [n.op_type for n in model.graph.nodes]
    assert ops.count("Gelu") == 1 and "BiasGelu" not in ops and "Erf" not in ops
    assert ops.count("Add") == n_add - 1  # the erf chain's "1 +" went into Gelu; the bias Add is kept
