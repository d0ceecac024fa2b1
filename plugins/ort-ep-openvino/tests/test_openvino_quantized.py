"""Quantized operators on the OpenVINO provider, checked against onnxruntime's results.

OpenVINO applies a per-channel QLinearConv w_scale along the weight's input channels: when input and
output channel counts are equal it compiled and gave wrong values, so such nodes are declined.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from ort_ep_openvino import runtime

if runtime.unavailable_reason():
    pytest.skip(f"OpenVINO unavailable: {runtime.unavailable_reason()}", allow_module_level=True)
onnxruntime = pytest.importorskip("onnxruntime")

import ort_core as ort  # noqa: E402

NAME = "OpenVINOExecutionProvider"
U8 = TensorProto.UINT8


def qlinearconv(channels=4, group=1, per_channel=True, bias=True, w_zero=0):
    """One QLinearConv, uint8 activations, int8 weights; per-channel scales differ tenfold."""
    rng = np.random.default_rng(0)
    w = rng.integers(-100, 100, (channels, channels // group, 3, 3)).astype(np.int8)
    if per_channel:
        ws = np.linspace(0.001, 0.011, channels).astype(np.float32)
        wz = np.full(channels, w_zero, np.int8)
    else:
        ws, wz = np.float32(0.005), np.int8(w_zero)
    inits = [numpy_helper.from_array(np.float32(0.02), "xs"), numpy_helper.from_array(np.uint8(128), "xz"),
             numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.asarray(ws), "ws"),
             numpy_helper.from_array(np.asarray(wz), "wz"), numpy_helper.from_array(np.float32(0.05), "ys"),
             numpy_helper.from_array(np.uint8(120), "yz")]
    names = ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"]
    if bias:
        inits.append(numpy_helper.from_array(rng.integers(-1000, 1000, channels).astype(np.int32), "b"))
        names.append("b")
    node = helper.make_node("QLinearConv", names, ["y"], pads=[1, 1, 1, 1], group=group)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", U8, [1, channels, 8, 8])],
                              [helper.make_tensor_value_info("y", U8, [1, channels, 8, 8])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def run_both(model):
    x = np.random.default_rng(1).integers(0, 256, (1, model.graph.input[0].type.tensor_type.shape.dim[1].dim_value,
                                                   8, 8)).astype(np.uint8)
    want = onnxruntime.InferenceSession(model.SerializeToString(),
                                        providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ort.OrtWarning)
        sess = ort.InferenceSession(model.SerializeToString(), providers=[NAME])
    got = sess.run(None, {"x": x})[0]
    return sess, got, want


@pytest.mark.parametrize("kwargs", [dict(), dict(bias=False), dict(group=4), dict(channels=6)],
                         ids=["square", "square-no-bias", "depthwise", "square-6"])
def test_per_channel_qlinearconv_matches_onnxruntime(kwargs):
    sess, got, want = run_both(qlinearconv(**kwargs))
    # integer outputs: equal up to one step where a value sits on a rounding boundary
    assert np.abs(got.astype(np.int32) - want.astype(np.int32)).max() <= 1
    assert (got == want).mean() > 0.99
    assert np.ptp(want) > 50  # the case is not trivially saturated


def test_per_channel_qlinearconv_is_declined_with_the_reason():
    sess, _, _ = run_both(qlinearconv())
    assert [a.provider for a in sess.get_provider_graph_assignment_info()] == ["CPUExecutionProvider"]
    assert "per-channel w_scale" in sess.explain()


def test_per_tensor_qlinearconv_still_runs_on_openvino_and_matches():
    sess, got, want = run_both(qlinearconv(per_channel=False))
    assert [a.provider for a in sess.get_provider_graph_assignment_info()] == [NAME]
    assert np.abs(got.astype(np.int32) - want.astype(np.int32)).max() <= 1
