"""``ort-conformance diff``: names the first node a provider computes wrongly (the broken fixture's Add
computes a - b), passes a correct provider, and keeps the suite's own invocation as it was."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from ort_conformance.cli import main


@pytest.fixture(scope="module", autouse=True)
def providers_installed():
    import ort_core

    names = ort_core.get_available_providers()
    for p in ("BrokenWrongResultExecutionProvider", "ExampleExecutionProvider"):
        if p not in names:
            pytest.fail(f"{p} is not installed (nox -s tests installs ort-ep-broken and ort-ep-example)")


@pytest.fixture
def model_path(tmp_path):
    """y = Tanh(Relu(x) * c + b) * Sigmoid(x): one Add ('shift'), two nodes computed from it."""
    b = numpy_helper.from_array(np.array([1, -2, 3, -4], np.float32), "b")
    c = numpy_helper.from_array(np.array([0.5, 2, -1, 3], np.float32), "c")
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Mul", ["r", "c"], ["m"], name="scale"),
             helper.make_node("Add", ["m", "b"], ["s"], name="shift"),
             helper.make_node("Tanh", ["s"], ["t"], name="squash"),
             helper.make_node("Sigmoid", ["x"], ["g"], name="gate"),
             helper.make_node("Mul", ["t", "g"], ["y"], name="mix")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])], [b, c])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return str(path)


def test_names_the_planted_node(model_path, capsys):
    code = main(["diff", model_path, "--provider", "BrokenWrongResultExecutionProvider"])
    out = capsys.readouterr().out
    assert code == 1, out
    assert "first differing node: shift (op Add, run by BrokenWrongResultExecutionProvider)" in out
    assert "output 's': 4 of 4 values differ" in out and "first at index [0, 0]: got" in out
    assert "downstream: 2 more node output(s) differ, 2 of them computed from shift's outputs" in out


def test_inputs_file_is_used(model_path, tmp_path, capsys):
    feeds = tmp_path / "feeds.npz"
    np.savez(feeds, x=np.zeros((2, 4), np.float32))  # r = m = 0, so s = 0 - b on the broken provider
    code = main(["diff", model_path, "--provider", "BrokenWrongResultExecutionProvider", "--inputs", str(feeds)])
    out = capsys.readouterr().out
    assert code == 1
    assert "output 's': 8 of 8 values differ" in out and "first at index [0, 0]: got -1.0, expected 1.0" in out


def test_correct_provider_exits_0(model_path, capsys):
    code = main(["diff", model_path, "--provider", "ExampleExecutionProvider", "--seed", "3"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "6 run by ExampleExecutionProvider" in out and "no difference" in out


def test_usage_errors_exit_2(model_path, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(["diff", model_path])  # no --provider
    assert e.value.code == 2
    assert main(["diff", model_path, "--provider", "NoSuchExecutionProvider"]) == 2
    assert main(["diff", str(tmp_path / "missing.onnx"), "--provider", "ExampleExecutionProvider"]) == 2
    bad = tmp_path / "bad.npz"
    np.savez(bad, z=np.zeros(1, np.float32))
    assert main(["diff", model_path, "--provider", "ExampleExecutionProvider", "--inputs", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "NoSuchExecutionProvider is not installed" in err and "cannot load" in err and "not inputs" in err


def test_suite_invocation_unchanged():
    with pytest.raises(SystemExit) as e:
        main([])  # still the suite's parser: --provider or --plugin is required
    assert e.value.code == 2
