"""Data-movement kernels (Reshape, Slice, Pad, Gather, ...) against onnx's reference evaluator."""

from __future__ import annotations

import numpy as np
import pytest

from ort_core.errors import KernelError

from .kernel_harness import check, check_onnxruntime, run_ours

rng = np.random.default_rng(1)


def arr(*shape, dtype=np.float32):
    return rng.uniform(-5, 5, shape).astype(dtype) if shape else np.array(rng.uniform(), dtype)


def i64(*values):
    return np.array(values, dtype=np.int64)


# ---------------------------------------------------------------------------------- Reshape

@pytest.mark.parametrize("opset", [5, 13, 14, 21])
@pytest.mark.parametrize("shape", [(6, 4), (-1,), (0, -1), (2, 0, 4), (4, -1, 1), (24,), (1, 2, 3, 4)])
def test_reshape(opset, shape):
    x = arr(2, 3, 4)
    (y,) = check("Reshape", [x, i64(*shape)], opset=opset)
    assert np.shares_memory(y, x)  # a view, no copy


def test_reshape_allowzero():
    x = np.zeros((0, 3), np.float32)
    (y,) = check("Reshape", [x, i64(3, 0)], {"allowzero": 1}, opset=14)
    assert y.shape == (3, 0)
    (y,) = check("Reshape", [arr(2, 3), i64(0, 3)], {"allowzero": 0}, opset=14)
    assert y.shape == (2, 3)
    with pytest.raises(KernelError, match="-1 and 0"):
        run_ours("Reshape", [x, i64(0, -1)], {"allowzero": 1}, opset=14)


def test_reshape_opset1_attribute_and_errors():
    x = arr(2, 3)
    (y,) = run_ours("Reshape", [x], {"shape": [3, -1]}, opset=1)
    np.testing.assert_array_equal(y, x.reshape(3, 2))
    with pytest.raises(KernelError, match="more than one -1"):
        run_ours("Reshape", [x, i64(-1, -1)], opset=13)
    with pytest.raises(KernelError, match="cannot reshape"):
        run_ours("Reshape", [x, i64(4, 2)], opset=13)
    with pytest.raises(KernelError, match="copies dimension"):
        run_ours("Reshape", [x, i64(1, 2, 3, 0)], opset=13)


# ---------------------------------------------------------------------------------- (Un)Squeeze, Flatten

@pytest.mark.parametrize("axes", [[0], [-1], [1, 3], [0, -1], [0, 2, 4]])
def test_unsqueeze(axes):
    x = arr(3, 4)
    check("Unsqueeze", [x, i64(*axes)], opset=13)
    (y,) = check("Unsqueeze", [x], {"axes": axes}, opset=11)
    assert np.shares_memory(y, x)


def test_unsqueeze_unsorted_axes():
    # axes name positions in the output, whatever their order (the reference gets this wrong)
    x = arr(3, 4)
    for opset, inputs, attrs in ((13, [x, i64(4, 0, 2)], {}), (11, [x], {"axes": [-1, 2, 0]}),
                                 (1, [x], {"axes": [4, 0, 2]})):
        (y,) = run_ours("Unsqueeze", inputs, attrs, opset=opset)
        assert y.shape == (1, 3, 1, 4, 1)
        np.testing.assert_array_equal(y.reshape(3, 4), x)


def test_unsqueeze_errors():
    with pytest.raises(KernelError, match="repeated"):
        run_ours("Unsqueeze", [arr(3), i64(0, 0)], opset=13)
    with pytest.raises(KernelError, match="out of range"):
        run_ours("Unsqueeze", [arr(3), i64(5)], opset=13)


def test_squeeze():
    x = arr(1, 3, 1, 4, 1)
    check("Squeeze", [x, i64(0)], opset=13)
    check("Squeeze", [x, i64(-1, 2)], opset=13)
    (y,) = check("Squeeze", [x], opset=13)
    assert y.shape == (3, 4)
    check("Squeeze", [x], {"axes": [0, 4]}, opset=11)
    (y,) = check("Squeeze", [x], {}, opset=1)
    assert y.shape == (3, 4)
    with pytest.raises(KernelError, match="cannot squeeze"):
        run_ours("Squeeze", [x, i64(1)], opset=13)


@pytest.mark.parametrize("axis", [0, 1, 2, 3, -1, -3])
def test_flatten(axis):
    x = arr(2, 3, 4)
    check("Flatten", [x], {"axis": axis}, opset=13)
    if axis >= 0:
        check("Flatten", [x], {"axis": axis}, opset=1)
    (y,) = run_ours("Flatten", [np.zeros((0, 2, 3), np.float32)], {"axis": axis}, opset=13)
    a = axis + 3 if axis < 0 else axis
    assert y.shape == (int(np.prod((0, 2, 3)[:a])), int(np.prod((0, 2, 3)[a:])))
    with pytest.raises(KernelError, match="out of range"):
        run_ours("Flatten", [x], {"axis": 4}, opset=13)


def test_identity_and_transpose():
    x = arr(2, 3, 4)
    (y,) = check("Identity", [x], opset=16)
    assert y is x
    check("Transpose", [x], opset=13)
    check("Transpose", [x], {"perm": [1, 0, 2]}, opset=1)
    check("Transpose", [x.astype(np.int64)], {"perm": [2, 0, 1]}, opset=21)
    with pytest.raises(KernelError, match="permutation"):
        run_ours("Transpose", [x], {"perm": [0, 0, 1]}, opset=13)


# ---------------------------------------------------------------------------------- Concat / Split

@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concat(axis):
    a = arr(2, 3)
    b = arr(2, 3) if axis == 0 else arr(2, 5)
    if axis == 0:
        check("Concat", [a, b, a], {"axis": axis}, opset=13)
    else:
        check("Concat", [a, b], {"axis": axis}, opset=11)
    check("Concat", [a.astype(np.int32)], {"axis": axis}, opset=13)


def test_concat_defaults_and_errors():
    a, b = arr(2, 3), arr(2, 2)
    (y,) = run_ours("Concat", [a, b], {}, opset=1)  # opset 1: axis defaults to 1
    np.testing.assert_array_equal(y, np.concatenate([a, b], axis=1))
    with pytest.raises(KernelError, match="required"):
        run_ours("Concat", [a, b], {}, opset=4)
    with pytest.raises(KernelError, match="cannot concatenate"):
        run_ours("Concat", [a, b], {"axis": 0}, opset=13)


def test_split_variants():
    x = arr(6, 4)
    check("Split", [x], {"axis": 0}, n_outputs=3, opset=11)
    check("Split", [x], {"axis": 0, "split": [1, 5]}, n_outputs=2, opset=2)
    check("Split", [x, i64(1, 3)], {"axis": 1}, n_outputs=2, opset=13)
    check("Split", [x, i64(2, 2, 2)], {"axis": -2}, n_outputs=3, opset=18)
    check("Split", [x], {"axis": 1}, n_outputs=2, opset=13)
    (a, b, c) = check("Split", [arr(7, 2)], {"axis": 0, "num_outputs": 3}, n_outputs=3, opset=18)
    assert [a.shape[0], b.shape[0], c.shape[0]] == [3, 3, 1]
    check("Split", [arr(5)], {"num_outputs": 2}, n_outputs=2, opset=18)
    (a, b) = run_ours("Split", [x, i64(4, 2)], {"axis": 0}, n_outputs=2, opset=1)
    np.testing.assert_array_equal(b, x[4:])


def test_split_errors():
    x = arr(6, 4)
    with pytest.raises(KernelError, match="does not divide"):
        run_ours("Split", [x, i64(2, 2)], {"axis": 0}, n_outputs=2, opset=13)
    with pytest.raises(KernelError, match="num_outputs"):
        run_ours("Split", [x], {"num_outputs": 3}, n_outputs=2, opset=18)
    with pytest.raises(KernelError, match="exclusive"):
        run_ours("Split", [x, i64(3, 3)], {"num_outputs": 2}, n_outputs=2, opset=18)


# ---------------------------------------------------------------------------------- Slice

SLICES = [
    ([0, 1], [2, 3], None, None),
    ([1], [-1], [1], None),
    ([-1], [-1000], [0], [-1]),
    ([5, -2], [0, -10**18], [0, 1], [-2, -1]),
    ([0], [2**62], [2], [2]),
    ([-100], [100], [-1], None),
    ([3], [1], [0], None),  # empty result
    ([2, 0, 1], [-1, 3, 4], [2, 0, 1], [1, 2, 3]),
    ([-(2**63)], [2**63 - 1], [1], [1]),
]


@pytest.mark.parametrize("starts,ends,axes,steps", SLICES)
def test_slice(starts, ends, axes, steps):
    x = arr(6, 5, 4)
    inputs = [x, i64(*starts), i64(*ends)]
    if axes is not None:
        inputs.append(i64(*axes))
        if steps is not None:
            inputs.append(i64(*steps))
    (y,) = check("Slice", inputs, opset=13)
    check("Slice", [inputs[0], *(v.astype(np.int32) for v in inputs[1:])], opset=10)
    if steps is None:
        attrs = {"starts": starts, "ends": ends}
        if axes is not None:
            attrs["axes"] = axes
        (y1,) = run_ours("Slice", [x], attrs, opset=1)
        np.testing.assert_array_equal(y1, y)


def test_slice_errors():
    x = arr(4, 4)
    with pytest.raises(KernelError, match="step"):
        run_ours("Slice", [x, i64(0), i64(2), i64(0), i64(0)], opset=13)
    with pytest.raises(KernelError, match="out of range"):
        run_ours("Slice", [x, i64(0), i64(2), i64(3)], opset=13)
    with pytest.raises(KernelError, match="repeated"):
        run_ours("Slice", [x, i64(0, 0), i64(2, 2), i64(1, 1)], opset=13)


# ---------------------------------------------------------------------------------- Gather

@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather(axis):
    x = arr(4, 5, 3)
    dim = x.shape[axis]
    check("Gather", [x, rng.integers(-dim, dim, (2, 3)).astype(np.int64)], {"axis": axis}, opset=13)
    check("Gather", [x, np.array(dim - 1, np.int32)], {"axis": axis}, opset=11)
    check("Gather", [x, np.array(-1, np.int64)], {"axis": axis}, opset=13)
    check("Gather", [x, np.zeros((0,), np.int64)], {"axis": axis}, opset=13)


def test_gather_errors_and_strings():
    x = np.array(["a", "b", "c"], dtype=object)
    (y,) = run_ours("Gather", [x, i64(2, 0)], opset=13)
    assert list(y) == ["c", "a"]
    with pytest.raises(KernelError, match="out of range"):
        run_ours("Gather", [arr(3, 2), i64(3)], opset=13)
    with pytest.raises(KernelError, match="out of range"):
        run_ours("Gather", [arr(3, 2), np.array(-4, np.int64)], opset=13)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_elements(axis):
    x = arr(3, 4)
    dim = x.shape[axis]
    idx_shape = (2, 4) if axis == 0 else (3, 6)
    idx = rng.integers(-dim, dim, idx_shape).astype(np.int64)
    (y,) = run_ours("GatherElements", [x, idx], {"axis": axis}, opset=13)
    expected = np.take_along_axis(x, np.where(idx < 0, idx + dim, idx), axis=axis)
    np.testing.assert_array_equal(y, expected)
    idx_pos = rng.integers(0, dim, x.shape).astype(np.int32)
    check("GatherElements", [x, idx_pos], {"axis": axis}, opset=11)


def test_gather_elements_smaller_indices_and_errors():
    x = arr(3, 4)
    idx = np.array([[0, 2], [1, 0]], np.int64)  # covers only a corner of x
    (y,) = run_ours("GatherElements", [x, idx], {"axis": 0}, opset=13)
    np.testing.assert_array_equal(y, [[x[0, 0], x[2, 1]], [x[1, 0], x[0, 1]]])
    with pytest.raises(KernelError, match="out of range"):
        run_ours("GatherElements", [x, np.full((3, 4), 3, np.int64)], {"axis": 0}, opset=13)


# ---------------------------------------------------------------------------------- Shape, Size

@pytest.mark.parametrize("start,end", [(0, None), (1, None), (-1, None), (0, -1), (1, 2),
                                       (-10, 10), (2, 1), (None, 2)])
def test_shape(start, end):
    x = arr(2, 3, 4)
    attrs = {}
    if start is not None:
        attrs["start"] = start
    if end is not None:
        attrs["end"] = end
    (y,) = check("Shape", [x], attrs, opset=15)
    assert y.dtype == np.int64
    (y,) = check("Shape", [x], opset=13)
    np.testing.assert_array_equal(y, [2, 3, 4])


def test_size():
    (y,) = check("Size", [arr(2, 3, 4)], opset=13)
    assert y.dtype == np.int64 and y.shape == () and y == 24
    check("Size", [np.zeros((0, 3), np.int8)], opset=1)


# ---------------------------------------------------------------------------------- Expand, Tile

@pytest.mark.parametrize("xshape,shape", [((3, 1), (2, 3, 4)), ((1,), (5,)), ((2, 3), (3,)),
                                          ((2, 1, 4), (1, 3, 1)), ((), (2, 2)), ((3,), (1, 1, 1))])
def test_expand(xshape, shape):
    x = arr(*xshape)
    (y,) = check("Expand", [x, i64(*shape)], opset=13)
    assert y.flags.writeable


def test_expand_error():
    with pytest.raises(KernelError, match="cannot expand"):
        run_ours("Expand", [arr(3), i64(4)], opset=13)


def test_tile():
    x = arr(2, 3)
    check("Tile", [x, i64(2, 3)], opset=13)
    check("Tile", [x.astype(np.int32), i64(1, 0)], opset=6)
    (y,) = run_ours("Tile", [x, i64(3), i64(1)], opset=1)
    np.testing.assert_array_equal(y, np.tile(x, (1, 3)))
    with pytest.raises(KernelError, match="repeats"):
        run_ours("Tile", [x, i64(2)], opset=13)


# ---------------------------------------------------------------------------------- Pad

@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
@pytest.mark.parametrize("pads", [[0, 2, 0, 0], [1, 1, 2, 2], [2, 0, 1, 3], [0, 0, 0, 0]])
def test_pad(mode, pads):
    x = arr(3, 4)
    check("Pad", [x, i64(*pads)], {"mode": mode}, opset=19)


def test_pad_constant_value_axes_and_negative():
    x = arr(3, 4, 2)
    check("Pad", [x, i64(1, 0, 2, 0, 1, 1), np.array(7.5, np.float32)], opset=13)
    (y,) = check("Pad", [x, i64(1, 2), np.array(-1, np.float32), i64(-2)], opset=18)
    assert y.shape == (3, 7, 2)
    check("Pad", [x, i64(1, 2, 0, 1), None, i64(0, 2)], opset=18)
    check("Pad", [x.astype(np.int32), i64(0, 1, 1, 1, 0, 0), np.array(3, np.int32)], opset=11)
    (y,) = run_ours("Pad", [x, i64(-1, 0, 0, 0, -1, 1)], opset=13)
    expected = np.pad(x[1:, :3, :], [(0, 0), (0, 0), (0, 1)])
    np.testing.assert_array_equal(y, expected)
    (y,) = run_ours("Pad", [x, i64(-1, 1, 0, 1, -1, 0)], {"mode": "edge"}, opset=13)
    np.testing.assert_array_equal(y, np.pad(x[1:, :-1, :], [(0, 1), (1, 0), (0, 0)], mode="edge"))


def test_pad_legacy_attributes():
    x = arr(2, 3)
    (y,) = run_ours("Pad", [x], {"paddings": [1, 0, 0, 2], "value": 9.0}, opset=1)
    np.testing.assert_array_equal(y, np.pad(x, [(1, 0), (0, 2)], constant_values=9.0))
    check("Pad", [x], {"pads": [0, 1, 1, 0], "mode": "reflect"}, opset=2)
    check("Pad", [x], {"pads": [0, 1, 1, 0], "value": 2.5}, opset=2)


def test_pad_errors():
    x = arr(2, 3)
    with pytest.raises(KernelError, match="pad mode"):
        run_ours("Pad", [x, i64(0, 0, 0, 0)], {"mode": "wrap"}, opset=13)
    with pytest.raises(KernelError, match="pads has"):
        run_ours("Pad", [x, i64(1, 1)], opset=13)


# ---------------------------------------------------------------------------------- DepthToSpace

@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_to_space(mode):
    x = arr(2, 8, 3, 2)
    check("DepthToSpace", [x], {"blocksize": 2, "mode": mode}, opset=13)
    if mode == "DCR":
        check("DepthToSpace", [x], {"blocksize": 2}, opset=1)
    with pytest.raises(KernelError, match="divisible"):
        run_ours("DepthToSpace", [arr(1, 6, 2, 2)], {"blocksize": 2}, opset=13)


@pytest.mark.parametrize("mode,opset", [("DCR", 13), ("DCR", 28), ("CRD", 28)])
def test_space_to_depth(mode, opset):
    x = arr(2, 3, 4, 6)
    (y,) = check("SpaceToDepth", [x], {"blocksize": 2, "mode": mode}, opset=opset)
    assert y.shape == (2, 12, 2, 3)
    # SpaceToDepth inverts DepthToSpace in the same mode
    (back,) = run_ours("DepthToSpace", [y], {"blocksize": 2, "mode": mode}, opset=13)
    np.testing.assert_array_equal(back, x)
    with pytest.raises(KernelError, match="blocksize"):
        run_ours("SpaceToDepth", [x], {"blocksize": 0}, opset=13)


@pytest.mark.parametrize("seed", range(40))
def test_slice_random_against_reference(seed):
    r = np.random.default_rng(seed)
    x = arr(5, 4, 6)
    n = int(r.integers(1, 4))
    axes = r.permutation(3)[:n] - r.integers(0, 2, n) * 3  # mix of positive and negative axes
    starts = r.integers(-9, 9, n)
    ends = r.integers(-9, 9, n)
    steps = r.choice([-3, -2, -1, 1, 2, 3], n)
    dims = [x.shape[a] for a in axes]
    if any(st < 0 and s + d < 0 for s, st, d in zip(starts, steps, dims)):
        # a backward start before the first element: the spec (and onnxruntime) clamp it to 0, the reference
        # evaluator's numpy slice reads nothing (test_slice_bounds.py covers this corner)
        check_onnxruntime("Slice", [x, starts, ends, axes, steps], opset=13, domain="")
    else:
        check("Slice", [x, starts, ends, axes, steps], opset=13)


@pytest.mark.parametrize("opset", [23, 25, 28])
def test_newest_opsets(opset):
    x = arr(2, 3, 4)
    check("Reshape", [x, i64(4, -1)], opset=opset)
    check("Unsqueeze", [x, i64(0)], opset=opset)
    check("Squeeze", [x[None], i64(0)], opset=opset)
    check("Flatten", [x], {"axis": 2}, opset=opset)
    check("Transpose", [x], {"perm": [2, 0, 1]}, opset=opset)
    check("Shape", [x], {"start": 1}, opset=opset)
    check("Size", [x], opset=opset)
    check("Identity", [x], opset=opset)
    check("Pad", [x, i64(1, 0, 0, 0, 1, 2)], {"mode": "edge"}, opset=opset)
    check("Cast", [x], {"to": 7}, opset=opset)
    check("DepthToSpace", [arr(1, 8, 2, 2)], {"blocksize": 2, "mode": "CRD"}, opset=opset)
