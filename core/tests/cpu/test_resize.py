"""Resize (opsets 10-19) and Upsample against the reference evaluator and hand-computed values."""

from __future__ import annotations

import numpy as np
import pytest

from ort_core.errors import KernelError

from .kernel_harness import check, run_ours

rng = np.random.default_rng(7)
X = rng.standard_normal((2, 3, 5, 7)).astype(np.float32)
# coordinate modes whose formulas the reference evaluator follows exactly for these shapes
COORDS = ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric"]


def f32(*v):
    return np.array(v, np.float32)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("coord", COORDS)
@pytest.mark.parametrize("scales", [f32(1, 1, 2, 3), f32(1, 1, 0.6, 0.5), f32(1, 1, 1.7, 0.8)])
def test_resize_scales_matches_reference(mode, coord, scales):
    check("Resize", [X, None, scales], {"mode": mode, "coordinate_transformation_mode": coord}, opset=19,
          rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("sizes", [[2, 3, 9, 4], [2, 3, 3, 12]])
def test_resize_sizes_matches_reference(mode, sizes):
    check("Resize", [X, None, None, np.array(sizes, np.int64)], {"mode": mode}, opset=19, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("nearest_mode", ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"])
@pytest.mark.parametrize("coord", COORDS)
def test_resize_nearest_modes(nearest_mode, coord):
    check("Resize", [X, None, f32(1, 1, 2.5, 1.5)],
          {"mode": "nearest", "nearest_mode": nearest_mode, "coordinate_transformation_mode": coord}, opset=19)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("scales", [f32(1, 1, 0.6, 0.3), f32(1, 1, 0.4, 1.5)])
def test_resize_antialias(mode, scales):
    check("Resize", [X, None, scales], {"mode": mode, "antialias": 1}, opset=19, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("a", [-0.5, -0.75])
def test_resize_cubic_exclude_outside(a):
    check("Resize", [X, None, f32(1, 1, 1.6, 0.7)],
          {"mode": "cubic", "cubic_coeff_a": a, "exclude_outside": 1}, opset=19, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_resize_tf_crop_and_resize_extrapolates(mode):
    roi = f32(0, 0, -0.2, 0.3, 1, 1, 0.9, 1.4)
    attrs = {"mode": mode, "coordinate_transformation_mode": "tf_crop_and_resize", "extrapolation_value": 7.5}
    (y,) = check("Resize", [X, roi, None, np.array([2, 3, 4, 6], np.int64)], attrs, opset=19,
                 rtol=1e-4, atol=1e-5)
    assert (y == 7.5).any()


def test_resize_axes_and_keep_aspect_ratio():
    sizes = np.array([8, 9], np.int64)
    for policy in ("stretch", "not_larger", "not_smaller"):
        for axes in ([2, 3], [3, 2]):
            check("Resize", [X, None, None, sizes],
                  {"mode": "linear", "axes": axes, "keep_aspect_ratio_policy": policy}, opset=19, rtol=1e-4)
        # negative axes count from the back (the reference evaluator does not accept them)
        attrs = {"mode": "linear", "keep_aspect_ratio_policy": policy}
        (neg,) = run_ours("Resize", [X, None, None, sizes], {**attrs, "axes": [-1, -2]}, opset=19)
        (pos,) = run_ours("Resize", [X, None, None, sizes], {**attrs, "axes": [3, 2]}, opset=19)
        np.testing.assert_array_equal(neg, pos)
    # ratios 8 / 5 = 1.6 and 9 / 7 = 1.29: the smaller keeps both sides within sizes, the larger covers them
    (y,) = run_ours("Resize", [X, None, None, sizes], {"axes": [2, 3], "keep_aspect_ratio_policy": "not_larger"},
                    opset=19)
    assert y.shape == (2, 3, 6, 9)  # 5 * 1.29 = 6.4 -> 6
    (y,) = run_ours("Resize", [X, None, None, sizes], {"axes": [2, 3], "keep_aspect_ratio_policy": "not_smaller"},
                    opset=19)
    assert y.shape == (2, 3, 8, 11)  # 7 * 1.6 = 11.2 -> 11


def test_resize_half_pixel_symmetric_exact_values():
    # 7 -> 3 (scale 0.5): offset = 3.5 * (1 - 3 / 3.5) = 0.5, so samples land exactly on 1, 3, 5
    x = np.arange(7, dtype=np.float32).reshape(1, 7)
    (y,) = run_ours("Resize", [x, None, f32(1, 0.5)], {"mode": "linear",
                                                      "coordinate_transformation_mode": "half_pixel_symmetric"},
                    opset=19)
    np.testing.assert_array_equal(y, [[1, 3, 5]])
    check("Resize", [X, None, f32(1, 1, 2.3, 1.4)], {"mode": "linear",
                                                    "coordinate_transformation_mode": "half_pixel_symmetric"},
          opset=19, rtol=1e-4, atol=1e-5)


def test_resize_linear_matches_numpy_formula():
    x = rng.standard_normal((4, 6)).astype(np.float64)
    (y,) = run_ours("Resize", [x, None, np.array([2.0, 1.5])], {"mode": "linear"}, opset=13)
    # separable half-pixel linear interpolation with edge clamping
    def interp(n_in, n_out):
        src = np.clip((np.arange(n_out) + 0.5) * n_in / n_out - 0.5, 0, n_in - 1)
        lo = np.floor(src).astype(int)
        hi = np.minimum(lo + 1, n_in - 1)
        m = np.zeros((n_out, n_in))
        m[np.arange(n_out), lo] += 1 - (src - lo)
        m[np.arange(n_out), hi] += src - lo
        return m
    np.testing.assert_allclose(y, interp(4, 8) @ x @ interp(6, 9).T, rtol=1e-12)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int32, np.float16, np.float64])
def test_resize_dtypes(dtype):
    x = (rng.uniform(0, 100, (1, 2, 4, 5))).astype(dtype)
    for mode in ("nearest", "linear", "cubic"):
        (y,) = run_ours("Resize", [x, None, f32(1, 1, 1.5, 2)], {"mode": mode}, opset=19)
        assert y.dtype == x.dtype and y.shape == (1, 2, 6, 10)
    check("Resize", [x, None, f32(1, 1, 1.5, 2)], {"mode": "linear"}, opset=19, rtol=2e-3, atol=1)


def test_resize_nearest_keeps_strings():
    x = np.array([["a", "b"], ["c", "d"]], dtype=object)
    (y,) = run_ours("Resize", [x, None, f32(1, 2)], {"mode": "nearest",
                                                    "coordinate_transformation_mode": "asymmetric"}, opset=19)
    assert y.tolist() == [["a", "a", "b", "b"], ["c", "c", "d", "d"]]


def test_resize_opset11_tf_half_pixel_for_nn():
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    (y,) = run_ours("Resize", [x, f32(), f32(1, 0.5)],
                    {"mode": "nearest", "coordinate_transformation_mode": "tf_half_pixel_for_nn"}, opset=11)
    np.testing.assert_array_equal(y, [[1, 3]])  # (y + 0.5) / 0.5 = 1, 3
    with pytest.raises(KernelError, match="tf_half_pixel_for_nn"):
        run_ours("Resize", [x, f32(), f32(1, 0.5)], {"coordinate_transformation_mode": "tf_half_pixel_for_nn"},
                 opset=13)


def test_resize_10_and_upsample_use_asymmetric_coordinates():
    x = np.arange(5, dtype=np.float32).reshape(1, 5)
    # upsampling truncates x / scale; downsampling rounds it up (onnxruntime's Resize-10 rule)
    (y,) = run_ours("Resize", [x, f32(1, 2)], {"mode": "nearest"}, opset=10)
    np.testing.assert_array_equal(y, [[0, 0, 1, 1, 2, 2, 3, 3, 4, 4]])
    (y,) = run_ours("Resize", [x, f32(1, 0.6)], {"mode": "nearest"}, opset=10)
    np.testing.assert_array_equal(y, [[0, 2, 4]])
    (y,) = run_ours("Resize", [x, f32(1, 2)], {"mode": "linear"}, opset=10)
    np.testing.assert_allclose(y, [[0, 0.5, 1, 1.5, 2, 2.5, 3, 3.5, 4, 4]])
    (y,) = run_ours("Upsample", [x], {"mode": "linear", "scales": [1.0, 2.0]}, opset=7)
    np.testing.assert_allclose(y, [[0, 0.5, 1, 1.5, 2, 2.5, 3, 3.5, 4, 4]])
    check("Upsample", [X, f32(1, 1, 2, 3)], {"mode": "nearest"}, opset=9)


def test_resize_errors():
    with pytest.raises(KernelError, match="exactly one of 'scales' and 'sizes'"):
        run_ours("Resize", [X, None, f32(1, 1, 2, 2), np.array([2, 3, 4, 4], np.int64)], {}, opset=19)
    with pytest.raises(KernelError, match="exactly one"):
        run_ours("Resize", [X, None, None, None], {}, opset=19)
    with pytest.raises(KernelError, match="'scales' has 2 values, expected 4"):
        run_ours("Resize", [X, None, f32(2, 2)], {}, opset=19)
    with pytest.raises(KernelError, match="positive"):
        run_ours("Resize", [X, None, f32(1, 1, 0, 2)], {}, opset=19)
    with pytest.raises(KernelError, match="needs 'roi'"):
        run_ours("Resize", [X, None, f32(1, 1, 2, 2)], {"coordinate_transformation_mode": "tf_crop_and_resize"},
                 opset=19)
    with pytest.raises(KernelError, match="unsupported mode"):
        run_ours("Resize", [X, None, f32(1, 1, 2, 2)], {"mode": "area"}, opset=19)
    with pytest.raises(KernelError, match="antialias"):
        run_ours("Resize", [X, None, f32(1, 1, 2, 2)], {"mode": "nearest", "antialias": 1}, opset=19)
    with pytest.raises(KernelError, match="invalid or repeated"):
        run_ours("Resize", [X, None, f32(2, 2)], {"axes": [2, 2]}, opset=19)
    with pytest.raises(KernelError, match="numeric"):
        run_ours("Resize", [np.array([["a", "b"]], dtype=object), None, f32(1, 2)], {"mode": "linear"}, opset=19)
    with pytest.raises(KernelError, match=">= 1"):
        run_ours("Upsample", [X, f32(1, 1, 0.5, 2)], {}, opset=9)


def test_resize_does_not_touch_input_and_returns_fresh_array():
    x = X.copy()
    (y,) = run_ours("Resize", [x, None, f32(1, 1, 1, 1)], {"mode": "linear"}, opset=19)
    np.testing.assert_array_equal(y, X)
    y[...] = 0
    np.testing.assert_array_equal(x, X)
