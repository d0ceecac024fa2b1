"""com.microsoft RotaryEmbedding against onnxruntime's CPU kernel, and the shared ``rotate`` helper."""

from __future__ import annotations

import numpy as np
import pytest

from ort_core.errors import KernelError
from ort_core.providers.cpu.ops.contrib_rotary import rotate

from .kernel_harness import check_onnxruntime, run_ours

RNG = np.random.default_rng(11)
OP = "RotaryEmbedding"


def rnd(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def caches(positions, width, dtype=np.float32):
    theta = RNG.random((positions, width)) * 6
    return np.cos(theta).astype(dtype), np.sin(theta).astype(dtype)


def ours(inputs, attrs=None):
    return run_ours(OP, inputs, attrs, opset=1, domain="com.microsoft")


@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("layout", ["bsd", "bnsh"])
def test_position_ids_per_token(interleaved, layout):
    x = rnd(2, 3, 4 * 8) if layout == "bsd" else rnd(2, 4, 3, 8)
    cos, sin = caches(10, 4)
    pos = np.array([[1, 2, 3], [9, 0, 4]], np.int64)
    (y,) = check_onnxruntime(OP, [x, pos, cos, sin], {"interleaved": interleaved})
    # first head of token (1, 1) at position 0 (the pair (i, i + 4), or (2i, 2i + 1), turned by the angle)
    v = (x[1, 1, :8] if layout == "bsd" else x[1, 0, 1]).astype(np.float64)
    a, b = (v[0::2], v[1::2]) if interleaved else (v[:4], v[4:])
    real, imag = a * cos[0] - b * sin[0], a * sin[0] + b * cos[0]
    want = np.stack([real, imag], -1).reshape(-1) if interleaved else np.concatenate([real, imag])
    got = y[1, 1, :8] if layout == "bsd" else y[1, 0, 1]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("offset", [np.array(2, np.int64), np.array([6], np.int64)])
def test_scalar_offset(offset):
    x = rnd(2, 4, 2 * 16)
    cos, sin = caches(10, 8)
    check_onnxruntime(OP, [x, offset, cos, sin], {"interleaved": 1})


@pytest.mark.parametrize("layout", ["bsd", "bnsh"])
@pytest.mark.parametrize("interleaved", [0, 1])
def test_partial_rotary_dim(layout, interleaved):
    x = rnd(2, 3, 2 * 16) if layout == "bsd" else rnd(2, 2, 3, 16)
    cos, sin = caches(8, 4)
    attrs = {"rotary_embedding_dim": 8, "num_heads": 2, "interleaved": interleaved}
    (y,) = check_onnxruntime(OP, [x, np.array([[0, 5, 7], [1, 1, 2]], np.int64), cos, sin], attrs)
    heads = y.reshape(2, 3, 2, 16) if layout == "bsd" else y
    xs = x.reshape(2, 3, 2, 16) if layout == "bsd" else x
    np.testing.assert_array_equal(heads[..., 8:], xs[..., 8:])


def test_partial_rotary_with_head_wide_cache():
    # onnxruntime reads the cache rows at position * rotary_dim / 2 of the flattened (10, 8) cache
    x = rnd(2, 3, 2 * 16)
    cos, sin = caches(10, 8)
    pos = np.array([[0, 3, 9], [2, 2, 5]], np.int64)
    (y,) = check_onnxruntime(OP, [x, pos, cos, sin], {"rotary_embedding_dim": 8, "num_heads": 2})
    flat = cos.reshape(-1)[pos[0, 1] * 4: pos[0, 1] * 4 + 4]
    a, b = x[0, 1, :4], x[0, 1, 4:8]
    sn = sin.reshape(-1)[pos[0, 1] * 4: pos[0, 1] * 4 + 4]
    np.testing.assert_allclose(y[0, 1, :4], a * flat - b * sn, rtol=1e-5, atol=1e-6)


def test_heads_inferred_from_cache_width():
    x = rnd(1, 3, 16)  # no num_heads: heads of 2 * cos_cache width = 4 channels
    cos, sin = caches(5, 2)
    check_onnxruntime(OP, [x, np.array([[0, 1, 4]], np.int64), cos, sin], {})


def test_float16():
    x = rnd(2, 3, 2 * 8, dtype=np.float16)
    cos, sin = caches(6, 4, np.float16)
    check_onnxruntime(OP, [x, np.array([[0, 5, 2], [3, 3, 1]], np.int64), cos, sin], {"interleaved": 1},
                      rtol=1e-3, atol=1e-3)


def test_packed_batching_and_scale():
    # is_packed_batching lifts the "sequence longer than the caches" refusal; scale does not change results
    x = rnd(1, 6, 8)
    cos, sin = caches(4, 4)
    pos = np.array([[0, 1, 2, 3, 0, 1]], np.int64)
    check_onnxruntime(OP, [x, pos, cos, sin], {"is_packed_batching": 1, "scale": 2.0})
    with pytest.raises(KernelError, match="exceeds the caches"):
        ours([x, pos, cos, sin])


def test_rotate_matches_onnx_rotary_embedding():
    """The shared helper gives the ONNX RotaryEmbedding-23 kernel's results (rotary.py could use it)."""
    x = rnd(2, 3, 5, 8)
    cos, sin = caches(7, 2)
    pos = RNG.integers(0, 7, (2, 5))
    for interleaved in (0, 1):
        (want,) = run_ours(OP, [x, cos, sin, pos], {"interleaved": interleaved, "rotary_embedding_dim": 4}, opset=23)
        got = rotate(x, cos[pos][:, None], sin[pos][:, None], bool(interleaved))
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
        assert not np.shares_memory(got, x)


@pytest.mark.parametrize("inputs, attrs, message", [
    (lambda c, s: [rnd(2, 3, 16), np.array([[1, 2, 3], [4, 5, 10]]), c, s], {}, "position_ids must lie"),
    (lambda c, s: [rnd(2, 3, 16), np.array(8), c, s], {}, "position offset 8"),
    (lambda c, s: [rnd(2, 3, 16), np.array([1, 2]), c, s], {}, "single offset or of shape"),
    (lambda c, s: [rnd(2, 3, 16), np.zeros((2, 2), np.int64), c, s], {}, "single offset or of shape"),
    (lambda c, s: [rnd(2, 3, 16), np.array(0), c, s[:9]], {}, "of one shape"),
    (lambda c, s: [rnd(2, 3, 16), np.array(0), c, s], {"num_heads": 4}, "cos_cache width 4"),
    (lambda c, s: [rnd(2, 3, 16), np.array(0), c, s], {"num_heads": 2, "rotary_embedding_dim": 12},
     "exceeds the head size"),
    (lambda c, s: [rnd(2, 12, 8), np.array(0), c, s], {}, "exceeds the caches"),
    (lambda c, s: [rnd(3, 16), np.array(0), c, s], {}, "3-D"),
    (lambda c, s: [rnd(2, 3, 16).astype(np.float64), np.array(0), c, s], {}, "float32 or float16"),
    (lambda c, s: [rnd(2, 3, 16), np.array(0.0), c, s], {}, "int64"),
])
def test_bad_inputs(inputs, attrs, message):
    cos, sin = caches(10, 4)
    with pytest.raises(KernelError, match=message) as info:
        ours(inputs(cos, sin), attrs)
    assert "RotaryEmbedding" in str(info.value)


@pytest.mark.parametrize("attrs, message", [
    ({"rotary_embedding_dim": 4}, "num_heads must be given"),
    ({"rotary_embedding_dim": 5, "num_heads": 2}, "must be even"),
    ({"interleaved": 2}, "interleaved must be 0 or 1"),
])
def test_bad_attributes(attrs, message):
    cos, sin = caches(10, 2)
    with pytest.raises(KernelError, match=message):
        ours([rnd(1, 2, 16), np.array(0), cos, sin], attrs)
