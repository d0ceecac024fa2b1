"""Normalization kernels against onnx's reference evaluator and float64 formulas from the spec."""

from __future__ import annotations

import numpy as np
import pytest

from ort_core.errors import KernelError

from .kernel_harness import check, run_ours


def rand(rng, *shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def bn_inputs(rng, shape, c_shape=None):
    c_shape = c_shape or (shape[1],)
    x = rand(rng, *shape)
    scale, bias, mean = rand(rng, *c_shape), rand(rng, *c_shape), rand(rng, *c_shape)
    var = rng.uniform(0.5, 2.0, c_shape).astype(np.float32)
    return [x, scale, bias, mean, var]


def bn_expected(x, scale, bias, mean, var, eps=1e-5, spatial=True):
    shape = (-1,) + (1,) * (x.ndim - 2) if spatial else (1,) + scale.shape
    f = [np.asarray(a, np.float64).reshape(shape) for a in (scale, bias, mean, var)]
    return ((x - f[2]) / np.sqrt(f[3] + eps) * f[0] + f[1]).astype(x.dtype)


# ---------------------------------------------------------------------------------------------
# BatchNormalization
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(2, 3), (2, 3, 5), (2, 3, 4, 5), (1, 3, 2, 3, 4)])
@pytest.mark.parametrize("opset", [14, 15])
def test_batch_norm_reference(shape, opset):
    rng = np.random.default_rng(0)
    check("BatchNormalization", bn_inputs(rng, shape), dict(epsilon=1e-3), opset=opset)


@pytest.mark.parametrize("shape", [(2, 3), (2, 3, 4, 5)])
def test_batch_norm_opset9(shape):
    # the reference treats opset 9 as training whenever momentum (default 0.9) is set
    rng = np.random.default_rng(0)
    inputs = bn_inputs(rng, shape)
    (y,) = run_ours("BatchNormalization", inputs, dict(epsilon=1e-3), opset=9)
    np.testing.assert_allclose(y, bn_expected(*inputs, eps=1e-3), rtol=1e-5, atol=1e-5)


def test_batch_norm_opset6_is_test():
    rng = np.random.default_rng(1)
    check("BatchNormalization", bn_inputs(rng, (2, 3, 4, 5)), dict(is_test=1, epsilon=1e-4), opset=6)


@pytest.mark.parametrize("opset,attrs", [
    (1, dict(consumed_inputs=[0, 0, 0, 1, 1], is_test=1)),
    (1, dict(is_test=0)),  # only Y requested: runs in inference mode, like onnxruntime
    (6, dict(spatial=1)),
    (7, dict(spatial=1, momentum=0.9)),
    (7, {}),
    (14, dict(training_mode=0, momentum=0.5)),
])
def test_batch_norm_old_attrs(opset, attrs):
    rng = np.random.default_rng(2)
    inputs = bn_inputs(rng, (2, 3, 4, 5))
    (y,) = run_ours("BatchNormalization", inputs, attrs, opset=opset)
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, bn_expected(*inputs), rtol=1e-5, atol=1e-5)


def test_batch_norm_spatial0():
    rng = np.random.default_rng(3)
    inputs = bn_inputs(rng, (2, 3, 4, 5), c_shape=(3, 4, 5))
    (y,) = run_ours("BatchNormalization", inputs, dict(spatial=0, is_test=1), opset=6)
    np.testing.assert_allclose(y, bn_expected(*inputs, spatial=False), rtol=1e-5, atol=1e-5)


def test_batch_norm_mixed_dtypes_and_float16():
    rng = np.random.default_rng(4)
    x, scale, bias, mean, var = bn_inputs(rng, (2, 3, 4))
    # opset 15: X/scale/B (T, T1) may differ from mean/var (T2)
    inputs = [x.astype(np.float16), scale.astype(np.float16), bias.astype(np.float16), mean, var]
    (y,) = run_ours("BatchNormalization", inputs, {}, opset=15)
    assert y.dtype == np.float16
    np.testing.assert_allclose(y.astype(np.float32), bn_expected(*[a.astype(np.float32) for a in inputs]),
                               rtol=2e-3, atol=2e-3)
    check("BatchNormalization", [a.astype(np.float64) for a in (x, scale, bias, mean, var)], {}, opset=15)


def test_batch_norm_shape_errors():
    rng = np.random.default_rng(6)
    x, scale, bias, mean, var = bn_inputs(rng, (2, 3, 4))
    with pytest.raises(KernelError, match="scale"):
        run_ours("BatchNormalization", [x, scale[:2], bias, mean, var], {}, opset=15)
    with pytest.raises(KernelError, match="rank"):
        run_ours("BatchNormalization", [x[0, 0], scale, bias, mean, var], {}, opset=15)


def bn_training_expected(x, scale, bias, mean, var, momentum=0.9, eps=1e-5):
    axes = (0,) + tuple(range(2, x.ndim))
    cur_mean = x.astype(np.float64).mean(axis=axes)
    cur_var = x.astype(np.float64).var(axis=axes)
    y = bn_expected(x, scale, bias, cur_mean, cur_var, eps)
    return (y, mean * momentum + cur_mean * (1 - momentum), var * momentum + cur_var * (1 - momentum),
            cur_mean, cur_var)


@pytest.mark.parametrize("shape", [(4, 3), (2, 3, 4, 5)])
@pytest.mark.parametrize("opset", [14, 15])
def test_batch_norm_training(shape, opset):
    rng = np.random.default_rng(5)
    inputs = bn_inputs(rng, shape)
    attrs = dict(training_mode=1, momentum=0.8, epsilon=1e-3)
    y, run_mean, run_var = check("BatchNormalization", inputs, attrs, opset=opset, n_outputs=3)
    exp = bn_training_expected(*inputs, momentum=0.8, eps=1e-3)
    for got, want in zip((y, run_mean, run_var), exp):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    (y_only,) = run_ours("BatchNormalization", inputs, attrs, opset=opset)  # Y alone, still training
    np.testing.assert_allclose(y_only, exp[0], rtol=1e-5, atol=1e-5)


def test_batch_norm_training_opset9_five_outputs_and_float16():
    rng = np.random.default_rng(7)
    inputs = bn_inputs(rng, (3, 2, 4))
    outs = run_ours("BatchNormalization", inputs, {}, opset=9, n_outputs=5)
    for got, want in zip(outs, bn_training_expected(*inputs)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    x16 = inputs[0].astype(np.float16)
    y, m, v = run_ours("BatchNormalization", [x16] + inputs[1:], dict(training_mode=1), opset=15,
                       n_outputs=3)
    assert y.dtype == np.float16 and m.dtype == v.dtype == np.float32


def test_batch_norm_extra_outputs_need_training():
    rng = np.random.default_rng(5)
    inputs = bn_inputs(rng, (2, 3, 4))
    with pytest.raises(KernelError, match="training mode"):
        run_ours("BatchNormalization", inputs, dict(training_mode=0), opset=15, n_outputs=3)
    with pytest.raises(KernelError, match="is_test=1"):
        run_ours("BatchNormalization", inputs, dict(is_test=1), opset=6, n_outputs=5)


# ---------------------------------------------------------------------------------------------
# LRN
# ---------------------------------------------------------------------------------------------

def lrn_expected(x, size, alpha=1e-4, beta=0.75, bias=1.0):
    x64 = x.astype(np.float64)
    C = x.shape[1]
    sq = np.zeros_like(x64)
    for c in range(C):
        lo, hi = max(0, c - (size - 1) // 2), min(C - 1, c + -(-(size - 1) // 2))
        sq[:, c] = (x64[:, lo:hi + 1] ** 2).sum(axis=1)
    return (x64 / (bias + alpha / size * sq) ** beta).astype(x.dtype)


@pytest.mark.parametrize("attrs", [dict(size=3), dict(size=5, alpha=0.01, beta=0.5, bias=2.0), dict(size=2),
                                   dict(size=4, alpha=1e-3)], ids=str)
def test_lrn(attrs):
    rng = np.random.default_rng(10)
    # the reference loops its channel window over the batch axis: equal N and C keeps it right
    x = rand(rng, 5, 5, 3, 4)
    check("LRN", [x], attrs)
    check("LRN", [x], attrs, opset=1)
    x2 = rand(rng, 2, 7, 3, 3)
    (y,) = run_ours("LRN", [x2], attrs)
    np.testing.assert_allclose(y, lrn_expected(x2, **attrs), rtol=1e-5, atol=1e-6)


def test_lrn_errors():
    with pytest.raises(KernelError, match="size"):
        run_ours("LRN", [np.zeros((1, 2, 3, 3), np.float32)], {})


# ---------------------------------------------------------------------------------------------
# InstanceNormalization
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(2, 3, 5), (2, 3, 4, 5), (1, 2, 3, 4, 5)])
@pytest.mark.parametrize("opset", [1, 6, 22])
def test_instance_norm(shape, opset):
    rng = np.random.default_rng(20)
    x = rand(rng, *shape) * 3 + 1
    check("InstanceNormalization", [x, rand(rng, shape[1]), rand(rng, shape[1])], dict(epsilon=1e-4),
          opset=opset, rtol=1e-4, atol=1e-5)


def test_instance_norm_float16():
    rng = np.random.default_rng(21)
    x, s, b = rand(rng, 2, 3, 8), rand(rng, 3), rand(rng, 3)
    half = [a.astype(np.float16) for a in (x, s, b)]
    (y,) = run_ours("InstanceNormalization", half, {})
    (y32,) = run_ours("InstanceNormalization", [a.astype(np.float32) for a in half], {})
    assert y.dtype == np.float16
    np.testing.assert_allclose(y.astype(np.float32), y32, rtol=2e-3, atol=2e-3)


# ---------------------------------------------------------------------------------------------
# LayerNormalization
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("axis", [-1, -2, 1, 0])
@pytest.mark.parametrize("with_bias", [True, False])
def test_layer_norm(axis, with_bias):
    rng = np.random.default_rng(30)
    x = rand(rng, 2, 3, 4, 5) * 2 + 0.5
    norm_shape = x.shape[axis:] if axis >= 0 else x.shape[x.ndim + axis:]
    inputs = [x, rand(rng, *norm_shape)] + ([rand(rng, *norm_shape)] if with_bias else [])
    check("LayerNormalization", inputs, dict(axis=axis, epsilon=1e-3), opset=17, n_outputs=3,
          rtol=1e-4, atol=1e-5)
    check("LayerNormalization", inputs, dict(axis=axis), opset=17, rtol=1e-4, atol=1e-5)


def test_layer_norm_broadcast_scale():
    rng = np.random.default_rng(31)
    x = rand(rng, 2, 3, 4)
    check("LayerNormalization", [x, rand(rng, 1, 4), rand(rng, 4)], dict(axis=-2), n_outputs=3,
          rtol=1e-4, atol=1e-5)


def test_layer_norm_float16_stats_are_float32():
    rng = np.random.default_rng(32)
    x, s, b = rand(rng, 3, 8), rand(rng, 8), rand(rng, 8)
    y, mean, inv = run_ours("LayerNormalization", [x.astype(np.float16), s.astype(np.float16),
                                                    b.astype(np.float16)], {}, opset=17, n_outputs=3)
    assert (y.dtype, mean.dtype, inv.dtype) == (np.float16, np.float32, np.float32)
    x32 = x.astype(np.float16).astype(np.float64)
    m = x32.mean(axis=-1, keepdims=True)
    iv = 1 / np.sqrt(x32.var(axis=-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(mean, m, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(inv, iv, rtol=1e-5)
    expected = (x32 - m) * iv * s.astype(np.float16) + b.astype(np.float16)
    np.testing.assert_allclose(y.astype(np.float32), expected, rtol=5e-3, atol=5e-3)


def test_layer_norm_errors():
    x = np.zeros((2, 3), np.float32)
    with pytest.raises(KernelError, match="axis"):
        run_ours("LayerNormalization", [x, np.ones(3, np.float32)], dict(axis=2), opset=17)
    with pytest.raises(KernelError, match="stash_type"):
        run_ours("LayerNormalization", [x, np.ones(3, np.float32)], dict(stash_type=7), opset=17)


# ---------------------------------------------------------------------------------------------
# GroupNormalization
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("shape,groups", [((2, 6, 4, 5), 3), ((2, 6, 7), 2), ((1, 4, 2, 3, 2), 4),
                                          ((2, 6, 3), 1)])
def test_group_norm_18(shape, groups):
    rng = np.random.default_rng(40)
    x = rand(rng, *shape) * 2 + 1
    check("GroupNormalization", [x, rand(rng, groups), rand(rng, groups)],
          dict(num_groups=groups, epsilon=1e-4), opset=18, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("shape,groups", [((2, 6, 4, 5), 3), ((2, 6, 7), 2), ((1, 4, 2, 3, 2), 4)])
def test_group_norm_21(shape, groups):
    rng = np.random.default_rng(41)
    x = rand(rng, *shape) * 2 + 1
    check("GroupNormalization", [x, rand(rng, shape[1]), rand(rng, shape[1])],
          dict(num_groups=groups, epsilon=1e-4), opset=21, rtol=1e-4, atol=1e-5)


def test_group_norm_errors():
    x = np.zeros((1, 6, 3), np.float32)
    with pytest.raises(KernelError, match="num_groups"):
        run_ours("GroupNormalization", [x, np.ones(6, np.float32), np.ones(6, np.float32)], {}, opset=21)
    with pytest.raises(KernelError, match="groups"):
        run_ours("GroupNormalization", [x, np.ones(6, np.float32), np.ones(6, np.float32)],
                 dict(num_groups=4), opset=21)
