"""MatMul and Gemm as cuBLAS calls (run through a numpy model of cuBLAS's column-major definition) and the view
ops' shapes, against numpy, without a GPU."""

from __future__ import annotations

import numpy as np
import pytest
from ort_ep_cuda import shapes

PAIRS = [((3, 4), (4, 5)), ((4,), (4, 5)), ((3, 4), (4,)), ((4,), (4,)), ((2, 3, 4), (4, 5)), ((3, 4), (2, 4, 5)),
         ((2, 3, 4), (2, 4, 5)), ((2, 1, 3, 4), (1, 5, 4, 2)), ((5, 2, 3, 4), (2, 4, 1)), ((2, 1, 3, 4), (3, 4, 2)),
         ((1, 3, 4), (2, 1, 4, 6)), ((0, 3, 4), (4, 2)), ((3, 0), (0, 2))]


@pytest.mark.parametrize("a_shape, b_shape", PAIRS)
def test_matmul_calls_compute_numpy_matmul(a_shape, b_shape):
    rng = np.random.default_rng(0)
    a = rng.standard_normal(a_shape)
    b = rng.standard_normal(b_shape)
    expected = np.matmul(a, b)
    assert shapes.matmul_shape(a_shape, b_shape) == expected.shape
    out = np.full(expected.size, np.nan)
    calls = shapes.matmul_calls(a_shape, b_shape)
    for call in calls:  # cuBLAS's A is the right operand
        shapes.emulate(call, b.reshape(-1), a.reshape(-1), out)
    if expected.size and a_shape[-1]:
        np.testing.assert_allclose(out.reshape(expected.shape), expected, rtol=1e-12, atol=1e-12)
    elif expected.size == 0:
        assert calls == []


def test_batches_fold_into_as_few_calls_as_broadcasting_allows():
    assert [c.count for c in shapes.matmul_calls((2, 3, 4), (2, 4, 5))] == [2]
    assert [(c.count, c.stride_a, c.stride_b) for c in shapes.matmul_calls((6, 3, 4), (4, 5))] == [(6, 0, 12)]
    assert len(shapes.matmul_calls((2, 1, 3, 4), (1, 5, 4, 2))) == 2  # one operand broadcast on each side
    assert [c.count for c in shapes.matmul_calls((5, 2, 3, 4), (2, 4, 1))] == [2] * 5  # b repeats per leading index


def test_matmul_shape_errors():
    with pytest.raises(ValueError, match="inner dimensions differ"):
        shapes.matmul_shape((2, 3), (4, 2))
    with pytest.raises(ValueError, match="rank >= 1"):
        shapes.matmul_shape((), (2,))


@pytest.mark.parametrize("trans_a, trans_b", [(False, False), (True, False), (False, True), (True, True)])
def test_gemm_call_with_transposes_and_bias(trans_a, trans_b):
    rng = np.random.default_rng(1)
    m, n, k = 3, 5, 4
    a = rng.standard_normal((k, m) if trans_a else (m, k))
    b = rng.standard_normal((n, k) if trans_b else (k, n))
    c = rng.standard_normal((n,))
    assert shapes.gemm_shape(a.shape, b.shape, trans_a, trans_b) == (m, n, k)
    out = np.broadcast_to(c, (m, n)).copy().reshape(-1)  # the broadcast kernel writes C first
    shapes.emulate(shapes.gemm_call(m, n, k, trans_a, trans_b), b.reshape(-1), a.reshape(-1), out, 0.5, 2.0)
    expected = 0.5 * ((a.T if trans_a else a) @ (b.T if trans_b else b)) + 2.0 * c
    np.testing.assert_allclose(out.reshape(m, n), expected, rtol=1e-12)


def test_gemm_shape_errors():
    with pytest.raises(ValueError, match="inner dimensions differ"):
        shapes.gemm_shape((3, 4), (5, 6), False, False)
    with pytest.raises(ValueError, match="2-D"):
        shapes.gemm_shape((3, 4, 1), (4, 6), False, False)


@pytest.mark.parametrize("shape, target, allowzero", [((2, 3, 4), (4, -1), False), ((2, 3, 4), (0, 12), False),
                                                       ((2, 3, 4), (-1,), False), ((0, 3), (3, 0), True),
                                                       ((2, 3, 4), (0, 0, 2, 2), False)])
def test_reshape_shape_matches_numpy(shape, target, allowzero):
    numpy_target = [shape[i] if d == 0 and not allowzero else d for i, d in enumerate(target)]
    expected = np.zeros(shape).reshape(numpy_target).shape
    assert shapes.reshape_shape(shape, target, allowzero) == expected


def test_reshape_errors():
    with pytest.raises(ValueError, match="more than one -1"):
        shapes.reshape_shape((4,), (-1, -1))
    with pytest.raises(ValueError, match="cannot reshape"):
        shapes.reshape_shape((4,), (3,))


def test_squeeze_unsqueeze_flatten_match_numpy():
    x = np.zeros((1, 3, 1, 2))
    assert shapes.squeeze_shape(x.shape, None) == np.squeeze(x).shape
    assert shapes.squeeze_shape(x.shape, [-2]) == np.squeeze(x, axis=2).shape
    assert shapes.unsqueeze_shape((3, 2), [0, -1]) == (1, 3, 2, 1)
    assert shapes.unsqueeze_shape((3, 2), [1]) == np.expand_dims(np.zeros((3, 2)), 1).shape
    assert shapes.flatten_shape((2, 3, 4), 1) == (2, 12)
    assert shapes.flatten_shape((2, 3, 4), -1) == (6, 4)
    assert shapes.flatten_shape((2, 3, 4), 0) == (1, 24)
    with pytest.raises(ValueError, match="are not all 1"):
        shapes.squeeze_shape((2, 3), [0])
    with pytest.raises(ValueError, match="out of range"):
        shapes.unsqueeze_shape((2,), [5])
