"""Classic-ML pipeline fusions (level extended, in the CPU provider's transform, beside cpu_fusion's).

skl2onnx writes a scikit-learn pipeline as one node per step: StandardScaler and MinMaxScaler as a Scaler (or
Mul and Add), PCA as Sub and MatMul, then a LinearClassifier or LinearRegressor, and LogisticRegression's
probabilities pass through a Normalizer (L1) after the classifier's SOFTMAX. At batch 1 each node costs a few
microseconds of dispatch and numpy calls, more than its arithmetic. Two rewrites:

- **Affine prefix folded into the linear model.** A chain of affine steps ending in the model's input (Scaler;
  Add, Sub, Mul or Div with a constant over the last axis; MatMul by a constant matrix), each read by the next
  step only, on a 1-D or 2-D float input: the model scores ``((x A1 + c1) A2 + c2) ... W^T + b``, which is
  ``x M + d`` with ``M = A1 A2 ... W^T`` and ``d`` composed alike. They are composed once, in float64, from the
  model's end (``M`` stays [features, columns]: no [F, F] matrix is made), and the steps and the model become one
  ``ort_core::AffineLinearClassifier`` / ``AffineLinearRegressor(X, M, d)`` with the model's other attributes,
  which computes ``x M + d`` in float64 (the composed steps can cancel, as a subtracted mean does) and then
  exactly what the model does with its float32 scores.
- **L1 Normalizer after softmax dropped.** A Normalizer(norm=L1) that alone reads the SOFTMAX probabilities
  of a multi-column linear classifier divides each row by a sum that is already 1 (to a rounding): the
  classifier writes the Normalizer's output directly.

Results move by float32 roundings only (the fused scores are the more exact ones). onnxruntime has no such
fusion; the fused ops never reach a saved model unless written by ``optimized_model_filepath``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..ir.graph import Node, is_onnx_domain
from .rewrite import DOMAIN, Matcher

ML = "ai.onnx.ml"
_FUSED = {"LinearClassifier": "AffineLinearClassifier", "LinearRegressor": "AffineLinearRegressor"}
_FLOAT_ELEM_TYPES = (1, 11)  # TensorProto FLOAT, DOUBLE: integer chains keep their own arithmetic
_MAX_ELEMENTS = 1 << 24  # a composed matrix larger than this (a very wide input) is left unfused

Fold = Callable[[np.ndarray, np.ndarray], "tuple[np.ndarray, np.ndarray] | None"]


def fuse_ml(m: Matcher) -> int:
    """Both rewrites on the nodes ``m`` walks; returns how many nodes went."""
    gone = 0
    for node in list(m.graph.nodes):
        if node.domain == ML and node.op_type in _FUSED and _mine(m, node):
            gone += _fold_prefix(m, node)
    for node in list(m.graph.nodes):
        if node.domain == ML and node.op_type == "Normalizer" and _mine(m, node):
            gone += _drop_normalizer(m, node)
    return gone


def _mine(m: Matcher, node: Node) -> bool:
    return node.id in m.on_cpu and m.alive(node)


def _text(value) -> str:
    return (value.decode() if isinstance(value, bytes) else str(value)).upper()


def _read_once(m: Matcher, name: str) -> bool:
    """``name`` is read by one node and is no graph output (nor read by a nested graph)."""
    return len(m.readers(name)) == 1 and name not in m.protected


# ------------------------------------------------------------------------------------------- prefix
def _model(node: Node) -> tuple[np.ndarray, np.ndarray] | None:
    """The linear model's [features, columns] coefficients and [columns] intercepts in float64 (None when the
    columns are known only at run time or the attributes do not fit: the model's own kernel reports that)."""
    coef = node.attr("coefficients")
    if coef is None or len(coef) == 0:
        return None
    coef = np.asarray(coef, dtype=np.float32).astype(np.float64).reshape(-1)
    intercepts = node.attr("intercepts")
    intercepts = np.zeros(0) if intercepts is None else np.asarray(intercepts, np.float32).astype(np.float64)
    columns = int(node.attr("targets", 1)) if node.op_type == "LinearRegressor" else intercepts.size
    if columns < 1 or coef.size % columns or intercepts.size not in (0, columns):
        return None
    b = intercepts.reshape(-1) if intercepts.size else np.zeros(columns)
    return np.ascontiguousarray(coef.reshape(columns, -1).T), b


def _fold_prefix(m: Matcher, model: Node) -> int:
    found = _model(model)
    if found is None or not m.makes(_FUSED[model.op_type], DOMAIN):
        return 0
    mat, bias = found
    steps: list[Node] = []
    x = model.inputs[0] if model.inputs else ""
    while x and _read_once(m, x):
        step = m.producers.get(x)
        if step is None or not _mine(m, step):
            break
        move = _affine_step(m, step)
        if move is None:
            break
        data, fold = move
        folded = fold(mat, bias)
        if folded is None or folded[0].size > _MAX_ELEMENTS:
            break
        (mat, bias), x = folded, data
        steps.append(step)
    t = m.graph.type_of(x) if steps else None
    if t is None or t.kind != "tensor" or t.elem_type not in _FLOAT_ELEM_TYPES or t.shape is None \
            or len(t.shape) not in (1, 2):
        return 0
    attrs = {k: v for k, v in model.attrs.items() if k not in ("coefficients", "intercepts")}
    inputs = [x, m.add_constant(f"{model.name or 'linear'}_affine_matrix", np.ascontiguousarray(mat)),
              m.add_constant(f"{model.name or 'linear'}_affine_offset", bias)]
    made = m.replace([*reversed(steps), model], _FUSED[model.op_type], inputs, list(model.outputs), attrs, DOMAIN)
    return len(steps) if made is not None else 0


def _affine_step(m: Matcher, step: Node) -> tuple[str, Fold] | None:
    """(the step's data input, how it folds into the (M, d) of what reads it) for an affine step, else None."""
    if step.domain == ML and step.op_type == "Scaler" and len(step.inputs) == 1:
        offset = np.asarray(step.attr("offset", [0.0]) or [0.0], np.float32).astype(np.float64).reshape(-1)
        scale = np.asarray(step.attr("scale", [1.0]) or [1.0], np.float32).astype(np.float64).reshape(-1)
        # y = (x - offset) * scale = x * scale + (-offset * scale)
        return step.inputs[0], lambda mat, d: _affine(mat, d, scale, -offset * scale)
    if not is_onnx_domain(step.domain) or len(step.inputs) != 2 or len(step.outputs) != 1:
        return None
    a, b = step.inputs
    ca, cb = m.const(a), m.const(b)
    if (ca is None) == (cb is None):
        return None
    const, data, first = (cb, a, False) if cb is not None else (ca, b, True)
    if const.dtype.kind != "f":
        return None
    k = const.astype(np.float64)
    op = step.op_type
    if op == "MatMul" and not first and k.ndim == 2:
        return data, lambda mat, d: (k @ mat, d) if k.shape[1] == mat.shape[0] else None
    if not _over_last_axis(k):
        return None
    k = k.reshape(-1)
    one, zero = np.ones(1), np.zeros(1)
    if op == "Add":
        return data, lambda mat, d: _affine(mat, d, one, k)
    if op == "Sub":  # x - k, or k - x = x * -1 + k
        return data, (lambda mat, d: _affine(mat, d, -one, k)) if first else (lambda mat, d: _affine(mat, d, one, -k))
    if op == "Mul":
        return data, lambda mat, d: _affine(mat, d, k, zero)
    if op == "Div" and not first and np.all(k != 0):
        return data, lambda mat, d: _affine(mat, d, 1.0 / k, zero)
    return None


def _over_last_axis(k: np.ndarray) -> bool:
    """A constant that broadcasts along the last axis only: a scalar, [F] or [1, F]."""
    return k.ndim <= 1 or k.ndim == 2 and k.shape[0] == 1


def _affine(mat: np.ndarray, d: np.ndarray, scale: np.ndarray, shift: np.ndarray):
    """(M, d) for ``x`` of a step ``y = x * scale + shift`` (each one value or one per feature) followed by what
    (M, d) computes from ``y``: ``(x * scale + shift) M + d = x (scale M) + (shift M + d)``; None when a vector
    does not fit M's features (the model's kernel then reports the mismatch, as it would have)."""
    f = mat.shape[0]
    if scale.size not in (1, f) or shift.size not in (1, f):
        return None
    moved = d + (shift @ mat if shift.size > 1 else shift[0] * mat.sum(axis=0))
    return (scale[:, None] * mat if scale.size > 1 else mat * scale[0]), moved


# --------------------------------------------------------------------------------------- normalizer
def _drop_normalizer(m: Matcher, norm: Node) -> int:
    if _text(norm.attr("norm", "MAX")) != "L1" or len(norm.inputs) != 1 or len(norm.outputs) != 1:
        return 0
    z = norm.inputs[0]
    producer = m.producers.get(z)
    if producer is None or not _mine(m, producer) or not _read_once(m, z) or len(producer.outputs) < 2 \
            or producer.outputs[1] != z or _text(producer.attr("post_transform", "NONE")) != "SOFTMAX":
        return 0
    if producer.domain == ML and producer.op_type == "LinearClassifier":
        intercepts = producer.attr("intercepts")
        columns = 0 if intercepts is None else len(intercepts)
    elif producer.domain == DOMAIN and producer.op_type == "AffineLinearClassifier":
        offsets = m.const(producer.inputs[2]) if len(producer.inputs) > 2 else None
        columns = 0 if offsets is None else offsets.size
    else:
        return 0
    if columns < 2:  # one score column is the binary case: Z = [1 - s, s], no softmax
        return 0
    out = norm.outputs[0]
    producer.outputs = [producer.outputs[0], out, *producer.outputs[2:]]
    m.graph.nodes = [n for n in m.graph.nodes if n is not norm]
    del m.by_id[norm.id]
    m.producers.pop(z, None)
    m.producers[out] = producer
    m.consumers.pop(z, None)
    return 1
