"""TopK, Unique, NonZero, Compress, OneHot, Trilu, ReverseSequence and CenterCropPad against onnx's
reference evaluator and numpy."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from ort_core.errors import KernelError

from .kernel_harness import check, run_ours

rng = np.random.default_rng(7)


# ------------------------------------------------------------------------------------- TopK

@pytest.mark.parametrize("largest", [0, 1])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("k", [0, 1, 3])
def test_topk_matches_reference(largest, axis, k):
    x = rng.integers(0, 4, (3, 4, 5)).astype(np.float32)  # many ties
    check("TopK", [x, np.array([k], np.int64)], {"axis": axis, "largest": largest}, opset=11,
          n_outputs=2)


def test_topk_ties_keep_lower_index_first():
    x = np.array([[3, 1, 3, 2, 3, 1]], np.int32)
    values, idx = run_ours("TopK", [x, np.array([4])], {}, opset=24, n_outputs=2)
    np.testing.assert_array_equal(values, [[3, 3, 3, 2]])
    np.testing.assert_array_equal(idx, [[0, 2, 4, 3]])
    values, idx = run_ours("TopK", [x, np.array([3])], {"largest": 0}, opset=24, n_outputs=2)
    np.testing.assert_array_equal(idx, [[1, 5, 3]])
    assert idx.dtype == np.int64 and values.dtype == np.int32


@pytest.mark.parametrize("dtype", [np.uint64, np.int8, np.float16, ml_dtypes.bfloat16])
def test_topk_dtypes(dtype):
    x = np.array([5, 0, 250 if dtype == np.uint64 else 7, 3], dtype)
    values, idx = run_ours("TopK", [x, np.array([2])], {}, opset=24, n_outputs=2)
    assert values.dtype == x.dtype
    np.testing.assert_array_equal(idx, [2, 0])


def test_topk_v1_attribute_k():
    x = rng.standard_normal((2, 6)).astype(np.float32)
    check("TopK", [x], {"k": 2}, opset=1, n_outputs=2)


def test_topk_k_too_large():
    with pytest.raises(KernelError, match="k=5"):
        run_ours("TopK", [np.zeros(4, np.float32), np.array([5])], opset=11, n_outputs=2)


# ----------------------------------------------------------------------------------- Unique

@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_unique_sorted_matches_reference(axis):
    x = rng.integers(0, 3, (4, 3)).astype(np.float32)
    x[2] = x[0]
    check("Unique", [x], {} if axis is None else {"axis": axis}, opset=11, n_outputs=4)


@pytest.mark.parametrize("is_sorted", [0, 1])
@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_unique_invariants(is_sorted, axis):
    # the reference evaluator breaks on sorted=0 unless axis=0 and the input is 1-D, so the
    # outputs are checked against their definitions instead
    x = rng.integers(0, 3, (5, 3)).astype(np.int32)
    x[3] = x[0]
    attrs = {"sorted": is_sorted} | ({} if axis is None else {"axis": axis})
    y, idx, inv, counts = run_ours("Unique", [x], attrs, opset=11, n_outputs=4)
    src, a = (x.reshape(-1), 0) if axis is None else (x, axis % 2)
    np.testing.assert_array_equal(np.take(src, idx, axis=a), y)
    np.testing.assert_array_equal(np.take(y, inv, axis=a), src)
    np.testing.assert_array_equal(counts, np.bincount(inv))
    np.testing.assert_array_equal(idx, [np.flatnonzero(inv == j)[0] for j in range(len(idx))])
    if is_sorted:
        keys = [tuple(np.take(y, j, axis=a).reshape(-1)) for j in range(len(idx))]
        assert keys == sorted(keys)
    else:
        assert np.all(np.diff(idx) > 0)


def test_unique_first_occurrence_order():
    x = np.array([2, 1, 1, 3, 4, 3], np.int64)
    y, idx, inv, counts = run_ours("Unique", [x], {"sorted": 0}, n_outputs=4)
    np.testing.assert_array_equal(y, [2, 1, 3, 4])
    np.testing.assert_array_equal(idx, [0, 1, 3, 4])
    np.testing.assert_array_equal(inv, [0, 1, 1, 2, 3, 2])
    np.testing.assert_array_equal(counts, [1, 2, 2, 1])


def test_unique_strings_along_axis_and_bfloat16():
    x = np.array([["b", "a"], ["a", "c"], ["b", "a"]], dtype=object)
    y, idx, inv, counts = run_ours("Unique", [x], {"axis": 0}, n_outputs=4, opset=28)
    assert y.tolist() == [["a", "c"], ["b", "a"]]
    np.testing.assert_array_equal(idx, [1, 0])
    np.testing.assert_array_equal(inv, [1, 0, 1])
    np.testing.assert_array_equal(counts, [1, 2])
    b = np.array([2.0, -1.0, 2.0], ml_dtypes.bfloat16)
    (y,) = run_ours("Unique", [b], {}, opset=28)
    assert y.dtype == b.dtype and y.astype(np.float32).tolist() == [-1.0, 2.0]


def test_unique_empty_and_single_output():
    (y,) = run_ours("Unique", [np.zeros((0, 3), np.float32)], {"axis": 0})
    assert y.shape == (0, 3)
    outs = run_ours("Unique", [np.zeros((2, 0), np.float32)], {"axis": 0}, n_outputs=4)
    assert outs[0].shape == (1, 0) and outs[3].tolist() == [2]


# ---------------------------------------------------------------------- NonZero / Compress

def test_nonzero():
    x = np.array([[1, 0, 3], [0, 0, 2]], np.int32)
    (y,) = check("NonZero", [x], opset=13)
    np.testing.assert_array_equal(y, [[0, 0, 1], [0, 2, 2]])
    (y,) = run_ours("NonZero", [np.array(5.0, np.float32)])
    assert y.dtype == np.int64 and y.shape == (1, 1)
    (y,) = run_ours("NonZero", [np.zeros((2, 3), bool)])
    assert y.shape == (2, 0)


@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_compress(axis):
    x = rng.standard_normal((3, 4)).astype(np.float32)
    cond = np.array([True, False, True])
    attrs = {} if axis is None else {"axis": axis}
    check("Compress", [x, cond], attrs, opset=11)


def test_compress_long_condition():
    x = np.arange(3, dtype=np.int64)
    (y,) = run_ours("Compress", [x, np.array([False, True, True, False])], {"axis": 0})
    np.testing.assert_array_equal(y, [1, 2])
    with pytest.raises(KernelError, match="beyond"):
        run_ours("Compress", [x, np.array([False, True, True, True])], {"axis": 0})


# ----------------------------------------------------------------------------------- OneHot

@pytest.mark.parametrize("axis", [-1, 0, 1, -2])
def test_onehot_matches_reference(axis):
    indices = np.array([[0, 2], [-1, 7]], np.int64)  # -1 wraps, 7 is out of range
    values = np.array([-2.0, 5.0], np.float32)
    check("OneHot", [indices, np.array(4, np.int64), values], {"axis": axis}, opset=11)


def test_onehot_depth_types_and_opset9_negative():
    indices = np.array([1.7, -1.0], np.float32)
    values = np.array(["off", "on"], dtype=object)
    (y,) = run_ours("OneHot", [indices, np.array([3.0], np.float32), values], opset=28)
    assert y.tolist() == [["off", "on", "off"], ["off", "off", "on"]]
    (y,) = run_ours("OneHot", [np.array([-1, 0]), np.array(2), np.array([0, 1], np.int32)], opset=9)
    np.testing.assert_array_equal(y, [[0, 0], [1, 0]])  # negatives are out of range at opset 9
    with pytest.raises(KernelError, match="depth"):
        run_ours("OneHot", [np.array([0]), np.array(0), np.array([0, 1])])


# ------------------------------------------------------------------------------------ Trilu

@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("k", [None, -7, -1, 0, 2, 9])
@pytest.mark.parametrize("shape", [(4, 5), (2, 3, 3), (3, 0, 2)])
def test_trilu(upper, k, shape):
    x = rng.integers(0, 9, shape).astype(np.int64)
    inputs = [x] if k is None else [x, np.array(k, np.int64)]
    check("Trilu", inputs, {"upper": upper}, opset=14)


def test_trilu_strings_and_rank_error():
    x = np.array([["a", "b"], ["c", "d"]], dtype=object)
    (y,) = run_ours("Trilu", [x], {"upper": 0}, opset=14)
    assert y.tolist() == [["a", ""], ["c", "d"]]
    with pytest.raises(KernelError, match="rank"):
        run_ours("Trilu", [np.zeros(3, np.float32)], opset=14)


# -------------------------------------------------------------------------- ReverseSequence

@pytest.mark.parametrize("time_axis,batch_axis", [(0, 1), (1, 0)])
def test_reverse_sequence(time_axis, batch_axis):
    x = rng.standard_normal((4, 4, 2)).astype(np.float32)
    lens = np.array([4, 1, 0, 3], np.int64)
    check("ReverseSequence", [x, lens], {"time_axis": time_axis, "batch_axis": batch_axis},
          opset=10)


def test_reverse_sequence_formula_and_errors():
    x = np.arange(12).reshape(3, 4)  # time 3, batch 4
    (y,) = run_ours("ReverseSequence", [x, np.array([3, 2, 1, 0])], {}, opset=28)
    np.testing.assert_array_equal(y, [[8, 5, 2, 3], [4, 1, 6, 7], [0, 9, 10, 11]])
    with pytest.raises(KernelError, match="sequence_lens"):
        run_ours("ReverseSequence", [x, np.array([4, 2, 1, 0])], {}, opset=10)
    with pytest.raises(KernelError, match="time_axis"):
        run_ours("ReverseSequence", [x, np.array([1, 1, 1, 1])], {"time_axis": 1}, opset=10)


# ---------------------------------------------------------------------------- CenterCropPad

@pytest.mark.parametrize("shape,axes", [
    ((5, 7), None), ((2, 2), None), ((9, 4), None), ((3,), [1]), ((6, 2), [-1, 0]),
])
def test_center_crop_pad(shape, axes):
    x = rng.standard_normal((4, 5)).astype(np.float32)
    attrs = {} if axes is None else {"axes": axes}
    check("CenterCropPad", [x, np.array(shape, np.int64)], attrs, opset=18)


def test_center_crop_pad_errors():
    with pytest.raises(KernelError, match="shape"):
        run_ours("CenterCropPad", [np.zeros((2, 2)), np.array([1], np.int64)], opset=18)
