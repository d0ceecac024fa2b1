"""Calibration methods, types and options of quantize_static against onnxruntime's, and the progress
line; ort_core.quantization never imports onnxruntime."""

from __future__ import annotations

import io
import subprocess
import sys

import numpy as np
import onnx
import pytest

from ort_core import quantization as ours
from ort_core.quantization.calibrate import compute_ranges
from ort_core.quantization.progress import Progress

from .helpers import ListReader, cosine, initializers, node_ops, ort_quant, output_step, run_ours, run_theirs
from .models import MODELS, calibration, eval_data


def both(tmp_path, model, **kwargs):
    src = tmp_path / f"{model}.onnx"
    onnx.save(MODELS[model](), src)
    mine, theirs = tmp_path / "ours.onnx", tmp_path / "ort.onnx"

    def convert(module, kw):
        out = dict(kw)
        for k in ("activation_type", "weight_type"):
            if k in out:
                out[k] = getattr(module.QuantType, out[k])
        if "calibrate_method" in out:
            out["calibrate_method"] = getattr(module.CalibrationMethod, out["calibrate_method"])
        if "quant_format" in out:
            out["quant_format"] = getattr(module.QuantFormat, out["quant_format"])
        return out

    ours.quantize_static(src, mine, ListReader(calibration(model)), **convert(ours, kwargs))
    ort_quant.quantize_static(src, theirs, ListReader(calibration(model)), **convert(ort_quant, kwargs))
    return src, mine, theirs


def scales(path) -> dict[str, np.ndarray]:
    return {k: v for k, v in initializers(path).items() if k.endswith("_scale")}


@pytest.mark.parametrize("method", ["Percentile", "Entropy"])
@pytest.mark.parametrize("model", ["cnn", "mlp"])
def test_histogram_methods_match_onnxruntime(tmp_path, method, model):
    src, mine, theirs = both(tmp_path, model, calibrate_method=method)
    a, b = scales(mine), scales(theirs)
    assert set(a) == set(b)
    for name in a:  # histograms of two runtimes' values (equal to ~1e-7 here)
        np.testing.assert_allclose(a[name], b[name], rtol=1e-4, err_msg=name)
    feed = eval_data(model)
    got, want, ref = run_ours(mine, feed), run_theirs(theirs, feed), run_theirs(src, feed)
    assert cosine(got, ref) > 0.99 and cosine(want, ref) > 0.99


@pytest.mark.parametrize("activation_type,weight_type", [("QUInt8", "QUInt8"), ("QUInt8", "QInt8"),
                                                         ("QInt16", "QInt8"), ("QUInt16", "QUInt8"),
                                                         ("QInt8", "QInt4")])
def test_types_match_onnxruntime(tmp_path, activation_type, weight_type):
    src, mine, theirs = both(tmp_path, "cnn", activation_type=activation_type, weight_type=weight_type)
    if weight_type == "QInt4":
        # deliberate difference: onnxruntime writes com.microsoft Q/DQ at opset 17, we write opset 21's own
        assert [op for _, op in node_ops(mine)] == [op for _, op in node_ops(theirs)]
        assert {d for d, _ in node_ops(mine)} == {""} and onnx.load(mine).opset_import[0].version == 21
    else:
        assert node_ops(mine) == node_ops(theirs)
    a, b = initializers(mine), initializers(theirs)
    assert set(a) == set(b)
    for name in a:
        assert a[name].dtype == b[name].dtype, name
        if a[name].dtype.kind == "f":
            np.testing.assert_allclose(a[name], b[name], rtol=1e-5, err_msg=name)
        else:
            assert np.abs(a[name].astype(np.int64) - b[name].astype(np.int64)).max(initial=0) <= 1, name
    feed = eval_data("cnn")
    ref = run_theirs(src, feed)
    # 4-bit weights are coarse: as close to float as onnxruntime's own 4-bit model, else > 0.99
    floor = cosine(run_theirs(theirs, feed), ref) - 1e-3 if weight_type == "QInt4" else 0.99
    assert cosine(run_theirs(mine, feed), ref) > floor
    if weight_type != "QInt4":  # ort-core runs int4 DequantizeLinear too, checked against onnxruntime
        np.testing.assert_allclose(run_ours(mine, feed), run_theirs(mine, feed), atol=0.05)


@pytest.mark.parametrize("extra", [{"ActivationSymmetric": True}, {"WeightSymmetric": False},
                                   {"QDQKeepRemovableActivations": True}, {"CalibTensorRangeSymmetric": True},
                                   {"CalibMovingAverage": True}])
@pytest.mark.parametrize("fmt", ["QDQ", "QOperator"])
def test_extra_options_match_onnxruntime(tmp_path, extra, fmt):
    src, mine, theirs = both(tmp_path, "mlp", extra_options=extra, quant_format=fmt, reduce_range=True)
    assert node_ops(mine) == node_ops(theirs)
    a, b = initializers(mine), initializers(theirs)
    assert set(a) == set(b)
    for name in a:
        assert a[name].dtype == b[name].dtype, name
        if a[name].dtype.kind == "f":
            np.testing.assert_allclose(a[name], b[name], rtol=1e-5, err_msg=name)
        else:
            assert np.abs(a[name].astype(np.int64) - b[name].astype(np.int64)).max(initial=0) <= 1, name


def test_nodes_to_exclude_and_op_types(tmp_path):
    src = tmp_path / "cnn.onnx"
    onnx.save(MODELS["cnn"](), src)
    ours.quantize_static(src, tmp_path / "a.onnx", ListReader(calibration("cnn")), nodes_to_exclude=["conv2"])
    m = onnx.load(tmp_path / "a.onnx")
    conv2 = next(n for n in m.graph.node if n.name == "conv2")
    assert "w2" in conv2.input and "b2" in conv2.input  # float weights kept
    ours.quantize_static(src, tmp_path / "b.onnx", ListReader(calibration("cnn")), op_types_to_quantize=["Relu"])
    ort_quant.quantize_static(src, tmp_path / "c.onnx", ListReader(calibration("cnn")),
                              op_types_to_quantize=["Relu"])
    # a Relu whose input is not quantized stays float (as onnxruntime leaves it)
    assert node_ops(tmp_path / "b.onnx") == node_ops(tmp_path / "c.onnx") == [("", "Conv"), ("", "Conv"), ("", "Relu")]


def test_minmax_ranges_are_the_extremes_over_all_batches():
    model = MODELS["mlp"]()
    feeds = calibration("mlp", 5)
    ranges = compute_ranges(model, ["x"], ListReader(feeds))
    allx = np.concatenate([f["x"] for f in feeds])
    assert ranges["x"] == (allx.min(), allx.max())


def test_an_empty_reader_is_an_error(tmp_path):
    src = tmp_path / "mlp.onnx"
    onnx.save(MODELS["mlp"](), src)
    with pytest.raises(ValueError, match="no batch"):
        ours.quantize_static(src, tmp_path / "q.onnx", ListReader([]))


def test_progress_only_when_asked_or_on_a_terminal(tmp_path, capsys):
    stream = io.StringIO()
    p = Progress("calibrating", None, stream)  # not a terminal: silent
    p.step()
    p.close()
    assert stream.getvalue() == ""
    p = Progress("calibrating", True, stream)
    p.step()
    p.step()
    p.close()
    assert "calibrating: 2 batches" in stream.getvalue() and stream.getvalue().endswith("\n")
    src = tmp_path / "mlp.onnx"
    onnx.save(MODELS["mlp"](), src)
    ours.quantize_static(src, tmp_path / "q.onnx", ListReader(calibration("mlp", 3)),
                         extra_options={"CalibProgress": True})
    assert "calibrating: 3 batches" in capsys.readouterr().err
    ours.quantize_static(src, tmp_path / "q.onnx", ListReader(calibration("mlp", 3)))
    assert capsys.readouterr().err == ""


def test_enums_match_onnxruntime():
    for enum in ("QuantType", "QuantFormat", "CalibrationMethod"):
        mine, theirs = getattr(ours, enum), getattr(ort_quant, enum)
        assert {e.name: e.value for e in mine} == {e.name: e.value for e in theirs}
    assert ours.QuantType.from_string("QInt8") is ours.QuantType.QInt8
    assert isinstance(ListReader([]), ours.CalibrationDataReader)  # duck-typed readers are readers


def test_never_imports_onnxruntime(tmp_path):
    src = tmp_path / "cnn.onnx"
    onnx.save(MODELS["cnn"](), src)
    code = f"""
import sys, numpy as np
from ort_core.quantization import quantize_static, quantize_dynamic, quant_pre_process
class R:
    def __init__(self): self.n = 0
    def get_next(self):
        self.n += 1
        return {{"x": np.ones((1, 3, 8, 8), np.float32)}} if self.n < 3 else None
quant_pre_process({str(src)!r}, {str(tmp_path / 'p.onnx')!r})
quantize_static({str(tmp_path / 'p.onnx')!r}, {str(tmp_path / 's.onnx')!r}, R())
quantize_dynamic({str(src)!r}, {str(tmp_path / 'd.onnx')!r})
print(sorted(m for m in sys.modules if m.startswith("onnxruntime")))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_quantize_with_configs_equals_the_functions(tmp_path):
    src = tmp_path / "mlp.onnx"
    onnx.save(MODELS["mlp"](), src)
    ours.quantize(src, tmp_path / "s1.onnx", ours.StaticQuantConfig(ListReader(calibration("mlp")), per_channel=True))
    ours.quantize_static(src, tmp_path / "s2.onnx", ListReader(calibration("mlp")), per_channel=True)
    ours.quantize(src, tmp_path / "d1.onnx", ours.DynamicQuantConfig(weight_type=ours.QuantType.QUInt8))
    ours.quantize_dynamic(src, tmp_path / "d2.onnx", weight_type=ours.QuantType.QUInt8)
    for a, b in (("s1", "s2"), ("d1", "d2")):
        assert onnx.load(tmp_path / f"{a}.onnx") == onnx.load(tmp_path / f"{b}.onnx")
    with pytest.raises(TypeError, match="MatMulNBits"):
        ours.quantize(src, tmp_path / "x.onnx", object())


def test_model_proto_in_and_external_data_out(tmp_path):
    rng = np.random.default_rng(7)
    w = onnx.numpy_helper.from_array((rng.standard_normal((64, 64)) * 0.1).astype(np.float32), "w")
    graph = onnx.helper.make_graph([onnx.helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g",
                                   [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N", 64])],
                                   [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["N", 64])], [w])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    model.ir_version = 8
    feeds = [{"x": rng.standard_normal((4, 64)).astype(np.float32)} for _ in range(4)]
    out = tmp_path / "q.onnx"
    ours.quantize_static(model, out, ListReader(feeds), use_external_data_format=True)
    assert (tmp_path / "q.onnx.data").stat().st_size >= 64 * 64  # the int8 weight
    test = {"x": rng.standard_normal((8, 64)).astype(np.float32)}
    np.testing.assert_allclose(run_ours(out, test), run_theirs(out, test), atol=float(output_step(out)) * 1.001)
