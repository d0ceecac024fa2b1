"""Rank-0 (scalar) tensors through QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear on the
CPU provider, against onnxruntime: a 0-d input once failed in QuantizeLinear (np.rint of a 0-d array
returns a numpy scalar, which the following out= call refused)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import ort_core as ort

from ..conftest import make_model

onnxruntime = pytest.importorskip("onnxruntime")


def both(model, feed):
    data = model.SerializeToString()
    ours = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feed)
    theirs = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feed)
    return ours, theirs


@pytest.mark.parametrize("zdtype,opset", [(np.uint8, 13), (np.int8, 13), (np.uint8, 21), (np.int8, 21),
                                          (np.int16, 21)])  # int16 needs opset 21
@pytest.mark.parametrize("x", [1.26, -0.34, 40.0])
def test_rank0_quantize_linear_matches_onnxruntime(zdtype, opset, x):
    qtype = {np.uint8: TensorProto.UINT8, np.int8: TensorProto.INT8, np.int16: TensorProto.INT16}[zdtype]
    node = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"])
    model = make_model([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [])],
                       [helper.make_tensor_value_info("y", qtype, [])],
                       [numpy_helper.from_array(np.float32(0.1), "s"), numpy_helper.from_array(zdtype(3), "z")],
                       opset=opset)
    (ours,), (theirs,) = both(model, {"x": np.array(x, np.float32)})
    assert ours.shape == () and ours.dtype == zdtype
    assert ours == theirs
    assert int(ours) == int(np.clip(np.rint(np.float32(x) / np.float32(0.1)) + 3, np.iinfo(zdtype).min,
                                    np.iinfo(zdtype).max))


def test_rank0_quantize_then_dequantize_round_trips():
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"])]
    model = make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])],
                       [numpy_helper.from_array(np.float32(0.25), "s"), numpy_helper.from_array(np.uint8(10), "z")])
    (ours,), (theirs,) = both(model, {"x": np.array(1.3, np.float32)})
    assert ours.shape == () and float(ours) == float(theirs) == 1.25


def test_rank0_dynamic_quantize_linear_matches_onnxruntime():
    node = helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])
    model = make_model([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [])],
                       [helper.make_tensor_value_info("y", TensorProto.UINT8, []),
                        helper.make_tensor_value_info("s", TensorProto.FLOAT, []),
                        helper.make_tensor_value_info("z", TensorProto.UINT8, [])])
    ours, theirs = both(model, {"x": np.array(-2.5, np.float32)})
    for a, b in zip(ours, theirs):
        assert a.shape == b.shape == ()
        np.testing.assert_allclose(a.astype(np.float64), b.astype(np.float64), rtol=1e-6)
