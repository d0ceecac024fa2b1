"""Dropout: identity plus an all-true mask in inference; seeded random masks in training."""

from __future__ import annotations

import numpy as np
import pytest

from ort_core.errors import KernelError

from .kernel_harness import check, run_ours

rng = np.random.default_rng(3)


@pytest.mark.parametrize("opset", [12, 13, 22])
def test_dropout_identity_and_mask(opset):
    x = rng.standard_normal((3, 4)).astype(np.float32)
    (y,) = check("Dropout", [x], opset=opset)
    assert y is x
    y, mask = check("Dropout", [x, np.array(0.3, np.float32)], n_outputs=2, opset=opset)
    assert mask.dtype == np.bool_ and mask.shape == x.shape and mask.all()
    np.testing.assert_array_equal(y, x)
    y, mask = check("Dropout", [x, np.array(0.3, np.float32), np.array(False)], n_outputs=2,
                    opset=opset)
    assert mask.all()


@pytest.mark.parametrize("opset", [1, 6, 7, 10])
def test_dropout_old_opsets(opset):
    x = rng.standard_normal((2, 5)).astype(np.float64)
    attrs = {"ratio": 0.2}
    if opset < 7:
        attrs["is_test"] = 1
    y, mask = run_ours("Dropout", [x], attrs, n_outputs=2, opset=opset)
    np.testing.assert_array_equal(y, x)
    # the mask is typed like the data before opset 10, bool from opset 10
    assert mask.dtype == (np.float64 if opset < 10 else np.bool_)
    np.testing.assert_array_equal(mask, np.ones_like(x))
    if opset >= 7:
        check("Dropout", [x], {"ratio": 0.2}, opset=opset)


def test_dropout_omitted_mask_output():
    x = np.ones((2, 2), np.float32)
    node_outputs = run_ours("Dropout", [x], opset=13, n_outputs=1)
    assert len(node_outputs) == 1


def _numpy_mask(shape, ratio, seed):
    """What onnx's test cases expect: numpy's global generator seeded with the node's seed."""
    return np.random.RandomState(seed).uniform(0, 1, shape) >= ratio


@pytest.mark.parametrize("ratio", [0.5, 0.75, 0.1])
def test_dropout_training_seeded(ratio):
    x = rng.standard_normal((3, 4, 5)).astype(np.float32)
    inputs = [x, np.array(ratio, np.float32), np.array(True)]
    y, mask = run_ours("Dropout", inputs, {"seed": 3}, opset=13, n_outputs=2)
    keep = _numpy_mask(x.shape, np.float32(ratio), 3)
    np.testing.assert_array_equal(mask, keep)
    np.testing.assert_allclose(y, np.where(keep, x / (1 - ratio), 0), rtol=1e-6)
    assert y.dtype == x.dtype and mask.dtype == np.bool_
    y2, mask2 = run_ours("Dropout", inputs, {"seed": 3}, opset=13, n_outputs=2)
    np.testing.assert_array_equal(y, y2)  # a seeded node draws the same mask on every run
    np.testing.assert_array_equal(mask, mask2)


def test_dropout_training_default_ratio_and_unseeded():
    x = np.ones((200, 50), np.float16)
    (y,) = run_ours("Dropout", [x, None, np.array(True)], opset=22)
    assert y.dtype == np.float16
    assert set(np.unique(y).tolist()) == {0.0, 2.0}  # ratio 0.5: kept values doubled
    assert 0.4 < (y == 0).mean() < 0.6


def test_dropout_training_zero_ratio_is_identity():
    x = rng.standard_normal((3, 4)).astype(np.float32)
    y, mask = check("Dropout", [x, np.array(0.0, np.float32), np.array(True)], opset=13, n_outputs=2)
    np.testing.assert_array_equal(y, x)
    assert mask.all()


def test_dropout_training_bad_ratio():
    x = np.ones(4, np.float32)
    with pytest.raises(KernelError, match="ratio"):
        run_ours("Dropout", [x, np.array(1.0, np.float32), np.array(True)], opset=13)
