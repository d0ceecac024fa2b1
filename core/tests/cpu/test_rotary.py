"""RotaryEmbedding kernel against onnx's reference evaluator and a per-pair rotation formula."""

from __future__ import annotations

import numpy as np
import pytest

from ort_core.errors import KernelError

from .kernel_harness import check, run_ours

RNG = np.random.default_rng(3)


def caches(positions, half):
    theta = RNG.random((positions, half)).astype(np.float32) * 6
    return np.cos(theta).astype(np.float32), np.sin(theta).astype(np.float32)


@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("rot_dim", [0, 4])
def test_rotary_4d_with_position_ids(interleaved, rot_dim):
    x = RNG.standard_normal((2, 3, 5, 8)).astype(np.float32)
    cos, sin = caches(10, (rot_dim or 8) // 2)
    pos = RNG.integers(0, 10, (2, 5))
    attrs = {"interleaved": interleaved, "rotary_embedding_dim": rot_dim}
    (y,) = check("RotaryEmbedding", [x, cos, sin, pos], attrs, opset=23)
    if rot_dim:
        np.testing.assert_array_equal(y[..., rot_dim:], x[..., rot_dim:])


def test_rotary_3d_without_position_ids():
    x = RNG.standard_normal((2, 5, 4 * 6)).astype(np.float32)
    theta = RNG.random((2, 5, 3)).astype(np.float32)
    check("RotaryEmbedding", [x, np.cos(theta), np.sin(theta)], {"num_heads": 4}, opset=23)
    check("RotaryEmbedding", [x, np.cos(theta), np.sin(theta)], {"num_heads": 4, "interleaved": 1}, opset=23)


def test_rotary_interleaved_rotates_adjacent_pairs():
    x = np.array([1.0, 0.0, 0.0, 2.0], np.float32).reshape(1, 1, 1, 4)
    ang = np.array([[np.pi / 2, np.pi]], np.float32)
    (y,) = run_ours("RotaryEmbedding", [x, np.cos(ang), np.sin(ang), np.zeros((1, 1), np.int64)],
                    {"interleaved": 1}, opset=23)
    # pair (1, 0) turned by 90 degrees -> (0, 1); pair (0, 2) turned by 180 degrees -> (0, -2)
    np.testing.assert_allclose(y.reshape(-1), [0, 1, 0, -2], atol=1e-6)


def test_rotary_half_split_preserves_norms():
    x = RNG.standard_normal((1, 2, 3, 8)).astype(np.float32)
    cos, sin = caches(3, 4)
    (y,) = run_ours("RotaryEmbedding", [x, cos, sin, np.arange(3)[None]], {}, opset=23)
    pairs = lambda a: a[..., :4] ** 2 + a[..., 4:] ** 2  # noqa: E731
    np.testing.assert_allclose(pairs(y), pairs(x), rtol=1e-5)


def test_rotary_float16():
    x = RNG.standard_normal((1, 2, 3, 8)).astype(np.float16)
    cos, sin = (c.astype(np.float16) for c in caches(4, 4))
    check("RotaryEmbedding", [x, cos, sin, np.array([[0, 3, 1]])], {}, opset=23, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("inputs, attrs, match", [
    ([np.zeros((1, 3, 8), np.float32), *caches(3, 4)], {}, "num_heads"),
    ([np.zeros((1, 1, 3, 8), np.float32), *caches(3, 3), np.zeros((1, 3), np.int64)], {}, "rotary_embedding_dim / 2"),
    ([np.zeros((1, 1, 3, 8), np.float32), *caches(3, 4), np.full((1, 3), 5)], {}, "position_ids"),
    ([np.zeros((1, 1, 3, 8), np.float32), *caches(3, 4)], {"rotary_embedding_dim": 10}, "at most"),
    ([np.zeros((3, 8), np.float32), *caches(3, 4)], {}, "3-D or 4-D"),
])
def test_rotary_errors(inputs, attrs, match):
    with pytest.raises(KernelError, match=match):
        run_ours("RotaryEmbedding", inputs, attrs, opset=23)
