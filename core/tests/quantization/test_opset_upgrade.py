"""Models below the opsets quantized nodes need are moved up first, as onnxruntime's quantizer does: a
per-channel DequantizeLinear (axis) needs opset 13, DynamicQuantizeLinear opset 11."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from ort_core.quantization import QuantFormat, quantize_dynamic, quantize_static

from .helpers import ListReader, run_ours, run_theirs

RNG = np.random.default_rng(7)


def opset9_cnn() -> onnx.ModelProto:
    w = numpy_helper.from_array(RNG.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    fc = numpy_helper.from_array(RNG.standard_normal((4 * 6 * 6, 5)).astype(np.float32), "fc")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Flatten", ["r"], ["f"]), helper.make_node("MatMul", ["f", "fc"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])], [w, fc])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)])
    model.ir_version = 7
    return model


def feeds(n=4):
    return [{"x": RNG.standard_normal((1, 3, 6, 6)).astype(np.float32)} for _ in range(n)]


def opset(path) -> int:
    return next(o.version for o in onnx.load(str(path)).opset_import if o.domain in ("", "ai.onnx"))


@pytest.mark.parametrize("per_channel,least", [(True, 13), (False, 11)])
def test_static_quantization_moves_an_opset9_model_up_and_both_runtimes_load_it(tmp_path, per_channel, least):
    src, dst = tmp_path / "m.onnx", tmp_path / "q.onnx"
    onnx.save(opset9_cnn(), src)
    quantize_static(str(src), str(dst), ListReader(feeds()), quant_format=QuantFormat.QDQ, per_channel=per_channel)
    assert opset(dst) >= least
    x = feeds(1)[0]
    np.testing.assert_allclose(run_ours(dst, x), run_theirs(dst, x), atol=0.05)


def test_dynamic_quantization_moves_an_opset9_model_to_11(tmp_path):
    src, dst = tmp_path / "m.onnx", tmp_path / "q.onnx"
    onnx.save(opset9_cnn(), src)
    quantize_dynamic(str(src), str(dst))
    assert opset(dst) >= 11
    x = feeds(1)[0]
    np.testing.assert_allclose(run_ours(dst, x), run_theirs(dst, x), rtol=1e-4, atol=1e-4)
