"""quantize_static against onnxruntime.quantization.quantize_static on the same calibration data: same
graph, same scales and zero points, outputs within one quantization step across runtimes, and close
to the float model."""

from __future__ import annotations

import numpy as np
import pytest

from ort_core import quantization as ours

from .helpers import ListReader, cosine, initializers, node_ops, ort_quant, output_step, run_ours, run_theirs
from .models import MODELS, calibration, eval_data

CASES = [(m, f, pc) for m in MODELS for f in ("QDQ", "QOperator") for pc in (False, True)]


@pytest.fixture(scope="module")
def quantized(tmp_path_factory):
    """(float path, ours path, onnxruntime's path) per case, quantized once."""
    root = tmp_path_factory.mktemp("static")
    done = {}

    def get(model, fmt, per_channel):
        key = (model, fmt, per_channel)
        if key not in done:
            base = root / f"{model}-{fmt}-{int(per_channel)}"
            src = f"{base}-float.onnx"
            import onnx

            onnx.save(MODELS[model](), src)
            mine, theirs = f"{base}-ours.onnx", f"{base}-ort.onnx"
            ours.quantize_static(src, mine, ListReader(calibration(model)), quant_format=ours.QuantFormat[fmt],
                                 per_channel=per_channel)
            ort_quant.quantize_static(src, theirs, ListReader(calibration(model)),
                                      quant_format=ort_quant.QuantFormat[fmt], per_channel=per_channel)
            done[key] = (src, mine, theirs)
        return done[key]

    return get


@pytest.mark.parametrize("model,fmt,per_channel", CASES)
def test_same_graph_and_parameters_as_onnxruntime(quantized, model, fmt, per_channel):
    _, mine, theirs = quantized(model, fmt, per_channel)
    assert node_ops(mine) == node_ops(theirs)
    a, b = initializers(mine), initializers(theirs)
    assert set(a) == set(b)
    for name in a:
        assert a[name].dtype == b[name].dtype and a[name].shape == b[name].shape, name
        if a[name].dtype.kind == "f":  # scales: calibration ranges computed by two runtimes
            np.testing.assert_allclose(a[name], b[name], rtol=1e-5, err_msg=name)
        else:  # quantized weights, zero points, int32 biases
            assert np.abs(a[name].astype(np.int64) - b[name].astype(np.int64)).max(initial=0) <= 1, name


@pytest.mark.parametrize("model,fmt,per_channel", CASES)
def test_runs_on_both_runtimes_within_one_step(quantized, model, fmt, per_channel):
    src, mine, theirs = quantized(model, fmt, per_channel)
    feed = eval_data(model)
    ref = run_theirs(src, feed)
    step = output_step(mine)
    assert step is not None and step > 0
    results = {}
    for label, path in (("ours", mine), ("ort", theirs)):
        got_core, got_ort = run_ours(path, feed), run_theirs(path, feed)
        # the same quantized model on ort-core and on onnxruntime: within one output step
        assert np.abs(got_core - got_ort).max() <= step * 1.001, label
        # most values equal: onnxruntime fuses QDQ groups into integer kernels that round differently
        assert np.abs(got_core - got_ort).mean() < step * 0.25, label
        results[label] = got_core
    # ort_core.quantization's model against onnxruntime.quantization's: within one step
    assert np.abs(results["ours"] - results["ort"]).max() <= step * 1.001
    # and close to the float model, no further from it than onnxruntime's quantized model
    assert cosine(results["ours"], ref) > 0.99
    assert np.abs(results["ours"] - ref).max() <= np.abs(results["ort"] - ref).max() + step * 1.001
