"""CPU kernels for the training losses NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss
(reductions none/sum/mean, class weights, ignore_index). Gradients are not computed here.
"""

from __future__ import annotations

import numpy as np

from ....errors import KernelError
from ....ir.graph import Node
from ..registry import register

_REDUCTIONS = ("none", "sum", "mean")


def _reduction(node: Node) -> str:
    r = node.attr("reduction", "mean")
    r = r.decode() if isinstance(r, bytes) else str(r)
    if r not in _REDUCTIONS:
        raise KernelError(f"{node.label}: reduction must be one of {_REDUCTIONS}, got {r!r}")
    return r


def _compute_dtype(dtype: np.dtype) -> np.dtype:
    """float16/bfloat16 losses are computed in float32 and rounded once at the end."""
    return np.dtype(np.float32) if dtype.itemsize < 4 else np.dtype(dtype)


def _nll(node: Node, logp: np.ndarray, target: np.ndarray, weight, reduction: str,
         ignore_index) -> np.ndarray:
    """The loss from log-probabilities ``logp`` (N, C, d...) in logp's dtype."""
    if logp.ndim < 2:
        raise KernelError(f"{node.label}: input must have shape (N, C, d1, ...), got {logp.shape}")
    n_classes = logp.shape[1]
    if target.shape != logp.shape[:1] + logp.shape[2:]:
        raise KernelError(f"{node.label}: target shape {target.shape} does not match input shape "
                          f"{logp.shape} (expected {logp.shape[:1] + logp.shape[2:]})")
    if target.dtype.kind not in "iu":
        raise KernelError(f"{node.label}: target must be an integer tensor, got {target.dtype}")
    if weight is not None and weight.shape != (n_classes,):
        raise KernelError(f"{node.label}: weight shape {weight.shape} must be ({n_classes},)")
    ignored = None if ignore_index is None else target == ignore_index
    # ignored targets may lie outside [0, C): point them at class 0, their loss is zeroed below
    t = target if ignored is None else np.where(ignored, 0, target)
    if t.size and (t.min() < 0 or t.max() >= n_classes):
        raise KernelError(f"{node.label}: target values must lie in [0, {n_classes}) "
                          f"(or equal ignore_index), got range [{t.min()}, {t.max()}]")
    t = t.astype(np.intp, copy=False)
    cdt = _compute_dtype(logp.dtype)
    loss = np.take_along_axis(logp, t[:, None], axis=1)[:, 0].astype(cdt)
    np.negative(loss, out=loss)
    w = None if weight is None else weight.astype(cdt, copy=False)[t]
    if ignored is not None:
        w = np.where(ignored, cdt.type(0), cdt.type(1) if w is None else w)
        # where, not multiply: 0 * inf would turn an ignored -inf log-probability into NaN
        loss = np.where(ignored, cdt.type(0), loss)
    if w is not None:
        loss *= w
    if reduction == "none":
        return loss.astype(logp.dtype, copy=False)
    total = loss.sum(dtype=cdt)
    if reduction == "mean":
        # weighted mean: divided by the total weight of the non-ignored targets (0/0 -> NaN)
        with np.errstate(invalid="ignore", divide="ignore"):
            total = total / (w.sum(dtype=cdt) if w is not None else cdt.type(loss.size))
    return np.asarray(total, dtype=logp.dtype)


def _ignore_index(node: Node):
    ii = node.attr("ignore_index")
    return None if ii is None else int(ii)


@register("NegativeLogLikelihoodLoss", since=12)
def _nll_factory(node: Node, opset: int):
    reduction = _reduction(node)
    ignore_index = _ignore_index(node)

    def kernel(x, target, weight=None):
        return (_nll(node, x, target, weight, reduction, ignore_index),)
    return kernel


def _log_softmax_axis1(x: np.ndarray) -> np.ndarray:
    cdt = _compute_dtype(x.dtype)
    z = x.astype(cdt)  # always a fresh array: shifted in place below
    z -= z.max(axis=1, keepdims=True)
    z -= np.log(np.exp(z).sum(axis=1, keepdims=True))
    return z


@register("SoftmaxCrossEntropyLoss", since=12)
def _sce_factory(node: Node, opset: int):
    reduction = _reduction(node)
    ignore_index = _ignore_index(node)
    n_out = len(node.outputs)
    want_log_prob = n_out > 1 and bool(node.outputs[1])

    def kernel(scores, labels, weights=None):
        if scores.ndim < 2:
            raise KernelError(f"{node.label}: scores must have shape (N, C, d1, ...), got "
                              f"{scores.shape}")
        logp = _log_softmax_axis1(scores)
        loss = _nll(node, logp, labels, weights, reduction, ignore_index).astype(scores.dtype)
        return (loss, logp.astype(scores.dtype, copy=False) if want_log_prob else None)[:n_out]
    return kernel
