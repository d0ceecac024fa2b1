"""Inference-mode Dropout: identity output plus an all-true mask."""

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


def test_dropout_training_mode_rejected():
    x = rng.standard_normal((3, 4)).astype(np.float32)
    with pytest.raises(KernelError, match="training_mode"):
        run_ours("Dropout", [x, np.array(0.5, np.float32), np.array(True)], opset=13)
    with pytest.raises(KernelError, match="training_mode"):
        run_ours("Dropout", [x, None, np.array(True)], opset=13)
    # ratio 0 in training mode drops nothing: still the identity
    (y,) = check("Dropout", [x, np.array(0.0, np.float32), np.array(True)], opset=13)
    np.testing.assert_array_equal(y, x)
