"""CumSum and CumProd against onnx's reference evaluator and numpy."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from ort_core.errors import KernelError

from .kernel_harness import check, run_ours

rng = np.random.default_rng(13)


@pytest.mark.parametrize("op,opset", [("CumSum", 11), ("CumSum", 14), ("CumProd", 26)])
@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_cumulative_matches_reference(op, opset, exclusive, reverse, axis):
    x = rng.uniform(0.5, 1.5, (3, 4)).astype(np.float64)
    check(op, [x, np.array(axis, np.int32)], {"exclusive": exclusive, "reverse": reverse}, opset=opset)


def test_cumulative_formulas():
    x = np.array([1, 2, 3], np.int32)
    ax = np.array(0, np.int64)
    expect = {
        (0, 0): ([1, 3, 6], [1, 2, 6]), (1, 0): ([0, 1, 3], [1, 1, 2]),
        (0, 1): ([6, 5, 3], [6, 6, 3]), (1, 1): ([5, 3, 0], [6, 3, 1]),
    }
    for (exclusive, reverse), (sums, prods) in expect.items():
        attrs = {"exclusive": exclusive, "reverse": reverse}
        (s,) = run_ours("CumSum", [x, ax], attrs, opset=14)
        (p,) = run_ours("CumProd", [x, ax], attrs, opset=26)
        assert s.dtype == p.dtype == np.int32  # numpy would widen to int64
        np.testing.assert_array_equal(s, sums)
        np.testing.assert_array_equal(p, prods)


def test_cumulative_half_floats_and_empty():
    x = np.full(4, 0.1, ml_dtypes.bfloat16)
    (y,) = run_ours("CumSum", [x, np.array(0)], opset=14)
    assert y.dtype == x.dtype
    np.testing.assert_allclose(y.astype(np.float32), [0.1, 0.2, 0.3, 0.4], rtol=1e-2)
    (y,) = run_ours("CumProd", [np.zeros((2, 0), np.float32), np.array(1)], {"exclusive": 1}, opset=26)
    assert y.shape == (2, 0)


def test_cumulative_axis_errors():
    x = np.ones((2, 2), np.float32)
    with pytest.raises(KernelError, match="out of range"):
        run_ours("CumSum", [x, np.array(2)], opset=14)
    with pytest.raises(KernelError, match="single integer"):
        run_ours("CumSum", [x, np.array([0, 1])], opset=14)
