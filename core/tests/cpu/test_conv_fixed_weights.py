"""Conv with constant-initializer weights (conv.fixed_conv: weight matrix, bias column and gather index made
once per input shape) against onnxruntime: padding, strides, dilations, 1-D and 2-D, with and without bias,
pointwise, batches, fused activations, new input shapes on later runs, and the same models with the
weights fed as graph inputs."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import ort_core
from ort_core.providers.cpu.ops import conv

ort = pytest.importorskip("onnxruntime")

ELEM = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE}


def conv_model(w, b, attrs, as_inputs=False, activation=None, dtype=np.float32):
    elem = ELEM[dtype]
    names = ["X", "W"] + (["B"] if b is not None else [])
    inputs = [helper.make_tensor_value_info("X", elem, None)]
    inits = []
    for name, value in zip(names[1:], (w, b)):
        if as_inputs:
            inputs.append(helper.make_tensor_value_info(name, elem, value.shape))
        else:
            inits.append(numpy_helper.from_array(value, name))
    nodes = [helper.make_node("Conv", names, ["Y0" if activation else "Y"], **attrs)]
    if activation:
        nodes.append(helper.make_node(activation, ["Y0"], ["Y"]))
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("Y", elem, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


@pytest.fixture
def fixed_runs(monkeypatch):
    """Counts the closures fixed_conv makes (one per input shape) and their calls."""
    made, calls = [], []
    real = conv.fixed_conv

    def counted(*args):
        run = real(*args)
        if run is None:
            return None
        made.append(1)

        def wrapped(x):
            calls.append(1)
            return run(x)
        return wrapped

    monkeypatch.setattr(conv, "fixed_conv", counted)
    return made, calls


CASES = [  # weight shape, attributes, input shapes run one after the other
    ((128, 129, 3), {"pads": [1, 1]}, [(1, 129, 4), (1, 129, 4), (1, 129, 7), (2, 129, 4)]),
    ((64, 32, 3), {"pads": [1, 1], "strides": [2]}, [(1, 32, 4), (1, 32, 5), (3, 32, 2)]),
    ((16, 1, 32), {"strides": [8]}, [(1, 1, 64), (2, 1, 80)]),
    ((8, 4, 3), {"pads": [2, 0], "dilations": [2]}, [(1, 4, 9), (2, 4, 6)]),
    ((6, 3, 3, 3), {"pads": [1, 0, 1, 2], "strides": [2, 1]}, [(1, 3, 5, 6), (2, 3, 4, 4)]),
    ((5, 4, 2, 2), {"auto_pad": "SAME_UPPER"}, [(1, 4, 3, 5), (1, 4, 4, 4)]),
    ((1, 128, 1), {}, [(1, 128, 1), (2, 128, 3)]),
    ((7, 5, 1, 1), {}, [(1, 5, 3, 3), (2, 5, 2, 1)]),
]


@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("wshape, attrs, shapes", CASES)
def test_constant_weights_against_onnxruntime(wshape, attrs, shapes, with_bias, fixed_runs):
    rng = np.random.default_rng(3)
    w = rng.standard_normal(wshape).astype(np.float32)
    b = rng.standard_normal(wshape[0]).astype(np.float32) if with_bias else None
    model = conv_model(w, b, attrs)
    ours = ort_core.InferenceSession(model, providers=["CPUExecutionProvider"])
    theirs = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    for shape in shapes:
        for _ in range(2):
            x = rng.standard_normal(shape).astype(np.float32)
            (y,), (ref,) = ours.run(None, {"X": x}), theirs.run(None, {"X": x})
            assert y.shape == ref.shape and y.dtype == ref.dtype
            np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)
            assert y.flags.writeable and y.flags.c_contiguous
    made, calls = fixed_runs
    assert len(made) == len(set(shapes)) and len(calls) == 2 * len(shapes)


@pytest.mark.parametrize("activation", ["Relu", "Sigmoid", "Tanh"])
def test_fused_activation_and_weights_fed_as_inputs(activation, fixed_runs):
    """Conv + activation (fused by the optimizer) with initializers, then the same model with W and B fed:
    the general path, with different weights on every run."""
    rng = np.random.default_rng(4)
    w = rng.standard_normal((16, 8, 3)).astype(np.float32)
    b = rng.standard_normal(16).astype(np.float32)
    for as_inputs in (False, True):
        model = conv_model(w, b, {"pads": [1, 1]}, as_inputs=as_inputs, activation=activation)
        ours = ort_core.InferenceSession(model, providers=["CPUExecutionProvider"])
        theirs = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
        for n in (1, 2, 1):
            feeds = {"X": rng.standard_normal((n, 8, 5)).astype(np.float32)}
            if as_inputs:
                feeds.update(W=rng.standard_normal(w.shape).astype(np.float32),
                             B=rng.standard_normal(b.shape).astype(np.float32))
            (y,), (ref,) = ours.run(None, feeds), theirs.run(None, feeds)
            np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)
    made, calls = fixed_runs
    assert len(made) == 2 and len(calls) == 3  # the initializer model only


def test_float64_and_other_paths_unchanged(fixed_runs):
    """float64 runs the fixed path too (onnxruntime has no float64 Conv: against the general path, W fed);
    groups > 1 and large images keep the general kernels."""
    rng = np.random.default_rng(5)
    w = rng.standard_normal((4, 3, 3)).astype(np.float64)
    b = rng.standard_normal(4).astype(np.float64)
    x = rng.standard_normal((1, 3, 6))
    (y,) = ort_core.InferenceSession(conv_model(w, b, {"pads": [1, 1]}, dtype=np.float64),
                                     providers=["CPUExecutionProvider"]).run(None, {"X": x})
    (ref,) = ort_core.InferenceSession(conv_model(w, b, {"pads": [1, 1]}, as_inputs=True, dtype=np.float64),
                                       providers=["CPUExecutionProvider"]).run(None, {"X": x, "W": w, "B": b})
    assert y.dtype == np.float64
    np.testing.assert_allclose(y, ref, rtol=1e-12, atol=1e-12)
    assert len(fixed_runs[0]) == 1
    for wshape, attrs, shape in (((4, 2, 3), {"group": 2, "pads": [1, 1]}, (1, 4, 5)),
                                 ((8, 3, 3, 3), {"pads": [1, 1, 1, 1]}, (1, 3, 64, 64))):
        w = rng.standard_normal(wshape).astype(np.float32)
        model = conv_model(w, None, attrs)
        x = rng.standard_normal(shape).astype(np.float32)
        (y,) = ort_core.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"X": x})
        (ref,) = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"X": x})
        np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)
    assert len(fixed_runs[0]) == 1
