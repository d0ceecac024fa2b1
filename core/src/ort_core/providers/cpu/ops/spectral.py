"""CPU kernels for Fourier transforms: DFT (opset 17 axis attribute, opset 20 axis input) and STFT (17).

Complex values travel as a trailing dimension of size 2 (real, imaginary); size 1 means real. np.fft
does the transforms. Window functions and MelWeightMatrix are in windows.py.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ....errors import KernelError
from ....limits import check_tensor_size
from ..registry import register


def _scalar(label: str, name: str, v) -> int:
    arr = np.asarray(v)
    if arr.size != 1:
        raise KernelError(f"{label}: '{name}' must be a scalar, got shape {arr.shape}")
    return int(arr.reshape(-1)[0])


def _to_complex(label: str, x: np.ndarray) -> np.ndarray:
    """Drop the trailing real/imaginary dimension: real array for size 1, complex for size 2."""
    if x.ndim < 2 or x.shape[-1] not in (1, 2):
        raise KernelError(f"{label}: the last input dimension must be 1 (real) or 2 (complex), got shape {x.shape}")
    work = np.float64 if x.dtype == np.float64 else np.float32
    x = x.astype(work, copy=False)
    if x.shape[-1] == 1:
        return x[..., 0]
    return x[..., 0] + 1j * x[..., 1]


def _from_complex(y: np.ndarray, dtype) -> np.ndarray:
    """Complex result -> trailing (real, imaginary) dimension in the input's dtype."""
    return np.stack((y.real, y.imag), axis=-1).astype(dtype)


def _dft(label: str, x: np.ndarray, length, axis: int, inverse: bool, onesided: bool) -> np.ndarray:
    rank = x.ndim
    if not (-rank <= axis <= -2 or 0 <= axis <= rank - 2):
        raise KernelError(f"{label}: axis {axis} is out of range [-{rank}, -2] U [0, {rank - 2}] for input "
                          f"of rank {rank} (the last dimension holds real/imaginary parts)")
    axis %= rank
    signal = _to_complex(label, x)
    is_complex = x.shape[-1] == 2
    if length is None:
        n = 2 * (x.shape[axis] - 1) if inverse and onesided else x.shape[axis]
    else:
        n = _scalar(label, "dft_length", length)
    if n < 1:
        raise KernelError(f"{label}: dft_length must be positive, got {n}")
    check_tensor_size(label, x.shape[:axis] + (n,) + x.shape[axis + 1:-1], np.complex128)
    if onesided and not inverse:
        if is_complex:
            raise KernelError(f"{label}: onesided forward DFT needs a real input (last dimension 1)")
        return _from_complex(np.fft.rfft(signal, n=n, axis=axis), x.dtype)
    if onesided:  # inverse of a one-sided spectrum: a real signal
        if not is_complex:
            raise KernelError(f"{label}: onesided inverse DFT needs a complex input (last dimension 2)")
        return np.fft.irfft(signal, n=n, axis=axis)[..., None].astype(x.dtype)
    y = np.fft.ifft(signal, n=n, axis=axis) if inverse else np.fft.fft(signal, n=n, axis=axis)
    return _from_complex(y, x.dtype)


@register("DFT", since=17, until=19)
def _dft_17(node, opset):
    axis = int(node.attr("axis", 1))
    inverse, onesided = bool(node.attr("inverse", 0)), bool(node.attr("onesided", 0))

    def kernel(x, dft_length=None):
        return (_dft(node.label, x, dft_length, axis, inverse, onesided),)
    return kernel


@register("DFT", since=20)
def _dft_20(node, opset):
    inverse, onesided = bool(node.attr("inverse", 0)), bool(node.attr("onesided", 0))

    def kernel(x, dft_length=None, axis=None):
        ax = -2 if axis is None else _scalar(node.label, "axis", axis)
        return (_dft(node.label, x, dft_length, ax, inverse, onesided),)
    return kernel


@register("STFT", since=17)
def _stft(node, opset):
    onesided = bool(node.attr("onesided", 1))

    def kernel(signal, frame_step, window=None, frame_length=None):
        label = node.label
        if signal.ndim != 3:
            raise KernelError(f"{label}: signal must have shape (batch, length, 1 or 2), got {signal.shape}")
        if onesided and signal.shape[-1] == 2:
            raise KernelError(f"{label}: onesided output needs a real signal (last dimension 1)")
        step = _scalar(label, "frame_step", frame_step)
        if window is not None and window.ndim != 1:
            raise KernelError(f"{label}: window must be 1-D, got shape {window.shape}")
        if frame_length is not None:
            length = _scalar(label, "frame_length", frame_length)
            if window is not None and window.shape[0] != length:
                raise KernelError(f"{label}: window has {window.shape[0]} values but frame_length is {length}")
        else:
            length = window.shape[0] if window is not None else signal.shape[1]
        if step < 1 or not 1 <= length <= signal.shape[1]:
            raise KernelError(f"{label}: need frame_step >= 1 and 1 <= frame_length <= signal length "
                              f"{signal.shape[1]}, got {step} and {length}")
        x = _to_complex(label, signal)  # (batch, length)
        frames = sliding_window_view(x, length, axis=1)[:, ::step]  # (batch, n_frames, frame_length)
        if window is not None:
            frames = frames * window.astype(x.real.dtype, copy=False)
        spectrum = np.fft.rfft(frames, axis=-1) if onesided else np.fft.fft(frames, axis=-1)
        return (_from_complex(spectrum, signal.dtype),)
    return kernel
