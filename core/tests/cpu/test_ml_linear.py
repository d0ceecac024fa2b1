"""Linear and SVM models of ai.onnx.ml against the reference evaluator, numpy formulas, and
onnxruntime where the reference differs from it (binary scores, pairwise-coupling probabilities)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

from ort_core.errors import KernelError
from ort_core.providers.cpu.ops.ml_linear import logistic, probit, softmax, softmax_zero

from .kernel_harness import run_onnxruntime_ml, run_ours, run_reference

ML = "ai.onnx.ml"
rng = np.random.default_rng(5)
F = 4


def floats(n):
    return [float(v) for v in rng.normal(size=n)]


def ours_and_ref(op, x, attrs, n_outputs):
    return (run_ours(op, [x], attrs, opset=1, n_outputs=n_outputs, domain=ML),
            run_reference(op, [x], attrs, opset=1, n_outputs=n_outputs, domain=ML))


# ---------------------------------------------------------------------------- post-transforms

def test_post_transforms_formulas():
    s = np.array([[-2.0, 0.0, 3.0], [0.5, 0.5, 0.0]], np.float32)
    np.testing.assert_allclose(logistic(s), 1 / (1 + np.exp(-s.astype(np.float64))), rtol=1e-6)
    e = np.exp(s - s.max(axis=1, keepdims=True))
    np.testing.assert_allclose(softmax(s), e / e.sum(axis=1, keepdims=True), rtol=1e-6)
    z = softmax_zero(s)
    assert z[0, 1] == 0 and z[1, 2] == 0  # zeros stay zero
    np.testing.assert_allclose(z.sum(axis=1), 1, rtol=1e-6)
    assert softmax_zero(np.zeros((1, 3), np.float32)).tolist() == [[0.5, 0.5, 0.5]]
    # probit(p) = sqrt(2) erfinv(2p - 1), Winitzki's approximation: ~1e-3 from the exact quantile
    p = np.array([[0.1, 0.5, 0.975]], np.float32)
    np.testing.assert_allclose(probit(p), [[-1.2815516, 0.0, 1.959964]], atol=5e-3)
    assert all(t.dtype == np.float32 for t in (logistic(s), softmax(s), z, probit(p)))


# ----------------------------------------------------------------------------- LinearRegressor

@pytest.mark.parametrize("targets", [1, 3])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_linear_regressor_formula(targets, dtype):
    coef, icpt = floats(targets * F), floats(targets)
    x = (rng.normal(size=(6, F)) * 3).astype(dtype)
    (y,) = run_ours("LinearRegressor", [x], dict(coefficients=coef, intercepts=icpt, targets=targets), opset=1,
                    domain=ML)
    expected = x.astype(np.float64) @ np.array(coef).reshape(targets, F).T + icpt
    assert y.dtype == np.float32 and y.shape == (6, targets)
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)


def test_linear_regressor_matches_reference_and_transforms():
    attrs = dict(coefficients=floats(2 * F), intercepts=floats(2), targets=2)
    x = rng.normal(size=(5, F)).astype(np.float32)
    (ours,), (ref,) = ours_and_ref("LinearRegressor", x, attrs, 1)
    np.testing.assert_allclose(ours, ref, rtol=1e-5)
    (soft,) = run_ours("LinearRegressor", [x], dict(attrs, post_transform="SOFTMAX"), opset=1, domain=ML)
    np.testing.assert_allclose(soft, softmax(ours), rtol=1e-6)
    (one,) = run_ours("LinearRegressor", [x[0]], dict(coefficients=floats(F), post_transform="LOGISTIC"), opset=1,
                      domain=ML)
    assert one.shape == (1, 1)  # a single target ignores LOGISTIC, as onnxruntime does


# ---------------------------------------------------------------------------- LinearClassifier

@pytest.mark.parametrize("transform", ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO"])
@pytest.mark.parametrize("labels", [dict(classlabels_ints=[2, 4, 6]), dict(classlabels_strings=["x", "y", "z"])])
def test_linear_classifier_multiclass_matches_reference(transform, labels):
    attrs = dict(coefficients=floats(3 * F), intercepts=floats(3), post_transform=transform, **labels)
    x = rng.normal(size=(8, F)).astype(np.float32)
    (label, z), (ref_label, ref_z) = ours_and_ref("LinearClassifier", x, attrs, 2)
    np.testing.assert_allclose(z, ref_z, rtol=1e-5, atol=1e-6)
    assert label.tolist() == ref_label.tolist()
    assert z.dtype == np.float32


@pytest.mark.parametrize("transform", ["NONE", "LOGISTIC", "SOFTMAX"])
def test_linear_classifier_binary(transform):
    coef, icpt = floats(F), floats(1)
    x = rng.normal(size=(10, F)).astype(np.float32)
    attrs = dict(coefficients=coef, intercepts=icpt, classlabels_strings=["no", "yes"], post_transform=transform)
    label, z = run_ours("LinearClassifier", [x], attrs, opset=1, n_outputs=2, domain=ML)
    s = (x @ np.array(coef, np.float32) + icpt[0]).astype(np.float32)
    assert label.tolist() == np.where(s > 0, "yes", "no").tolist()
    p = 1 / (1 + np.exp(-s.astype(np.float64))) if transform == "LOGISTIC" else s
    np.testing.assert_allclose(z, np.stack([1 - p, p], axis=1), rtol=1e-5, atol=1e-6)
    label2, z2 = run_onnxruntime_ml("LinearClassifier", x, attrs, [TensorProto.STRING, TensorProto.FLOAT])
    assert label.tolist() == label2.tolist()
    np.testing.assert_allclose(z, z2, rtol=1e-5, atol=1e-6)


def test_linear_classifier_without_intercepts():
    coef = floats(3 * F)
    x = rng.normal(size=(5, F)).astype(np.float32)
    label, z = run_ours("LinearClassifier", [x], dict(coefficients=coef, classlabels_ints=[4, 5, 6]), opset=1,
                        n_outputs=2, domain=ML)
    scores = x @ np.array(coef, np.float32).reshape(3, F).T  # columns: coefficients / features
    np.testing.assert_allclose(z, scores, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(label, scores.argmax(axis=1) + 4)


def test_linear_classifier_errors():
    with pytest.raises(KernelError, match="classlabels"):
        run_ours("LinearClassifier", [None], dict(coefficients=[1.0]), opset=1, n_outputs=2, domain=ML)
    with pytest.raises(KernelError, match="coefficients"):
        run_ours("LinearClassifier", [None], dict(classlabels_ints=[0, 1]), opset=1, n_outputs=2, domain=ML)
    with pytest.raises(KernelError, match="post_transform"):
        run_ours("LinearClassifier", [None], dict(coefficients=[1.0, 2.0], intercepts=[0.0], classlabels_ints=[0, 1],
                                                   post_transform="TANH"), opset=1, n_outputs=2, domain=ML)
    with pytest.raises(KernelError, match="features"):
        run_ours("LinearClassifier", [np.zeros((2, 3), np.float32)],
                 dict(coefficients=[1.0, 2.0], intercepts=[0.0], classlabels_ints=[0, 1]), opset=1, n_outputs=2,
                 domain=ML)
    with pytest.raises(KernelError, match="numeric"):
        run_ours("LinearRegressor", [np.array(["a"], dtype=object)], dict(coefficients=[1.0]), opset=1, domain=ML)


# --------------------------------------------------------------------------------------- SVMs

def svc_attrs(k, kernel, proba=False, transform="NONE"):
    per = [int(v) for v in rng.integers(1, 4, k)]
    nv, pairs = sum(per), k * (k - 1) // 2
    attrs = dict(kernel_type=kernel, kernel_params=[0.3, 0.5, 2.0], vectors_per_class=per,
                 support_vectors=floats(nv * F), coefficients=floats((k - 1) * nv), rho=floats(pairs),
                 classlabels_ints=list(range(10, 10 + k)), post_transform=transform)
    if proba:
        attrs.update(prob_a=[v - 2 for v in floats(pairs)], prob_b=[v * 0.1 for v in floats(pairs)])
    return attrs


@pytest.mark.parametrize("kernel", ["LINEAR", "RBF", "POLY", "SIGMOID"])
@pytest.mark.parametrize("k, proba", [(2, False), (2, True), (3, False), (4, False)])
@pytest.mark.parametrize("transform", ["NONE", "LOGISTIC"])
def test_svm_classifier_matches_reference(kernel, k, proba, transform):
    attrs = svc_attrs(k, kernel, proba, transform)
    x = rng.normal(size=(12, F)).astype(np.float32)
    (label, z), (ref_label, ref_z) = ours_and_ref("SVMClassifier", x, attrs, 2)
    np.testing.assert_allclose(z, ref_z, rtol=1e-4, atol=1e-5)
    if k == 2 and not proba:
        # binary without probabilities: the reference picks labels[1] for all-positive weights,
        # onnxruntime (followed here) the class with the vote
        ref_label = run_onnxruntime_ml("SVMClassifier", x, attrs, [TensorProto.INT64, TensorProto.FLOAT])[0]
    np.testing.assert_array_equal(label, ref_label)


@pytest.mark.parametrize("k", [3, 5])
def test_svm_classifier_probabilities(k):
    attrs = svc_attrs(k, "RBF", proba=True)
    x = rng.normal(size=(20, F)).astype(np.float32)
    label, z = run_ours("SVMClassifier", [x], attrs, opset=1, n_outputs=2, domain=ML)
    assert z.shape == (20, k) and z.dtype == np.float32
    np.testing.assert_allclose(z.sum(axis=1), 1, atol=1e-3)  # coupled pairwise probabilities
    # the reference evaluator builds the coupling matrix differently; onnxruntime is followed here
    label2, z2 = run_onnxruntime_ml("SVMClassifier", x, attrs, [TensorProto.INT64, TensorProto.FLOAT])
    np.testing.assert_array_equal(label, label2)
    np.testing.assert_allclose(z, z2, rtol=1e-3, atol=1e-4)


def test_svm_classifier_linear_mode():
    coef, rho = floats(3 * F), floats(1)
    x = rng.normal(size=(7, F)).astype(np.float32)
    attrs = dict(coefficients=coef, rho=rho, classlabels_strings=["a", "b", "c"])
    label, z = run_ours("SVMClassifier", [x], attrs, opset=1, n_outputs=2, domain=ML)
    scores = x @ np.array(coef, np.float32).reshape(3, F).T + rho[0]
    np.testing.assert_allclose(z, scores, rtol=1e-5, atol=1e-6)
    assert label.tolist() == np.array(["a", "b", "c"])[scores.argmax(axis=1)].tolist()


@pytest.mark.parametrize("kernel", ["LINEAR", "RBF", "POLY", "SIGMOID"])
@pytest.mark.parametrize("one_class", [0, 1])
def test_svm_regressor_matches_reference(kernel, one_class):
    attrs = dict(kernel_type=kernel, kernel_params=[0.2, 0.1, 3.0], n_supports=5, support_vectors=floats(5 * F),
                 coefficients=floats(5), rho=floats(1), one_class=one_class)
    x = rng.normal(size=(9, F)).astype(np.float32)
    (ours,), (ref,) = ours_and_ref("SVMRegressor", x, attrs, 1)
    assert ours.dtype == np.float32 and ours.shape == (9, 1)
    np.testing.assert_allclose(ours, ref, rtol=1e-4, atol=1e-5)


def test_svm_regressor_liblinear_formula_and_errors():
    coef = floats(F)
    x = rng.normal(size=(3, F)).astype(np.float32)
    (y,) = run_ours("SVMRegressor", [x], dict(coefficients=coef, rho=[0.5]), opset=1, domain=ML)
    np.testing.assert_allclose(y[:, 0], x @ np.array(coef) + 0.5, rtol=1e-5)
    with pytest.raises(KernelError, match="kernel_type"):
        run_ours("SVMRegressor", [None], dict(coefficients=coef, rho=[0.0], n_supports=1, support_vectors=coef,
                                               kernel_type="CUBIC"), opset=1, domain=ML)
    with pytest.raises(KernelError, match="n_supports"):
        run_ours("SVMRegressor", [None], dict(coefficients=coef, rho=[0.0], n_supports=3, support_vectors=coef),
                 opset=1, domain=ML)
    with pytest.raises(KernelError, match="vectors_per_class"):
        run_ours("SVMClassifier", [None], dict(svc_attrs(3, "RBF"), vectors_per_class=[1, 1]), opset=1,
                 n_outputs=2, domain=ML)
