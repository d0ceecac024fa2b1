"""ImageDecoder: decoding through Pillow, pixel formats, failures and the missing-Pillow error."""

from __future__ import annotations

import io
import sys

import numpy as np
import pytest

from ort_core.errors import KernelError

from .kernel_harness import check, run_ours

try:
    import PIL.Image as PIL_Image
except ImportError:  # Pillow is the optional "image" extra
    PIL_Image = None
needs_pillow = pytest.mark.skipif(PIL_Image is None, reason="Pillow is not installed")
rng = np.random.default_rng(8)
PIXELS = np.repeat(np.repeat(rng.integers(0, 256, (4, 5, 3), dtype=np.uint8), 4, axis=0), 4, axis=1)


def encode(fmt, pixels=PIXELS, mode=None):
    buf = io.BytesIO()
    PIL_Image.fromarray(pixels, mode=mode).save(buf, format=fmt)
    return np.frombuffer(buf.getvalue(), dtype=np.uint8)


@needs_pillow
@pytest.mark.parametrize("fmt", ["PNG", "BMP", "TIFF", "PPM", "WEBP", "JPEG"])
@pytest.mark.parametrize("pixel_format", ["RGB", "BGR", "Grayscale"])
def test_image_decoder_matches_reference(fmt, pixel_format):
    (y,) = check("ImageDecoder", [encode(fmt)], {"pixel_format": pixel_format}, opset=20, rtol=0, atol=0)
    assert y.dtype == np.uint8 and y.shape == (16, 20, 1 if pixel_format == "Grayscale" else 3)


@needs_pillow
def test_image_decoder_lossless_values_and_channel_order():
    data = encode("PNG")
    (rgb,) = run_ours("ImageDecoder", [data], {}, opset=20)
    (bgr,) = run_ours("ImageDecoder", [data], {"pixel_format": "BGR"}, opset=20)
    (gray,) = run_ours("ImageDecoder", [data], {"pixel_format": "Grayscale"}, opset=20)
    np.testing.assert_array_equal(rgb, PIXELS)
    np.testing.assert_array_equal(bgr, PIXELS[:, :, ::-1])
    luma = PIXELS.astype(np.float64) @ [0.299, 0.587, 0.114]  # ITU-R 601-2
    assert np.abs(gray[:, :, 0].astype(np.float64) - luma).max() <= 1


@needs_pillow
def test_image_decoder_converts_gray_and_alpha_images_to_rgb():
    gray = PIXELS[:, :, 0]
    (y,) = run_ours("ImageDecoder", [encode("PNG", gray)], {}, opset=20)
    np.testing.assert_array_equal(y, np.repeat(gray[:, :, None], 3, axis=2))
    rgba = np.concatenate([PIXELS, np.full((16, 20, 1), 128, np.uint8)], axis=2)
    (y,) = run_ours("ImageDecoder", [encode("PNG", rgba)], {}, opset=20)
    np.testing.assert_array_equal(y, PIXELS)


@needs_pillow
def test_image_decoder_returns_empty_on_garbage():
    (y,) = run_ours("ImageDecoder", [np.frombuffer(b"not an image", np.uint8)], {}, opset=20)
    assert y.shape == (0, 0, 3) and y.dtype == np.uint8
    (y,) = run_ours("ImageDecoder", [encode("PNG")[:40]], {"pixel_format": "Grayscale"}, opset=20)
    assert y.shape == (0, 0, 1)


@needs_pillow
def test_image_decoder_errors():
    with pytest.raises(KernelError, match="pixel_format"):
        run_ours("ImageDecoder", [encode("PNG")], {"pixel_format": "YUV"}, opset=20)
    with pytest.raises(KernelError, match="1-D uint8"):
        run_ours("ImageDecoder", [encode("PNG").astype(np.int32)], {}, opset=20)


def test_image_decoder_without_pillow_names_the_extra(monkeypatch):
    # without Pillow the node fails at session creation with an actionable message
    monkeypatch.setitem(sys.modules, "PIL", None)
    monkeypatch.setitem(sys.modules, "PIL.Image", None)
    with pytest.raises(KernelError, match=r'test_ImageDecoder.*needs Pillow: pip install "ort-core\[image\]"'):
        run_ours("ImageDecoder", [np.zeros(4, np.uint8)], {}, opset=20)
