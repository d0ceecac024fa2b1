"""CPU kernels for onnxruntime's normalization contrib ops: com.microsoft SkipLayerNormalization,
SkipSimplifiedLayerNormalization and EmbedLayerNormalization, and the two that onnxruntime registers in the
ONNX domain itself: SimplifiedLayerNormalization (opset 1 on) and LayerNormalization below opset 17.

SkipLayerNormalization(input, skip, gamma, beta?, bias?) -> (output, mean?, inv_std_var?, input_skip_bias_sum?):
s = input + skip (+ bias), output = (s - mean) * inv_std * gamma (+ beta) over the last axis, inv_std =
1 / sqrt(var + epsilon) (epsilon 1e-12 by default). input is (B, S, H) or (T, H); skip has input's shape or,
for a 3-D input, (1, S, H) or (S, H) (onnxruntime also takes a 3-D skip of another batch size and reads its
batches cyclically, batch b adding skip[b % len(skip)]: so do we). mean/inv_std_var are float32 (..., 1).
SkipSimplifiedLayerNormalization(input, skip, gamma, bias?) is its RMS form, s * inv_rms * gamma with inv_rms =
1 / sqrt(mean(s^2) + epsilon); its mean output holds zeros, as onnxruntime's does.
EmbedLayerNormalization: word, position (position_ids, else 0..S-1) and segment embeddings (segment 0 when
segment_ids is absent) gathered and summed, then layer-normalized with gamma, beta; mask_index counts the 1s of
each mask row (zeros without a mask), embedding_sum is the sum before normalization.
SimplifiedLayerNormalization(X, scale) -> (Y, inv_std_var?): RMS normalization over axes axis..rank-1.
LayerNormalization below opset 17 is ONNX's opset-17 kernel (normalization.py), with Y in scale's type.
16-bit floats run in float32 and are rounded once at the end. The fused ort_core-domain ops are in
fused_transformer.py; RMSNormalization (opset 23) is in norm_recent.py.
"""

from __future__ import annotations

import math

import numpy as np

from ....errors import KernelError
from ....limits import check_tensor_size
from ..registry import register
from .norm_recent import _axis, _check_float, _compute_dtype
from .normalization import _float_attr, layer_normalization_factory

DOMAIN = "com.microsoft"
_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)
_STASH = {1: _F32, 11: _F64}  # SimplifiedLayerNormalization's inv_std_var types (float, double)


def _row_norm(x2: np.ndarray, epsilon: float, cdt: np.dtype, centered: bool):
    """Rows of the 2-D x2 normalized in dtype cdt (centered: layer norm, else RMS norm) into a new array:
    (y, mean (R, 1) or None, inv_std (R, 1)). Row statistics are batched dot products, which BLAS runs
    much faster than numpy's reductions."""
    n_rows, width = x2.shape
    rows = x2.astype(cdt, copy=False).reshape(n_rows, 1, width)
    mean = None
    if centered:
        mean = np.matmul(rows, np.full((width, 1), 1.0 / max(width, 1), cdt))
        y = np.subtract(rows, mean)
        var = np.matmul(y, y.transpose(0, 2, 1))
    else:
        y = None
        var = np.matmul(rows, rows.transpose(0, 2, 1))
    var *= cdt.type(1.0 / max(width, 1))
    var += cdt.type(epsilon)
    inv_std = np.reciprocal(np.sqrt(var, out=var), out=var)
    if y is None:
        y = np.multiply(rows, inv_std)
    else:
        y *= inv_std
    return (y.reshape(n_rows, width), None if mean is None else mean.reshape(n_rows, 1),
            inv_std.reshape(n_rows, 1))


def _layer_norm(s: np.ndarray, gamma: np.ndarray, beta: np.ndarray | None, epsilon: float) -> np.ndarray:
    """LayerNorm of s over its last axis into a new array; 16-bit floats computed in float32."""
    cdt = np.dtype(np.float32) if s.dtype.itemsize < 4 else s.dtype
    y = _row_norm(s.reshape(-1, s.shape[-1]), epsilon, cdt, centered=True)[0]
    y *= gamma
    if beta is not None:
        y += beta
    return y.reshape(s.shape).astype(s.dtype, copy=False)


def _check_affine(label: str, x: np.ndarray, **params) -> None:
    """Scale/bias of (Simplified)LayerNormalization: numpy-broadcastable to X without widening it."""
    for name, p in params.items():
        if p is None:
            continue
        _check_float(label, p)
        try:
            ok = p.ndim <= x.ndim and np.broadcast_shapes(p.shape, x.shape) == x.shape
        except ValueError:
            ok = False
        if not ok:
            raise KernelError(f"{label}: {name} of shape {p.shape} does not broadcast to X of shape {x.shape}")


def _wider(a: np.dtype, b: np.dtype) -> np.dtype:
    """The float type two different float types are computed in: double if either is, else float32."""
    return _F64 if _F64 in (a, b) else _F32


# ---------------------------------------------------------------------------------------------
# LayerNormalization (opset < 17) and SimplifiedLayerNormalization, ONNX domain
# ---------------------------------------------------------------------------------------------

@register("LayerNormalization", since=1, until=16)
def layer_normalization_contrib_factory(node, opset):
    inner = layer_normalization_factory(node, opset)
    label = node.label

    def kernel(x, scale, bias=None):
        _check_float(label, x)
        _check_affine(label, x, scale=scale, B=bias)
        if bias is not None and bias.dtype != scale.dtype:
            raise KernelError(f"{label}: B has type {bias.dtype}, Scale has {scale.dtype}")
        if scale.dtype == x.dtype:
            return inner(x, scale, bias)
        w = _wider(x.dtype, scale.dtype)  # Y has Scale's type; mixed types run in the wider one
        outs = inner(x.astype(w), scale.astype(w), None if bias is None else bias.astype(w))
        return (outs[0].astype(scale.dtype),) + tuple(outs[1:])

    return kernel


@register("SimplifiedLayerNormalization", since=1)
def simplified_layer_normalization_factory(node, opset):
    label = node.label
    axis = int(node.attr("axis", -1))
    epsilon = _float_attr(node, "epsilon", 1e-5)
    stash_type = int(node.attr("stash_type", 1))
    if stash_type not in _STASH:
        raise KernelError(f"{label}: unsupported stash_type {stash_type} (supported: 1 float, 11 double)")
    stash = _STASH[stash_type]
    n_out = len(node.outputs)
    want_inv = n_out > 1 and bool(node.outputs[1])

    def kernel(x, scale):
        _check_float(label, x)
        _check_affine(label, x, scale=scale)
        ax = _axis(label, axis, x.ndim)
        cdt = np.result_type(_compute_dtype(x.dtype, stash), _compute_dtype(scale.dtype, stash))
        y, _, inv = _row_norm(x.reshape(math.prod(x.shape[:ax]), math.prod(x.shape[ax:])), epsilon, cdt, False)
        y = y.reshape(x.shape)
        y *= scale.astype(cdt, copy=False)
        outs = (y.astype(scale.dtype, copy=False),)
        if n_out > 1:
            stat_shape = x.shape[:ax] + (1,) * (x.ndim - ax)
            outs += (inv.reshape(stat_shape).astype(stash, copy=False) if want_inv else None,)
        return outs

    return kernel


# ---------------------------------------------------------------------------------------------
# SkipLayerNormalization, SkipSimplifiedLayerNormalization
# ---------------------------------------------------------------------------------------------

def _skip_like(label: str, x: np.ndarray, skip: np.ndarray) -> np.ndarray:
    """skip shaped to broadcast against x (see the module docstring for the shapes taken)."""
    if x.ndim not in (2, 3):
        raise KernelError(f"{label}: input must be 3-D (batch, sequence, hidden) or 2-D (tokens, hidden), "
                          f"got shape {x.shape}")
    if skip.shape == x.shape:
        return skip
    if x.ndim == 3 and skip.ndim in (2, 3) and skip.shape[-2:] == x.shape[-2:]:
        if skip.ndim == 2 or skip.shape[0] == 1:
            return skip
        if skip.shape[0] > 0:
            return np.take(skip, np.arange(x.shape[0]) % skip.shape[0], axis=0)
    raise KernelError(f"{label}: skip of shape {skip.shape} does not fit input of shape {x.shape} (expected the "
                      f"input's shape or, for a 3-D input, (1, S, H) or (S, H))")


def _check_vector(label: str, name: str, v: np.ndarray | None, x: np.ndarray) -> None:
    if v is None:
        return
    if v.dtype != x.dtype:
        raise KernelError(f"{label}: {name} has type {v.dtype}, input has {x.dtype}")
    if v.shape != x.shape[-1:]:
        raise KernelError(f"{label}: {name} must be 1-D of the hidden size {x.shape[-1]}, got shape {v.shape}")


def _skip_factory(node, simplified: bool):
    label = node.label
    epsilon = _float_attr(node, "epsilon", 1e-12)
    if epsilon < 0:
        raise KernelError(f"{label}: epsilon must not be negative, got {epsilon}")
    outputs = list(node.outputs)
    if len(outputs) > 4:
        raise KernelError(f"{label}: {node.op_type} has at most 4 outputs, got {len(outputs)}")
    want = [bool(o) for o in outputs] + [False] * (4 - len(outputs))

    def kernel(x, skip, gamma, beta=None, bias=None):
        _check_float(label, x)
        if skip.dtype != x.dtype:
            raise KernelError(f"{label}: skip has type {skip.dtype}, input has {x.dtype}")
        skip = _skip_like(label, x, skip)
        for name, v in (("gamma", gamma), ("beta", beta), ("bias", bias)):
            _check_vector(label, name, v, x)
        cdt = _compute_dtype(x.dtype)
        s = np.add(x, skip, dtype=cdt)
        if bias is not None:
            s += bias.astype(cdt, copy=False)
        g = gamma.astype(cdt, copy=False)
        b = None if beta is None else beta.astype(cdt, copy=False)
        hidden = x.shape[-1]
        stat_shape = x.shape[:-1] + (1,)
        mean = inv = None
        if simplified or want[1] or want[2]:
            y, mean, inv = _row_norm(s.reshape(math.prod(stat_shape), hidden), epsilon, cdt, centered=not simplified)
            y = y.reshape(x.shape)
            y *= g
            if b is not None:
                y += b
        else:
            y = _layer_norm(s, g, b, epsilon) if hidden else np.empty(s.shape, cdt)
        outs = [y.astype(x.dtype, copy=False)]
        if want[1]:
            outs.append(np.zeros(stat_shape, _F32) if simplified else mean.reshape(stat_shape).astype(_F32))
        else:
            outs.append(None)
        outs.append(inv.reshape(stat_shape).astype(_F32) if want[2] else None)
        outs.append(s.astype(x.dtype, copy=False) if want[3] else None)
        return tuple(outs[:len(outputs)])

    return kernel


@register("SkipLayerNormalization", since=1, domain=DOMAIN)
def skip_layer_normalization_factory(node, opset):
    return _skip_factory(node, simplified=False)


@register("SkipSimplifiedLayerNormalization", since=1, domain=DOMAIN)
def skip_simplified_layer_normalization_factory(node, opset):
    inner = _skip_factory(node, simplified=True)
    return lambda x, skip, gamma, bias=None: inner(x, skip, gamma, None, bias)  # no beta input here


# ---------------------------------------------------------------------------------------------
# EmbedLayerNormalization
# ---------------------------------------------------------------------------------------------

def _check_ids(label: str, name: str, ids: np.ndarray | None, shape: tuple | None = None) -> None:
    if ids is None:
        return
    if ids.dtype.kind not in "iu":
        raise KernelError(f"{label}: {name} must be int32, got {ids.dtype}")
    if shape is not None and ids.shape != shape:
        raise KernelError(f"{label}: {name} of shape {ids.shape} must have input_ids' shape {shape}")


def _gather(label: str, name: str, table: np.ndarray, ids: np.ndarray, cdt: np.dtype) -> np.ndarray:
    """Rows table[ids] in cdt (a new array), after checking every id is a row of table."""
    if ids.size and (ids.min() < 0 or ids.max() >= table.shape[0]):
        raise KernelError(f"{label}: {name} out of range: ids must lie in [0, {table.shape[0]}), got "
                          f"[{ids.min()}, {ids.max()}]")
    return np.take(table, ids, axis=0).astype(cdt, copy=False)


@register("EmbedLayerNormalization", since=1, domain=DOMAIN)
def embed_layer_normalization_factory(node, opset):
    label = node.label
    epsilon = _float_attr(node, "epsilon", 1e-12)
    if epsilon < 0:
        raise KernelError(f"{label}: epsilon must not be negative, got {epsilon}")
    mask_index_type = int(node.attr("mask_index_type", 1))
    if mask_index_type not in (0, 1):
        raise KernelError(f"{label}: unsupported mask_index_type {mask_index_type} (supported: 0 none, 1 1-D "
                          f"mask_index)")
    n_out = len(node.outputs)
    if n_out > 3:
        raise KernelError(f"{label}: EmbedLayerNormalization has at most 3 outputs, got {n_out}")
    want = [bool(o) for o in node.outputs] + [False] * 3

    def kernel(input_ids, segment_ids, word_embedding, position_embedding, segment_embedding=None, gamma=None,
               beta=None, mask=None, position_ids=None):
        if gamma is None or beta is None:
            raise KernelError(f"{label}: inputs gamma and beta are required")
        _check_ids(label, "input_ids", input_ids)
        if input_ids.ndim != 2:
            raise KernelError(f"{label}: input_ids must be 2-D (batch, sequence), got shape {input_ids.shape}")
        _check_ids(label, "segment_ids", segment_ids, input_ids.shape)
        _check_ids(label, "mask", mask, input_ids.shape)
        _check_ids(label, "position_ids", position_ids)
        _check_float(label, word_embedding)
        if word_embedding.ndim != 2:
            raise KernelError(f"{label}: word_embedding must be 2-D, got shape {word_embedding.shape}")
        hidden = word_embedding.shape[1]
        for name, t in (("position_embedding", position_embedding), ("segment_embedding", segment_embedding)):
            if t is not None and (t.ndim != 2 or t.shape[1] != hidden or t.dtype != word_embedding.dtype):
                raise KernelError(f"{label}: {name} must be 2-D {word_embedding.dtype} with hidden size {hidden}, "
                                  f"got {t.dtype} of shape {t.shape}")
        for name, v in (("gamma", gamma), ("beta", beta)):
            if v.shape != (hidden,) or v.dtype != word_embedding.dtype:
                raise KernelError(f"{label}: {name} must be 1-D {word_embedding.dtype} of the hidden size {hidden}, "
                                  f"got {v.dtype} of shape {v.shape}")
        if segment_ids is not None and segment_embedding is None:
            raise KernelError(f"{label}: segment_ids is given without segment_embedding")
        batch, seq = input_ids.shape
        check_tensor_size(label, (batch, seq, hidden), word_embedding.dtype)
        cdt = _compute_dtype(word_embedding.dtype)

        s = _gather(label, "input_ids", word_embedding, input_ids, cdt)
        if position_ids is None:
            if seq > position_embedding.shape[0]:
                raise KernelError(f"{label}: sequence length {seq} exceeds the {position_embedding.shape[0]} rows "
                                  f"of position_embedding")
            s += position_embedding[:seq].astype(cdt, copy=False)
        else:
            if position_ids.ndim != 2 or position_ids.shape[1] != seq or position_ids.shape[0] not in (1, batch):
                raise KernelError(f"{label}: position_ids must be (1, {seq}) or ({batch}, {seq}), got shape "
                                  f"{position_ids.shape}")
            s += _gather(label, "position_ids", position_embedding, position_ids, cdt)
        if segment_embedding is not None:
            if segment_ids is None:  # onnxruntime adds segment 0 to every token then
                segment_ids = np.zeros((1, 1), np.int32)
            s += _gather(label, "segment_ids", segment_embedding, segment_ids, cdt)

        y = _layer_norm(s, gamma.astype(cdt, copy=False), beta.astype(cdt, copy=False), epsilon) if hidden else s
        outs = [y.astype(word_embedding.dtype, copy=False)]
        if n_out > 1:
            if not want[1]:
                outs.append(None)
            elif mask is None:
                outs.append(np.zeros(batch, np.int32))
            else:
                outs.append(np.count_nonzero(mask == 1, axis=1).astype(np.int32))
        if n_out > 2:
            outs.append(s.astype(word_embedding.dtype, copy=not hidden) if want[2] else None)
        return tuple(outs)

    return kernel
