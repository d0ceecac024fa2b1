"""DeformConv (opsets 19, 22) against the reference evaluator and the plain convolution."""

from __future__ import annotations

import numpy as np
import pytest

from ort_core.errors import KernelError

from .kernel_harness import check, run_ours

rng = np.random.default_rng(4)


def out_size(n, k, d, s, pb, pe):
    return (n + pb + pe - d * (k - 1) - 1) // s + 1


@pytest.mark.parametrize("group,offset_group", [(1, 1), (2, 1), (1, 2), (2, 2)])
@pytest.mark.parametrize("with_mask", [False, True])
def test_deform_conv_matches_reference(group, offset_group, with_mask):
    ks, st, dil, pads = (2, 3), [2, 1], [1, 2], [1, 0, 0, 1]
    x = rng.standard_normal((2, 4, 7, 6)).astype(np.float32)
    w = rng.standard_normal((4, 4 // group, *ks)).astype(np.float32)
    oh, ow = out_size(7, 2, 1, 2, 1, 0), out_size(6, 3, 2, 1, 0, 1)
    off = rng.uniform(-2, 2, (2, offset_group * 6 * 2, oh, ow)).astype(np.float32)
    inputs = [x, w, off]
    if with_mask:
        inputs += [rng.standard_normal(4).astype(np.float32),
                   rng.uniform(0, 1, (2, offset_group * 6, oh, ow)).astype(np.float32)]
    attrs = {"group": group, "offset_group": offset_group, "strides": st, "dilations": dil, "pads": pads,
             "kernel_shape": list(ks)}
    check("DeformConv", inputs, attrs, opset=22, rtol=1e-4, atol=1e-4)


def test_deform_conv_zero_offsets_is_conv():
    x = rng.standard_normal((1, 3, 6, 6))
    w = rng.standard_normal((2, 3, 3, 3))
    b = rng.standard_normal(2)
    off = np.zeros((1, 18, 6, 6))
    (y,) = run_ours("DeformConv", [x, w, off, b], {"pads": [1, 1, 1, 1]}, opset=19)
    (ref,) = run_ours("Conv", [x, w, b], {"pads": [1, 1, 1, 1]}, opset=11)
    np.testing.assert_allclose(y, ref, rtol=1e-10, atol=1e-12)


def test_deform_conv_1d_and_3d_integer_offsets_shift_the_input():
    # a whole-pixel offset of +1 along every axis samples the input shifted by one
    x = rng.standard_normal((1, 1, 5, 5, 5))
    w = np.ones((1, 1, 1, 1, 1))
    off = np.ones((1, 3, 5, 5, 5))
    (y,) = run_ours("DeformConv", [x, w, off], {}, opset=22)
    expected = np.zeros_like(x)
    expected[..., :-1, :-1, :-1] = x[..., 1:, 1:, 1:]
    np.testing.assert_allclose(y, expected)
    x1 = rng.standard_normal((2, 2, 8)).astype(np.float32)
    w1 = rng.standard_normal((3, 2, 3)).astype(np.float32)
    (y1,) = run_ours("DeformConv", [x1, w1, np.full((2, 3, 6), 0.5, np.float32)], {}, opset=22)
    assert y1.shape == (2, 3, 6) and y1.dtype == np.float32


def test_deform_conv_errors():
    x = np.zeros((1, 4, 5, 5), np.float32)
    w = np.zeros((2, 4, 3, 3), np.float32)
    with pytest.raises(KernelError, match="offset must have shape"):
        run_ours("DeformConv", [x, w, np.zeros((1, 18, 4, 4), np.float32)], {}, opset=19)
    with pytest.raises(KernelError, match="offset_group"):
        run_ours("DeformConv", [x, w, np.zeros((1, 54, 3, 3), np.float32)], {"offset_group": 3}, opset=19)
    with pytest.raises(KernelError, match="group"):
        run_ours("DeformConv", [x, w, np.zeros((1, 18, 3, 3), np.float32)], {"group": 2}, opset=19)
    with pytest.raises(KernelError, match="mask must have shape"):
        run_ours("DeformConv", [x, w, np.zeros((1, 18, 3, 3), np.float32), None, np.zeros((1, 8, 3, 3), np.float32)],
                 {}, opset=19)
