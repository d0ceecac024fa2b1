"""quantize_dynamic against onnxruntime.quantization.quantize_dynamic: the same nodes and the same
quantized weights, outputs that agree across runtimes, and close to the float model."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from ort_core import quantization as ours

from .helpers import cosine, initializers, node_ops, ort_quant, run_ours, run_theirs
from .models import MODELS, eval_data

CASES = [(m, pc) for m in MODELS for pc in (False, True)]


@pytest.fixture(scope="module")
def quantized(tmp_path_factory):
    root = tmp_path_factory.mktemp("dynamic")
    done = {}

    def get(model, per_channel, **kwargs):
        key = (model, per_channel, tuple(sorted(kwargs.items())))
        if key not in done:
            base = root / f"{model}-{int(per_channel)}-{len(done)}"
            src, mine, theirs = f"{base}-float.onnx", f"{base}-ours.onnx", f"{base}-ort.onnx"
            onnx.save(MODELS[model](), src)
            ours.quantize_dynamic(src, mine, per_channel=per_channel,
                                  **{k: getattr(ours.QuantType, v) if k == "weight_type" else v
                                     for k, v in kwargs.items()})
            ort_quant.quantize_dynamic(src, theirs, per_channel=per_channel,
                                       **{k: getattr(ort_quant.QuantType, v) if k == "weight_type" else v
                                          for k, v in kwargs.items()})
            done[key] = (src, mine, theirs)
        return done[key]

    return get


@pytest.mark.parametrize("model,per_channel", CASES)
def test_same_graph_and_weights_as_onnxruntime(quantized, model, per_channel):
    _, mine, theirs = quantized(model, per_channel)
    assert node_ops(mine) == node_ops(theirs)
    a, b = initializers(mine), initializers(theirs)
    assert set(a) == set(b)
    for name in a:  # weights only: no calibration, so bit-identical
        assert a[name].dtype == b[name].dtype and a[name].shape == b[name].shape, name
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


@pytest.mark.parametrize("model,per_channel", CASES)
def test_runs_on_both_runtimes_and_stays_close_to_float(quantized, model, per_channel):
    src, mine, theirs = quantized(model, per_channel)
    feed = eval_data(model)
    ref = run_theirs(src, feed)
    got = {}
    for label, path in (("ours", mine), ("ort", theirs)):
        core, ort = run_ours(path, feed), run_theirs(path, feed)
        np.testing.assert_allclose(core, ort, rtol=1e-5, atol=1e-5 * np.abs(ort).max(), err_msg=label)
        got[label] = core
    np.testing.assert_allclose(got["ours"], got["ort"], rtol=1e-5, atol=1e-5 * np.abs(ref).max())
    assert cosine(got["ours"], ref) > 0.99


@pytest.mark.parametrize("weight_type", ["QUInt8", "QInt8"])
def test_weight_type_and_reduce_range_follow_onnxruntime(quantized, weight_type):
    _, mine, theirs = quantized("mlp", False, weight_type=weight_type, reduce_range=True)
    a, b = initializers(mine), initializers(theirs)
    assert a["w1_quantized"].dtype == (np.uint8 if weight_type == "QUInt8" else np.int8)
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)
    # reduce_range keeps weights to 7 bits
    assert np.ptp(a["w1_quantized"].astype(np.int32)) <= 128


def test_nodes_to_exclude_and_op_types(quantized, tmp_path):
    src = tmp_path / "mlp.onnx"
    onnx.save(MODELS["mlp"](), src)
    ours.quantize_dynamic(src, tmp_path / "a.onnx", nodes_to_exclude=["mm2"])
    ops = [n.op_type for n in onnx.load(tmp_path / "a.onnx").graph.node]
    assert ops.count("MatMulInteger") == 1 and ops.count("MatMul") == 1
    ours.quantize_dynamic(src, tmp_path / "b.onnx", op_types_to_quantize=["Conv"])
    kept = [n.op_type for n in onnx.load(tmp_path / "b.onnx").graph.node]
    assert kept == [n.op_type for n in MODELS["mlp"]().graph.node]
