"""DFT (opsets 17 and 20) and STFT against numpy's FFT and the reference evaluator."""

from __future__ import annotations

import numpy as np
import pytest

from ort_core.errors import KernelError

from .kernel_harness import check, run_ours

rng = np.random.default_rng(6)


def as_pairs(z):
    return np.stack([z.real, z.imag], axis=-1)


@pytest.mark.parametrize("inverse", [0, 1])
@pytest.mark.parametrize("length", [None, 6, 12])
@pytest.mark.parametrize("last", [1, 2])
def test_dft_full_spectrum(inverse, length, last):
    x = rng.standard_normal((2, 8, 5, last)).astype(np.float32)
    n = None if length is None else np.array(length, np.int64)
    check("DFT", [x, n, np.array(1, np.int64)], {"inverse": inverse}, opset=20, rtol=1e-4, atol=1e-4)
    check("DFT", [x, n], {"inverse": inverse, "axis": 1}, opset=17, rtol=1e-4, atol=1e-4)


def test_dft_values_and_default_axis():
    z = rng.standard_normal((3, 4, 10)) + 1j * rng.standard_normal((3, 4, 10))
    (y,) = run_ours("DFT", [as_pairs(z)], {}, opset=20)  # default axis -2: the last signal axis
    np.testing.assert_allclose(y, as_pairs(np.fft.fft(z, axis=-1)), rtol=1e-12, atol=1e-12)
    (y,) = run_ours("DFT", [as_pairs(z), None, np.array(-3)], {"inverse": 1}, opset=20)
    np.testing.assert_allclose(y, as_pairs(np.fft.ifft(z, axis=1)), rtol=1e-12, atol=1e-12)
    (y,) = run_ours("DFT", [as_pairs(z)], {"axis": 2}, opset=17)
    np.testing.assert_allclose(y, as_pairs(np.fft.fft(z, axis=2)), rtol=1e-12, atol=1e-12)


def test_dft_onesided_round_trip():
    x = rng.standard_normal((2, 10, 1)).astype(np.float32)
    (spec,) = check("DFT", [x, None, np.array(1)], {"onesided": 1}, opset=20, rtol=1e-4, atol=1e-4)
    assert spec.shape == (2, 6, 2)
    (back,) = check("DFT", [spec, None, np.array(1)], {"onesided": 1, "inverse": 1}, opset=20, rtol=1e-4, atol=1e-4)
    assert back.shape == (2, 10, 1)  # default length 2 * (6 - 1)
    np.testing.assert_allclose(back, x, atol=1e-5)
    (odd,) = run_ours("DFT", [spec, np.array(11), np.array(1)], {"onesided": 1, "inverse": 1}, opset=20)
    assert odd.shape == (2, 11, 1)


def test_dft_dtypes():
    x = rng.standard_normal((1, 8, 2))
    for dtype in (np.float16, np.float64):
        (y,) = run_ours("DFT", [x.astype(dtype)], {}, opset=20)
        assert y.dtype == dtype and y.shape == (1, 8, 2)


def test_dft_errors():
    x = np.zeros((2, 8, 2), np.float32)
    with pytest.raises(KernelError, match="axis 2 is out of range"):
        run_ours("DFT", [x, None, np.array(2)], {}, opset=20)
    with pytest.raises(KernelError, match="last input dimension"):
        run_ours("DFT", [np.zeros((2, 8, 3), np.float32)], {}, opset=20)
    with pytest.raises(KernelError, match="needs a real input"):
        run_ours("DFT", [x, None, np.array(1)], {"onesided": 1}, opset=20)
    with pytest.raises(KernelError, match="needs a complex input"):
        run_ours("DFT", [x[..., :1], None, np.array(1)], {"onesided": 1, "inverse": 1}, opset=20)
    with pytest.raises(KernelError, match="dft_length must be positive"):
        run_ours("DFT", [x, np.array(0)], {"axis": 1}, opset=17)


@pytest.mark.parametrize("onesided", [0, 1])
@pytest.mark.parametrize("with_window", [False, True])
def test_stft_matches_reference(onesided, with_window):
    signal = rng.standard_normal((2, 64, 1)).astype(np.float32)
    window = np.hanning(16).astype(np.float32) if with_window else None
    check("STFT", [signal, np.array(8), window, np.array(16)], {"onesided": onesided}, opset=17,
          rtol=1e-4, atol=1e-4)


def test_stft_frames_and_complex_signal():
    z = rng.standard_normal((1, 40)) + 1j * rng.standard_normal((1, 40))
    window = np.hamming(10)
    (y,) = run_ours("STFT", [as_pairs(z), np.array(7), window], {"onesided": 0}, opset=17)
    frames = np.stack([z[:, i * 7:i * 7 + 10] * window for i in range(5)], axis=1)  # 1 + (40 - 10) // 7
    np.testing.assert_allclose(y, as_pairs(np.fft.fft(frames, axis=-1)), rtol=1e-12, atol=1e-12)
    with pytest.raises(KernelError, match="real signal"):
        run_ours("STFT", [as_pairs(z), np.array(7), window], {}, opset=17)


def test_stft_errors():
    signal = np.zeros((1, 32, 1), np.float32)
    with pytest.raises(KernelError, match="frame_length is 8"):
        run_ours("STFT", [signal, np.array(4), np.ones(6, np.float32), np.array(8)], {}, opset=17)
    with pytest.raises(KernelError, match="frame_step >= 1"):
        run_ours("STFT", [signal, np.array(0), None, np.array(8)], {}, opset=17)
    with pytest.raises(KernelError, match="rank|shape"):
        run_ours("STFT", [signal[0], np.array(4)], {}, opset=17)
