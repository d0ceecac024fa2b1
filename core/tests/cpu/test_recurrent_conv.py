"""CausalConvWithState kernel against onnx's reference evaluator and a direct convolution sum."""

from __future__ import annotations

import numpy as np
import pytest

from ort_core.errors import KernelError

from .kernel_harness import check, run_ours

RNG = np.random.default_rng(11)


def inputs(b=2, c=3, length=6, k=4, dtype=np.float32):
    return (RNG.standard_normal((b, c, length)).astype(dtype), RNG.standard_normal((c, 1, k)).astype(dtype),
            RNG.standard_normal(c).astype(dtype), RNG.standard_normal((b, c, k - 1)).astype(dtype))


@pytest.mark.parametrize("activation", [None, "none", "silu", "swish"])
@pytest.mark.parametrize("with_bias, with_state", [(False, False), (True, False), (False, True), (True, True)])
def test_causal_conv_matches_reference(activation, with_bias, with_state):
    x, w, bias, state = inputs()
    attrs = {} if activation is None else {"activation": activation}
    check("CausalConvWithState", [x, w, bias if with_bias else None, state if with_state else None], attrs,
          opset=27, n_outputs=2)


def test_causal_conv_direct_sum_and_state():
    x, w, bias, state = inputs(b=1, c=2, length=5, k=3)
    y, present = run_ours("CausalConvWithState", [x, w, bias, state], {}, opset=27, n_outputs=2)
    padded = np.concatenate([state, x], axis=2).astype(np.float64)
    for t in range(5):
        np.testing.assert_allclose(y[0, :, t], (padded[0, :, t:t + 3] * w[:, 0]).sum(-1) + bias, rtol=1e-5)
    np.testing.assert_array_equal(present, x[:, :, -2:])


def test_causal_conv_decode_steps_equal_one_prefill():
    x, w, bias, _ = inputs(b=2, c=3, length=7, k=4)
    full, _ = run_ours("CausalConvWithState", [x, w, bias, None], {"activation": "silu"}, opset=27, n_outputs=2)
    state, steps = None, []
    for t in range(7):
        y, state = run_ours("CausalConvWithState", [x[:, :, t:t + 1], w, bias, state], {"activation": "silu"},
                            opset=27, n_outputs=2)
        steps.append(y)
    np.testing.assert_allclose(np.concatenate(steps, axis=2), full, rtol=1e-6)


def test_causal_conv_short_input_and_kernel_one():
    x, w, bias, state = inputs(length=2, k=5)
    _, present = check("CausalConvWithState", [x, w, None, state], {}, opset=27, n_outputs=2)
    np.testing.assert_array_equal(present, np.concatenate([state, x], axis=2)[:, :, -4:])
    x, w, _, _ = inputs(k=1)
    y, present = check("CausalConvWithState", [x, w], {}, opset=27, n_outputs=2)
    assert present.shape == (2, 3, 0)
    np.testing.assert_allclose(y, x * w[:, 0], rtol=1e-6)


def test_causal_conv_float16():
    x, w, bias, state = inputs(dtype=np.float16)
    check("CausalConvWithState", [x, w, bias, state], {"activation": "silu"}, opset=27, n_outputs=2,
          rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("args, attrs, match", [
    ((np.zeros((1, 2, 3), np.float32), np.zeros((3, 1, 2), np.float32)), {}, "weight"),
    ((np.zeros((1, 2, 3), np.float32), np.zeros((2, 1, 2), np.float32), np.zeros(3, np.float32)), {}, "bias"),
    ((np.zeros((1, 2, 3), np.float32), np.zeros((2, 1, 3), np.float32), None, np.zeros((1, 2, 1), np.float32)),
     {}, "past_state"),
    ((np.zeros((1, 2, 3), np.float32), np.zeros((2, 1, 2), np.float32)), {"activation": "relu"}, "activation"),
])
def test_causal_conv_errors(args, attrs, match):
    with pytest.raises(KernelError, match=match):
        run_ours("CausalConvWithState", list(args), attrs, opset=27, n_outputs=2)
