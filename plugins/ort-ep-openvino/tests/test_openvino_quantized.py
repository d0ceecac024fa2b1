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


def _qdq_cnn(tmp_path):
    """A small CNN quantized static QDQ (per-channel int8 weights) by ort_core.quantization; its path, the
    scale of its output's last DequantizeLinear, and a feed."""
    from ort_core.quantization import CalibrationDataReader, QuantFormat, quantize_static

    rng = np.random.default_rng(2)
    f32 = TensorProto.FLOAT
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Relu", ["c2"], ["r2"]), helper.make_node("GlobalAveragePool", ["r2"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]), helper.make_node("Gemm", ["f", "w3", "b3"], ["y"])]
    inits = [numpy_helper.from_array((rng.standard_normal(s) * 0.3).astype(np.float32), n) for n, s in
             (("w1", (8, 3, 3, 3)), ("b1", (8,)), ("w2", (16, 8, 3, 3)), ("b2", (16,)), ("w3", (16, 10)),
              ("b3", (10,)))]
    graph = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", f32, [1, 3, 16, 16])],
                              [helper.make_tensor_value_info("y", f32, [1, 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    fpath, qpath = tmp_path / "f.onnx", tmp_path / "q.onnx"
    fpath.write_bytes(model.SerializeToString())

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.batches = iter([{"x": rng.standard_normal((1, 3, 16, 16)).astype(np.float32)} for _ in range(4)])

        def get_next(self):
            return next(self.batches, None)

    quantize_static(str(fpath), str(qpath), Reader(), quant_format=QuantFormat.QDQ, per_channel=True)
    import onnx

    q = onnx.load(str(qpath))
    inits = {t.name: numpy_helper.to_array(t) for t in q.graph.initializer}
    last = next(n for n in q.graph.node if n.op_type == "DequantizeLinear" and n.output[0] == "y")
    return str(qpath), float(inits[last.input[1]]), {"x": rng.standard_normal((1, 3, 16, 16)).astype(np.float32)}


def test_enable_qdq_optimizer_hands_openvino_the_whole_qdq_graph(tmp_path):
    path, out_scale, feeds = _qdq_cnn(tmp_path)
    want = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ort.OrtWarning)
        plain = ort.InferenceSession(path, providers=[NAME, "CPUExecutionProvider"])
        qdq = ort.InferenceSession(path, providers=[(NAME, {"enable_qdq_optimizer": "true"}), "CPUExecutionProvider"])
    # by default QuantizeLinear is declined (OpenVINO's rounding near .5 differs), so the graph fragments
    assert any(a.provider == "CPUExecutionProvider" and "QuantizeLinear" in a.op_types
               for a in plain.get_provider_graph_assignment_info())
    (whole,) = qdq.get_provider_graph_assignment_info()  # one OpenVINO subgraph: every node, weights still int8
    assert whole.provider == NAME and "QuantizeLinear" in whole.op_types
    import onnx

    in_file = sum(n.op_type == "DequantizeLinear" for n in onnx.load(path).graph.node)
    assert whole.op_types.count("DequantizeLinear") == in_file  # the weights' too: not folded back to float
    got = qdq.run(None, feeds)[0]
    # int8 arithmetic in both; OpenVINO may round a value near .5 the other way, one step at a time
    np.testing.assert_allclose(got, want, rtol=0, atol=4 * out_scale)
    assert got.argmax() == want.argmax()


@pytest.mark.parametrize("value, expected", [("true", True), ("1", True), ("False", False), (False, False)])
def test_enable_qdq_optimizer_is_parsed_and_keeps_qdq(value, expected):
    from ort_ep_openvino.options import parse

    assert parse({"enable_qdq_optimizer": value}).enable_qdq_optimizer is expected
    with pytest.raises(ValueError, match="enable_qdq_optimizer='maybe': expected true or false"):
        parse({"enable_qdq_optimizer": "maybe"})


@pytest.mark.parametrize("x_zero,w_zero", [(0, 127), (128, 127), (0, 0)])
def test_qdq_conv_transpose_with_weight_zero_point_matches(x_zero, w_zero):
    """uint8 ConvTranspose weights with a zero point (onnxruntime's quantizer makes them for weights held in
    Constant nodes): OpenVINO's int8 kernel dropped the weight zero point when the input's was 0 (off by 60
    where the outputs reach 7), so such weights reach it dequantized; the rest of the graph stays QDQ."""
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((24, 16, 2, 2)) * 0.3).astype(np.float32)
    wq = np.clip(np.round(w / 0.01) + w_zero, 0, 255).astype(np.uint8)
    inits = [numpy_helper.from_array(np.float32(0.02), "xs"), numpy_helper.from_array(np.uint8(x_zero), "xz"),
             numpy_helper.from_array(np.float32(0.01), "ws"), numpy_helper.from_array(np.uint8(w_zero), "wz"),
             numpy_helper.from_array(wq, "wq")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"]),
             helper.make_node("ConvTranspose", ["xd", "wd"], ["y"], kernel_shape=[2, 2], strides=[2, 2])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 24, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    x = (rng.random((1, 24, 8, 8)) * 2).astype(np.float32)
    want = onnxruntime.InferenceSession(model.SerializeToString(),
                                        providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ort.OrtWarning)
        sess = ort.InferenceSession(model.SerializeToString(),
                                    providers=[(NAME, {"enable_qdq_optimizer": "true"}), "CPUExecutionProvider"])
    got = sess.run(None, {"x": x})[0]
    assert [a.provider for a in sess.get_provider_graph_assignment_info()] == [NAME]
    assert np.abs(want).max() > 3
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
