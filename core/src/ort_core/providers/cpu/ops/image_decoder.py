"""CPU kernel for ImageDecoder (opset 20): decodes one encoded image (BMP, JPEG, JPEG 2000, TIFF, PNG, WebP,
PNM) into an (H, W, C) uint8 array in RGB, BGR or Grayscale.

numpy has no image codecs, so decoding is delegated to Pillow, an optional dependency imported only when a
model contains this operator. Encoding images is not offered.
"""

from __future__ import annotations

import io

import numpy as np

from ....errors import KernelError
from ....limits import check_tensor_size
from ..registry import register

_FORMATS = ("RGB", "BGR", "Grayscale")


def _pillow(label: str):
    try:
        import PIL.Image
    except ImportError as exc:
        raise KernelError(f'{label}: ImageDecoder needs Pillow: pip install "ort-core[image]"') from exc
    return PIL.Image


@register("ImageDecoder", since=20)
def _image_decoder(node, opset):
    pixel_format = node.attr("pixel_format", "RGB")
    pixel_format = pixel_format.decode() if isinstance(pixel_format, bytes) else pixel_format
    if pixel_format not in _FORMATS:
        raise KernelError(f"{node.label}: unsupported pixel_format '{pixel_format}' (expected one of {_FORMATS})")
    image_module = _pillow(node.label)
    channels = 1 if pixel_format == "Grayscale" else 3
    mode = "L" if pixel_format == "Grayscale" else "RGB"

    def kernel(encoded):
        """Decoding is a codec call per image; there is no array formulation."""
        if encoded.dtype != np.uint8 or encoded.ndim != 1:
            raise KernelError(f"{node.label}: encoded_stream must be a 1-D uint8 tensor, "
                              f"got {encoded.dtype} with shape {encoded.shape}")
        try:
            img = image_module.open(io.BytesIO(encoded.tobytes()))
        except Exception:  # noqa: BLE001 - the spec asks for an empty result on any decoding failure
            return (np.zeros((0, 0, channels), dtype=np.uint8),)
        with img:
            # the header gives the size: a small stream must not decode into an image past the limit
            # (up to 4 bytes per pixel while converting: alpha, 16- and 32-bit modes)
            check_tensor_size(node.label, (img.size[1], img.size[0], 4), np.uint8, "decoded image")
            try:
                # palette, alpha, CMYK and 16-bit images all end up as 8-bit RGB or luma (ITU-R 601-2)
                pixels = np.asarray(img.convert(mode))
            except Exception:  # noqa: BLE001 - the spec asks for an empty result on any decoding failure
                return (np.zeros((0, 0, channels), dtype=np.uint8),)
        if pixel_format == "Grayscale":
            pixels = pixels[:, :, None]
        elif pixel_format == "BGR":
            pixels = pixels[:, :, ::-1]
        return (np.ascontiguousarray(pixels, dtype=np.uint8),)
    return kernel
