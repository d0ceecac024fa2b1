"""Blackman/Hamming/Hann windows and MelWeightMatrix against the reference and closed forms."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

from ort_core.errors import KernelError

from .kernel_harness import check, run_ours

WINDOWS = ["HannWindow", "HammingWindow", "BlackmanWindow"]


@pytest.mark.parametrize("op", WINDOWS)
@pytest.mark.parametrize("periodic", [0, 1])
@pytest.mark.parametrize("dtype", [TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16])
def test_windows_match_reference(op, periodic, dtype):
    # the reference evaluates float16 windows in float16; we round the float64 value once
    for n in (2, 10, 33):
        check(op, [np.array(n, np.int64)], {"periodic": periodic, "output_datatype": dtype}, opset=17,
              rtol=1e-2 if dtype == TensorProto.FLOAT16 else 1e-5, atol=3e-3 if dtype == TensorProto.FLOAT16 else 1e-6)


def test_windows_match_numpy_symmetric_forms():
    n = np.array(9, np.int32)
    for op, ref in (("HannWindow", np.hanning(9)), ("BlackmanWindow", np.blackman(9))):
        (y,) = run_ours(op, [n], {"periodic": 0, "output_datatype": TensorProto.DOUBLE}, opset=17)
        np.testing.assert_allclose(y, ref, atol=1e-12)
    (y,) = run_ours("HammingWindow", [n], {"periodic": 0, "output_datatype": TensorProto.DOUBLE}, opset=17)
    np.testing.assert_allclose(y, 25 / 46 - 21 / 46 * np.cos(2 * np.pi * np.arange(9) / 8), atol=1e-12)
    # periodic = symmetric window of length n + 1 without its last point
    (y,) = run_ours("HannWindow", [np.array(8)], {"output_datatype": TensorProto.DOUBLE}, opset=17)
    np.testing.assert_allclose(y, np.hanning(9)[:-1], atol=1e-12)


def test_windows_edge_sizes_and_errors():
    for op in WINDOWS:
        (y,) = run_ours(op, [np.array(1)], {"periodic": 0}, opset=17)
        np.testing.assert_array_equal(y, [1.0])  # a single point is the window's peak, not 0/0
        (y,) = run_ours(op, [np.array(0)], {}, opset=17)
        assert y.shape == (0,) and y.dtype == np.float32
    with pytest.raises(KernelError, match="negative"):
        run_ours("HannWindow", [np.array(-1)], {}, opset=17)
    with pytest.raises(KernelError, match="output_datatype"):
        run_ours("HannWindow", [np.array(4)], {"output_datatype": TensorProto.STRING}, opset=17)


@pytest.mark.parametrize("args", [(8, 16, 8192, 0, 4096), (10, 64, 16000, 20, 8000), (5, 31, 8000, 100, 3000),
                                  (40, 512, 16000, 0, 8000)])
def test_mel_weight_matrix(args):
    nm, nd, sr, lo, hi = args
    inputs = [np.array(nm), np.array(nd), np.array(sr), np.array(lo, np.float32), np.array(hi, np.float32)]
    (y,) = check("MelWeightMatrix", inputs, {}, opset=17)
    assert y.shape == (nd // 2 + 1, nm) and y.dtype == np.float32
    assert y.max() == 1.0 and y.min() == 0.0  # triangles peak at exactly 1
    (y64,) = run_ours("MelWeightMatrix", inputs, {"output_datatype": TensorProto.DOUBLE}, opset=17)
    assert y64.dtype == np.float64


def test_mel_weight_matrix_errors():
    base = [np.array(8), np.array(16), np.array(8000), np.array(0.0, np.float32)]
    with pytest.raises(KernelError, match="above the highest spectrogram bin"):
        run_ours("MelWeightMatrix", base + [np.array(6000.0, np.float32)], {}, opset=17)
    with pytest.raises(KernelError, match="lower_edge_hertz < upper_edge_hertz"):
        run_ours("MelWeightMatrix", base[:3] + [np.array(500.0, np.float32), np.array(100.0, np.float32)], {},
                 opset=17)
