"""CPU kernels drawing random values: RandomNormal, RandomUniform, their -Like variants, Bernoulli and
Multinomial. A ``seed`` attribute makes every run draw the same values (a fresh numpy Generator per
call); without one each call draws anew. Draws do not match other runtimes' (the spec allows it).
"""

from __future__ import annotations

import math
import threading

import ml_dtypes
import numpy as np

from ....errors import KernelError
from ....ir.graph import Node
from ....ir.types import np_dtype
from ....limits import check_tensor_size
from ..registry import register

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))


def _seed_of(node: Node):
    """numpy seed for the float ``seed`` attribute, or None for fresh entropy. Whole non-negative
    seeds are used as they are (seed=0.0 -> 0); others by their float64 bit pattern, so distinct
    seeds give distinct streams."""
    seed = node.attr("seed")
    if seed is None:
        return None
    seed = float(seed)
    if math.isnan(seed):
        return None
    if seed >= 0 and seed.is_integer():
        return int(seed)
    return int(np.float64(seed).view(np.uint64))


_process_seed: list = [None]  # set_seed's generator, which seeds the draws of nodes without a seed
_process_lock = threading.Lock()


def set_seed(seed: int) -> None:
    """From now on, random nodes without a ``seed`` attribute draw a reproducible sequence in this process
    (onnxruntime.set_seed); nodes with one are unaffected."""
    with _process_lock:
        _process_seed[0] = np.random.default_rng(int(seed))


def _generator(seed) -> np.random.Generator:
    # a Generator per call: runs never share state, so threads and repeated runs stay independent
    if seed is None and _process_seed[0] is not None:
        with _process_lock:
            seed = int(_process_seed[0].integers(0, 1 << 63))
    return np.random.default_rng(seed)


def _float_dtype(node: Node, code, fallback=None) -> np.dtype:
    """The float output type named by a dtype attribute code (0/absent -> fallback)."""
    dtype = np_dtype(int(code)) if code else fallback
    if dtype not in _FLOATS:
        raise KernelError(f"{node.label}: output type {dtype} is not float, double, float16 or bfloat16")
    return dtype


def _draw(rng: np.random.Generator, kind: str, shape, dtype: np.dtype, a: float, b: float) -> np.ndarray:
    """normal(mean=a, scale=b) or uniform[a, b) values of ``dtype``, drawn in float32 or float64."""
    gdt = np.float64 if dtype == np.float64 else np.float32
    if kind == "normal":
        v = rng.standard_normal(shape, dtype=gdt)
        if b != 1:
            v *= gdt(b)
        if a != 0:
            v += gdt(a)
    else:
        v = rng.random(shape, dtype=gdt)
        v *= gdt(b - a)
        v += gdt(a)
        if b > a:
            # rounding of low + u * (high - low) can land on high, which the range excludes
            np.minimum(v, np.nextafter(gdt(b), gdt(a)), out=v)
    return v.astype(dtype, copy=False)


def _params(node: Node, kind: str) -> tuple[float, float]:
    if kind == "normal":
        return float(node.attr("mean", 0.0)), float(node.attr("scale", 1.0))
    low, high = float(node.attr("low", 0.0)), float(node.attr("high", 1.0))
    if high < low:
        raise KernelError(f"{node.label}: high ({high}) must not be below low ({low})")
    return low, high


def _from_attrs(kind: str):
    def factory(node: Node, opset: int):
        shape = node.attr("shape")
        if shape is None:
            raise KernelError(f"{node.label}: attribute 'shape' is required")
        shape = tuple(int(d) for d in shape)
        if min(shape, default=0) < 0:
            raise KernelError(f"{node.label}: negative dimension in shape {list(shape)}")
        dtype = _float_dtype(node, node.attr("dtype", 1))
        check_tensor_size(node.label, shape, np.float64)  # drawn in double, then cast
        seed, (a, b) = _seed_of(node), _params(node, kind)

        def kernel():
            return (_draw(_generator(seed), kind, shape, dtype, a, b),)
        return kernel
    return factory


def _like(kind: str):
    def factory(node: Node, opset: int):
        code = node.attr("dtype")
        dtype = _float_dtype(node, code) if code else None
        seed, (a, b) = _seed_of(node), _params(node, kind)

        def kernel(x):
            out = dtype if dtype is not None else _float_dtype(node, 0, x.dtype)
            return (_draw(_generator(seed), kind, x.shape, out, a, b),)
        return kernel
    return factory


register("RandomNormal", since=1)(_from_attrs("normal"))
register("RandomUniform", since=1)(_from_attrs("uniform"))
register("RandomNormalLike", since=1)(_like("normal"))
register("RandomUniformLike", since=1)(_like("uniform"))


@register("Bernoulli", since=15)
def _bernoulli(node: Node, opset: int):
    code = node.attr("dtype")
    out = np_dtype(int(code)) if code else None
    if out is not None and out.kind not in "biuf" and out != ml_dtypes.bfloat16:
        raise KernelError(f"{node.label}: dtype {out} is not a numeric or bool type")
    seed = _seed_of(node)

    def kernel(p):
        if p.dtype not in _FLOATS:
            raise KernelError(f"{node.label}: input must hold float probabilities, got {p.dtype}")
        gdt = np.float64 if p.dtype == np.float64 else np.float32
        # u < p is 1 with probability p for u uniform in [0, 1)
        hit = _generator(seed).random(p.shape, dtype=gdt) < p.astype(gdt, copy=False)
        return (hit.astype(out if out is not None else p.dtype),)

    return kernel


@register("Multinomial", since=7)
def _multinomial(node: Node, opset: int):
    """Inverse-CDF sampling of every row at once: the per-row CDFs are laid end to end with row b
    shifted by b, so one searchsorted finds every sample's class."""
    n = int(node.attr("sample_size", 1))
    if n < 1:
        raise KernelError(f"{node.label}: sample_size must be >= 1, got {n}")
    out = np_dtype(int(node.attr("dtype", 6)))
    if out not in (np.int32, np.int64):
        raise KernelError(f"{node.label}: dtype must be int32 or int64, got {out}")
    seed = _seed_of(node)

    def kernel(logits):
        if logits.ndim != 2 or logits.shape[1] == 0:
            raise KernelError(f"{node.label}: input must be [batch_size, class_size] with classes, "
                              f"got shape {logits.shape}")
        nb, nc = logits.shape
        check_tensor_size(node.label, (nb, n), np.float64)
        z = logits.astype(np.float64)
        z -= z.max(axis=1, keepdims=True)  # unnormalized log-probabilities -> stable exp
        cdf = np.cumsum(np.exp(z), axis=1)
        cdf /= cdf[:, -1:]
        cdf[:, -1] = 1.0  # every draw in [0, 1) lands on some class despite rounding
        rows = np.arange(nb, dtype=np.float64)[:, None]
        u = _generator(seed).random((nb, n))
        flat = np.searchsorted((cdf + rows).ravel(), (u + rows).ravel(), side="right")
        cls = flat.reshape(nb, n) - np.arange(nb)[:, None] * nc
        return (np.clip(cls, 0, nc - 1).astype(out),)

    return kernel
