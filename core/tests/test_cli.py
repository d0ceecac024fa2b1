"""The ort-core command: run, providers, demo."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx.reference import ReferenceEvaluator

from ort_core import InferenceSession
from ort_core.cli import demo_input, demo_model_path, main


def test_demo_prints_result_and_timing(capsys):
    assert main(["demo", "--repeat", "3"]) == 0
    out = capsys.readouterr().out
    assert "output probs: float32 [1, 10]" in out
    assert "top-3 classes:" in out and "median latency" in out


def test_demo_model_matches_reference_evaluator():
    x = demo_input()
    (ours,) = InferenceSession(demo_model_path()).run(None, {"image": x})
    (ref,) = ReferenceEvaluator(onnx.load(demo_model_path())).run(None, {"image": x})
    np.testing.assert_allclose(ours, ref, rtol=1e-4, atol=1e-6)


def test_run_with_input_file(tmp_path, capsys):
    x = demo_input()
    np.save(tmp_path / "img.npy", x)
    assert main(["run", demo_model_path(), "--input", f"image={tmp_path / 'img.npy'}"]) == 0
    out = capsys.readouterr().out
    assert "input  image: float32 [1, 1, 28, 28] from file" in out
    assert "output probs: float32 [1, 10]" in out


def test_run_with_random_inputs(capsys):
    assert main(["run", demo_model_path(), "--repeat", "2"]) == 0
    out = capsys.readouterr().out
    assert "input  image: random tensor(float) [1, 1, 28, 28]" in out


def test_run_reports_errors_without_traceback(tmp_path, capsys):
    assert main(["run", str(tmp_path / "nope.onnx")]) == 1
    assert "ort-core: error: model file" in capsys.readouterr().err


def test_providers_lists_cpu(capsys):
    assert main(["providers"]) == 0
    out = capsys.readouterr().out
    assert "CPUExecutionProvider" in out and "available" in out


def _free_batch_model(path):
    from onnx import TensorProto, helper

    vi = helper.make_tensor_value_info
    model = helper.make_model(helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "g", [vi("x", TensorProto.FLOAT, ["N", 3])],
        [vi("y", TensorProto.FLOAT, ["N", 3])]), opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return str(path)


def test_run_gives_free_dimensions_the_shape_asked_for(tmp_path, capsys):
    assert main(["run", _free_batch_model(tmp_path / "m.onnx"), "--shape", "x=5,3"]) == 0
    out = capsys.readouterr().out
    assert "input  x: random tensor(float) [5, 3]" in out and "output y: float32 [5, 3] min 0" in out


@pytest.mark.parametrize("shape, words", [("x=5,4", "dimension 1 is fixed at 3 in the model, 4 given"),
                                          ("x=5", "1 dimensions given, the model declares 2 ([N, 3])"),
                                          ("y=5,3", "the model has no input 'y' (its inputs: ['x'])"),
                                          ("x=a,3", "dimensions must be integers")])
def test_run_refuses_shapes_that_do_not_fit(tmp_path, capsys, shape, words):
    assert main(["run", _free_batch_model(tmp_path / "m.onnx"), "--shape", shape]) == 1
    assert words in capsys.readouterr().err


def test_run_converts_file_inputs_to_the_declared_type_with_a_warning(tmp_path, capsys):
    np.save(tmp_path / "x.npy", np.full((4, 3), -1.5))  # float64
    np.savez(tmp_path / "all.npz", x=np.array([[1, -2, 3]], np.int32))
    model = _free_batch_model(tmp_path / "m.onnx")
    assert main(["run", model, "--input", f"x={tmp_path / 'x.npy'}"]) == 0
    captured = capsys.readouterr()
    assert "input  x: float32 [4, 3] from file" in captured.out and "min 0 max 0" in captured.out
    assert "float64 converted to float32 (tensor(float), as the model declares)" in captured.err
    assert main(["run", model, "--input", str(tmp_path / "all.npz")]) == 0  # arrays named after the inputs
    captured = capsys.readouterr()
    assert "input  x: float32 [1, 3] from file" in captured.out and "max 3 mean 1.333" in captured.out
    assert "int32 converted to float32" in captured.err


@pytest.mark.parametrize("item, words", [("x=missing.npy", "does not exist"),
                                         ("{npy}", "a .npy file holds one array; say which input it is")])
def test_run_names_the_problem_with_an_input_file(tmp_path, capsys, item, words):
    np.save(tmp_path / "x.npy", np.ones((1, 3), np.float32))
    item = item.format(npy=tmp_path / "x.npy")
    assert main(["run", _free_batch_model(tmp_path / "m.onnx"), "--input", item]) == 1
    assert words in capsys.readouterr().err


def test_explain_says_which_node_no_provider_runs(tmp_path, capsys):
    from onnx import TensorProto, helper

    vi = helper.make_tensor_value_info
    model = helper.make_model(helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"], name="relu"),
         helper.make_node("FooBar", ["r"], ["y"], name="foo", domain="my.domain")], "g",
        [vi("x", TensorProto.FLOAT, [3])], [vi("y", TensorProto.FLOAT, [3])]),
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("my.domain", 1)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "m.onnx"))
    assert main(["explain", str(tmp_path / "m.onnx")]) == 1
    out = capsys.readouterr().out
    assert "unsupported: no requested provider can run 1 node(s)" in out
    assert "node 'foo' (my.domain::FooBar)" in out


def test_explain_to_a_closed_pipe_ends_quietly():
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "ort_core.cli", "explain", demo_model_path()],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # as `| head` does once it has its lines: every write after this fails
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err.decode()
    assert b"Broken pipe" not in err and b"Traceback" not in err


def test_demo_takes_providers(capsys):
    assert main(["demo", "--repeat", "1", "--providers", "CPUExecutionProvider"]) == 0
    assert "on CPUExecutionProvider" in capsys.readouterr().out
    with pytest.warns(UserWarning, match="provider 'NoSuchExecutionProvider' is not installed"):
        assert main(["demo", "--repeat", "1", "--providers", "NoSuchExecutionProvider"]) == 0
    captured = capsys.readouterr()
    assert "on CPUExecutionProvider" in captured.out
