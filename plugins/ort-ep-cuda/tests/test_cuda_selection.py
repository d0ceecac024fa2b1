"""Slice and Gather geometry (``selection``) against numpy: the strided view a Slice reads and the 2-D copies a
Gather makes, over random shapes, bounds and indices, and the errors for what ONNX forbids."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from ort_ep_cuda import selection

BIG = 2**63 - 1  # what exporters write for "to the end"


def _read(x: np.ndarray, view: selection.Strided) -> np.ndarray:
    """The elements the Identity kernel reads for ``view``: offset and element strides over the flat input."""
    flat = np.ascontiguousarray(x).reshape(-1)
    out = np.empty(view.shape, x.dtype)
    for index in itertools.product(*(range(d) for d in view.shape)):
        out[index] = flat[view.offset + sum(i * s for i, s in zip(index, view.strides))]
    return out


def _numpy_slice(x, starts, ends, axes, steps):
    key = [slice(None)] * x.ndim
    for s, e, a, st in zip(starts, ends, axes, steps):
        key[a] = slice(s, e, st) if st > 0 or e >= -x.shape[a] else slice(s, None, st)
    return x[tuple(key)]


def test_slices_read_what_numpy_slicing_reads():
    rng = np.random.default_rng(0)
    for _ in range(300):
        rank = int(rng.integers(1, 4))
        shape = tuple(int(d) for d in rng.integers(1, 6, rank))
        x = rng.standard_normal(shape).astype(np.float32)
        axes = [int(a) for a in rng.permutation(rank)[:int(rng.integers(1, rank + 1))]]
        steps = [int(rng.choice([-3, -2, -1, 1, 2, 3])) for _ in axes]
        # starts from -dim on: below it, ONNX clamps a backward start to 0 where numpy reads nothing (checked apart)
        starts = [int(rng.integers(-shape[a], 8)) for a in axes]
        ends = [int(rng.choice([rng.integers(-8, 8), BIG, -BIG])) for _ in axes]
        view = selection.slice_view(shape, starts, ends, axes, steps)
        # numpy's slice clamps as ONNX does, except that an end below -dim means "before the first" for a
        # negative step, which numpy spells None
        want = _numpy_slice(x, starts, [max(min(e, 2**31), -2**31) for e in ends], axes, steps)
        assert view.shape == want.shape, (shape, starts, ends, axes, steps)
        if want.size:
            np.testing.assert_array_equal(_read(x, view), want)


def test_slice_defaults_negative_axes_and_errors():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    view = selection.slice_view(x.shape, [1], [BIG])  # axes default to 0.., steps to 1
    np.testing.assert_array_equal(_read(x, view), x[1:])
    view = selection.slice_view(x.shape, [-1, 0], [-BIG, 4], [-1, 1], [-1, 2])
    np.testing.assert_array_equal(_read(x, view), x[:, ::2, ::-1])
    assert selection.slice_view(x.shape, [3], [1], [2], [1]).shape == (2, 3, 0)  # empty: nothing is read
    # the spec clamps an adjusted start into [0, dim - 1] when stepping backward: -9 + 4 -> 0, one element
    np.testing.assert_array_equal(_read(x, selection.slice_view(x.shape, [-9], [-BIG], [2], [-1])), x[:, :, :1])
    np.testing.assert_array_equal(_read(x, selection.slice_view(x.shape, [BIG], [-BIG], [2], [-2])), x[:, :, ::-2])
    for args, match in [(([0], [1], [0], [0]), "step of 0"), (([0], [1], [3]), "axis 3 is out of range"),
                        (([0, 0], [1, 1], [1, -2]), "repeat an axis"), (([0], [1, 2]), "differ in length")]:
        with pytest.raises(ValueError, match=match):
            selection.slice_view(x.shape, *args)


@pytest.mark.parametrize("shape,axis", [((5,), 0), ((4, 6), 0), ((4, 6), 1), ((3, 5, 2), 1), ((3, 5, 2), -1)])
def test_gathers_copy_what_numpy_take_takes(shape, axis):
    rng = np.random.default_rng(1)
    x = rng.standard_normal(shape).astype(np.float32)
    dim = shape[axis]
    for indices in (np.int64(dim - 1), np.array([0]), np.arange(dim), np.arange(dim)[::-1].copy(),
                    rng.integers(-dim, dim, (2, 3)), np.array([1, 2, 2, 0, -1]) % dim, np.zeros((0,), np.int64)):
        g = selection.gather_runs(shape, indices, axis)
        want = np.take(x, indices, axis=axis)
        assert g.shape == want.shape
        np.testing.assert_array_equal(selection.emulate_gather(g, x), want)
    assert len(selection.gather_runs(shape, np.arange(dim), axis).runs) == 1  # consecutive indices: one copy


def test_gather_refuses_indices_out_of_range():
    with pytest.raises(ValueError, match="index 4 is out of range for axis 1 of size 4"):
        selection.gather_runs((2, 4), np.array([0, 4]), 1)
    with pytest.raises(ValueError, match="index -5 is out of range"):
        selection.gather_runs((2, 4), np.array([-5]), -1)
    with pytest.raises(ValueError, match="axis 2 is out of range for rank 2"):
        selection.gather_runs((2, 4), np.array([0]), 2)
