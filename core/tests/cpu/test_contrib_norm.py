"""onnxruntime's normalization contrib ops against its CPU provider: com.microsoft SkipLayerNormalization,
SkipSimplifiedLayerNormalization, EmbedLayerNormalization, and SimplifiedLayerNormalization /
LayerNormalization (below opset 17) in the ONNX domain."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from ort_core.errors import KernelError
from ort_core.ir.graph import Node
from ort_core.providers.cpu.registry import lookup

from .kernel_harness import check_onnxruntime, run_ours

RNG = np.random.default_rng(11)
MS = "com.microsoft"
H = 16


def _r(*shape, dtype=np.float32, shift=0.0):
    return (RNG.standard_normal(shape) + shift).astype(dtype)


def _ours(op, inputs, attrs=None, n_outputs=1, domain=MS, opset=1):
    return run_ours(op, inputs, attrs, opset=opset, n_outputs=n_outputs, domain=domain)


def _kernel(op, outputs, attrs=None, domain=MS, opset=1, n_inputs=5):
    node = Node(op, [f"x{i}" for i in range(n_inputs)], outputs, dict(attrs or {}), domain=domain,
                name=f"test_{op}", id=0)
    return lookup(domain, op, opset).factory(node, opset)


def _layer_norm64(s, gamma, beta, eps):
    s = s.astype(np.float64)
    mean = s.mean(-1, keepdims=True)
    inv = 1 / np.sqrt(s.var(-1, keepdims=True) + eps)
    y = (s - mean) * inv * gamma
    return (y if beta is None else y + beta), mean, inv


# ---------------------------------------------------------------------------------------------
# SkipLayerNormalization / SkipSimplifiedLayerNormalization
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("skip_shape", [(2, 5, H), (1, 5, H), (5, H)])
def test_skip_layer_norm_all_outputs(skip_shape):
    x, skip, gamma, beta, bias = _r(2, 5, H, shift=1.0), _r(*skip_shape), _r(H), _r(H), _r(H)
    y, mean, inv, s = check_onnxruntime("SkipLayerNormalization", [x, skip, gamma, beta, bias], n_outputs=4,
                                        rtol=1e-5, atol=1e-5)
    assert mean.shape == inv.shape == (2, 5, 1) and mean.dtype == inv.dtype == np.float32
    np.testing.assert_allclose(s, x + skip + bias, rtol=1e-6, atol=1e-6)
    want, want_mean, want_inv = _layer_norm64(x + skip + bias, gamma, beta, 1e-12)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(mean, want_mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(inv, want_inv, rtol=1e-5)


@pytest.mark.parametrize("skip_batch", [3, 2, 6])
def test_skip_of_another_batch_size_is_read_cyclically(skip_batch):
    # onnxruntime takes any 3-D skip whose last two dimensions fit, batch b adding skip[b % len(skip)]
    x, skip, gamma = _r(4, 3, H), _r(skip_batch, 3, H), _r(H)
    s = check_onnxruntime("SkipLayerNormalization", [x, skip, gamma], n_outputs=4, atol=1e-5)[3]
    np.testing.assert_allclose(s, x + skip[np.arange(4) % skip_batch], rtol=1e-6)


@pytest.mark.parametrize("n_outputs", [1, 2, 3, 4])
def test_skip_layer_norm_output_counts(n_outputs):
    inputs = [_r(3, 4, H), _r(3, 4, H), _r(H), _r(H)]
    outs = check_onnxruntime("SkipLayerNormalization", inputs, n_outputs=n_outputs, atol=1e-5)
    assert len(outs) == n_outputs and all(o is not None for o in outs)


def test_skip_layer_norm_two_d_input_and_epsilon():
    inputs = [_r(7, H), _r(7, H), _r(H), None, _r(H)]
    check_onnxruntime("SkipLayerNormalization", inputs, {"epsilon": 0.5}, n_outputs=4, atol=1e-5)


def test_skip_layer_norm_without_beta_and_bias():
    x, skip, gamma = _r(2, 3, H), _r(2, 3, H), _r(H)
    y = check_onnxruntime("SkipLayerNormalization", [x, skip, gamma], atol=1e-5)[0]
    np.testing.assert_allclose(y, _layer_norm64(x + skip, gamma, None, 1e-12)[0], rtol=1e-5, atol=1e-5)


def test_skip_layer_norm_float16():
    inputs = [_r(2, 3, H, dtype=np.float16) for _ in range(2)] + [_r(H, dtype=np.float16) for _ in range(3)]
    outs = check_onnxruntime("SkipLayerNormalization", inputs, n_outputs=4, rtol=2e-3, atol=2e-3)
    assert [o.dtype for o in outs] == [np.float16, np.float32, np.float32, np.float16]


def test_skip_layer_norm_bfloat16_runs_in_float32():
    inputs = [_r(2, 3, H), _r(1, 3, H), _r(H), _r(H), _r(H)]
    bf = [a.astype(ml_dtypes.bfloat16) for a in inputs]
    ours = _ours("SkipLayerNormalization", bf, n_outputs=4)
    ref = _ours("SkipLayerNormalization", [a.astype(np.float32) for a in bf], n_outputs=4)
    assert [o.dtype for o in ours] == [bf[0].dtype, np.float32, np.float32, bf[0].dtype]
    for a, b in zip(ours, ref):
        np.testing.assert_array_equal(a, b.astype(a.dtype))


def test_skip_layer_norm_float64_computes_in_double():
    x, skip, gamma, beta = (_r(2, 3, H, dtype=np.float64), _r(3, H, dtype=np.float64), _r(H, dtype=np.float64),
                            _r(H, dtype=np.float64))
    y, mean, inv = _ours("SkipLayerNormalization", [x, skip, gamma, beta], {"epsilon": 1e-3}, n_outputs=3)
    want, want_mean, want_inv = _layer_norm64(x + skip, gamma, beta, float(np.float32(1e-3)))  # a float attribute
    assert y.dtype == np.float64 and mean.dtype == np.float32
    np.testing.assert_allclose(y, want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(inv, want_inv, rtol=1e-6)


def test_skip_layer_norm_omitted_middle_outputs():
    kernel = _kernel("SkipLayerNormalization", ["y", "", "", "sum"])
    x, skip, gamma, bias = _r(2, 3, H), _r(2, 3, H), _r(H), _r(H)
    y, mean, inv, s = kernel(x, skip, gamma, None, bias)
    assert mean is None and inv is None
    np.testing.assert_allclose(s, x + skip + bias, rtol=1e-6)
    np.testing.assert_allclose(y, _layer_norm64(s, gamma, None, 1e-12)[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("skip_shape", [(2, 5, H), (1, 5, H), (5, H)])
def test_skip_simplified_layer_norm(skip_shape):
    x, skip, gamma, bias = _r(2, 5, H, shift=1.0), _r(*skip_shape), _r(H), _r(H)
    y, mean, inv, s = check_onnxruntime("SkipSimplifiedLayerNormalization", [x, skip, gamma, bias],
                                        {"epsilon": 1e-4}, n_outputs=4, rtol=1e-5, atol=1e-5)
    s64 = (x + skip + bias).astype(np.float64)
    want_inv = 1 / np.sqrt((s64 ** 2).mean(-1, keepdims=True) + 1e-4)
    np.testing.assert_allclose(y, s64 * want_inv * gamma, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(inv, want_inv, rtol=1e-5)
    np.testing.assert_array_equal(mean, np.zeros((2, 5, 1), np.float32))  # onnxruntime leaves zeros there


def test_skip_simplified_layer_norm_two_d_no_bias_and_float16():
    check_onnxruntime("SkipSimplifiedLayerNormalization", [_r(6, H), _r(6, H), _r(H)], n_outputs=3, atol=1e-5)
    inputs = [_r(6, H, dtype=np.float16), _r(6, H, dtype=np.float16), _r(H, dtype=np.float16),
              _r(H, dtype=np.float16)]
    check_onnxruntime("SkipSimplifiedLayerNormalization", inputs, n_outputs=4, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("op", ["SkipLayerNormalization", "SkipSimplifiedLayerNormalization"])
@pytest.mark.parametrize("x_shape, skip_shape", [
    ((2, 3, H), (H,)), ((2, 3, H), (2, 1, H)), ((2, 3, H), (6, H)), ((2, 3, H), (0, 3, H)), ((6, H), (1, H)),
    ((6, H), (1, 6, H)), ((H,), (H,)), ((1, 2, 3, H), (1, 2, 3, H)), ((2, 3, H), (1, 1, 2, 3, H))])
def test_skip_bad_shapes_name_the_node(op, x_shape, skip_shape):
    with pytest.raises(KernelError, match=f"test_{op}.*(skip|input)"):
        _ours(op, [_r(*x_shape), _r(*skip_shape), _r(H)])


@pytest.mark.parametrize("which, shape", [(2, (H + 1,)), (2, (1, H)), (3, (H - 1,)), (4, (2, H))])
def test_skip_bad_vectors(which, shape):
    inputs = [_r(2, 3, H), _r(2, 3, H), _r(H), _r(H), _r(H)]
    inputs[which] = _r(*shape)
    name = {2: "gamma", 3: "beta", 4: "bias"}[which]
    with pytest.raises(KernelError, match=f"test_SkipLayerNormalization.*{name}"):
        _ours("SkipLayerNormalization", inputs)


def test_skip_bad_types():
    with pytest.raises(KernelError, match="skip has type float16"):
        _ours("SkipLayerNormalization", [_r(2, 3, H), _r(2, 3, H, dtype=np.float16), _r(H)])
    with pytest.raises(KernelError, match="int32"):
        _ours("SkipLayerNormalization", [np.ones((2, H), np.int32), np.ones((2, H), np.int32), _r(H)])
    with pytest.raises(KernelError, match="at most 4 outputs"):
        _ours("SkipLayerNormalization", [_r(2, H), _r(2, H), _r(H)], n_outputs=5)


# ---------------------------------------------------------------------------------------------
# EmbedLayerNormalization
# ---------------------------------------------------------------------------------------------

B, S, VOCAB, POS, SEG = 3, 5, 20, 8, 2


def _embed_inputs(dtype=np.float32):
    ids = RNG.integers(0, VOCAB, (B, S)).astype(np.int32)
    seg = RNG.integers(0, SEG, (B, S)).astype(np.int32)
    tables = [_r(VOCAB, H, dtype=dtype), _r(POS, H, dtype=dtype), _r(SEG, H, dtype=dtype)]
    gamma, beta = _r(H, dtype=dtype), _r(H, dtype=dtype)
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 1, 2, 1]], np.int32)
    return [ids, seg, *tables, gamma, beta, mask]


def test_embed_layer_norm_all_inputs_and_outputs():
    inputs = _embed_inputs()
    ids, seg, word, pos, segment, gamma, beta, _ = inputs
    y, mask_index, s = check_onnxruntime("EmbedLayerNormalization", inputs, n_outputs=3, atol=1e-5)
    np.testing.assert_array_equal(mask_index, np.array([3, 5, 3], np.int32))  # counts of the 1s in each row
    assert mask_index.dtype == np.int32
    want_sum = word[ids] + pos[:S] + segment[seg]
    np.testing.assert_allclose(s, want_sum, rtol=1e-6)
    np.testing.assert_allclose(y, _layer_norm64(want_sum, gamma, beta, 1e-12)[0], rtol=1e-5, atol=1e-5)


def test_embed_layer_norm_without_mask_gives_zero_mask_index():
    inputs = _embed_inputs()[:7]
    mask_index = check_onnxruntime("EmbedLayerNormalization", inputs, {"epsilon": 1e-3}, n_outputs=3, atol=1e-5)[1]
    np.testing.assert_array_equal(mask_index, np.zeros(B, np.int32))


def test_embed_layer_norm_without_segments():
    inputs = _embed_inputs()
    inputs[1] = inputs[4] = None
    s = check_onnxruntime("EmbedLayerNormalization", inputs, n_outputs=3, atol=1e-5)[2]
    np.testing.assert_allclose(s, inputs[2][inputs[0]] + inputs[3][:S], rtol=1e-6)


def test_embed_layer_norm_segment_table_without_ids_adds_segment_zero():
    inputs = _embed_inputs()
    inputs[1] = None
    s = check_onnxruntime("EmbedLayerNormalization", inputs, n_outputs=3, atol=1e-5)[2]
    np.testing.assert_allclose(s, inputs[2][inputs[0]] + inputs[3][:S] + inputs[4][0], rtol=1e-6)


@pytest.mark.parametrize("pos_batch", [1, B])
def test_embed_layer_norm_position_ids(pos_batch):
    inputs = _embed_inputs() + [RNG.integers(0, POS, (pos_batch, S)).astype(np.int32)]
    s = check_onnxruntime("EmbedLayerNormalization", inputs, n_outputs=3, atol=1e-5)[2]
    ids, seg, word, pos, segment = inputs[:5]
    np.testing.assert_allclose(s, word[ids] + pos[inputs[8]] + segment[seg], rtol=1e-6)


@pytest.mark.parametrize("mask_index_type", [0, 1])
def test_embed_layer_norm_mask_index_type(mask_index_type):
    # onnxruntime's CPU kernel computes mask_index whatever this (shape-inference) attribute says
    check_onnxruntime("EmbedLayerNormalization", _embed_inputs(), {"mask_index_type": mask_index_type},
                      n_outputs=2, atol=1e-5)


def test_embed_layer_norm_output_only():
    check_onnxruntime("EmbedLayerNormalization", _embed_inputs(), {"mask_index_type": 0}, atol=1e-5)


def test_embed_layer_norm_float16():
    outs = check_onnxruntime("EmbedLayerNormalization", _embed_inputs(np.float16), n_outputs=3, rtol=2e-3,
                             atol=2e-3)
    assert [o.dtype for o in outs] == [np.float16, np.int32, np.float16]


def test_embed_layer_norm_empty_batch():
    inputs = _embed_inputs()[:7]
    inputs[0] = inputs[1] = np.zeros((0, S), np.int32)
    check_onnxruntime("EmbedLayerNormalization", inputs, n_outputs=3)


def test_embed_layer_norm_int64_ids_as_int32():
    inputs = _embed_inputs()
    wide = [a.astype(np.int64) if a.dtype == np.int32 else a for a in inputs]
    for a, b in zip(_ours("EmbedLayerNormalization", inputs, n_outputs=3),
                    _ours("EmbedLayerNormalization", wide, n_outputs=3)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("which, value", [(0, VOCAB), (0, -1), (1, SEG), (8, POS)])
def test_embed_layer_norm_ids_out_of_range(which, value):
    inputs = _embed_inputs() + [np.zeros((1, S), np.int32)]
    inputs[which] = inputs[which].copy()
    inputs[which][0, 2] = value
    with pytest.raises(KernelError, match="test_EmbedLayerNormalization.*out of range"):
        _ours("EmbedLayerNormalization", inputs, n_outputs=2)


def test_embed_layer_norm_sequence_longer_than_positions():
    inputs = _embed_inputs()[:7]
    inputs[0] = inputs[1] = np.zeros((1, POS + 1), np.int32)
    with pytest.raises(KernelError, match="test_EmbedLayerNormalization.*sequence length 9"):
        _ours("EmbedLayerNormalization", inputs, n_outputs=2)


@pytest.mark.parametrize("which, shape", [
    (0, (B * S,)), (1, (1, S)), (7, (B, S + 1)), (8, (2, S)), (8, (1, S - 1)), (8, (S,)), (2, (VOCAB * H,)),
    (3, (POS, H + 1)), (4, (SEG, 1, H)), (5, (H - 1,)), (6, (1, H))])
def test_embed_layer_norm_bad_shapes(which, shape):
    inputs = _embed_inputs() + [np.zeros((1, S), np.int32)]
    inputs[which] = np.zeros(shape, inputs[which].dtype)
    with pytest.raises(KernelError, match="test_EmbedLayerNormalization"):
        _ours("EmbedLayerNormalization", inputs, n_outputs=2)


def test_embed_layer_norm_bad_inputs_and_attributes():
    inputs = _embed_inputs()
    inputs[4] = None
    with pytest.raises(KernelError, match="segment_ids is given without segment_embedding"):
        _ours("EmbedLayerNormalization", inputs, n_outputs=2)
    inputs = _embed_inputs()
    inputs[0] = inputs[0].astype(np.float32)
    with pytest.raises(KernelError, match="input_ids must be int32"):
        _ours("EmbedLayerNormalization", inputs, n_outputs=2)
    with pytest.raises(KernelError, match="test_EmbedLayerNormalization.*unsupported mask_index_type 2"):
        _ours("EmbedLayerNormalization", _embed_inputs(), {"mask_index_type": 2}, n_outputs=2)


# ---------------------------------------------------------------------------------------------
# SimplifiedLayerNormalization and LayerNormalization (opset < 17), ONNX domain
# ---------------------------------------------------------------------------------------------

X_SHAPE = (2, 3, 4, 5)


def _rms64(x, scale, axis, eps):
    axes = tuple(range(axis % x.ndim, x.ndim))
    inv = 1 / np.sqrt((x.astype(np.float64) ** 2).mean(axes, keepdims=True) + eps)
    return x * inv * scale, inv


@pytest.mark.parametrize("axis, scale_shape", [
    (-1, (5,)), (-2, (4, 5)), (1, (3, 4, 5)), (0, X_SHAPE), (-1, (1, 5)), (-2, (4, 1)), (-1, (2, 1, 1, 5)),
    (-1, (4, 5)), (1, (1,))])
def test_simplified_layer_norm(axis, scale_shape):
    x, scale = _r(*X_SHAPE, shift=0.5), _r(*scale_shape)
    y, inv = check_onnxruntime("SimplifiedLayerNormalization", [x, scale], {"axis": axis, "epsilon": 1e-3},
                               n_outputs=2, domain="", opset=13, atol=1e-5)
    want, want_inv = _rms64(x, scale, axis, 1e-3)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(inv, want_inv, rtol=1e-5)


@pytest.mark.parametrize("dtype, tol", [(np.float16, 2e-3), (np.float64, 1e-10)])
def test_simplified_layer_norm_types(dtype, tol):
    outs = check_onnxruntime("SimplifiedLayerNormalization", [_r(3, 7, dtype=dtype), _r(7, dtype=dtype)],
                             n_outputs=2, domain="", opset=13, rtol=tol, atol=tol)
    assert [o.dtype for o in outs] == [dtype, np.float32]


@pytest.mark.parametrize("x_type, scale_type", [(np.float16, np.float32), (np.float32, np.float16)])
def test_simplified_layer_norm_output_has_scale_type(x_type, scale_type):
    y = check_onnxruntime("SimplifiedLayerNormalization", [_r(3, 7, dtype=x_type), _r(7, dtype=scale_type)],
                          domain="", opset=13, rtol=2e-3, atol=2e-3)[0]
    assert y.dtype == scale_type


def test_simplified_layer_norm_double_stash():
    # onnxruntime's CPU provider has no kernel for stash_type 11 here; ours stashes and computes in double
    x, scale = _r(4, 6), _r(6)
    y, inv = _ours("SimplifiedLayerNormalization", [x, scale], {"stash_type": 11}, n_outputs=2, domain="", opset=13)
    want, want_inv = _rms64(x, scale, -1, 1e-5)
    assert y.dtype == np.float32 and inv.dtype == np.float64
    np.testing.assert_allclose(inv, want_inv, rtol=1e-12)
    np.testing.assert_allclose(y, want, rtol=1e-6, atol=1e-6)


def test_simplified_layer_norm_bfloat16():
    x, scale = _r(4, 6).astype(ml_dtypes.bfloat16), _r(6).astype(ml_dtypes.bfloat16)
    y, inv = _ours("SimplifiedLayerNormalization", [x, scale], n_outputs=2, domain="", opset=13)
    ref = _ours("SimplifiedLayerNormalization", [x.astype(np.float32), scale.astype(np.float32)], n_outputs=2,
                domain="", opset=13)
    assert y.dtype == x.dtype
    np.testing.assert_array_equal(y, ref[0].astype(x.dtype))
    np.testing.assert_array_equal(inv, ref[1])


def test_simplified_layer_norm_errors():
    with pytest.raises(KernelError, match="test_SimplifiedLayerNormalization.*unsupported stash_type 10"):
        _ours("SimplifiedLayerNormalization", [_r(2, 5), _r(5)], {"stash_type": 10}, domain="", opset=13)
    with pytest.raises(KernelError, match="test_SimplifiedLayerNormalization.*axis 2 is out of range"):
        _ours("SimplifiedLayerNormalization", [_r(2, 5), _r(5)], {"axis": 2}, domain="", opset=13)
    for shape in [(6,), (1, 1, 5), (3, 5)]:
        with pytest.raises(KernelError, match="test_SimplifiedLayerNormalization.*scale of shape"):
            _ours("SimplifiedLayerNormalization", [_r(2, 5), _r(*shape)], domain="", opset=13)
    with pytest.raises(KernelError, match="int32"):
        _ours("SimplifiedLayerNormalization", [np.ones((2, 5), np.int32), _r(5)], domain="", opset=13)


@pytest.mark.parametrize("opset", [1, 13, 16])
@pytest.mark.parametrize("axis", [-1, -2, 1])
def test_layer_norm_before_opset_17(opset, axis):
    x = _r(*X_SHAPE, shift=2.0)
    inputs = [x, _r(*X_SHAPE[axis:]), _r(*X_SHAPE[axis:])]
    check_onnxruntime("LayerNormalization", inputs, {"axis": axis, "epsilon": 1e-3}, n_outputs=3, domain="",
                      opset=max(opset, 7), atol=1e-5)
    if opset < 7:  # onnxruntime cannot load a model of so low an opset: check our lookup runs it
        y = _ours("LayerNormalization", inputs, {"axis": axis}, domain="", opset=opset)[0]
        assert y.shape == X_SHAPE


def test_layer_norm_before_opset_17_is_onnx_kernel_afterwards():
    from ort_core.providers.cpu.ops.contrib_norm import layer_normalization_contrib_factory
    from ort_core.providers.cpu.ops.normalization import layer_normalization_factory

    assert lookup("", "LayerNormalization", 16).factory is layer_normalization_contrib_factory
    assert lookup("", "LayerNormalization", 17).factory is layer_normalization_factory


@pytest.mark.parametrize("scale_shape", [(1, 5), (4, 5), (3, 1, 5), X_SHAPE])
def test_layer_norm_before_opset_17_broadcast_scale(scale_shape):
    check_onnxruntime("LayerNormalization", [_r(*X_SHAPE), _r(*scale_shape), _r(*scale_shape)], n_outputs=3,
                      domain="", opset=13, atol=1e-5)


def test_layer_norm_before_opset_17_without_bias_and_types():
    check_onnxruntime("LayerNormalization", [_r(3, 9), _r(9)], n_outputs=3, domain="", opset=13, atol=1e-5)
    outs = check_onnxruntime("LayerNormalization", [_r(3, 9, dtype=np.float16), _r(9, dtype=np.float16)],
                             n_outputs=3, domain="", opset=13, rtol=2e-3, atol=2e-3)
    assert [o.dtype for o in outs] == [np.float16, np.float32, np.float32]
    outs = check_onnxruntime("LayerNormalization", [_r(3, 9, dtype=np.float64), _r(9, dtype=np.float64)],
                             {"stash_type": 11}, n_outputs=3, domain="", opset=13, rtol=1e-10, atol=1e-10)
    assert [o.dtype for o in outs] == [np.float64, np.float64, np.float64]


@pytest.mark.parametrize("x_type, scale_type", [(np.float16, np.float32), (np.float32, np.float16)])
def test_layer_norm_before_opset_17_output_has_scale_type(x_type, scale_type):
    inputs = [_r(3, 9, dtype=x_type), _r(9, dtype=scale_type), _r(9, dtype=scale_type)]
    y = check_onnxruntime("LayerNormalization", inputs, n_outputs=3, domain="", opset=13, rtol=2e-3, atol=2e-3)[0]
    assert y.dtype == scale_type


def test_layer_norm_before_opset_17_errors():
    for shape in [(6,), (1, 1, 5), (3, 5)]:
        with pytest.raises(KernelError, match="test_LayerNormalization.*scale of shape"):
            _ours("LayerNormalization", [_r(2, 5), _r(*shape)], domain="", opset=13)
    with pytest.raises(KernelError, match="test_LayerNormalization.*B has type float16"):
        _ours("LayerNormalization", [_r(2, 5), _r(5), _r(5, dtype=np.float16)], domain="", opset=13)
    with pytest.raises(KernelError, match="test_LayerNormalization.*axis -3 is out of range"):
        _ours("LayerNormalization", [_r(2, 5), _r(5)], {"axis": -3}, domain="", opset=13)
