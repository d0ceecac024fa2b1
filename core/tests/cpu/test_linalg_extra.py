"""Det against onnx's reference evaluator and numpy."""

from __future__ import annotations

import numpy as np
import pytest

from ort_core.errors import KernelError

from .kernel_harness import check, run_ours

rng = np.random.default_rng(19)


@pytest.mark.parametrize("shape", [(2, 2), (3, 3), (2, 4, 4), (2, 3, 1, 1), (0, 2, 2)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_det(shape, dtype):
    check("Det", [rng.standard_normal(shape).astype(dtype)], opset=11, rtol=1e-5, atol=1e-5)


def test_det_values_and_float16():
    x = np.array([[[1, 2], [3, 4]], [[2, 0], [0, 3]]], np.float16)
    (y,) = run_ours("Det", [x], opset=22)
    assert y.dtype == np.float16
    np.testing.assert_allclose(y, [-2, 6], rtol=1e-3)


def test_det_rejects_non_square():
    with pytest.raises(KernelError, match="square"):
        run_ours("Det", [np.zeros((2, 3), np.float32)], opset=11)
