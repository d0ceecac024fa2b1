"""ScatterElements, ScatterND, Scatter and GatherND against onnx's reference evaluator."""

from __future__ import annotations

import numpy as np
import pytest

from ort_core.errors import KernelError

from .kernel_harness import check, run_ours

rng = np.random.default_rng(5)


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_elements(axis, reduction):
    data = rng.standard_normal((3, 4)).astype(np.float32)
    dim = data.shape[axis]
    if reduction == "none":  # distinct indices along the axis: duplicates are unspecified here
        idx = (np.argsort(rng.random(data.shape), axis=axis)[:2, :3] - dim).astype(np.int64)
    else:  # repeated and negative indices
        idx = rng.integers(-dim, dim, (2, 3)).astype(np.int64)
    updates = rng.standard_normal(idx.shape).astype(np.float32)
    check("ScatterElements", [data, idx, updates], {"axis": axis, "reduction": reduction}, opset=18)


def test_scatter_elements_duplicates_accumulate():
    data = np.zeros((1, 5), np.float32)
    idx = np.array([[1, 1, 3, 1]])
    upd = np.array([[1.0, 2.0, 3.0, 4.0]], np.float32)
    (y,) = run_ours("ScatterElements", [data, idx, upd], {"axis": 1, "reduction": "add"}, opset=16)
    np.testing.assert_array_equal(y, [[0, 7, 0, 3, 0]])
    (y,) = run_ours("ScatterElements", [data + 1, idx, upd], {"axis": 1, "reduction": "mul"}, opset=16)
    np.testing.assert_array_equal(y, [[1, 8, 1, 3, 1]])
    assert data.sum() == 0  # the input is untouched


def test_scatter_elements_bfloat16_reduction():
    import ml_dtypes

    data = np.ones((2, 2), ml_dtypes.bfloat16)
    (y,) = run_ours("ScatterElements", [data, np.array([[0, 0]]), np.full((1, 2), 2, ml_dtypes.bfloat16)],
                    {"reduction": "add"}, opset=18)
    assert y.dtype == data.dtype
    np.testing.assert_array_equal(y.astype(np.float32), [[3, 3], [1, 1]])


def test_scatter_elements_errors():
    data = np.zeros((2, 3), np.float32)
    with pytest.raises(KernelError, match="out of range"):
        run_ours("ScatterElements", [data, np.array([[3]]), np.ones((1, 1), np.float32)], {"axis": 1})
    with pytest.raises(KernelError, match="reduction"):
        run_ours("ScatterElements", [data, np.array([[0]]), np.ones((1, 1), np.float32)],
                 {"reduction": "max"}, opset=16)
    with pytest.raises(KernelError, match="one shape"):
        run_ours("ScatterElements", [data, np.array([[0, 1]]), np.ones((1, 1), np.float32)])


@pytest.mark.parametrize("opset", [9, 10])
def test_scatter_deprecated(opset):
    data = np.zeros((3, 3), np.float32)
    idx = np.array([[1, 0, 2], [0, 2, 1]], np.int64)
    upd = rng.standard_normal((2, 3)).astype(np.float32)
    (y,) = run_ours("Scatter", [data, idx, upd], {"axis": 0}, opset=opset)
    expected = data.copy()
    for i in range(2):
        for j in range(3):
            expected[idx[i, j], j] = upd[i, j]
    np.testing.assert_array_equal(y, expected)


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_nd(reduction):
    data = rng.standard_normal((4, 3, 2)).astype(np.float32)
    idx = np.array([[0], [2], [-1]], np.int64) if reduction == "none" else np.array([[0], [2], [0]])
    upd = rng.standard_normal((3, 3, 2)).astype(np.float32)
    check("ScatterND", [data, idx, upd], {"reduction": reduction}, opset=18)
    idx2 = np.array([[[0, 1], [3, 2]]], np.int64)  # element-level: k == rank - 1
    check("ScatterND", [data, idx2, rng.standard_normal((1, 2, 2)).astype(np.float32)],
          {"reduction": reduction}, opset=18)


def test_scatter_nd_errors():
    data = np.zeros((2, 2), np.float32)
    with pytest.raises(KernelError, match="updates shape"):
        run_ours("ScatterND", [data, np.array([[0]]), np.zeros((1, 3), np.float32)], opset=13)
    with pytest.raises(KernelError, match="out of range"):
        run_ours("ScatterND", [data, np.array([[2]]), np.zeros((1, 2), np.float32)], opset=13)
    with pytest.raises(KernelError, match="last dimension"):
        run_ours("ScatterND", [data, np.array([[0, 0, 0]]), np.zeros(1, np.float32)], opset=13)


@pytest.mark.parametrize("batch_dims,data_shape,idx", [
    (0, (2, 2), [[0, 0], [1, 1]]),
    (0, (2, 2), [[1], [0]]),
    (0, (2, 2, 2), [[[0, 1]], [[1, 0]]]),
    (0, (3, 4), [[-1, -2]]),
    (1, (2, 2, 2), [[1], [0]]),
    (1, (2, 3, 4), [[[0, 1], [2, 3]], [[1, 0], [0, 0]]]),
    (2, (2, 2, 3, 2), [[[[1], [0]], [[2], [1]]], [[[0], [0]], [[1], [2]]]]),
])
def test_gather_nd(batch_dims, data_shape, idx):
    data = rng.standard_normal(data_shape).astype(np.float32)
    check("GatherND", [data, np.array(idx, np.int64)], {"batch_dims": batch_dims}, opset=13)


def test_gather_nd_opset11_and_empty_index_tuple():
    data = np.arange(6, dtype=np.int32).reshape(2, 3)
    (y,) = run_ours("GatherND", [data, np.array([[1, 2], [0, 0]], np.int64)], opset=11)
    np.testing.assert_array_equal(y, [5, 0])
    (y,) = run_ours("GatherND", [data, np.zeros((2, 0), np.int64)], opset=13)  # whole tensor twice
    np.testing.assert_array_equal(y, np.stack([data, data]))


def test_gather_nd_errors():
    data = np.zeros((2, 3), np.float32)
    with pytest.raises(KernelError, match="out of range"):
        run_ours("GatherND", [data, np.array([[2, 0]])], opset=13)
    with pytest.raises(KernelError, match="do not fit"):
        run_ours("GatherND", [data, np.array([[0], [1], [0]])], {"batch_dims": 1}, opset=13)
