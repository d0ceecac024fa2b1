"""Reduction kernels (Reduce*, ArgMax/ArgMin) against onnx's reference evaluator."""

from __future__ import annotations

import numpy as np
import pytest

from ort_core.errors import KernelError

from .kernel_harness import check, run_ours

rng = np.random.default_rng(4)

REDUCE_OPS = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
              "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"]
INPUT_SINCE = {op: 13 if op == "ReduceSum" else 18 for op in REDUCE_OPS}
AXES = [None, [0], [1], [-1], [0, 2], [2, 0, 1]]


def data(op, dtype=np.float32, shape=(2, 3, 4)):
    lo = 0.1 if op == "ReduceLogSum" else -2.0
    hi = 1.5 if op == "ReduceProd" else 2.0
    return rng.uniform(lo, hi, shape).astype(dtype)


@pytest.mark.parametrize("op", REDUCE_OPS)
@pytest.mark.parametrize("axes", AXES)
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reduce_axes_attribute(op, axes, keepdims):
    x = data(op)
    attrs = {"keepdims": keepdims}
    if axes is not None:
        attrs["axes"] = axes
    for opset in (1, 11, INPUT_SINCE[op] - 1):
        check(op, [x], attrs, opset=opset)


@pytest.mark.parametrize("op", REDUCE_OPS)
@pytest.mark.parametrize("axes", AXES)
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reduce_axes_input(op, axes, keepdims):
    x = data(op)
    inputs = [x] if axes is None else [x, np.array(axes, np.int64)]
    (y,) = check(op, inputs, {"keepdims": keepdims}, opset=INPUT_SINCE[op])
    assert y.dtype == np.float32
    check(op, inputs, {"keepdims": keepdims}, opset=max(INPUT_SINCE[op], 20))


@pytest.mark.parametrize("op", REDUCE_OPS)
def test_reduce_empty_axes_and_noop(op):
    x = data(op)
    empty = np.array([], np.int64)
    (y,) = check(op, [x, empty], {"keepdims": 0}, opset=INPUT_SINCE[op])
    assert y.shape == ()  # empty axes reduce everything by default
    (y,) = check(op, [x, empty], {"noop_with_empty_axes": 1}, opset=INPUT_SINCE[op])
    assert y.shape == x.shape  # ... and nothing with noop_with_empty_axes
    (y,) = check(op, [x], {"noop_with_empty_axes": 1}, opset=INPUT_SINCE[op])
    assert y.shape == x.shape
    if op in ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd"):
        np.testing.assert_array_equal(y, x)


@pytest.mark.parametrize("op", REDUCE_OPS)
@pytest.mark.parametrize("dtype", [np.float64, np.float16])
def test_reduce_other_float_types(op, dtype):
    x = data(op, dtype)
    tol = 5e-3 if dtype == np.float16 else 1e-6
    check(op, [x, np.array([1], np.int64)], opset=INPUT_SINCE[op], rtol=tol, atol=tol)


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd",
                                "ReduceL1", "ReduceSumSquare"])
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_reduce_integers(op, dtype):
    x = rng.integers(-5, 6, (3, 4)).astype(dtype)
    if op == "ReduceSumSquare":  # the reference widens int32 to int64; the spec keeps T
        (y,) = run_ours(op, [x, np.array([1], np.int64)], opset=INPUT_SINCE[op])
        assert y.dtype == dtype
        np.testing.assert_array_equal(y, (x.astype(np.int64) ** 2).sum(axis=1, keepdims=True))
        return
    (y,) = check(op, [x, np.array([1], np.int64)], opset=INPUT_SINCE[op])
    assert y.dtype == dtype
    check(op, [x], {"axes": [0], "keepdims": 0}, opset=11)


def test_reduce_sum_int32_does_not_widen():
    x = np.full((4,), 2**30, np.int32)
    (y,) = run_ours("ReduceSum", [x], {"keepdims": 0}, opset=11)
    assert y.dtype == np.int32 and y == np.int32(0)  # wraps like int32 arithmetic


def test_reduce_mean_int_truncates():
    x = np.array([[1, 2], [-3, -4]], np.int32)
    (y,) = run_ours("ReduceMean", [x], {"axes": [1], "keepdims": 0}, opset=13)
    np.testing.assert_array_equal(y, [1, -3])


@pytest.mark.parametrize("op,expected", [("ReduceSum", 0), ("ReduceProd", 1), ("ReduceL1", 0),
                                         ("ReduceL2", 0), ("ReduceSumSquare", 0),
                                         ("ReduceMax", -np.inf), ("ReduceMin", np.inf),
                                         ("ReduceLogSum", -np.inf), ("ReduceLogSumExp", -np.inf)])
def test_reduce_empty_set(op, expected):
    x = np.zeros((2, 0, 3), np.float32)
    with np.errstate(divide="ignore"):
        (y,) = check(op, [x, np.array([1], np.int64)], {"keepdims": 1}, opset=INPUT_SINCE[op])
    assert y.shape == (2, 1, 3)
    np.testing.assert_array_equal(y, np.full((2, 1, 3), expected, np.float32))


def test_reduce_max_min_empty_int_and_bool():
    x = np.zeros((0, 2), np.int32)
    (y,) = run_ours("ReduceMax", [x, np.array([0], np.int64)], {"keepdims": 0}, opset=18)
    np.testing.assert_array_equal(y, [np.iinfo(np.int32).min] * 2)
    (y,) = run_ours("ReduceMin", [x, np.array([0], np.int64)], {"keepdims": 0}, opset=18)
    np.testing.assert_array_equal(y, [np.iinfo(np.int32).max] * 2)
    b = rng.random((3, 4)) > 0.5
    (y,) = check("ReduceMax", [b, np.array([1], np.int64)], opset=20)
    assert y.dtype == np.bool_


def test_reduce_log_sum_exp_is_stable():
    x = np.array([[1000.0, 1000.0], [-1000.0, -np.inf], [np.inf, 1.0]], np.float32)
    (y,) = run_ours("ReduceLogSumExp", [x, np.array([1], np.int64)], {"keepdims": 0}, opset=18)
    np.testing.assert_allclose(y, [1000 + np.log(2), -1000, np.inf], rtol=1e-6)


def test_reduce_scalar_input():
    x = np.array(3.0, np.float32)
    expected = {"ReduceL1": 3.0, "ReduceL2": 3.0, "ReduceSumSquare": 9.0, "ReduceLogSum": np.log(3.0)}
    for op in REDUCE_OPS:
        (y,) = run_ours(op, [x], {"keepdims": 0}, opset=INPUT_SINCE[op])
        assert y.shape == () and y.dtype == np.float32
        np.testing.assert_allclose(y, expected.get(op, 3.0), rtol=1e-6)
        if op not in ("ReduceLogSum", "ReduceLogSumExp"):  # the reference fails on scalars here
            check(op, [x], {"keepdims": 1}, opset=INPUT_SINCE[op])


def test_reduce_errors():
    x = data("ReduceSum")
    with pytest.raises(KernelError, match="out of range"):
        run_ours("ReduceSum", [x, np.array([3], np.int64)], opset=13)
    with pytest.raises(KernelError, match="repeated"):
        run_ours("ReduceMean", [x, np.array([1, -2], np.int64)], opset=18)
    with pytest.raises(KernelError, match="out of range"):
        run_ours("ReduceMax", [x], {"axes": [-4]}, opset=11)


def test_reduce_does_not_mutate_input():
    x = data("ReduceSum")
    x0 = x.copy()
    for op in REDUCE_OPS:
        if op == "ReduceLogSum":
            continue
        run_ours(op, [x], {"keepdims": 0}, opset=11)
        run_ours(op, [x, np.array([], np.int64)], {"noop_with_empty_axes": 1}, opset=INPUT_SINCE[op])
    np.testing.assert_array_equal(x, x0)


# ---------------------------------------------------------------------------------- ArgMax/ArgMin

@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("axis", [0, 1, -1, 2])
@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.uint8, np.float64])
def test_arg(op, axis, keepdims, dtype):
    x = rng.integers(0, 4, (3, 4, 5)).astype(dtype)  # many ties
    attrs = {"axis": axis, "keepdims": keepdims}
    (y,) = check(op, [x], attrs, opset=13)
    assert y.dtype == np.int64
    (first,) = check(op, [x], attrs, opset=11 if axis >= 0 else 11)
    (last,) = check(op, [x], {**attrs, "select_last_index": 1}, opset=12)
    assert (last >= first).all() and (last > first).any()
    if axis >= 0:
        check(op, [x], attrs, opset=1)


def test_arg_errors():
    with pytest.raises(KernelError, match="out of range"):
        run_ours("ArgMax", [np.zeros((2, 3), np.float32)], {"axis": 2}, opset=13)
    with pytest.raises(KernelError, match="empty"):
        run_ours("ArgMin", [np.zeros((2, 0), np.float32)], {"axis": 1}, opset=13)


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean"])
@pytest.mark.parametrize("axes", [[-1], [2, 3], [0], [0, 1], [1], [0, 1, 2, 3], [1, 3]])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_reduce_sum_mean_large_inputs(op, axes, dtype):
    # large contiguous inputs reduced over leading/trailing axes go through BLAS
    x = rng.standard_normal((4, 6, 16, 48)).astype(dtype)
    for keepdims in (0, 1):
        (y,) = run_ours(op, [x, np.array(axes, np.int64)], {"keepdims": keepdims},
                        opset=INPUT_SINCE[op])
        fn = np.sum if op == "ReduceSum" else np.mean
        expected = fn(x.astype(np.float64), axis=tuple(axes), keepdims=bool(keepdims))
        assert y.dtype == dtype and y.shape == expected.shape
        np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-4)
    # non-contiguous input takes the generic path and agrees
    xt = x.transpose(1, 0, 2, 3)
    (y,) = run_ours(op, [xt, np.array(axes, np.int64)], {"keepdims": 0}, opset=INPUT_SINCE[op])
    np.testing.assert_allclose(y, fn(xt.astype(np.float64), axis=tuple(axes)), rtol=1e-4, atol=1e-4)
