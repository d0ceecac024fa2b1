"""com.microsoft QAttention on the CPU provider against onnxruntime's CPU kernel."""

from __future__ import annotations

import numpy as np
import pytest

from ort_core.errors import KernelError

from .kernel_harness import check_onnxruntime, run_ours

MS = "com.microsoft"
B, S, C, N, H = 2, 4, 12, 2, 4
D = N * H


def _inputs(weight_dtype=np.uint8, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 256, (B, S, C)).astype(np.uint8)
    info = np.iinfo(weight_dtype)
    w = rng.integers(info.min, int(info.max) + 1, (C, 3 * D)).astype(weight_dtype)
    bias = rng.standard_normal(3 * D).astype(np.float32)
    return x, w, bias, np.array(0.02, np.float32), np.array([0.004], np.float32)


@pytest.mark.parametrize("weight_dtype", [np.uint8, np.int8])
def test_qattention_zero_points_and_per_column(weight_dtype):
    x, w, bias, sx, sw = _inputs(weight_dtype)
    out = check_onnxruntime("QAttention", [x, w, bias, sx, sw], {"num_heads": N})[0]
    assert out.shape == (B, S, D) and out.dtype == np.float32
    rng = np.random.default_rng(5)
    zx = np.array(131, np.uint8)
    zw = np.array(3, weight_dtype)
    check_onnxruntime("QAttention", [x, w, bias, sx, sw, None, zx, zw], {"num_heads": N})
    per_col_scale = (rng.random(3 * D) * 0.01).astype(np.float32)
    per_col_zp = rng.integers(0, 20, 3 * D).astype(weight_dtype)
    check_onnxruntime("QAttention", [x, w, bias, sx, per_col_scale, None, zx, per_col_zp], {"num_heads": N})


@pytest.mark.parametrize("mask", [np.array([2, 4], np.int32), np.array([3, 4, 1, 0], np.int32),
                                  np.array([[1, 1, 0, 1], [1, 0, 1, 1]], np.int32),
                                  np.ones((B, S, S), np.int32) - np.eye(S, dtype=np.int32)],
                         ids=["1d", "1d-end-start", "2d", "3d"])
def test_qattention_masks_and_attributes(mask):
    x, w, bias, sx, sw = _inputs(seed=1)
    check_onnxruntime("QAttention", [x, w, bias, sx, sw, mask, np.array(128, np.uint8)], {"num_heads": N})
    check_onnxruntime("QAttention", [x, w, bias, sx, sw, mask], {"num_heads": N, "unidirectional": 1, "scale": 0.2,
                                                                  "mask_filter_value": -3.0})


def test_qattention_past_present_and_rotary_ignored():
    x, w, bias, sx, sw = _inputs(seed=2)
    past = np.random.default_rng(3).standard_normal((2, B, N, 3, H)).astype(np.float32)
    out, present = check_onnxruntime("QAttention", [x, w, bias, sx, sw, np.ones((B, S + 3), np.int32), None, None,
                                                    past], {"num_heads": N, "unidirectional": 1}, n_outputs=2)
    assert present.shape == (2, B, N, S + 3, H)
    np.testing.assert_array_equal(present[:, :, :, :3], past)
    # onnxruntime's CPU QAttention ignores do_rotary
    rotary = check_onnxruntime("QAttention", [x, w, bias, sx, sw], {"num_heads": N, "do_rotary": 1})[0]
    np.testing.assert_array_equal(rotary, run_ours("QAttention", [x, w, bias, sx, sw], {"num_heads": N},
                                                   opset=1, domain=MS)[0])


def test_qattention_float16():
    x, w, bias, sx, sw = _inputs(seed=4)
    out = check_onnxruntime("QAttention", [x, w, bias.astype(np.float16), sx.astype(np.float16),
                                           sw.astype(np.float16)], {"num_heads": N}, rtol=2e-3, atol=2e-3)[0]
    assert out.dtype == np.float16


def test_qattention_errors():
    x, w, bias, sx, sw = _inputs()
    past = np.zeros((2, B, N, 3, H), np.float32)
    with pytest.raises(KernelError, match="test_QAttention.*past_present_share_buffer"):
        run_ours("QAttention", [x, w, bias, sx, sw, None, None, None, past],
                 {"num_heads": N, "past_present_share_buffer": 1}, opset=1, n_outputs=2, domain=MS)
    cases = [
        ([x.astype(np.int32), w, bias, sx, sw], "input must be uint8 or int8"),
        ([x, w[:, :-1], bias, sx, sw], "weight width"),
        ([x, w[:-1], bias, sx, sw], "expected input"),
        ([x, w, bias[:-1], sx, sw], "bias of shape"),
        ([x, w, None, sx, sw], "bias"),
        ([x, w, bias, np.array([0.1, 0.2], np.float32), sw], "input_scale must be a scalar"),
        ([x, w, bias, sx, np.ones(5, np.float32)], "weight_scale must be a scalar or have shape"),
        ([x, w, bias, sx, sw, None, np.array(1, np.int8)], "input_zero_point has type"),
        ([x, w, bias, sx, sw, None, None, np.ones(5, np.uint8)], "weight_zero_point must be"),
        ([x, w, bias, sx, sw, np.ones((B, 1, S, S), np.int32)], "4-D masks"),
        ([x, w, bias, sx, sw, None, None, None, past], "present output"),
    ]
    for inputs, message in cases:
        with pytest.raises(KernelError, match=f"test_QAttention.*{message}"):
            run_ours("QAttention", inputs, {"num_heads": N}, opset=1, domain=MS)
