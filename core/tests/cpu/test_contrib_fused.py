"""com.microsoft FusedConv, FusedGemm and FusedMatMul against onnxruntime's own kernels."""

from __future__ import annotations

import numpy as np
import pytest

from ort_core.errors import KernelError

from .kernel_harness import check_onnxruntime, run_ours

RNG = np.random.default_rng(7)


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


CONV_ACTIVATIONS = [{}, {"activation": "Relu"}, {"activation": "Tanh"}, {"activation": "Sigmoid"},
                    {"activation": "LeakyRelu", "activation_params": [0.2]},
                    {"activation": "Clip", "activation_params": [-0.5, 0.75]},
                    {"activation": "HardSigmoid", "activation_params": [0.3, 0.4]}]


@pytest.mark.parametrize("act", CONV_ACTIVATIONS, ids=lambda a: a.get("activation", "none"))
@pytest.mark.parametrize("with_bias,with_z", [(True, False), (True, True), (False, True), (False, False)])
def test_fused_conv(act, with_bias, with_z):
    x, w = rand(2, 4, 7, 6), rand(6, 4, 3, 3)
    b = rand(6) if with_bias else None
    z = rand(2, 6, 4, 3) if with_z else None
    attrs = {"strides": [2, 2], "pads": [1, 1, 1, 0], **act}
    inputs = [x, w, b, z] if with_z else [x, w, b]
    check_onnxruntime("FusedConv", inputs, attrs, rtol=1e-4, atol=1e-5)


def test_fused_conv_grouped_dilated_1x1_and_1d():
    check_onnxruntime("FusedConv", [rand(1, 6, 9, 9), rand(6, 2, 3, 3), rand(6)],
                      {"group": 3, "dilations": [2, 1], "activation": "Relu"}, rtol=1e-4, atol=1e-5)
    check_onnxruntime("FusedConv", [rand(1, 8, 5, 5), rand(4, 8, 1, 1), rand(4), rand(1, 4, 5, 5)],
                      {"activation": "LeakyRelu", "activation_params": [0.1]}, rtol=1e-4, atol=1e-5)
    check_onnxruntime("FusedConv", [rand(2, 3, 11), rand(5, 3, 4), rand(5)],
                      {"auto_pad": "SAME_UPPER", "activation": "Sigmoid"}, rtol=1e-4, atol=1e-5)


def test_fused_conv_errors():
    x, w = rand(1, 2, 5, 5), rand(3, 2, 3, 3)
    with pytest.raises(KernelError, match="activation 'Elu'"):
        run_ours("FusedConv", [x, w], {"activation": "Elu"}, opset=1, domain="com.microsoft")
    with pytest.raises(KernelError, match=r"LeakyRelu needs its parameters \['alpha'\]"):
        run_ours("FusedConv", [x, w], {"activation": "LeakyRelu"}, opset=1, domain="com.microsoft")
    with pytest.raises(KernelError, match="sum input Z"):
        run_ours("FusedConv", [x, w, None, rand(1, 3, 2, 2)], {}, opset=1, domain="com.microsoft")


GEMM_ACTIVATIONS = [{"activation": "Relu"}, {"activation": "Tanh"}, {"activation": "Sigmoid"},
                    {"activation": "Softplus"}, {"activation": "Softsign"},
                    {"activation": "LeakyRelu", "activation_alpha": 0.2},
                    {"activation": "Elu", "activation_alpha": 0.5},
                    {"activation": "ThresholdedRelu", "activation_alpha": 0.3},
                    {"activation": "HardSigmoid", "activation_alpha": 0.3, "activation_beta": 0.4},
                    {"activation": "Selu", "activation_alpha": 1.5, "activation_gamma": 1.1},
                    {"activation": "ScaledTanh", "activation_alpha": 0.3, "activation_beta": 2.0},
                    {"activation": "ParametricSoftplus", "activation_alpha": 0.3, "activation_beta": 2.0}]


@pytest.mark.parametrize("act", GEMM_ACTIVATIONS, ids=lambda a: a["activation"])
def test_fused_gemm_activations(act):
    check_onnxruntime("FusedGemm", [rand(3, 4), rand(4, 5), rand(5)], act, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("attrs", [{"alpha": 2.0, "beta": 0.5}, {"transA": 1}, {"transB": 1, "alpha": 0.5}])
def test_fused_gemm_gemm_attributes(attrs):
    a = rand(4, 3) if attrs.get("transA") else rand(3, 4)
    b = rand(5, 4) if attrs.get("transB") else rand(4, 5)
    check_onnxruntime("FusedGemm", [a, b, rand(3, 5)], {**attrs, "activation": "Relu"})
    check_onnxruntime("FusedGemm", [a, b], {**attrs, "activation": "Tanh"})


def test_fused_gemm_errors():
    with pytest.raises(KernelError, match="not one of"):
        run_ours("FusedGemm", [rand(2, 2), rand(2, 2)], {}, opset=1, domain="com.microsoft")
    with pytest.raises(KernelError, match=r"needs \['activation_alpha', 'activation_beta'\]"):
        run_ours("FusedGemm", [rand(2, 2), rand(2, 2)], {"activation": "HardSigmoid"}, opset=1, domain="com.microsoft")


@pytest.mark.parametrize("sa,sb,attrs", [
    ((3, 4), (4, 5), {}),
    ((3, 4), (4, 5), {"alpha": 0.25}),
    ((4, 3), (4, 5), {"transA": 1}),
    ((3, 4), (5, 4), {"transB": 1, "alpha": 2.0}),
    ((2, 4, 3), (2, 5, 4), {"transA": 1, "transB": 1}),
    ((2, 4, 3), (4, 3, 5), {"transBatchA": 1}),
    ((2, 3, 4, 6), (3, 4, 6, 5), {"transBatchA": 1}),
    ((2, 3, 6, 4), (3, 6, 2, 5), {"transBatchA": 1, "transA": 1}),
    ((5, 4, 2, 3), (3, 5, 4, 6), {"transBatchB": 1}),
    ((3, 2, 5), (4, 3, 5), {"transBatchB": 1, "transB": 1, "alpha": 0.5}),
    ((4,), (4, 5), {}),
])
def test_fused_matmul(sa, sb, attrs):
    check_onnxruntime("FusedMatMul", [rand(*sa), rand(*sb)], attrs, rtol=1e-5, atol=1e-5)
