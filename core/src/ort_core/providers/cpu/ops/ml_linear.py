"""CPU kernels for ai.onnx.ml linear models: LinearClassifier, LinearRegressor, SVMClassifier and
SVMRegressor, plus the score post-transforms (LOGISTIC, SOFTMAX, ...) the tree ensembles share, and the fused
ort_core::AffineLinearClassifier / AffineLinearRegressor (a linear model with the affine steps before it folded in).

Where onnx's reference evaluator and onnxruntime disagree on these ML ops (binary-class labels and
scores), onnxruntime is followed: it is what model converters target. Trees live in ml_tree.
"""

from __future__ import annotations

import numpy as np

from ....errors import KernelError
from ....ir.graph import Node
from ..registry import register
from .fused import DOMAIN as FUSED_DOMAIN  # ort-core's own fused ops (optimizer/ml_fusion.py makes the two here)

ML = "ai.onnx.ml"
TRANSFORMS = ("NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT")


# --------------------------------------------------------------------------------------------
# Post-transforms on [N, K] float32 scores (the formulas of onnxruntime's ml_common.h)
# --------------------------------------------------------------------------------------------

def logistic(x: np.ndarray) -> np.ndarray:
    # exp of -|x| never overflows; the sign picks the half of the curve
    v = 1.0 / (1.0 + np.exp(-np.abs(x)))
    return np.where(x < 0, 1.0 - v, v).astype(np.float32)


def softmax(x: np.ndarray) -> np.ndarray:
    one = x.shape[0] == 1  # one row: whole-array reductions (the same elements, in the same order) are cheaper
    e = x - (x.max() if one else x.max(axis=1, keepdims=True))  # a new array: exp and division run in place
    np.exp(e, out=e)
    e /= e.sum() if one else e.sum(axis=1, keepdims=True)
    return e.astype(np.float32, copy=False)


def softmax_zero(x: np.ndarray) -> np.ndarray:
    """Softmax in which exact zeros stay zero (they mark classes no tree voted for); a row of
    zeros becomes 0.5 everywhere, as in onnx's reference evaluator."""
    nonzero = np.abs(x) > 1e-7
    e = np.where(nonzero, np.exp(x - x.max(axis=1, keepdims=True)), 0.0)
    total = e.sum(axis=1, keepdims=True)
    safe = np.where(total == 0, 1.0, total)
    return np.where(total == 0, 0.5, e / safe).astype(np.float32)


def probit(x: np.ndarray) -> np.ndarray:
    """sqrt(2) * erfinv(2x - 1) with Winitzki's closed-form erfinv (a = 0.147), the
    approximation onnxruntime and the reference evaluator both use."""
    f = np.float32
    y = f(2.0) * x.astype(f) - f(1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        ln = np.log((f(1.0) - y) * (f(1.0) + y))
        v = f(2.0 / (np.pi * 0.147)) + f(0.5) * ln
        r = np.sign(y) * np.sqrt(-v + np.sqrt(v * v - ln / f(0.147)))
    return (f(np.sqrt(2.0)) * np.where(y == 0, f(0.0), r)).astype(f)


_APPLY = {"NONE": lambda s: s.astype(np.float32), "LOGISTIC": logistic, "SOFTMAX": softmax,
          "SOFTMAX_ZERO": softmax_zero, "PROBIT": probit}


def post_transform(scores: np.ndarray, name: str) -> np.ndarray:
    """The named transform of [N, K] scores, as float32."""
    return _APPLY[name](scores)


def binary_scores(s: np.ndarray, name: str, mode: int) -> np.ndarray:
    """Two score columns from one column ``s`` ([N]), as onnxruntime's add_second_class:
    [logistic(-s), logistic(s)] under LOGISTIC, else [1 - s, s] (``mode`` 0/1: all weights
    positive) or [-s, s] (mode 2/3: mixed signs). Under PROBIT onnxruntime transforms s and
    leaves the second column undefined; here s is replaced by probit(s) and the rule applied."""
    s = s.astype(np.float32)
    if name == "LOGISTIC":
        return np.stack([logistic(-s), logistic(s)], axis=1)
    if name == "PROBIT":
        s = probit(s[:, None])[:, 0]
    if mode in (0, 1):
        return np.stack([1.0 - s, s], axis=1).astype(np.float32)
    return np.stack([-s, s], axis=1)


def transform_name(node: Node, value) -> str:
    name = str(value or "NONE").upper()
    if name not in TRANSFORMS:
        raise KernelError(f"{node.label}: post_transform must be one of {TRANSFORMS}, got {value!r}")
    return name


# --------------------------------------------------------------------------------------------
# Shared helpers
# --------------------------------------------------------------------------------------------

def as_rows(node: Node, x: np.ndarray, features: int | None = None, dtype=np.float32) -> np.ndarray:
    """[N, F] view of a [F] or [N, F] numeric input, as ``dtype`` (float32: onnxruntime computes in float)."""
    if not isinstance(x, np.ndarray) or x.dtype.kind not in "fiub":
        raise KernelError(f"{node.label}: input must be a numeric tensor, got "
                          f"{getattr(x, 'dtype', type(x).__name__)}")
    if x.ndim not in (1, 2):
        raise KernelError(f"{node.label}: input must be 1-D or 2-D, got shape {list(x.shape)}")
    rows = x.reshape(1, -1) if x.ndim == 1 else x
    if features is not None and rows.shape[1] != features:
        raise KernelError(f"{node.label}: input has {rows.shape[1]} features, the model expects {features}")
    return rows.astype(dtype, copy=False)


def class_labels(node: Node) -> tuple[np.ndarray | None, bool]:
    """(labels array, labels are strings) from classlabels_strings or classlabels_ints/int64s."""
    strings = node.attr("classlabels_strings")
    ints = node.attr("classlabels_ints", node.attr("classlabels_int64s"))
    if strings:
        arr = np.empty(len(strings), dtype=object)
        arr[:] = [s.decode() if isinstance(s, bytes) else s for s in strings]
        return arr, True
    if ints:
        return np.asarray(ints, dtype=np.int64), False
    return None, False


def pick(labels: np.ndarray, index: np.ndarray) -> np.ndarray:
    return labels.take(index) if labels.dtype == object or labels.dtype == np.int64 else \
        labels.take(index).astype(np.int64)


def _floats(node: Node, name: str, required: bool = True) -> np.ndarray:
    v = node.attr(name)
    if v is None or (not isinstance(v, np.ndarray) and len(v) == 0):
        if required:
            raise KernelError(f"{node.label}: attribute '{name}' is required")
        return np.zeros(0, dtype=np.float32)
    return np.asarray(v, dtype=np.float32).reshape(-1)


# --------------------------------------------------------------------------------------------
# Linear models
# --------------------------------------------------------------------------------------------

@register("LinearRegressor", since=1, domain=ML)
def _linear_regressor(node: Node, opset: int):
    targets = int(node.attr("targets", 1))
    coef = _floats(node, "coefficients")
    if targets < 1 or coef.size % targets:
        raise KernelError(f"{node.label}: {coef.size} coefficients do not split into {targets} targets")
    coef = coef.reshape(targets, -1)
    intercepts = _floats(node, "intercepts", required=False)
    if intercepts.size not in (0, targets):
        raise KernelError(f"{node.label}: {intercepts.size} intercepts for {targets} targets")
    finish = _regressor_outputs(node, targets)

    def kernel(x):
        y = as_rows(node, x, coef.shape[1]) @ coef.T
        if intercepts.size:
            y += intercepts
        return finish(y)
    return kernel


def _regressor_outputs(node: Node, targets: int):
    """The regressor's output from its [N, targets] scores."""
    name = transform_name(node, node.attr("post_transform"))

    def finish(y: np.ndarray) -> tuple:
        # a single target only knows PROBIT (onnxruntime leaves it untouched otherwise)
        if targets > 1 or name == "PROBIT":
            y = post_transform(y, name)
        return (y.astype(np.float32, copy=False),)
    return finish


@register("LinearClassifier", since=1, domain=ML)
def _linear_classifier(node: Node, opset: int):
    """Scores X @ coefficients^T + intercepts; the number of score columns is the number of
    intercepts (without intercepts: coefficients / features, as the reference evaluator). One
    score column is binary: the label is labels[1] (or 1/"1") where the raw score s is > 0, and
    with two labels Z gets [1 - s, s], or [logistic(-s), logistic(s)] under LOGISTIC (as
    onnxruntime)."""
    coef = _floats(node, "coefficients")
    intercepts = _floats(node, "intercepts", required=False)
    if intercepts.size and coef.size % intercepts.size:
        raise KernelError(f"{node.label}: {coef.size} coefficients do not split into {intercepts.size} classes")
    # [features, classes], made once (without intercepts the feature count is known at run time only)
    weights_t = np.ascontiguousarray(coef.reshape(intercepts.size, -1).T) if intercepts.size else None
    finish = _classifier_outputs(node)

    def kernel(x):
        w_t = weights_t
        if w_t is None:
            features = x.shape[-1] if x.ndim else 1
            if features == 0 or coef.size % features:
                raise KernelError(f"{node.label}: {coef.size} coefficients do not fit {features} features")
            w_t = coef.reshape(-1, features).T
        scores = np.dot(as_rows(node, x, w_t.shape[0]), w_t)
        if intercepts.size:
            scores += intercepts
        return finish(scores)
    return kernel


def _classifier_outputs(node: Node):
    """The classifier's (labels, Z) from its [N, columns] float32 scores (see LinearClassifier)."""
    labels, _ = class_labels(node)
    if labels is None:
        raise KernelError(f"{node.label}: classlabels_ints or classlabels_strings is required")
    name = transform_name(node, node.attr("post_transform"))
    pos, neg = (labels[1], labels[0]) if labels.size == 2 else (("1", "0") if labels.dtype == object else (1, 0))
    pair = np.array([neg, pos], dtype=labels.dtype)

    def finish(scores: np.ndarray) -> tuple:
        if scores.shape[1] == 1:
            y = pick(pair, (scores[:, 0] > 0).astype(np.int64))
            if labels.size == 2:
                z = binary_scores(scores[:, 0], name, 1)
            else:
                z = post_transform(scores, name) if name == "PROBIT" else scores
        else:
            if labels.size < scores.shape[1]:
                raise KernelError(f"{node.label}: {labels.size} class labels for {scores.shape[1]} score columns")
            y = pick(labels, scores.argmax(axis=1))
            z = post_transform(scores, name)
        return y, z.astype(np.float32, copy=False)
    return finish


# Affine prefixes folded into a linear model (optimizer/ml_fusion.py): inputs X, M [F, K] and b [K] (float64
# constants, the prefix and the model's coefficients and intercepts composed), the linear model's other attributes

def _affine_scores(node: Node, x, m, b) -> np.ndarray:
    """[N, K] float32 scores x @ M + b, computed in float64 (the composed steps may cancel: a mean subtracted
    before a dot product)."""
    if not isinstance(m, np.ndarray) or m.ndim != 2 or not isinstance(b, np.ndarray) or b.shape != (m.shape[1],):
        raise KernelError(f"{node.label}: inputs 1 and 2 must be a [features, columns] matrix and its [columns] "
                          "offsets")
    scores = np.dot(as_rows(node, x, m.shape[0], np.float64), m)
    scores += b
    return scores.astype(np.float32)


@register("AffineLinearClassifier", since=1, domain=FUSED_DOMAIN)
def _affine_linear_classifier(node: Node, opset: int):
    finish = _classifier_outputs(node)

    def kernel(x, m, b):
        return finish(_affine_scores(node, x, m, b))
    return kernel


@register("AffineLinearRegressor", since=1, domain=FUSED_DOMAIN)
def _affine_linear_regressor(node: Node, opset: int):
    finish = _regressor_outputs(node, int(node.attr("targets", 1)))

    def kernel(x, m, b):
        return finish(_affine_scores(node, x, m, b))
    return kernel


# --------------------------------------------------------------------------------------------
# Support vector machines
# --------------------------------------------------------------------------------------------

class _SVMKernel:
    """k(x, v) for every row of X against every support vector (``vectors``, [n, features] float64),
    vectorized as one matmul; what depends on the vectors only is computed once, here."""

    def __init__(self, node: Node, kind: str, params, vectors: np.ndarray) -> None:
        kind = str(kind or "LINEAR").upper()
        if kind not in ("LINEAR", "POLY", "RBF", "SIGMOID"):
            raise KernelError(f"{node.label}: kernel_type must be LINEAR, POLY, RBF or SIGMOID, got {kind!r}")
        params = list(params or [])
        self.kind = kind
        self.gamma = float(params[0]) if len(params) > 0 else 0.0
        self.coef0 = float(params[1]) if len(params) > 1 else 0.0
        self.degree = float(int(params[2])) if len(params) > 2 else 0.0
        if kind == "RBF":
            # exp(-g |x - v|^2) = exp(2g x.v - g |v|^2 - g |x|^2): the product with 2g v, then in-place passes
            self.vectors_t = np.ascontiguousarray(vectors.T) * (2.0 * self.gamma)
            self.neg_norms = -self.gamma * (vectors * vectors).sum(axis=1)[None, :]  # -g |v|^2
        else:
            self.vectors_t = np.ascontiguousarray(vectors.T)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        dot = x @ self.vectors_t
        if self.kind == "LINEAR":
            return dot
        if self.kind == "POLY":
            return (self.gamma * dot + self.coef0) ** self.degree
        if self.kind == "SIGMOID":
            return np.tanh(self.gamma * dot + self.coef0)
        dot += self.neg_norms
        dot -= self.gamma * (x * x).sum(axis=1)[:, None]
        np.minimum(dot, 0.0, out=dot)  # -g |x - v|^2 <= 0: rounding can make it slightly positive
        return np.exp(dot, out=dot)


@register("SVMRegressor", since=1, domain=ML)
def _svm_regressor(node: Node, opset: int):
    coef = _floats(node, "coefficients")
    rho = _floats(node, "rho")
    n_supports = int(node.attr("n_supports", 0))
    one_class = bool(node.attr("one_class", 0))
    name = transform_name(node, node.attr("post_transform"))
    if n_supports > 0:
        vectors = _floats(node, "support_vectors").astype(np.float64)
        if vectors.size % n_supports or coef.size < n_supports:
            raise KernelError(f"{node.label}: support_vectors ({vectors.size}) and coefficients ({coef.size}) "
                              f"do not fit n_supports={n_supports}")
        vectors = vectors.reshape(n_supports, -1)
        kern = _SVMKernel(node, node.attr("kernel_type"), node.attr("kernel_params"), vectors)
        weights = coef[:n_supports].astype(np.float64)
    else:  # liblinear: the coefficients are the one weight vector
        vectors = coef.astype(np.float64).reshape(1, -1)
        kern = _SVMKernel(node, "LINEAR", None, vectors)
        weights = np.ones(1)

    def kernel(x):
        rows = as_rows(node, x, vectors.shape[1]).astype(np.float64)
        y = (kern(rows) @ weights + rho[0])[:, None]
        if one_class:
            y = np.where(y > 0, 1.0, -1.0)
        elif name == "PROBIT":
            y = post_transform(y, name)
        return (y.astype(np.float32),)
    return kernel


def _multiclass_probability(r: np.ndarray) -> np.ndarray:
    """Pairwise-coupling probabilities (libsvm's method 2 of Wu, Lin and Weng) for every row at
    once; r is [N, K, K] with r[n, i, j] = P(i | i or j). Rows stop updating once converged, as
    each would alone; the loops run over iterations and classes only."""
    n, k, _ = r.shape
    q = -r.transpose(0, 2, 1) * r  # Q[i, j] = -r[j, i] * r[i, j] off the diagonal
    diag = (r.transpose(0, 2, 1) ** 2).sum(axis=2) - r.diagonal(axis1=1, axis2=2) ** 2
    idx = np.arange(k)
    q[:, idx, idx] = diag
    p = np.full((n, k), 1.0 / k, dtype=np.float32)
    q = q.astype(np.float32)
    active = np.ones(n, dtype=bool)
    eps = 0.005 / k
    for _ in range(max(100, k)):
        qp = np.einsum("nij,nj->ni", q, p)
        pqp = (p * qp).sum(axis=1)
        active &= np.abs(qp - pqp[:, None]).max(axis=1) >= eps
        if not active.any():
            break
        for t in range(k):
            diff = np.where(active, (pqp - qp[:, t]) / q[:, t, t], 0.0).astype(np.float32)
            p[:, t] += diff
            scale = 1.0 + diff
            pqp = (pqp + diff * (diff * q[:, t, t] + 2.0 * qp[:, t])) / scale / scale
            qp = (qp + diff[:, None] * q[:, t, :]) / scale[:, None]
            p /= scale[:, None]
    return p


@register("SVMClassifier", since=1, domain=ML)
def _svm_classifier(node: Node, opset: int):
    """SVC mode (support vectors given): one-vs-one classifiers vote; Z holds the pairwise scores,
    or class probabilities when prob_a/prob_b are given. Linear mode: X @ coefficients^T + rho[0].
    Labels and binary score columns follow onnxruntime."""
    labels, _ = class_labels(node)
    if labels is None:
        raise KernelError(f"{node.label}: classlabels_ints or classlabels_strings is required")
    k = labels.size
    coef = _floats(node, "coefficients")
    rho = _floats(node, "rho").astype(np.float64)
    prob_a, prob_b = _floats(node, "prob_a", False), _floats(node, "prob_b", False)
    if prob_a.size != prob_b.size:
        raise KernelError(f"{node.label}: prob_a and prob_b must have the same length")
    name = transform_name(node, node.attr("post_transform"))
    per_class = [int(v) for v in node.attr("vectors_per_class", []) or []]
    n_vectors = sum(per_class)
    all_positive = bool((coef >= 0).all())
    n_pairs = k * (k - 1) // 2
    has_proba = prob_a.size > 0

    if n_vectors > 0:
        if len(per_class) != k:
            raise KernelError(f"{node.label}: vectors_per_class has {len(per_class)} entries for {k} classes")
        vectors = _floats(node, "support_vectors").astype(np.float64)
        if vectors.size % n_vectors or coef.size < (k - 1) * n_vectors or rho.size < n_pairs:
            raise KernelError(f"{node.label}: support_vectors, coefficients or rho do not fit "
                              f"{n_vectors} support vectors and {k} classes")
        vectors = vectors.reshape(n_vectors, -1)
        coef2 = coef[:(k - 1) * n_vectors].astype(np.float64).reshape(k - 1, n_vectors)
        kern = _SVMKernel(node, node.attr("kernel_type"), node.attr("kernel_params"), vectors)
        starts = np.concatenate([[0], np.cumsum(per_class)]).astype(np.int64)
        # pair (i, j): sum over i's vectors of coef[j-1] * k + sum over j's vectors of coef[i] * k
        pairs = [(i, j) for i in range(k) for j in range(i + 1, k)]
        pair_w = np.zeros((n_vectors, n_pairs))
        for c, (i, j) in enumerate(pairs):
            si, sj = slice(starts[i], starts[i + 1]), slice(starts[j], starts[j + 1])
            pair_w[si, c] = coef2[j - 1, si]
            pair_w[sj, c] = coef2[i, sj]
        pi = np.array([i for i, _ in pairs], dtype=np.int64)
        pj = np.array([j for _, j in pairs], dtype=np.int64)
        if has_proba and prob_a.size < n_pairs:
            raise KernelError(f"{node.label}: prob_a has {prob_a.size} entries for {n_pairs} class pairs")

        def kernel(x):
            rows = as_rows(node, x, vectors.shape[1]).astype(np.float64)
            pair_scores = kern(rows) @ pair_w + rho[:n_pairs]
            n = rows.shape[0]
            winners = np.where(pair_scores > 0, pi, pj)
            if n > 1:
                winners += np.arange(0, n * k, k)[:, None]  # row r's classes counted at r * k + class
            votes = np.bincount(winners.reshape(-1), minlength=n * k).reshape(n, k)
            y = pick(labels, votes.argmax(axis=1))
            if has_proba:
                val = pair_scores.astype(np.float32) * prob_a[:n_pairs] + prob_b[:n_pairs]
                val = np.clip(1.0 - logistic(val), 1e-7, 1 - 1e-7).astype(np.float32)
                r = np.zeros((n, k, k), dtype=np.float32)
                r[:, pi, pj] = val
                r[:, pj, pi] = 1.0 - val
                z = post_transform(_multiclass_probability(r), name)
            elif k <= 2:
                z = binary_scores(pair_scores[:, 0], name, 2 if name == "NONE" else 0)
            else:
                z = post_transform(pair_scores, name) if n_pairs > 1 else pair_scores
            return y, z.astype(np.float32, copy=False)
        return kernel

    if coef.size % k:
        raise KernelError(f"{node.label}: {coef.size} coefficients do not split into {k} classes")
    weights = coef.reshape(k, -1)

    def linear_kernel(x):
        scores = as_rows(node, x, weights.shape[1]) @ weights.T + np.float32(rho[0])
        best = scores.argmax(axis=1)
        if k == 2 and not has_proba:  # onnxruntime's binary rule on the winning score
            top = scores[np.arange(scores.shape[0]), best]
            y = pick(labels, np.where((top >= 0.5) if all_positive else (top > 0), 1, best))
        else:
            y = pick(labels, best)
        z = post_transform(scores, name) if k >= 2 or name == "PROBIT" else scores
        return y, z.astype(np.float32, copy=False)
    return linear_kernel
