"""Pooling kernels against onnx's reference evaluator, and against a naive per-window loop where
the reference is known to deviate from the spec (MaxPool SAME_LOWER, Indices with stride 1,
LpPool with padding, GlobalLpPool which it lacks)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from ort_core.errors import KernelError

from .kernel_harness import check, run_ours


def rand(rng, *shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def naive_pool(x, kind, kernel, strides, pads, dilations=None, ceil_mode=False, count_include_pad=False, p=2):
    """Per-window loop following the spec (pads: explicit begin..., end...)."""
    nsp = len(kernel)
    dilations = dilations or [1] * nsp
    in_sp = x.shape[2:]
    out = []
    for i in range(nsp):
        dk = (kernel[i] - 1) * dilations[i] + 1
        span = in_sp[i] + pads[i] + pads[i + nsp] - dk
        o = -(-span // strides[i]) + 1 if ceil_mode else span // strides[i] + 1
        if ceil_mode and (o - 1) * strides[i] >= in_sp[i] + pads[i]:
            o -= 1
        out.append(o)
    y = np.zeros(x.shape[:2] + tuple(out), dtype=np.float64)
    idx = np.zeros(y.shape, dtype=np.int64)
    for n, c in itertools.product(range(x.shape[0]), range(x.shape[1])):
        for o in itertools.product(*[range(v) for v in out]):
            vals, where, n_pad = [], [], 0
            for t in itertools.product(*[range(k) for k in kernel]):
                pos = [o[i] * strides[i] - pads[i] + t[i] * dilations[i] for i in range(nsp)]
                if all(0 <= pos[i] < in_sp[i] for i in range(nsp)):
                    vals.append(float(x[(n, c, *pos)]))
                    where.append(np.ravel_multi_index(pos, in_sp))
                elif all(-pads[i] <= pos[i] < in_sp[i] + pads[i + nsp] for i in range(nsp)):
                    n_pad += 1
            vals = np.array(vals)
            if kind == "max":
                y[(n, c, *o)] = vals.max()
                idx[(n, c, *o)] = (n * x.shape[1] + c) * int(np.prod(in_sp)) + where[int(np.argmax(vals))]
            elif kind == "avg":
                y[(n, c, *o)] = vals.sum() / (len(vals) + (n_pad if count_include_pad else 0))
            else:
                y[(n, c, *o)] = (np.abs(vals) ** p).sum() ** (1.0 / p)
    return y.astype(x.dtype), idx


# ---------------------------------------------------------------------------------------------
# MaxPool
# ---------------------------------------------------------------------------------------------

MAX_GEOMETRIES = [
    dict(kernel_shape=[3, 3]),
    dict(kernel_shape=[2, 2], strides=[2, 2]),
    dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
    dict(kernel_shape=[3, 2], strides=[2, 1], pads=[1, 0, 0, 1]),
    dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),
    dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1, pads=[1, 1, 1, 1]),
    dict(kernel_shape=[2, 3], strides=[2, 1], dilations=[2, 2], pads=[1, 0, 1, 1]),
    dict(kernel_shape=[3, 3], auto_pad="SAME_UPPER", strides=[2, 2]),
    dict(kernel_shape=[3, 3], auto_pad="VALID", strides=[2, 2]),
]


@pytest.mark.parametrize("attrs", MAX_GEOMETRIES, ids=str)
def test_max_pool_2d(attrs):
    x = rand(np.random.default_rng(0), 2, 3, 9, 10)
    check("MaxPool", [x], attrs)


@pytest.mark.parametrize("attrs", [a for a in MAX_GEOMETRIES if a.get("strides", [1])[0] > 1], ids=str)
def test_max_pool_indices_against_reference(attrs):
    x = rand(np.random.default_rng(1), 2, 3, 9, 10)
    check("MaxPool", [x], attrs, n_outputs=2)
    check("MaxPool", [x], dict(attrs, storage_order=1), n_outputs=2)


@pytest.mark.parametrize("attrs", [
    dict(kernel_shape=[3, 3]),
    dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
    dict(kernel_shape=[2, 2], dilations=[2, 1], pads=[0, 1, 1, 0]),
], ids=str)
def test_max_pool_indices_stride1(attrs):
    x = rand(np.random.default_rng(2), 2, 3, 6, 7)
    y, idx = run_ours("MaxPool", [x], attrs, n_outputs=2)
    pads = attrs.get("pads", [0] * 4)
    ey, eidx = naive_pool(x, "max", attrs["kernel_shape"], [1, 1], pads, attrs.get("dilations"))
    assert idx.dtype == np.int64
    np.testing.assert_array_equal(y, ey)
    np.testing.assert_array_equal(idx, eidx)
    np.testing.assert_array_equal(x.reshape(-1)[idx], y)


def test_max_pool_indices_column_major_3d():
    x = rand(np.random.default_rng(3), 1, 2, 4, 5, 6)
    y, idx = run_ours("MaxPool", [x], dict(kernel_shape=[2, 2, 2], strides=[2, 2, 2], storage_order=1),
                      n_outputs=2)
    # column-major flat index of the spatial position, row-major over (N, C)
    flat_cm = np.transpose(x, (0, 1, 4, 3, 2)).reshape(-1)
    np.testing.assert_array_equal(flat_cm[idx], y)
    _, idx_rm = run_ours("MaxPool", [x], dict(kernel_shape=[2, 2, 2], strides=[2, 2, 2]), n_outputs=2)
    np.testing.assert_array_equal(x.reshape(-1)[idx_rm], y)


def test_max_pool_same_lower():
    x = rand(np.random.default_rng(4), 1, 2, 7, 8)
    (y,) = run_ours("MaxPool", [x], dict(kernel_shape=[2, 2], auto_pad="SAME_LOWER"))
    # SAME_LOWER: output = input size, the odd extra pad goes at the beginning
    ey, _ = naive_pool(x, "max", [2, 2], [1, 1], [1, 1, 0, 0])
    np.testing.assert_array_equal(y, ey)


@pytest.mark.parametrize("attrs", [dict(kernel_shape=[3]), dict(kernel_shape=[3], strides=[2], pads=[1, 1]),
                                   dict(kernel_shape=[2], dilations=[3], ceil_mode=1, strides=[2])], ids=str)
def test_max_pool_1d(attrs):
    x = rand(np.random.default_rng(5), 2, 3, 11)
    check("MaxPool", [x], attrs)


def test_max_pool_3d():
    x = rand(np.random.default_rng(6), 1, 2, 5, 6, 7)
    check("MaxPool", [x], dict(kernel_shape=[2, 3, 2], strides=[2, 2, 1], pads=[0, 1, 1, 1, 1, 0]))


def test_max_pool_int8_and_opsets():
    rng = np.random.default_rng(7)
    x = rng.integers(-128, 127, size=(1, 2, 6, 6), dtype=np.int8)
    check("MaxPool", [x], dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2]), opset=12)
    xf = rand(rng, 1, 2, 6, 6)
    for opset in (1, 8, 10, 11, 12, 22):
        check("MaxPool", [xf], dict(kernel_shape=[2, 2], strides=[2, 2]), opset=opset)


def test_max_pool_errors():
    x = rand(np.random.default_rng(8), 1, 1, 4, 4)
    with pytest.raises(KernelError, match="kernel_shape"):
        run_ours("MaxPool", [x], {})
    with pytest.raises(KernelError, match="storage_order"):
        run_ours("MaxPool", [x], dict(kernel_shape=[2, 2], storage_order=2))
    with pytest.raises(KernelError, match="strides"):
        run_ours("MaxPool", [x], dict(kernel_shape=[2, 2], strides=[1]))
    with pytest.raises(KernelError, match="rank"):
        run_ours("MaxPool", [x[0]], dict(kernel_shape=[2, 2]))
    with pytest.raises(KernelError, match="does not fit"):
        run_ours("MaxPool", [x], dict(kernel_shape=[5, 5]))


# ---------------------------------------------------------------------------------------------
# AveragePool
# ---------------------------------------------------------------------------------------------

AVG_GEOMETRIES = [
    dict(kernel_shape=[3, 3]),
    dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
    dict(kernel_shape=[3, 2], strides=[1, 2], pads=[2, 0, 1, 1]),
    dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),
    dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1, pads=[1, 1, 1, 1]),
    dict(kernel_shape=[3, 3], auto_pad="SAME_UPPER", strides=[2, 2]),
    dict(kernel_shape=[3, 3], auto_pad="SAME_LOWER", strides=[2, 2]),
    dict(kernel_shape=[2, 2], auto_pad="VALID", strides=[2, 2]),
    dict(kernel_shape=[2, 2], dilations=[2, 2], pads=[1, 1, 1, 1]),
]


@pytest.mark.parametrize("attrs", AVG_GEOMETRIES, ids=str)
@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_average_pool_2d(attrs, count_include_pad):
    x = rand(np.random.default_rng(10), 2, 3, 9, 10)
    check("AveragePool", [x], dict(attrs, count_include_pad=count_include_pad))


@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_average_pool_divisor_naive(count_include_pad):
    x = rand(np.random.default_rng(11), 1, 2, 7, 7)
    attrs = dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 2, 2, 1], ceil_mode=1,
                 count_include_pad=count_include_pad)
    (y,) = run_ours("AveragePool", [x], attrs)
    ey, _ = naive_pool(x, "avg", [3, 3], [2, 2], [1, 2, 2, 1], ceil_mode=True,
                       count_include_pad=bool(count_include_pad))
    np.testing.assert_allclose(y, ey, rtol=1e-5, atol=1e-6)


def test_average_pool_1d_3d_and_opsets():
    rng = np.random.default_rng(12)
    check("AveragePool", [rand(rng, 2, 3, 11)], dict(kernel_shape=[3], strides=[2], pads=[1, 1]))
    check("AveragePool", [rand(rng, 1, 2, 5, 6, 7)],
          dict(kernel_shape=[2, 3, 2], strides=[2, 1, 2], pads=[1, 1, 0, 0, 1, 1], count_include_pad=1))
    x = rand(rng, 1, 2, 6, 6)
    for opset in (1, 7, 10, 11, 19, 22):
        check("AveragePool", [x], dict(kernel_shape=[3, 3], strides=[2, 2]), opset=opset)


def test_average_pool_float16():
    x = rand(np.random.default_rng(13), 1, 2, 6, 6).astype(np.float16)
    (y,) = run_ours("AveragePool", [x], dict(kernel_shape=[2, 2], strides=[2, 2]))
    assert y.dtype == np.float16
    expected = x.astype(np.float32).reshape(1, 2, 3, 2, 3, 2).mean(axis=(3, 5))
    np.testing.assert_allclose(y.astype(np.float32), expected, rtol=1e-3, atol=1e-3)


# ---------------------------------------------------------------------------------------------
# LpPool
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("attrs", [dict(kernel_shape=[3, 3], strides=[2, 2]), dict(kernel_shape=[3, 3], p=3),
                                   dict(kernel_shape=[2, 2], p=1, strides=[2, 2]),
                                   dict(kernel_shape=[2, 2], dilations=[2, 1], p=2)], ids=str)
def test_lp_pool_reference(attrs):
    x = rand(np.random.default_rng(20), 2, 3, 8, 9)
    check("LpPool", [x], attrs, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("p", [1, 2, 3])
def test_lp_pool_padded_naive(p):
    # the reference rescales padded windows by K/count; the spec (and onnxruntime) sums the window
    x = rand(np.random.default_rng(21), 1, 2, 7, 6)
    (y,) = run_ours("LpPool", [x], dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 0], p=p))
    ey, _ = naive_pool(x, "lp", [3, 3], [2, 2], [1, 1, 1, 0], p=p)
    np.testing.assert_allclose(y, ey, rtol=1e-5, atol=1e-6)


def test_lp_pool_opset1_float_p():
    x = rand(np.random.default_rng(22), 1, 2, 4, 4)
    (y,) = run_ours("LpPool", [x], dict(kernel_shape=[2, 2], strides=[2, 2], p=2.0), opset=1)
    expected = np.sqrt((x.astype(np.float64) ** 2).reshape(1, 2, 2, 2, 2, 2).sum(axis=(3, 5)))
    np.testing.assert_allclose(y, expected, rtol=1e-5)


# ---------------------------------------------------------------------------------------------
# Global pools
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(2, 3, 5), (2, 3, 4, 5), (1, 2, 3, 4, 5)])
@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
def test_global_pools(op, shape):
    x = rand(np.random.default_rng(30), *shape)
    axes = tuple(range(2, x.ndim))
    reduce = np.mean if op == "GlobalAveragePool" else np.max
    expected = reduce(x, axis=axes, keepdims=True)
    for opset in (1, 22):
        (y,) = run_ours(op, [x], {}, opset=opset)
        assert y.dtype == np.float32 and y.shape == x.shape[:2] + (1,) * len(axes)
        np.testing.assert_allclose(y, expected, rtol=1e-6)
    if x.ndim == 4:  # the reference's GlobalMaxPool only handles 4-D inputs
        check(op, [x], {})


@pytest.mark.parametrize("p", [1, 2, 3])
def test_global_lp_pool(p):
    x = rand(np.random.default_rng(31), 2, 3, 4, 5)
    (y,) = run_ours("GlobalLpPool", [x], dict(p=p))
    expected = (np.abs(x.astype(np.float64)) ** p).sum(axis=(2, 3), keepdims=True) ** (1.0 / p)
    assert y.dtype == np.float32 and y.shape == (2, 3, 1, 1)
    np.testing.assert_allclose(y, expected, rtol=1e-5)


def test_global_pool_errors():
    with pytest.raises(KernelError, match="rank"):
        run_ours("GlobalAveragePool", [np.zeros((2, 3), np.float32)], {})
    with pytest.raises(KernelError, match="p must be positive"):
        run_ours("GlobalLpPool", [np.zeros((2, 3, 4), np.float32)], dict(p=0))
