"""com.microsoft Gelu, BiasGelu, FastGelu and QuickGelu against onnxruntime's CPU provider."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from ort_core.errors import KernelError

from .kernel_harness import check_onnxruntime, run_ours

RNG = np.random.default_rng(7)
# the tails, zero, infinities and NaN besides ordinary values
SPECIAL = np.array([-1e30, -100, -20, -5, -0.5, 0, 0.5, 5, 20, 100, 1e30, np.inf, -np.inf, np.nan], np.float32)


def _x(*shape, dtype=np.float32):
    return (RNG.standard_normal(shape) * 2).astype(dtype)


@pytest.mark.parametrize("op", ["Gelu", "FastGelu", "QuickGelu"])
@pytest.mark.parametrize("shape", [(2, 3, 16), (7,), (0, 4)])
def test_unary_matches_onnxruntime(op, shape):
    check_onnxruntime(op, [_x(*shape)], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", ["Gelu", "FastGelu", "QuickGelu"])
def test_unary_special_values(op):
    check_onnxruntime(op, [SPECIAL], rtol=1e-5, atol=1e-6)


def test_bias_gelu_special_values():
    check_onnxruntime("BiasGelu", [SPECIAL.reshape(2, 7), np.zeros(7, np.float32)])


@pytest.mark.parametrize("shape", [(2, 3, 16), (16,), (0, 16)])
def test_bias_gelu_matches_onnxruntime(shape):
    a = _x(*shape)
    out = check_onnxruntime("BiasGelu", [a, _x(16)])[0]
    assert out.shape == shape


@pytest.mark.parametrize("op", ["Gelu", "BiasGelu", "FastGelu"])
def test_large_gelus_run_by_row_blocks_and_match_onnxruntime(op, monkeypatch):
    """From BY_ROWS_MIN elements on, the GELUs run by row blocks (several here: 64 elements a block); the
    values stay onnxruntime's, special values included."""
    from ort_core.providers.cpu.ops import activation, contrib_activation

    monkeypatch.setattr(contrib_activation, "BY_ROWS_MIN", 64)
    monkeypatch.setattr(activation, "BY_ROWS_BLOCK", 64)
    blocks = []
    for name in ("gelu_erf_values", "gelu_tanh_values"):
        fn = getattr(contrib_activation, name)
        monkeypatch.setattr(contrib_activation, name, lambda part, fn=fn: blocks.append(part.shape) or fn(part))
    x = _x(3, 40, 16)
    x[1, 3, :14] = SPECIAL
    inputs = [x] if op == "Gelu" else [x, _x(16)]
    out = check_onnxruntime(op, inputs, rtol=1e-5, atol=1e-6)[0]
    assert out.shape == x.shape and blocks == [(4, 16)] * 30


@pytest.mark.parametrize("shape", [(2, 3, 16), (16,)])
def test_fast_gelu_with_bias_matches_onnxruntime(shape):
    x, bias = _x(*shape), _x(16)
    check_onnxruntime("FastGelu", [x, bias])
    # the bias is added before the activation, not after it
    ours = run_ours("FastGelu", [x, bias], domain="com.microsoft", opset=1)[0]
    assert not np.allclose(ours, run_ours("FastGelu", [x], domain="com.microsoft", opset=1)[0] + bias)


@pytest.mark.parametrize("alpha", [1.702, 1.0, -0.75, 0.0])
def test_quick_gelu_alpha(alpha):
    x = _x(3, 11)
    ours = check_onnxruntime("QuickGelu", [x], {"alpha": alpha})[0]
    np.testing.assert_allclose(ours, x / (1 + np.exp(-np.float32(alpha) * x)), rtol=1e-5, atol=1e-6)


def test_quick_gelu_default_alpha():
    x = _x(40)
    ours = run_ours("QuickGelu", [x], domain="com.microsoft", opset=1)[0]
    np.testing.assert_allclose(ours, x / (1 + np.exp(-1.702 * x.astype(np.float64))), rtol=1e-5, atol=1e-6)


def test_gelu_is_the_erf_form():
    x = np.array([-3, -1, 0, 0.5, 2], np.float32)
    want = [0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x.tolist()]
    np.testing.assert_allclose(run_ours("Gelu", [x], domain="com.microsoft", opset=1)[0], want, rtol=1e-5)


@pytest.mark.parametrize("op", ["Gelu", "FastGelu", "QuickGelu", "BiasGelu"])
def test_float16_runs_in_float32(op):
    # onnxruntime casts 16-bit inputs to float32 around its float kernels: one rounding at the end
    inputs = [_x(4, 8, dtype=np.float16)] + ([_x(8, dtype=np.float16)] if op == "BiasGelu" else [])
    check_onnxruntime(op, inputs, rtol=1e-3, atol=1e-3)


# onnxruntime's double FastGelu is only float32-accurate (ours computes in double), hence float32 tolerances
@pytest.mark.parametrize("op", ["FastGelu", "QuickGelu"])
def test_float64(op):
    check_onnxruntime(op, [_x(4, 8, dtype=np.float64)], rtol=1e-5, atol=1e-6)


def test_fast_gelu_float64_bias():
    x, bias = _x(4, 8, dtype=np.float64), _x(8, dtype=np.float64)
    ours = check_onnxruntime("FastGelu", [x, bias], rtol=1e-5, atol=1e-6)[0]
    y = x + bias
    np.testing.assert_allclose(ours, 0.5 * y * (1 + np.tanh(math.sqrt(2 / math.pi) * (y + 0.044715 * y ** 3))),
                               rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("op", ["Gelu", "BiasGelu"])
def test_float64_gelu_keeps_double(op):
    # onnxruntime's CPU provider has no double kernel for these; ours computes in double
    x = _x(5, dtype=np.float64)
    inputs = [x] + ([np.zeros(5)] if op == "BiasGelu" else [])
    ours = run_ours(op, inputs, domain="com.microsoft", opset=1)[0]
    assert ours.dtype == np.float64
    want = [0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x.tolist()]
    np.testing.assert_allclose(ours, want, rtol=1e-12)


@pytest.mark.parametrize("op", ["Gelu", "FastGelu", "QuickGelu"])
def test_bfloat16(op):
    x = _x(3, 8).astype(ml_dtypes.bfloat16)
    ours = run_ours(op, [x], domain="com.microsoft", opset=1)[0]
    ref = run_ours(op, [x.astype(np.float32)], domain="com.microsoft", opset=1)[0]
    assert ours.dtype == x.dtype
    np.testing.assert_array_equal(ours, ref.astype(ml_dtypes.bfloat16))


def test_zero_d_input():
    x = np.array(1.5, np.float32)
    for op in ("Gelu", "FastGelu", "QuickGelu"):
        out = run_ours(op, [x], domain="com.microsoft", opset=1)[0]
        assert out.shape == () and out.dtype == np.float32 and 1.3 < float(out) < 1.5


def test_outputs_do_not_alias_inputs():
    x, b = _x(4, 6), _x(6)
    for op, inputs in (("Gelu", [x]), ("FastGelu", [x]), ("FastGelu", [x, b]), ("BiasGelu", [x, b]),
                       ("QuickGelu", [x])):
        x0 = x.copy()
        out = run_ours(op, inputs, domain="com.microsoft", opset=1)[0]
        assert not np.shares_memory(out, x)
        np.testing.assert_array_equal(x, x0)


@pytest.mark.parametrize("op", ["BiasGelu", "FastGelu"])
@pytest.mark.parametrize("bias_shape", [(4,), (1, 8), (3, 8), ()])
def test_bad_bias_shape_names_node(op, bias_shape):
    with pytest.raises(KernelError, match=f"test_{op}.*bias"):
        run_ours(op, [_x(3, 8), _x(*bias_shape)], domain="com.microsoft", opset=1)


@pytest.mark.parametrize("op", ["BiasGelu", "FastGelu"])
def test_bias_type_mismatch(op):
    with pytest.raises(KernelError, match="type"):
        run_ours(op, [_x(3, 8), _x(8, dtype=np.float64)], domain="com.microsoft", opset=1)


@pytest.mark.parametrize("op", ["Gelu", "FastGelu", "QuickGelu"])
def test_integer_input_is_refused(op):
    with pytest.raises(KernelError, match=f"test_{op}.*int32"):
        run_ours(op, [np.arange(4, dtype=np.int32)], domain="com.microsoft", opset=1)
