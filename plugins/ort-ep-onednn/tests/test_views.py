"""Reshape/Transpose as strided views: the stride arithmetic of ``ort_ep_onednn.views`` checked against
numpy's own views and copies (no oneDNN needed)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from numpy.lib.stride_tricks import as_strided
from ort_ep_onednn import views as V

RNG = np.random.default_rng(11)


def _layout(shape, order):
    """A dense array of ``shape`` whose dimensions are laid out in memory in ``order`` (outermost first),
    with its element strides."""
    base = RNG.standard_normal([shape[d] for d in order]).astype(np.float32)
    arr = base.transpose(np.argsort(order))
    return arr, tuple(s // 4 for s in arr.strides)


@pytest.mark.parametrize("shape,new", [
    ((1, 136, 28, 28), (1, 4, 34, 28, 28)), ((2, 6, 5), (2, 30)), ((2, 6, 5), (12, 5)), ((4, 1, 6), (2, 2, 1, 3, 2)),
    ((3, 4), (12,)), ((1, 1), (1,)), ((6, 1, 1), (1, 6)),
])
def test_reshaped_strides_read_what_numpy_reshape_gives(shape, new):
    for order in itertools.permutations(range(len(shape))):
        arr, strides = _layout(shape, order)
        got = V.reshaped(shape, strides, new)
        want = arr.reshape(new)  # numpy: a view exactly when no copy is needed
        if not np.shares_memory(want, arr):
            assert got is None, (order, got)
            continue
        assert got is not None, order
        np.testing.assert_array_equal(as_strided(arr, shape=new, strides=[4 * s for s in got]), want)


def test_row_major_results_use_row_major_strides():
    # strides of size-1 axes do not matter, but descriptors compare equal only when they agree
    assert V.reshaped((1, 8, 1, 1), (8, 1, 1, 1), (1, 8)) == (8, 1)
    assert V.reshaped((1, 8, 1, 1), (8, 1, 8, 8), (1, 8)) == (8, 1)
    assert V.transposed((60, 20, 5, 1), (0, 2, 1, 3)) == [60, 5, 20, 1]
    assert V.normalized((2, 1, 3), (3, 999, 1)) == (3, 3, 1)
    assert V.channels_last_strides((2, 3, 4, 5)) == [60, 1, 15, 3]
    assert V.reshaped((1, 12, 5), (60, 1, 12), (1, 3, 4, 5)) == (60, 4, 1, 12)  # a leading 1 spans it all


def test_channel_shuffle_copy_keeps_channels_last():
    n, g, c, h, w = 1, 4, 34, 5, 6
    x, strides = _layout((n, g * c, h, w), (0, 2, 3, 1))  # NHWC
    split = V.reshaped(x.shape, strides, (n, g, c, h, w))
    assert split is not None
    perm = (0, 2, 1, 3, 4)
    t_shape = (n, c, g, h, w)
    t_strides = V.transposed(split, perm)
    assert V.reshaped(t_shape, t_strides, (n, g * c, h, w)) is None  # the merge needs a copy
    out_strides, in_strides = V.copy_layout(t_shape, t_strides, (n, g * c, h, w))
    assert out_strides == (g * c * h * w, 1, w * g * c, g * c)  # channels last again
    # copying element by element through the two views gives numpy's shuffle
    src = as_strided(x, shape=t_shape, strides=[4 * s for s in t_strides])
    buf = np.zeros(x.size, np.float32)
    as_strided(buf, shape=t_shape, strides=[4 * s for s in in_strides])[...] = src
    got = as_strided(buf, shape=(n, g * c, h, w), strides=[4 * s for s in out_strides])
    want = x.reshape(n, g, c, h, w).transpose(perm).reshape(n, g * c, h, w)
    np.testing.assert_array_equal(got, want)


def test_copy_layout_is_dense_for_any_source_order():
    shape, new = (2, 3, 4, 5), (6, 20)
    for order in itertools.permutations(range(4)):
        arr, strides = _layout(shape, order)
        if V.reshaped(shape, strides, new) is not None:
            continue
        out_strides, in_strides = V.copy_layout(shape, strides, new)
        buf = np.full(arr.size, np.nan, np.float32)
        as_strided(buf, shape=shape, strides=[4 * s for s in in_strides])[...] = arr
        assert not np.isnan(buf).any(), order  # every element of the destination written: dense
        got = as_strided(buf, shape=new, strides=[4 * s for s in out_strides])
        np.testing.assert_array_equal(got, arr.reshape(new))
