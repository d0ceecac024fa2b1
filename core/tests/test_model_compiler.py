"""ModelCompiler: an EPContext model written ahead of time through the providers SessionOptions choose, on
ort-core and (where the behaviour needs no compiling provider) on onnxruntime too."""

from __future__ import annotations

import importlib
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import ort_core
from ort_core.errors import InvalidArgument, NotImplementedOp

from .conftest import make_model

EXAMPLE, CPU = "ExampleExecutionProvider", "CPUExecutionProvider"
X = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
pytestmark = pytest.mark.filterwarnings("ignore:provider assignment")


def _runtimes():
    yield pytest.param(ort_core, id="ort_core")
    try:
        yield pytest.param(importlib.import_module("onnxruntime"), id="onnxruntime")
    except ImportError:  # pragma: no cover
        yield pytest.param(None, id="onnxruntime", marks=pytest.mark.skip(reason="onnxruntime is not installed"))


RUNTIMES = list(_runtimes())


@pytest.fixture
def model_path(tmp_path) -> str:
    vi = helper.make_tensor_value_info
    model = make_model([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Add", ["r", "r"], ["y"])],
                       [vi("x", TensorProto.FLOAT, [2, 3])], [vi("y", TensorProto.FLOAT, [2, 3])])
    path = str(tmp_path / "model.onnx")
    onnx.save(model, path)
    return path


def _example_options():
    so = ort_core.SessionOptions()
    so.add_provider_for_devices([d for d in ort_core.get_ep_devices() if d.ep_name == EXAMPLE], {})
    return so


@pytest.mark.parametrize("rt", RUNTIMES)
def test_without_a_compiling_provider_the_model_is_written_as_it_is(rt, model_path, tmp_path):
    compiler = rt.ModelCompiler(rt.SessionOptions(), model_path)
    out = str(tmp_path / "out.onnx")
    compiler.compile_to_file(out)
    assert [n.op_type for n in onnx.load(out).graph.node] == ["Relu", "Add"]
    assert [n.op_type for n in onnx.load_from_string(compiler.compile_to_bytes()).graph.node] == ["Relu", "Add"]


@pytest.mark.parametrize("rt", RUNTIMES)
def test_compile_flags_refuse_as_asked(rt, model_path, tmp_path):
    strict = rt.ModelCompiler(rt.SessionOptions(), model_path, flags=rt.OrtCompileApiFlags.ERROR_IF_NO_NODES_COMPILED)
    with pytest.raises(Exception, match="(?i)unable to compile any nodes"):
        strict.compile_to_file(str(tmp_path / "a.onnx"))
    with pytest.raises(Exception, match="exists already"):
        rt.ModelCompiler(rt.SessionOptions(), model_path,
                         flags=rt.OrtCompileApiFlags.ERROR_IF_OUTPUT_FILE_EXISTS).compile_to_file(model_path)


@pytest.mark.parametrize("rt", RUNTIMES)
def test_a_model_argument_that_is_no_model_is_refused(rt, tmp_path):
    with pytest.raises((TypeError, ValueError)):
        rt.ModelCompiler(rt.SessionOptions(), 5)
    with pytest.raises(ValueError, match="Input model path is empty"):
        rt.ModelCompiler(rt.SessionOptions(), "")
    with pytest.raises(Exception, match="(?i)does not exist"):
        rt.ModelCompiler(rt.SessionOptions(), str(tmp_path / "missing.onnx")).compile_to_file(str(tmp_path / "o.onnx"))


@pytest.mark.parametrize("embed", [True, False])
def test_the_example_providers_subgraph_becomes_an_epcontext_node_that_loads_back(model_path, tmp_path, embed):
    out = str(tmp_path / "compiled.onnx")
    ort_core.ModelCompiler(_example_options(), model_path, embed_compiled_data_into_model=embed).compile_to_file(out)
    (node,) = onnx.load(out).graph.node
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    assert (node.op_type, node.domain, attrs["source"], attrs["embed_mode"]) == \
        ("EPContext", "com.microsoft", EXAMPLE.encode(), int(embed))
    beside = sorted(f for f in os.listdir(tmp_path) if f.endswith(".bin"))
    assert beside == ([] if embed else ["compiled_ExampleExecutionProvider_0.bin"])
    sess = ort_core.InferenceSession(out, providers=[EXAMPLE])
    assert [a.op_types for a in sess.get_provider_graph_assignment_info()] == [("EPContext",)]
    np.testing.assert_array_equal(sess.run(None, {"x": X})[0], 2 * np.maximum(X, 0))


def test_compile_to_bytes_and_the_default_path_follow_a_policy(model_path, tmp_path):
    so = ort_core.SessionOptions()
    so.set_provider_selection_policy(ort_core.OrtExecutionProviderDevicePolicy.PREFER_NPU)
    compiler = ort_core.ModelCompiler(so, model_path)
    blob = compiler.compile_to_bytes()
    assert [n.op_type for n in onnx.load_from_string(blob).graph.node] == ["EPContext"]
    compiler.compile_to_file()  # '<input>_ctx.onnx', as onnxruntime documents
    assert [n.op_type for n in onnx.load(str(tmp_path / "model_ctx.onnx")).graph.node] == ["EPContext"]
    chunks = []
    compiler.compile_to_stream(chunks.append)
    assert [n.op_type for n in onnx.load_from_string(b"".join(chunks)).graph.node] == ["EPContext"]
    assert so.graph_optimization_level == ort_core.GraphOptimizationLevel.ORT_ENABLE_ALL  # the user's untouched


def test_what_ort_core_does_not_take_is_named(model_path):
    with open(model_path, "rb") as f:
        from_bytes = ort_core.ModelCompiler(_example_options(), f.read())
    with pytest.raises(InvalidArgument, match="given as bytes: give compile_to_file an output path"):
        from_bytes.compile_to_file()
    with pytest.raises(NotImplementedOp, match="get_initializer_location_func is not supported"):
        ort_core.ModelCompiler(_example_options(), model_path, get_initializer_location_func=lambda *a: None)
    with pytest.raises(InvalidArgument, match="sess_options must be an ort_core.SessionOptions"):
        ort_core.ModelCompiler(None, model_path)
