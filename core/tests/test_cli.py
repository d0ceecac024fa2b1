"""The ort-core command: run, providers, demo."""

from __future__ import annotations

import numpy as np
import onnx
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
