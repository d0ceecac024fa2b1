"""The bench's built models (bench/models.py) at small sizes: valid ONNX in the exported node forms, run
by ort-core, equal to onnxruntime; and the BLAS-floor shapes bench/measure.py derives from a profile.

bench/ is no package: its modules are loaded by file path. Nothing here is timed.
"""

from __future__ import annotations

import collections
import math

import numpy as np
import onnx
import pytest

import ort_core as ort

from .conftest import load_bench_module

models = load_bench_module("models")
measure = load_bench_module("measure")

LAYERS, HIDDEN, HEADS, FFN, SEQ = 2, 64, 4, 128, 16
SMALL = {
    "bert": lambda: models.bert(LAYERS, HIDDEN, HEADS, FFN, SEQ),
    "gpt2": lambda: models.gpt2(LAYERS, HIDDEN, HEADS, FFN, SEQ),
    "lstm": lambda: models.lstm(seq=SEQ, batch=2, input_size=24, hidden=32, layers=2),
    "gru": lambda: models.gru(seq=SEQ, batch=2, input_size=24, hidden=32, layers=2),
    "adds": lambda: models.add_chain(40, width=16),
}
SHAPES = {"bert": (1, SEQ, HIDDEN), "gpt2": (1, SEQ, HIDDEN), "lstm": (SEQ, 2, 32), "gru": (SEQ, 2, 32),
          "adds": (1, 16)}


def _ops(model: onnx.ModelProto) -> collections.Counter:
    return collections.Counter(n.op_type for n in model.graph.node)


@pytest.mark.parametrize("name", sorted(SMALL))
def test_small_model_is_valid_and_matches_onnxruntime(name):
    model = SMALL[name]()
    onnx.checker.check_model(model, full_check=True)
    sess = ort.InferenceSession(model.SerializeToString())
    feeds = models.feeds(sess.get_inputs())
    (y,) = sess.run(None, feeds)
    assert y.shape == SHAPES[name] and y.dtype == np.float32 and np.isfinite(y).all()
    onnxruntime = pytest.importorskip("onnxruntime")
    ref = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(y, ref.run(None, feeds)[0], rtol=1e-4, atol=1e-4)


def test_bert_has_the_exported_forms():
    model = SMALL["bert"]()
    ops = _ops(model)
    assert ops["Softmax"] == ops["Erf"] == LAYERS
    assert ops["ReduceMean"] == 4 * LAYERS and ops["Sqrt"] == 2 * LAYERS
    assert ops["MatMul"] == 8 * LAYERS  # q, k, v, out, two FFN, scores, context
    perms = collections.Counter(tuple(onnx.helper.get_attribute_value(n.attribute[0])) for n in model.graph.node
                                if n.op_type == "Transpose")
    assert perms == {(0, 2, 1, 3): 3 * LAYERS, (0, 2, 3, 1): LAYERS}
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    shapes = [inits[n.input[1]].tolist() for n in model.graph.node if n.op_type == "Reshape"]
    assert shapes.count([0, 0, HEADS, HIDDEN // HEADS]) == 3 * LAYERS and shapes.count([0, 0, HIDDEN]) == LAYERS
    scale = [float(inits[n.input[1]]) for n in model.graph.node if n.op_type == "Div" and n.input[1] in inits
             and inits[n.input[1]].ndim == 0 and float(inits[n.input[1]]) != float(np.float32(math.sqrt(2)))]
    assert scale.count(math.sqrt(HIDDEN // HEADS)) == LAYERS
    assert [i.name for i in model.graph.input] == ["x", "mask"] and model.graph.output[0].name == "y"


def test_gpt2_has_the_exported_forms():
    model = SMALL["gpt2"]()
    ops = _ops(model)
    assert ops["Split"] == ops["Where"] == ops["Tanh"] == ops["Softmax"] == LAYERS
    assert ops["ReduceMean"] == 2 * (2 * LAYERS + 1)  # two LayerNorms per layer and the final one
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    split = next(n for n in model.graph.node if n.op_type == "Split")
    assert inits[split.input[1]].tolist() == [HIDDEN] * 3
    where = next(n for n in model.graph.node if n.op_type == "Where")
    mask = inits[where.input[0]]
    assert mask.dtype == bool and mask.shape == (1, 1, SEQ, SEQ) and (mask[0, 0] == np.tril(np.ones((SEQ, SEQ)))).all()
    assert float(inits[where.input[2]]) == -1e4


def test_bert_mask_feed_pads_the_last_eighth():
    sess = ort.InferenceSession(SMALL["bert"]().SerializeToString())
    mask = models.feeds(sess.get_inputs())["mask"]
    assert mask.shape == (1, 1, 1, SEQ)
    assert (mask[..., :SEQ - SEQ // 8] == 0).all() and (mask[..., SEQ - SEQ // 8:] == -10000).all()


def test_add_chain_keeps_every_node_and_sums_right(tmp_path):
    model = models.add_chain(40, width=16)
    so = ort.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "opt.onnx")
    sess = ort.InferenceSession(model.SerializeToString(), so)
    assert len(onnx.load(so.optimized_model_filepath).graph.node) == 40
    x = np.arange(16, dtype=np.float32)[None] / 16
    consts = sum(onnx.numpy_helper.to_array(t) for t in model.graph.initializer)
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], 21 * x + consts, rtol=1e-5)  # 20 constants, 20 x's


def _flops(products) -> int:
    total = 0
    for a, b, times in products:
        batch = math.prod(np.broadcast_shapes(tuple(a[:-2]), tuple(b[:-2])))
        total += batch * a[-2] * a[-1] * b[-1] * times
    return total


def test_floor_products_of_a_profiled_bert_cover_its_matmuls(tmp_path):
    """Whatever the fusions make of it, the products must add up to the model's multiply-adds."""
    path = str(tmp_path / "bert.onnx")
    onnx.save(SMALL["bert"](), path)
    profile = measure.profile_ort_core(path, models.feeds, 1, str(tmp_path))
    products = [p for step in profile["steps"] for p in measure.gemm_products(step)]
    per_layer = 4 * SEQ * HIDDEN * HIDDEN + 2 * SEQ * HIDDEN * FFN + 2 * SEQ * SEQ * HIDDEN
    assert _flops(products) == LAYERS * per_layer
    assert measure.floor_fn(profile["steps"]) is not None
    assert measure.floor_fn([s for s in profile["steps"] if not measure.gemm_products(s)]) is None


def test_floor_products_of_conv_gemm_and_recurrent_steps():
    grouped = {"op": "com.microsoft::FusedConv", "inputs": [[1, 24, 56, 56], [112, 6, 1, 1], [112]],
               "outputs": [[1, 112, 56, 56]], "attrs": {}}
    assert measure.gemm_products(grouped) == [((4, 28, 6), (4, 6, 3136), 1)]
    conv = {"op": "Conv", "inputs": [[2, 3, 32, 32], [8, 3, 3, 3], None], "outputs": [[2, 8, 16, 16]], "attrs": {}}
    assert measure.gemm_products(conv) == [((8, 27), (27, 512), 1)]
    deconv = {"op": "ConvTranspose", "inputs": [[1, 16, 8, 8], [16, 4, 2, 2]], "outputs": [[1, 8, 16, 16]],
              "attrs": {}}
    assert measure.gemm_products(deconv) == [((2, 16, 8), (2, 8, 64), 1)]  # two groups of (4*2*2) x 8 @ 8 x 64
    gemm = {"op": "Gemm", "inputs": [[1, 512], [1000, 512], [1000]], "outputs": [[1, 1000]], "attrs": {}}
    assert measure.gemm_products(gemm) == [((1, 512), (512, 1000), 1)]
    lstm = {"op": "LSTM", "inputs": [[16, 2, 24], [1, 128, 24], [1, 128, 32], [1, 256]],
            "outputs": [[16, 1, 2, 32]], "attrs": {}}
    assert measure.gemm_products(lstm) == [((32, 24), (24, 128), 1), ((2, 32), (32, 128), 16)]
    assert measure.gemm_products({"op": "Relu", "inputs": [[1, 4]], "outputs": [[1, 4]], "attrs": {}}) == []
