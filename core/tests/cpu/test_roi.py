"""RoiAlign (opsets 10-22) against the reference evaluator and hand-computed values."""

from __future__ import annotations

import numpy as np
import pytest

from ort_core.errors import KernelError

from .kernel_harness import check, run_ours

rng = np.random.default_rng(5)
X = rng.standard_normal((2, 3, 10, 12)).astype(np.float32)
ROIS = np.array([[1, 1, 5, 6], [-1.5, -1, 3, 4], [2, 3, 11, 9], [8, 7, 3, 2], [0, 0, 13, 12], [4, 4, 4.5, 4.2]],
                np.float32)
BATCH = np.array([0, 1, 1, 0, 1, 0], np.int64)


@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("coord", ["half_pixel", "output_half_pixel"])
@pytest.mark.parametrize("ratio", [0, 2])
def test_roi_align_matches_reference(mode, coord, ratio):
    attrs = {"mode": mode, "coordinate_transformation_mode": coord, "output_height": 3, "output_width": 4,
             "sampling_ratio": ratio, "spatial_scale": 0.9}
    check("RoiAlign", [X, ROIS, BATCH], attrs, opset=16, rtol=1e-4, atol=1e-5)
    check("RoiAlign", [X.astype(np.float64), ROIS.astype(np.float64), BATCH], attrs, opset=22)


def test_roi_align_opset10_has_no_pixel_shift():
    # opset 10 predates coordinate_transformation_mode and behaves like output_half_pixel
    attrs = {"output_height": 2, "output_width": 2, "sampling_ratio": 2}
    (a,) = run_ours("RoiAlign", [X, ROIS, BATCH], attrs, opset=10)
    (b,) = run_ours("RoiAlign", [X, ROIS, BATCH], {**attrs, "coordinate_transformation_mode": "output_half_pixel"},
                    opset=16)
    np.testing.assert_array_equal(a, b)


def test_roi_align_constant_image_and_plane():
    # bilinear sampling of a linear ramp is exact: a bin's average is the ramp at its centre
    x = np.broadcast_to(np.arange(8, dtype=np.float64), (1, 1, 8, 8)).copy()
    rois = np.array([[1.0, 2.0, 5.0, 6.0]])
    (y,) = run_ours("RoiAlign", [x, rois, np.array([0])], {"output_height": 2, "output_width": 2,
                                                           "sampling_ratio": 2}, opset=16)
    # half_pixel: roi spans x in [0.5, 4.5]; bin centres at 1.5 and 3.5
    np.testing.assert_allclose(y[0, 0], [[1.5, 3.5], [1.5, 3.5]])


def test_roi_align_empty_and_large_batches():
    (y,) = run_ours("RoiAlign", [X, np.zeros((0, 4), np.float32), np.zeros(0, np.int64)], {}, opset=16)
    assert y.shape == (0, 3, 1, 1) and y.dtype == np.float32
    many = np.tile(ROIS, (50, 1))
    (y,) = run_ours("RoiAlign", [X, many, np.tile(BATCH, 50)], {"output_height": 2, "output_width": 3}, opset=16)
    (one,) = run_ours("RoiAlign", [X, ROIS, BATCH], {"output_height": 2, "output_width": 3}, opset=16)
    np.testing.assert_array_equal(y, np.tile(one, (50, 1, 1, 1)))


def test_roi_align_errors():
    with pytest.raises(KernelError, match="batch_indices must lie"):
        run_ours("RoiAlign", [X, ROIS, BATCH + 1], {}, opset=16)
    with pytest.raises(KernelError, match=r"rois must have shape \(num_rois, 4\)"):
        run_ours("RoiAlign", [X, ROIS[:, :3], BATCH], {}, opset=16)
    with pytest.raises(KernelError, match="6 rois"):
        run_ours("RoiAlign", [X, ROIS, BATCH[:2]], {}, opset=16)
    with pytest.raises(KernelError, match="mode"):
        run_ours("RoiAlign", [X, ROIS, BATCH], {"mode": "sum"}, opset=16)
    with pytest.raises(KernelError, match="4-D"):
        run_ours("RoiAlign", [X[0], ROIS, BATCH], {}, opset=16)
