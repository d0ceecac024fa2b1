"""TensorScatter kernel against onnx's reference evaluator and explicit expectations."""

from __future__ import annotations

import numpy as np
import pytest

from ort_core.errors import KernelError

from .kernel_harness import check, run_ours

RNG = np.random.default_rng(5)


@pytest.mark.parametrize("mode", ["linear", "circular"])
@pytest.mark.parametrize("axis", [-2, 1, 2])
def test_tensor_scatter_matches_reference(mode, axis):
    cache = RNG.standard_normal((2, 3, 6, 4)).astype(np.float32)
    shape = list(cache.shape)
    shape[axis] = 2
    update = RNG.standard_normal(shape).astype(np.float32)
    idx = np.array([1, cache.shape[axis] - 2 if mode == "linear" else cache.shape[axis] - 1], np.int64)
    check("TensorScatter", [cache, update, idx], {"mode": mode, "axis": axis}, opset=24)


def test_tensor_scatter_default_indices_and_no_mutation():
    cache = np.zeros((2, 5, 3), np.int32)
    update = np.arange(2 * 2 * 3, dtype=np.int32).reshape(2, 2, 3) + 1
    (y,) = run_ours("TensorScatter", [cache, update], {}, opset=24)
    np.testing.assert_array_equal(y[:, :2], update)
    assert not y[:, 2:].any() and not cache.any()


def test_tensor_scatter_circular_wraps():
    cache = np.zeros((1, 4), np.float32)
    (y,) = run_ours("TensorScatter", [cache, np.array([[1, 2, 3]], np.float32), np.array([2])],
                    {"mode": "circular", "axis": 1}, opset=24)
    np.testing.assert_array_equal(y, [[3, 0, 1, 2]])


def test_tensor_scatter_strings():
    cache = np.array([["a", "b", "c"], ["d", "e", "f"]], dtype=object)
    (y,) = run_ours("TensorScatter", [cache, np.array([["x"], ["y"]], dtype=object), np.array([2, 0])],
                    {"axis": 1}, opset=24)
    assert y.tolist() == [["a", "b", "x"], ["y", "e", "f"]]


@pytest.mark.parametrize("inputs, attrs, match", [
    ([np.zeros((2, 4)), np.zeros((2, 2)), np.array([3, 0])], {"axis": 1}, "leave the cache"),
    ([np.zeros((2, 4)), np.zeros((2, 5))], {"axis": 1}, "does not fit"),
    ([np.zeros((2, 4)), np.zeros((2, 2))], {"axis": 0}, "non-batch axis"),
    ([np.zeros((2, 4)), np.zeros((2, 2)), np.array([0])], {"axis": 1}, "write_indices"),
    ([np.zeros((2, 4)), np.zeros((2, 2), np.float32)], {"axis": 1}, "does not fit"),
])
def test_tensor_scatter_errors(inputs, attrs, match):
    with pytest.raises(KernelError, match=match):
        run_ours("TensorScatter", inputs, attrs, opset=24)


def test_tensor_scatter_bad_mode():
    with pytest.raises(KernelError, match="mode"):
        run_ours("TensorScatter", [np.zeros((1, 2)), np.zeros((1, 1))], {"mode": "ring"}, opset=24)
