"""MaxUnpool against onnx's reference evaluator, and as the inverse of our MaxPool."""

from __future__ import annotations

import numpy as np
import pytest

from ort_core.errors import KernelError

from .kernel_harness import check, run_ours

rng = np.random.default_rng(29)


@pytest.mark.parametrize("opset", [9, 11, 22])
def test_max_unpool_after_max_pool(opset):
    x = rng.standard_normal((2, 3, 4, 6)).astype(np.float32)
    attrs = {"kernel_shape": [2, 2], "strides": [2, 2]}
    pooled, idx = run_ours("MaxPool", [x], attrs, opset=12, n_outputs=2)
    (y,) = check("MaxUnpool", [pooled, idx], attrs, opset=opset)
    assert y.shape == x.shape
    # every pooled maximum is back at its place, everything else is zero
    np.testing.assert_array_equal(y.reshape(-1)[idx.reshape(-1)], pooled.reshape(-1))
    assert np.count_nonzero(y) == pooled.size


def test_max_unpool_output_shape_and_pads():
    x = np.array([[[[5, 6], [7, 8]]]], np.float32)
    idx = np.array([[[[5, 7], [13, 15]]]], np.int64)
    attrs = {"kernel_shape": [2, 2], "strides": [2, 2]}
    (y,) = check("MaxUnpool", [x, idx, np.array([1, 1, 5, 5], np.int64)], attrs, opset=11)
    assert y.shape == (1, 1, 5, 5) and y[0, 0, 1, 1] == 5 and y[0, 0, 3, 3] == 8
    (y,) = check("MaxUnpool", [x, np.array([[[[0, 1], [2, 3]]]])], attrs | {"pads": [1, 1, 1, 1]},
                 opset=11)
    assert y.shape == (1, 1, 2, 2)


def test_max_unpool_1d():
    x = rng.standard_normal((1, 2, 3)).astype(np.float64)
    idx = np.array([[[0, 2, 3], [4, 5, 7]]], np.int64)
    (y,) = check("MaxUnpool", [x, idx], {"kernel_shape": [2]}, opset=11)
    assert y.shape == (1, 2, 4)


def test_max_unpool_errors():
    x = np.ones((1, 1, 2, 2), np.float32)
    attrs = {"kernel_shape": [2, 2], "strides": [2, 2]}
    with pytest.raises(KernelError, match="indices must lie"):
        run_ours("MaxUnpool", [x, np.full((1, 1, 2, 2), 16, np.int64)], attrs, opset=11)
    with pytest.raises(KernelError, match="output_shape"):
        run_ours("MaxUnpool", [x, np.zeros((1, 1, 2, 2), np.int64), np.array([1, 1, 3, 3])], attrs, opset=11)
    with pytest.raises(KernelError, match="kernel_shape"):
        run_ours("MaxUnpool", [x, np.zeros((1, 1, 2, 2), np.int64)], {}, opset=11)
