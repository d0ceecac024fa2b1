"""Models rewritten by onnxruntime's own tools run on ort-core and match onnxruntime.

The bench's BERT and GPT-2 stacks (small sizes) go through what users run before saving a model:
onnxruntime's graph optimizer at levels basic and extended (``optimized_model_filepath``; the same step
``onnxruntime.transformers.optimizer.optimize_model`` takes at opt_level 1 and 2, without its torch import),
then its transformer fusions (``optimize_model`` at opt_level 0), its ``quantize_dynamic``, and its 4-bit
MatMulNBits quantizer. The result holds onnxruntime's contrib ops (domain com.microsoft); ort-core must run
them and agree with onnxruntime on the same file.
"""

from __future__ import annotations

import collections
import os

import numpy as np
import onnx
import pytest

import ort_core as ort

from .test_bench_models import FFN, HEADS, HIDDEN, LAYERS, SEQ, models

onnxruntime = pytest.importorskip("onnxruntime")
pytest.importorskip("sympy")  # the transformer optimizer's shape inference needs it

LEVELS = {1: onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC,
          2: onnxruntime.GraphOptimizationLevel.ORT_ENABLE_EXTENDED}


def _graph_optimized(path: str, level: int, out: str) -> str:
    so = onnxruntime.SessionOptions()
    so.graph_optimization_level = LEVELS[level]
    so.optimized_model_filepath = out
    onnxruntime.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    return out


def _transformer_optimized(path: str, kind: str, out: str) -> str:
    from onnxruntime.transformers.optimizer import optimize_model

    optimize_model(path, model_type="bert" if kind == "bert" else "gpt2", num_heads=HEADS, hidden_size=HIDDEN,
                   opt_level=0).save_model_to_file(out)
    return out


def _contrib_ops(path: str) -> collections.Counter:
    return collections.Counter(n.op_type for n in onnx.load(path).graph.node if n.domain == "com.microsoft")


def _agree(path: str, rtol: float, atol: float) -> None:
    """ort-core (default optimizations, and none) and onnxruntime on the same file and inputs."""
    ours = ort.InferenceSession(path)
    feeds = models.feeds(ours.get_inputs())
    (expected,) = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)
    off = ort.SessionOptions()
    off.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    for sess in (ours, ort.InferenceSession(path, off)):
        (got,) = sess.run(None, feeds)
        np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol)


@pytest.fixture(scope="module", params=["bert", "gpt2"])
def exported(request, tmp_path_factory):
    path = str(tmp_path_factory.mktemp(request.param) / f"{request.param}.onnx")
    onnx.save(getattr(models, request.param)(LAYERS, HIDDEN, HEADS, FFN, SEQ), path)
    return request.param, path


@pytest.mark.parametrize("level", [1, 2])
def test_transformer_optimizer_output_runs(exported, level, tmp_path):
    kind, path = exported
    graph = _graph_optimized(path, level, str(tmp_path / "graph.onnx"))
    fused = _transformer_optimized(graph, kind, str(tmp_path / "fused.onnx"))
    ops = _contrib_ops(fused)
    assert ops["SkipLayerNormalization"] >= 1 and (ops["Gelu"] or ops["FastGelu"]) == LAYERS, ops
    if level == 2:
        assert ops["FusedMatMul"] == LAYERS, ops  # extended level: the q.k^T with its scale
    _agree(fused, rtol=1e-4, atol=1e-5)


def test_quantize_dynamic_output_runs(exported, tmp_path):
    """DynamicQuantizeLinear + MatMulInteger as quantize_dynamic writes them, and the same model after
    onnxruntime's extended level has made them DynamicQuantizeMatMul / MatMulIntegerToFloat."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    _, path = exported
    quantized = str(tmp_path / "quantized.onnx")
    quantize_dynamic(path, quantized, weight_type=QuantType.QInt8)
    assert "MatMulInteger" in {n.op_type for n in onnx.load(quantized).graph.node}
    _agree(quantized, rtol=1e-4, atol=1e-4)
    fused = _graph_optimized(quantized, 2, str(tmp_path / "quantized_fused.onnx"))
    ops = _contrib_ops(fused)
    assert ops["DynamicQuantizeMatMul"] + ops["MatMulIntegerToFloat"] > 0, ops
    _agree(fused, rtol=1e-4, atol=1e-4)


def test_matmul_nbits_quantizer_output_runs(exported, tmp_path):
    pytest.importorskip("onnx_ir")  # the quantizer's own dependency
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    _, path = exported
    quantizer = MatMulNBitsQuantizer(onnx.load(path), block_size=32, is_symmetric=False)
    quantizer.process()
    out = str(tmp_path / "nbits.onnx")
    quantizer.model.save_model_to_file(out, use_external_data_format=False)
    assert _contrib_ops(out)["MatMulNBits"] > 0
    assert os.path.getsize(out) < os.path.getsize(path)
    _agree(out, rtol=1e-4, atol=1e-4)
