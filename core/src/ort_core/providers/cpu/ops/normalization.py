"""CPU kernels for normalizations: BatchNormalization (inference and training mode), LRN,
InstanceNormalization, LayerNormalization and GroupNormalization.

RMSNormalization, LpNormalization and MeanVarianceNormalization are not here.
"""

from __future__ import annotations

import math

import numpy as np

from ....errors import KernelError
from ..registry import register

_STASH_TYPES = {1: np.float32, 10: np.float16, 11: np.float64}


def _compute_dtype(dtype: np.dtype) -> np.dtype:
    """Statistics of float16 inputs are computed in float32; other float types as they are."""
    return np.dtype(np.float32) if dtype == np.float16 else np.dtype(dtype)


def _float_attr(node, name, default):
    """A float attribute (ONNX stores them as float32: defaults are rounded the same way)."""
    return float(np.float32(node.attr(name, default)))


def _channel_shape(x):
    """Shape broadcasting a per-channel vector over (N, C, spatial...)."""
    return (x.shape[1],) + (1,) * (x.ndim - 2)


# ---------------------------------------------------------------------------------------------
# BatchNormalization
# ---------------------------------------------------------------------------------------------

def _bn_affine(x, scale, bias, mean, var, shape, epsilon, cdt):
    """(x - mean) / sqrt(var + epsilon) * scale + bias, folded into one multiply-add."""
    inv = np.sqrt(var.astype(np.float64) + epsilon)
    np.divide(scale.astype(np.float64), inv, out=inv)
    shift = bias.astype(np.float64) - mean.astype(np.float64) * inv
    y = np.multiply(x, inv.astype(cdt).reshape(shape), dtype=cdt)
    y += shift.astype(cdt).reshape(shape)
    return y.astype(x.dtype, copy=False)


@register("BatchNormalization", since=1, until=None)
def batch_normalization_factory(node, opset):
    epsilon = _float_attr(node, "epsilon", 1e-5)
    momentum = _float_attr(node, "momentum", 0.9)
    extra_outputs = [o for o in node.outputs[1:] if o]
    if opset >= 14:
        training = int(node.attr("training_mode", 0)) != 0
        if extra_outputs and not training:
            raise KernelError(f"{node.label}: outputs {extra_outputs} are only produced in training "
                              f"mode (training_mode=1)")
    else:
        # before opset 14 the outputs say the mode: Y alone is inference (is_test, opset < 7, is
        # ignored then, as in onnxruntime); running and saved statistics mean training
        training = bool(extra_outputs)
        if training and opset < 7 and int(node.attr("is_test", 0)):
            raise KernelError(f"{node.label}: outputs {extra_outputs} are only produced in training "
                              f"mode, but is_test=1")
    # opset < 9: spatial=0 means per-activation statistics of shape x.shape[1:]
    spatial = int(node.attr("spatial", 1)) if opset < 9 else 1
    n_out = len(node.outputs)
    label = node.label

    def kernel(x, scale, bias, mean, var):
        cdt = _compute_dtype(x.dtype)
        if x.ndim < 2:
            raise KernelError(f"{label}: input must have rank >= 2 (N, C, ...), got shape {x.shape}")
        if spatial or (scale.ndim == 1 and x.ndim > 2 and scale.shape[0] == x.shape[1]):
            shape = _channel_shape(x)
            axes = (0,) + tuple(range(2, x.ndim))
        else:
            shape = x.shape[1:]
            axes = (0,)
        for name, a in (("scale", scale), ("B", bias), ("mean", mean), ("var", var)):
            if a.size != math.prod(shape):
                raise KernelError(f"{label}: {name} of shape {a.shape} does not match input shape "
                                  f"{x.shape} (expected {math.prod(shape)} values)")
        if not training:
            return (_bn_affine(x, scale, bias, mean, var, shape, epsilon, cdt),) + (None,) * (n_out - 1)
        # training: normalize with the batch's own statistics (population variance, float32
        # at least) and blend them into the running statistics by momentum
        cur_mean = np.mean(x, axis=axes, dtype=cdt)
        centered = np.subtract(x, cur_mean.reshape(shape), dtype=cdt)
        cur_var = np.mean(np.square(centered, out=centered), axis=axes)
        y = _bn_affine(x, scale, bias, cur_mean, cur_var, shape, epsilon, cdt)
        stat = mean.dtype
        run_mean = (mean.astype(cdt) * cdt.type(momentum)
                    + cur_mean.reshape(mean.shape) * cdt.type(1 - momentum)).astype(stat)
        run_var = (var.astype(cdt) * cdt.type(momentum)
                   + cur_var.reshape(var.shape) * cdt.type(1 - momentum)).astype(stat)
        outs = (y, run_mean, run_var)
        if opset < 14:  # saved_mean, saved_var: the batch statistics themselves
            outs += (cur_mean.reshape(mean.shape).astype(stat), cur_var.reshape(var.shape).astype(stat))
        return tuple(o if i == 0 or (i < n_out and node.outputs[i]) else None
                     for i, o in enumerate(outs[:n_out]))

    return kernel


# ---------------------------------------------------------------------------------------------
# LRN
# ---------------------------------------------------------------------------------------------

@register("LRN", since=1, until=None)
def lrn_factory(node, opset):
    size = node.attr("size")
    if size is None or int(size) < 1:
        raise KernelError(f"{node.label}: LRN requires a positive 'size' attribute, got {size!r}")
    size = int(size)
    alpha = _float_attr(node, "alpha", 1e-4)
    beta = _float_attr(node, "beta", 0.75)
    bias = _float_attr(node, "bias", 1.0)
    before = (size - 1) // 2  # channels summed: [c - before, c + size - 1 - before]
    label = node.label

    def kernel(x):
        if x.ndim < 3:
            raise KernelError(f"{label}: LRN input must have rank >= 3, got shape {x.shape}")
        cdt = _compute_dtype(x.dtype)
        C = x.shape[1]
        # channels past either end are zeros: a window wider than the channels sums just as much with
        # its padding cut to C - 1 on each side (a hostile 'size' of 2**31 costs neither memory nor time)
        lo, hi = min(before, max(C - 1, 0)), min(size - 1 - before, max(C - 1, 0))
        sq = np.zeros((x.shape[0], C + lo + hi) + x.shape[2:], dtype=cdt)
        np.square(x, out=sq[:, lo:lo + C], dtype=cdt)
        acc = sq[:, 0:C].copy()
        for t in range(1, lo + hi + 1):
            acc += sq[:, t:t + C]
        acc *= cdt.type(alpha / size)
        acc += cdt.type(bias)
        np.power(acc, cdt.type(-beta), out=acc)
        acc *= x
        return (acc.astype(x.dtype, copy=False),)

    return kernel


# ---------------------------------------------------------------------------------------------
# InstanceNormalization
# ---------------------------------------------------------------------------------------------

def _normalize_rows(x2, epsilon, cdt):
    """Rows of the 2-D x2 standardized in dtype cdt: (normalized, mean (R, 1), inv_std (R, 1))."""
    mean = np.mean(x2, axis=1, keepdims=True, dtype=cdt)
    y = np.subtract(x2, mean, dtype=cdt)
    var = np.einsum("ij,ij->i", y, y).reshape(-1, 1)  # one pass, no squared temporary
    var *= cdt.type(1.0 / max(1, x2.shape[1]))
    var += cdt.type(epsilon)
    inv_std = np.sqrt(var, out=var)
    np.reciprocal(inv_std, out=inv_std)
    y *= inv_std
    return y, mean, inv_std


@register("InstanceNormalization", since=1, until=None)
def instance_normalization_factory(node, opset):
    epsilon = _float_attr(node, "epsilon", 1e-5)
    label = node.label

    def kernel(x, scale, bias):
        if x.ndim < 3:
            raise KernelError(f"{label}: input must have rank >= 3 (N, C, spatial...), got {x.shape}")
        cdt = _compute_dtype(x.dtype)
        y, _, _ = _normalize_rows(x.reshape(x.shape[0] * x.shape[1], math.prod(x.shape[2:])), epsilon, cdt)
        y = y.reshape(x.shape)
        shape = _channel_shape(x)
        y *= scale.astype(cdt, copy=False).reshape(shape)
        y += bias.astype(cdt, copy=False).reshape(shape)
        return (y.astype(x.dtype, copy=False),)

    return kernel


# ---------------------------------------------------------------------------------------------
# LayerNormalization
# ---------------------------------------------------------------------------------------------

@register("LayerNormalization", since=17, until=None)
def layer_normalization_factory(node, opset):
    axis = int(node.attr("axis", -1))
    epsilon = _float_attr(node, "epsilon", 1e-5)
    stash = _read_stash_type(node)
    n_out = len(node.outputs)
    label = node.label

    def kernel(x, scale, bias=None):
        ax = axis + x.ndim if axis < 0 else axis
        if not 0 <= ax < x.ndim:
            raise KernelError(f"{label}: axis {axis} is out of range for input of rank {x.ndim}")
        cdt = np.result_type(stash, _compute_dtype(x.dtype))
        stat_shape = x.shape[:ax] + (1,) * (x.ndim - ax)
        x2 = x.reshape(math.prod(x.shape[:ax]), math.prod(x.shape[ax:]))
        y, mean, inv_std = _normalize_rows(x2, epsilon, cdt)
        y = y.reshape(x.shape)
        mean, inv_std = mean.reshape(stat_shape), inv_std.reshape(stat_shape)
        y *= scale.astype(cdt, copy=False)
        if bias is not None:
            y += bias.astype(cdt, copy=False)
        outs = (y.astype(x.dtype, copy=False),)
        if n_out > 1:
            outs += (mean.astype(stash, copy=False),)
        if n_out > 2:
            outs += (inv_std.astype(stash, copy=False),)
        return outs

    return kernel


def _read_stash_type(node):
    stash_type = int(node.attr("stash_type", 1))
    if stash_type not in _STASH_TYPES:
        raise KernelError(f"{node.label}: unsupported stash_type {stash_type} "
                          f"(supported: {sorted(_STASH_TYPES)})")
    return np.dtype(_STASH_TYPES[stash_type])


# ---------------------------------------------------------------------------------------------
# GroupNormalization
# ---------------------------------------------------------------------------------------------

def _group_norm_factory(node, opset, per_channel_affine: bool):
    num_groups = node.attr("num_groups")
    if num_groups is None or int(num_groups) < 1:
        raise KernelError(f"{node.label}: GroupNormalization requires a positive 'num_groups', "
                          f"got {num_groups!r}")
    G = int(num_groups)
    epsilon = _float_attr(node, "epsilon", 1e-5)
    stash = _read_stash_type(node) if per_channel_affine else np.dtype(np.float32)
    label = node.label

    def kernel(x, scale, bias):
        if x.ndim < 2 or x.shape[1] % G:
            raise KernelError(f"{label}: channels of input shape {x.shape} are not divisible into "
                              f"{G} groups")
        N, C = x.shape[:2]
        cdt = np.result_type(stash, _compute_dtype(x.dtype))
        y, _, _ = _normalize_rows(x.reshape(N * G, math.prod(x.shape[1:]) // G), epsilon, cdt)
        y = y.reshape(x.shape)
        s = scale.astype(cdt, copy=False)
        b = bias.astype(cdt, copy=False)
        if not per_channel_affine:  # opset 18: one scale/bias per group
            s, b = np.repeat(s, C // G), np.repeat(b, C // G)
        shape = _channel_shape(x)
        y *= s.reshape(shape)
        y += b.reshape(shape)
        return (y.astype(x.dtype, copy=False),)

    return kernel


@register("GroupNormalization", since=18, until=20)
def group_normalization_18_factory(node, opset):
    return _group_norm_factory(node, opset, per_channel_affine=False)


@register("GroupNormalization", since=21, until=None)
def group_normalization_21_factory(node, opset):
    return _group_norm_factory(node, opset, per_channel_affine=True)
