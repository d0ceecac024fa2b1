"""CPU kernels generating signal-processing constants (opset 17): the Blackman, Hamming and Hann windows
and MelWeightMatrix.

Values are computed in float64 and cast once to output_datatype; the transforms themselves are in spectral.py.
"""

from __future__ import annotations

import math

import numpy as np
from onnx import TensorProto

from ....errors import KernelError
from ....ir.types import np_dtype
from ....limits import check_tensor_size
from ..registry import register

_NUMERIC = {TensorProto.UINT8, TensorProto.UINT16, TensorProto.UINT32, TensorProto.UINT64, TensorProto.INT8,
            TensorProto.INT16, TensorProto.INT32, TensorProto.INT64, TensorProto.FLOAT16, TensorProto.FLOAT,
            TensorProto.DOUBLE, TensorProto.BFLOAT16}


def _output_dtype(node) -> np.dtype:
    to = int(node.attr("output_datatype", TensorProto.FLOAT))
    if to not in _NUMERIC:
        raise KernelError(f"{node.label}: output_datatype {to} is not a supported numeric type")
    return np_dtype(to)


def _scalar(label: str, name: str, v) -> float | int:
    arr = np.asarray(v)
    if arr.size != 1:
        raise KernelError(f"{label}: '{name}' must be a scalar, got shape {arr.shape}")
    return arr.reshape(-1)[0].item()


def _hann(n, period):
    return np.sin(n * (math.pi / period)) ** 2


def _hamming(n, period):
    alpha = 25 / 46  # the exact zero-first-sidelobe value; 0.54 is its rounding
    return alpha - (1 - alpha) * np.cos(n * (2 * math.pi / period))


def _blackman(n, period):
    # summed with the constant last: the ends come out exactly 0 and the peak exactly 1
    return (0.08 * np.cos(n * (4 * math.pi / period)) - 0.5 * np.cos(n * (2 * math.pi / period))) + 0.42


_WINDOWS = {"HannWindow": _hann, "HammingWindow": _hamming, "BlackmanWindow": _blackman}


@register(tuple(_WINDOWS), since=17)
def _window(node, opset):
    shape = _WINDOWS[node.op_type]
    periodic = bool(node.attr("periodic", 1))
    dtype = _output_dtype(node)

    def kernel(size):
        n = int(_scalar(node.label, "size", size))
        if n < 0:
            raise KernelError(f"{node.label}: size must not be negative, got {n}")
        check_tensor_size(node.label, (n,), np.float64)
        # a periodic window is the symmetric window of length size + 1 without its last point
        period = n if periodic else n - 1
        if period <= 0:  # a single point: the window's peak
            return (np.ones(n, dtype=dtype),)
        return (shape(np.arange(n, dtype=np.float64), period).astype(dtype),)
    return kernel


@register("MelWeightMatrix", since=17)
def _mel_weight_matrix(node, opset):
    dtype = _output_dtype(node)

    def kernel(num_mel_bins, dft_length, sample_rate, lower_edge_hertz, upper_edge_hertz):
        label = node.label
        n_mel = int(_scalar(label, "num_mel_bins", num_mel_bins))
        n_dft = int(_scalar(label, "dft_length", dft_length))
        rate = int(_scalar(label, "sample_rate", sample_rate))
        low = float(_scalar(label, "lower_edge_hertz", lower_edge_hertz))
        high = float(_scalar(label, "upper_edge_hertz", upper_edge_hertz))
        if n_mel < 1 or n_dft < 1 or rate < 1 or not 0 <= low < high:
            raise KernelError(f"{label}: need num_mel_bins, dft_length, sample_rate >= 1 and "
                              f"0 <= lower_edge_hertz < upper_edge_hertz, got {n_mel}, {n_dft}, {rate}, {low}, {high}")
        n_bins = n_dft // 2 + 1
        check_tensor_size(label, (n_bins, n_mel + 2), np.float64)

        # n_mel + 2 band edges evenly spaced in mel, mapped back to spectrogram bin indices;
        # like onnxruntime, the mel step divides the range by the number of edges
        mel_low, mel_high = 2595 * math.log10(1 + low / 700), 2595 * math.log10(1 + high / 700)
        mels = np.arange(n_mel + 2) * ((mel_high - mel_low) / (n_mel + 2)) + mel_low
        hertz = 700 * (10 ** (mels / 2595) - 1)
        edges = np.floor((n_dft + 1) * hertz / rate).astype(np.int64)
        if edges[-1] >= n_bins:
            raise KernelError(f"{label}: upper_edge_hertz {high} lies above the highest spectrogram bin "
                              f"({n_bins} bins for dft_length {n_dft} at sample_rate {rate})")

        left, centre, right = edges[:-2], edges[1:-1], edges[2:]
        j = np.arange(n_bins)[:, None]
        rising_width = np.maximum(centre - left, 1)
        rising = np.where((j >= left) & (j <= centre), (j - left) / rising_width, 0.0)
        rising = np.where((centre == left) & (j == centre), 1.0, rising)
        falling_mask = (j >= centre) & (j < right)
        falling = (right - j) / np.maximum(right - centre, 1)
        return (np.where(falling_mask, falling, rising).astype(dtype),)
    return kernel
