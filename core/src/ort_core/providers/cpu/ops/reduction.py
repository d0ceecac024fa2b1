"""CPU kernels for reductions: ReduceSum/Mean/Max/Min/Prod/L1/L2/LogSum/LogSumExp/SumSquare
(axes as attribute or input per opset, keepdims, noop_with_empty_axes) and ArgMax/ArgMin.

Cumulative ops (CumSum), TopK and normalizations are not here.
"""

from __future__ import annotations

import math

import numpy as np

from ....errors import KernelError
from ....ir.graph import Node
from ..registry import register


def _arr(r, dtype) -> np.ndarray:
    """numpy reductions over everything return scalars; kernels return arrays of the type."""
    if not isinstance(r, np.ndarray):
        return np.asarray(r, dtype=dtype)
    return r if r.dtype == dtype else r.astype(dtype)


_ONES: dict[tuple[np.dtype, int], np.ndarray] = {}  # read-only vectors of ones for _blas_sum


def _ones(dtype: np.dtype, n: int) -> np.ndarray:
    ones = _ONES.get((dtype, n))
    if ones is None:
        ones = np.ones(n, dtype)
        ones.setflags(write=False)
        if n <= 65536 and len(_ONES) < 256:  # bounded cache; benign races between threads
            _ONES[(dtype, n)] = ones
    return ones


def _blas_sum(x, axes, keepdims):
    """Sum of a float32/float64 C-contiguous array over a leading or trailing block of axes
    as a matrix-vector product (BLAS), several times faster than np.add.reduce for the
    last-axis sums of normalizations and softmax. None when the case does not apply."""
    if (x.dtype not in (np.float32, np.float64) or axes is None or not axes
            or x.size < 4096 or not x.flags.c_contiguous):
        return None
    ax = sorted(axes)
    k = len(ax)
    if ax == list(range(x.ndim - k, x.ndim)):
        inner = math.prod(x.shape[x.ndim - k:])
        if inner < 16:
            return None
        r = x.reshape(-1, inner) @ _ones(x.dtype, inner)
    elif ax == list(range(k)):
        outer = math.prod(x.shape[:k])
        if outer < 16:
            return None
        r = _ones(x.dtype, outer) @ x.reshape(outer, -1)
    else:
        return None
    kept = set(ax)
    if keepdims:
        return r.reshape([1 if i in kept else d for i, d in enumerate(x.shape)])
    return r.reshape([d for i, d in enumerate(x.shape) if i not in kept])


def _sum(x, axes, keepdims):
    r = _blas_sum(x, axes, keepdims)
    if r is not None:
        return r
    return np.add.reduce(x, axis=axes, dtype=x.dtype, keepdims=keepdims)


def _mean(x, axes, keepdims):
    if x.dtype == np.float16:  # accumulate in float32
        s = np.add.reduce(x, axis=axes, dtype=np.float32, keepdims=keepdims)
    else:
        s = _sum(x, axes, keepdims)
    s = np.asarray(s)
    n = x.size // s.size if s.size else 1
    if s.dtype.kind in "iu":  # integer mean truncates toward zero, like C
        return np.true_divide(s, n, out=s, casting="unsafe")
    return np.divide(s, n, out=s)


def _extreme(ufunc, empty_value):
    def reduce(x, axes, keepdims):
        if x.size == 0:
            if x.dtype == np.bool_:
                init = empty_value > 0  # max of nothing is False, min is True
            elif x.dtype.kind in "iu":
                info = np.iinfo(x.dtype)
                init = info.min if empty_value < 0 else info.max
            else:
                init = empty_value
            return ufunc.reduce(x, axis=axes, keepdims=keepdims, initial=init)
        return ufunc.reduce(x, axis=axes, keepdims=keepdims)
    return reduce


def _prod(x, axes, keepdims):
    return np.multiply.reduce(x, axis=axes, dtype=x.dtype, keepdims=keepdims)


def _l1(x, axes, keepdims):
    return np.add.reduce(np.abs(x), axis=axes, dtype=x.dtype, keepdims=keepdims)


def _sum_square(x, axes, keepdims):
    return np.add.reduce(np.square(x), axis=axes, dtype=x.dtype, keepdims=keepdims)


def _l2(x, axes, keepdims):
    s = np.asarray(_sum_square(x, axes, keepdims))
    if s.dtype.kind in "iu":
        return np.sqrt(s).astype(x.dtype)
    return np.sqrt(s, out=s)


def _log_sum(x, axes, keepdims):
    s = np.asarray(_sum(x, axes, keepdims))
    return np.log(s) if s.dtype.kind in "iu" else np.log(s, out=s)


def _log_sum_exp(x, axes, keepdims):
    work = x.astype(np.float32) if x.dtype == np.float16 else x
    if work.dtype.kind in "iu":
        work = work.astype(np.float64)
    if x.size == 0:
        return np.add.reduce(work, axis=axes, keepdims=keepdims) - np.inf
    m = np.maximum.reduce(work, axis=axes, keepdims=True)
    m = np.where(np.isfinite(m), m, 0).astype(work.dtype, copy=False)  # +-inf/NaN: no shift
    e = np.exp(work - m)
    s = np.asarray(np.add.reduce(e, axis=axes, keepdims=True))
    r = np.log(s, out=s)
    r += m
    if not keepdims:
        r = r.reshape([d for i, d in enumerate(r.shape) if i not in _norm(axes, x.ndim)])
    return r


def _norm(axes, rank):
    return range(rank) if axes is None else {a % rank for a in axes}


_REDUCERS = {
    # name: (function, opset where axes became an input)
    "ReduceSum": (_sum, 13),
    "ReduceMean": (_mean, 18),
    "ReduceMax": (_extreme(np.maximum, -np.inf), 18),
    "ReduceMin": (_extreme(np.minimum, np.inf), 18),
    "ReduceProd": (_prod, 18),
    "ReduceL1": (_l1, 18),
    "ReduceL2": (_l2, 18),
    "ReduceLogSum": (_log_sum, 18),
    "ReduceLogSumExp": (_log_sum_exp, 18),
    "ReduceSumSquare": (_sum_square, 18),
}


def _check_axes(node: Node, axes: list[int], rank: int) -> tuple[int, ...]:
    out = []
    for a in axes:
        if not -rank <= a < max(rank, 1):
            raise KernelError(f"{node.label}: axis {a} is out of range for rank {rank}")
        out.append(a % rank if rank else 0)
    if len(set(out)) != len(out):
        raise KernelError(f"{node.label}: repeated axes {axes}")
    return tuple(out)


def _reduce_factory(fn, input_since: int):
    def factory(node: Node, opset: int):
        keepdims = bool(node.attr("keepdims", 1))
        if opset < input_since:
            attr_axes = node.attr("axes")
            attr_axes = [int(a) for a in attr_axes] if attr_axes else None
            noop = False
        else:
            attr_axes = None
            noop = bool(node.attr("noop_with_empty_axes", 0))

        def run(x, axes):
            if x.ndim == 0:  # a scalar reduces to itself whatever the axes
                axes = None
            elif axes is not None:
                axes = _check_axes(node, axes, x.ndim)
            r = fn(x, axes, keepdims)
            return (_arr(r, x.dtype),)

        if opset < input_since:
            def kernel(x):
                return run(x, attr_axes)
            return kernel

        def kernel(x, axes=None):
            if axes is None or axes.size == 0:
                if noop:  # reducing over no axis: only the element-wise part applies
                    return run(x, [])
                return run(x, None)
            return run(x, axes.reshape(-1).tolist())
        return kernel
    return factory


for _name, (_fn, _input_since) in _REDUCERS.items():
    register(_name, since=1, until=_input_since - 1)(_reduce_factory(_fn, _input_since))
    register(_name, since=_input_since)(_reduce_factory(_fn, _input_since))


def _arg_factory(np_arg):
    def factory(node: Node, opset: int):
        axis = int(node.attr("axis", 0))
        keepdims = bool(node.attr("keepdims", 1))
        last = bool(node.attr("select_last_index", 0)) if opset >= 12 else False

        def kernel(x):
            (a,) = _check_axes(node, [axis], x.ndim)
            if x.shape[a] == 0:
                raise KernelError(f"{node.label}: cannot take {np_arg.__name__} over an empty axis")
            if last:
                r = x.shape[a] - 1 - np_arg(np.flip(x, a), axis=a, keepdims=keepdims)
            else:
                r = np_arg(x, axis=a, keepdims=keepdims)
            return (_arr(r, np.int64),)
        return kernel
    return factory


for _name, _np_arg in (("ArgMax", np.argmax), ("ArgMin", np.argmin)):
    register(_name, since=1, until=11)(_arg_factory(_np_arg))
    register(_name, since=12)(_arg_factory(_np_arg))
