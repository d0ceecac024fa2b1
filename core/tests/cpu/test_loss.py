"""NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss against onnx's reference evaluator and
plain numpy formulas."""

from __future__ import annotations

import numpy as np
import pytest

from ort_core.errors import KernelError

from .kernel_harness import check, run_ours

rng = np.random.default_rng(11)


def log_softmax(x):
    z = x - x.max(axis=1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=1, keepdims=True))


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("shape", [(4, 5), (3, 5, 2), (2, 4, 3, 2)])
@pytest.mark.parametrize("weighted", [False, True])
def test_nll_matches_reference(reduction, shape, weighted):
    x = rng.standard_normal(shape).astype(np.float32)
    target = rng.integers(0, shape[1], (shape[0],) + shape[2:]).astype(np.int64)
    inputs = [x, target] + ([rng.uniform(0.1, 1, shape[1]).astype(np.float32)] if weighted else [])
    check("NegativeLogLikelihoodLoss", inputs, {"reduction": reduction}, opset=13)


def test_nll_weighted_mean_formula():
    x = rng.standard_normal((3, 4)).astype(np.float64)
    t = np.array([0, 3, 1])
    w = np.array([0.5, 1.0, 2.0, 4.0])
    (loss,) = run_ours("NegativeLogLikelihoodLoss", [x, t, w], {"reduction": "mean"}, opset=22)
    picked = -x[np.arange(3), t] * w[t]
    assert loss.dtype == np.float64 and loss.shape == ()
    np.testing.assert_allclose(loss, picked.sum() / w[t].sum())


@pytest.mark.parametrize("ignore_index", [-1, 2, 10])
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
def test_nll_ignore_index(ignore_index, reduction):
    x = rng.standard_normal((4, 3, 5)).astype(np.float32)
    t = rng.integers(0, 3, (4, 5)).astype(np.int64)
    t[0, :2] = ignore_index  # may lie outside [0, C): must not be read
    if ignore_index == -1 and reduction == "mean":
        # the reference evaluator forgets ignore_index=-1 without weights (it averages over
        # every element); the spec divides by the number of targets not ignored
        (loss,) = run_ours("NegativeLogLikelihoodLoss", [x, t], {"ignore_index": -1})
        keep = t != -1
        picked = -np.take_along_axis(x, np.where(keep, t, 0)[:, None], axis=1)[:, 0]
        np.testing.assert_allclose(loss, picked[keep].mean(), rtol=1e-6)
    else:
        check("NegativeLogLikelihoodLoss", [x, t], {"reduction": reduction, "ignore_index": ignore_index})
    w = rng.uniform(0.1, 1, 3).astype(np.float32)
    (loss,) = check("NegativeLogLikelihoodLoss", [x, t, w],
                    {"reduction": reduction, "ignore_index": ignore_index})
    if reduction == "none":
        assert np.all(loss[0, :2] == 0)


def test_nll_ignored_minus_inf_is_zero_not_nan():
    x = np.array([[-np.inf, 0.0], [-1.0, -2.0]], np.float32)
    t = np.array([0, 1])
    (loss,) = run_ours("NegativeLogLikelihoodLoss", [x, t], {"reduction": "none", "ignore_index": 0})
    np.testing.assert_array_equal(loss, [0.0, 2.0])


def test_nll_errors():
    x = np.zeros((2, 3), np.float32)
    with pytest.raises(KernelError, match="target values"):
        run_ours("NegativeLogLikelihoodLoss", [x, np.array([0, 3])])
    with pytest.raises(KernelError, match="target shape"):
        run_ours("NegativeLogLikelihoodLoss", [x, np.array([0, 1, 2])])
    with pytest.raises(KernelError, match="weight shape"):
        run_ours("NegativeLogLikelihoodLoss", [x, np.array([0, 1]), np.ones(2, np.float32)])
    with pytest.raises(KernelError, match="reduction"):
        run_ours("NegativeLogLikelihoodLoss", [x, np.array([0, 1])], {"reduction": "max"})


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("shape", [(3, 5), (2, 4, 3), (2, 3, 2, 2)])
def test_sce_matches_reference(reduction, shape):
    x = rng.standard_normal(shape).astype(np.float32)
    labels = rng.integers(0, shape[1], (shape[0],) + shape[2:]).astype(np.int32)
    w = rng.uniform(0.1, 1, shape[1]).astype(np.float32)
    check("SoftmaxCrossEntropyLoss", [x, labels], {"reduction": reduction}, opset=13, n_outputs=2)
    check("SoftmaxCrossEntropyLoss", [x, labels, w], {"reduction": reduction, "ignore_index": 1},
          opset=13, n_outputs=2)
    check("SoftmaxCrossEntropyLoss", [x, labels], {"reduction": reduction}, opset=12)


def test_sce_formula_and_log_prob():
    x = rng.standard_normal((4, 6)).astype(np.float64) * 30  # large logits: must stay finite
    labels = np.array([5, 0, 2, 2])
    loss, log_prob = run_ours("SoftmaxCrossEntropyLoss", [x, labels], {}, opset=13, n_outputs=2)
    expected = log_softmax(x)
    np.testing.assert_allclose(log_prob, expected, rtol=1e-12)
    np.testing.assert_allclose(loss, -expected[np.arange(4), labels].mean(), rtol=1e-12)
    assert loss.dtype == log_prob.dtype == np.float64


def test_sce_float16():
    x = rng.standard_normal((3, 4)).astype(np.float16)
    loss, log_prob = run_ours("SoftmaxCrossEntropyLoss", [x, np.array([0, 1, 3])], {}, n_outputs=2)
    assert loss.dtype == log_prob.dtype == np.float16
    ref = log_softmax(x.astype(np.float64))
    np.testing.assert_allclose(loss, -ref[np.arange(3), [0, 1, 3]].mean(), rtol=2e-3)


def test_sce_rejects_1d_scores():
    with pytest.raises(KernelError, match="scores"):
        run_ours("SoftmaxCrossEntropyLoss", [np.zeros(3, np.float32), np.array(0)])
