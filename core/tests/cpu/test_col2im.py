"""Col2Im against the reference evaluator and against its adjoint, im2col."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from ort_core.errors import KernelError

from .kernel_harness import check, run_ours

rng = np.random.default_rng(3)


def blocks(image, block, dil, st, pads):
    nd = len(image)
    return [(image[i] + pads[i] + pads[i + nd] - dil[i] * (block[i] - 1) - 1) // st[i] + 1 for i in range(nd)]


@pytest.mark.parametrize("image,block,dil,st,pads", [
    ([5, 5], [2, 2], [1, 1], [1, 1], [0, 0, 0, 0]),
    ([6, 7], [3, 2], [2, 1], [2, 1], [1, 0, 1, 2]),
    ([4, 5, 6], [2, 1, 3], [1, 2, 1], [1, 1, 2], [0, 1, 1, 1, 0, 0]),
])
def test_col2im_matches_reference(image, block, dil, st, pads):
    nb = blocks(image, block, dil, st, pads)
    x = rng.standard_normal((2, 3 * int(np.prod(block)), int(np.prod(nb)))).astype(np.float32)
    check("Col2Im", [x, np.array(image, np.int64), np.array(block, np.int64)],
          {"dilations": dil, "strides": st, "pads": pads}, opset=18, rtol=1e-5, atol=1e-6)


def test_col2im_is_adjoint_of_im2col():
    # <col2im(c), img> == <c, im2col(img)> for any c and img
    image, block, st = [5, 6], [2, 3], [1, 2]
    nb = blocks(image, block, [1, 1], st, [0] * 4)
    img = rng.standard_normal((1, 1, *image))
    cols = np.stack([img[0, 0, i:i + st[0] * nb[0]:st[0], j:j + st[1] * nb[1]:st[1]].ravel()
                     for i, j in itertools.product(range(block[0]), range(block[1]))])[None]
    c = rng.standard_normal(cols.shape)
    (y,) = run_ours("Col2Im", [c, np.array(image), np.array(block)], {"strides": st}, opset=18)
    np.testing.assert_allclose((y * img).sum(), (c * cols).sum(), rtol=1e-12)


def test_col2im_errors():
    x = np.zeros((1, 4, 16), np.float32)
    with pytest.raises(KernelError, match="blocks"):
        run_ours("Col2Im", [x, np.array([6, 6]), np.array([2, 2])], {}, opset=18)
    with pytest.raises(KernelError, match="multiple"):
        run_ours("Col2Im", [x, np.array([5, 5]), np.array([3, 1])], {}, opset=18)
    with pytest.raises(KernelError, match="'pads' has 2 values"):
        run_ours("Col2Im", [x, np.array([5, 5]), np.array([2, 2])], {"pads": [0, 0]}, opset=18)
