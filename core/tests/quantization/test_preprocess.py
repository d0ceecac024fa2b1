"""quant_pre_process: basic optimizations and shape inference, output that onnxruntime loads and that
computes what the float model computes."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ort_core import quantization as ours

from .helpers import ListReader, cosine, ort_quant, run_ours, run_theirs


def conv_bn_model():
    """Identity -> Conv -> BatchNormalization -> Relu -> Dropout: folds to Conv -> Relu -> Dropout (a
    Dropout making a graph output stays, in onnxruntime's pre-processing too)."""
    rng = np.random.default_rng(5)
    inits = {"w": (rng.standard_normal((6, 3, 3, 3)) * 0.3).astype(np.float32),
             "scale": (rng.random(6) + 0.5).astype(np.float32), "bias": rng.standard_normal(6).astype(np.float32),
             "mean": (rng.standard_normal(6) * 0.1).astype(np.float32), "var": (rng.random(6) + 0.5).astype(np.float32)}
    nodes = [helper.make_node("Identity", ["x"], ["xi"]),
             helper.make_node("Conv", ["xi", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["bn"]),
             helper.make_node("Relu", ["bn"], ["r"]),
             helper.make_node("Dropout", ["r"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 6, 8, 8])],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_pre_process_folds_infers_shapes_and_loads_in_onnxruntime(tmp_path):
    src, out = tmp_path / "f.onnx", tmp_path / "p.onnx"
    onnx.save(conv_bn_model(), src)
    ours.quant_pre_process(str(src), str(out))
    model = onnx.load(out)
    onnx.checker.check_model(model)
    assert [n.op_type for n in model.graph.node] == ["Conv", "Relu", "Dropout"]
    assert {n.domain for n in model.graph.node} == {""}
    assert any(p.key == "onnx.quant.pre_process" for p in model.metadata_props)
    shapes = {vi.name: [d.dim_value or d.dim_param for d in vi.type.tensor_type.shape.dim]
              for vi in model.graph.value_info}
    assert set(shapes) >= {"r"} and all(v == ["N", 6, 8, 8] for v in shapes.values())
    feed = {"x": np.random.default_rng(0).standard_normal((2, 3, 8, 8)).astype(np.float32)}
    np.testing.assert_allclose(run_theirs(out, feed), run_theirs(src, feed), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(run_ours(out, feed), run_theirs(src, feed), rtol=1e-4, atol=1e-5)


def test_pre_processed_model_quantizes_like_onnxruntime(tmp_path):
    src, pre = tmp_path / "f.onnx", tmp_path / "p.onnx"
    onnx.save(conv_bn_model(), src)
    ours.quant_pre_process(src, pre, skip_symbolic_shape=True)
    feeds = [{"x": np.random.default_rng(s).standard_normal((2, 3, 8, 8)).astype(np.float32)} for s in range(6)]
    ours.quantize_static(pre, tmp_path / "a.onnx", ListReader(feeds), per_channel=True)
    ort_quant.quantize_static(pre, tmp_path / "b.onnx", ListReader(feeds), per_channel=True)
    test = {"x": np.random.default_rng(99).standard_normal((4, 3, 8, 8)).astype(np.float32)}
    a, b, ref = run_ours(tmp_path / "a.onnx", test), run_theirs(tmp_path / "b.onnx", test), run_theirs(src, test)
    step = float(next(numpy_helper.to_array(t) for t in onnx.load(tmp_path / "a.onnx").graph.initializer
                      if t.name == "r_scale"))
    assert np.abs(a - b).max() <= step * 1.001
    assert cosine(a, ref) > 0.99
