"""GridSample (opsets 16-22, N-D) and AffineGrid against the reference evaluator and closed forms."""

from __future__ import annotations

import numpy as np
import pytest

from ort_core.errors import KernelError

from .kernel_harness import check, run_ours

rng = np.random.default_rng(11)


def grid_for(n, out, nd, lo=-1.4, hi=1.4, dtype=np.float32):
    g = rng.uniform(lo, hi, (n, *out, nd)).astype(dtype)
    g.reshape(-1)[:4] = [-1, 1, 0, 0.5]  # corners, centre and a half-way point
    return g


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [0, 1])
def test_grid_sample_2d(mode, padding, align):
    x = rng.standard_normal((2, 3, 5, 6)).astype(np.float32)
    check("GridSample", [x, grid_for(2, (4, 3), 2)], {"mode": mode, "padding_mode": padding, "align_corners": align},
          opset=22, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [0, 1])
def test_grid_sample_3d_and_1d(mode, padding, align):
    attrs = {"mode": mode, "padding_mode": padding, "align_corners": align}
    x = rng.standard_normal((1, 2, 3, 4, 5)).astype(np.float64)
    check("GridSample", [x, grid_for(1, (2, 3, 2), 3, dtype=np.float64)], attrs, opset=20)
    x = rng.standard_normal((2, 2, 6)).astype(np.float32)
    check("GridSample", [x, grid_for(2, (5,), 1)], attrs, opset=20, rtol=1e-4, atol=1e-5)


def test_grid_sample_opset16_names_and_rank():
    x = rng.standard_normal((1, 2, 4, 4)).astype(np.float32)
    g = grid_for(1, (3, 3), 2)
    # opset 16 spells the modes bilinear/bicubic (the reference evaluator knows only the new names)
    for old, new in (("bilinear", "linear"), ("bicubic", "cubic"), ("nearest", "nearest")):
        (a,) = run_ours("GridSample", [x, g], {"mode": old, "padding_mode": "border"}, opset=16)
        (b,) = check("GridSample", [x, g], {"mode": new, "padding_mode": "border"}, opset=20, rtol=1e-4, atol=1e-5)
        np.testing.assert_array_equal(a, b)
    with pytest.raises(KernelError, match="unsupported mode 'linear'"):
        run_ours("GridSample", [x, g], {"mode": "linear"}, opset=16)
    with pytest.raises(KernelError, match="4-D"):
        run_ours("GridSample", [x[..., 0], g[:, :, :, :1]], {}, opset=16)


def test_grid_sample_identity_grid_reproduces_input():
    x = rng.standard_normal((1, 1, 4, 5)).astype(np.float32)
    ys, xs = np.meshgrid(np.linspace(-1, 1, 4), np.linspace(-1, 1, 5), indexing="ij")
    g = np.stack([xs, ys], axis=-1)[None].astype(np.float32)
    for mode in ("nearest", "linear", "cubic"):
        (y,) = run_ours("GridSample", [x, g], {"mode": mode, "align_corners": 1}, opset=20)
        np.testing.assert_allclose(y, x, atol=1e-6)


def test_grid_sample_nearest_rounds_half_to_even_and_zero_pads():
    x = np.arange(4, dtype=np.float32).reshape(1, 1, 1, 4)
    # align_corners=1: x = (g + 1) * 1.5 -> 0.75, 1.5, 2.5, and one point far outside
    g = np.array([[[[-0.5, 0], [0, 0], [2 / 3, 0], [3, 0]]]], np.float32)
    (y,) = run_ours("GridSample", [x, g], {"mode": "nearest", "align_corners": 1}, opset=20)
    np.testing.assert_array_equal(y.ravel(), [1, 2, 2, 0])


def test_grid_sample_integer_input_and_errors():
    x = rng.integers(0, 50, (1, 1, 3, 3)).astype(np.int32)
    (y,) = run_ours("GridSample", [x, grid_for(1, (2, 2), 2)], {"mode": "linear"}, opset=22)
    assert y.dtype == np.int32
    with pytest.raises(KernelError, match="grid must have shape"):
        run_ours("GridSample", [x.astype(np.float32), grid_for(1, (2, 2), 3)], {}, opset=22)
    with pytest.raises(KernelError, match="padding_mode"):
        run_ours("GridSample", [x, grid_for(1, (2, 2), 2)], {"padding_mode": "wrap"}, opset=22)


@pytest.mark.parametrize("align", [0, 1])
def test_affine_grid(align):
    theta2 = rng.standard_normal((2, 2, 3)).astype(np.float32)
    check("AffineGrid", [theta2, np.array([2, 3, 4, 5], np.int64)], {"align_corners": align}, opset=20, rtol=1e-5)
    theta3 = rng.standard_normal((1, 3, 4)).astype(np.float32)
    check("AffineGrid", [theta3, np.array([1, 1, 2, 3, 4], np.int64)], {"align_corners": align}, opset=20,
          rtol=1e-5, atol=1e-6)


def test_affine_grid_identity_is_pixel_centres_and_feeds_grid_sample():
    theta = np.array([[[1, 0, 0], [0, 1, 0]]], np.float64)
    (g,) = run_ours("AffineGrid", [theta, np.array([1, 1, 2, 4], np.int64)], {}, opset=20)
    assert g.dtype == np.float64 and g.shape == (1, 2, 4, 2)
    np.testing.assert_allclose(g[0, 0, :, 0], [-0.75, -0.25, 0.25, 0.75])
    np.testing.assert_allclose(g[0, :, 0, 1], [-0.5, 0.5])
    x = rng.standard_normal((1, 1, 2, 4))
    (y,) = run_ours("GridSample", [x, g], {}, opset=20)
    np.testing.assert_allclose(y, x, atol=1e-12)
    with pytest.raises(KernelError, match="theta must have shape"):
        run_ours("AffineGrid", [theta, np.array([1, 1, 2, 3, 4], np.int64)], {}, opset=20)
