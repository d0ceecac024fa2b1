"""The suite must catch broken providers: each deliberately broken fixture is flagged by the
check that targets its defect, and a correct provider's report is well formed."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

SELECT = "add or relu or registration or capability or allocator or transfer or concurrent or churn or test_check"


def run_suite(provider: str, tmp_path, *extra: str, known: bool = False) -> tuple[int, dict, str]:
    """Run the suite in a subprocess; broken fixtures run without any known-failures list."""
    cmd = [sys.executable, "-m", "ort_conformance.cli", "--provider", provider, "--report", str(tmp_path), *extra]
    if not known:
        cmd += ["--known-failures", str(tmp_path / "none.txt")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    with open(tmp_path / f"conformance-{provider}.json", encoding="utf-8") as f:
        return proc.returncode, json.load(f), proc.stdout + proc.stderr


@pytest.fixture(scope="module", autouse=True)
def broken_plugins_installed():
    import ort_core

    names = ort_core.get_available_providers()
    if "BrokenWrongResultExecutionProvider" not in names:
        pytest.fail("install conformance/fixtures/ort-ep-broken (nox -s tests does this)")


def test_wrong_results_are_flagged(tmp_path):
    code, rep, out = run_suite("BrokenWrongResultExecutionProvider", tmp_path, "--only", "operators", "-k", "add")
    assert code == 1 and rep["verdict"] == "not certified"
    assert "test_node[test_add]" in rep["failed_tests"]
    case = next(c for c in rep["cases"] if c["case"] == "test_add")
    assert case["phase"] == "compare" and "values differ" in case["message"]


def test_wrong_dtype_is_flagged(tmp_path):
    code, rep, out = run_suite("BrokenWrongDtypeExecutionProvider", tmp_path, "--only", "operators", "-k", "relu")
    assert code == 1 and rep["verdict"] == "not certified"
    case = next(c for c in rep["cases"] if c["case"] == "test_relu")
    assert case["outcome"] == "failed"
    assert "float64" in case["message"] and "declared tensor(float)" in case["message"]


def test_missing_decline_reason_is_flagged(tmp_path):
    code, rep, out = run_suite("BrokenNoReasonExecutionProvider", tmp_path, "--only", "contract", "-k", "capability")
    assert code == 1
    assert rep["contract"]["get_capability"]["ok"] is False
    assert "gave no reason" in rep["contract"]["get_capability"]["detail"]


def test_leak_is_flagged(tmp_path):
    code, rep, out = run_suite("BrokenLeakyExecutionProvider", tmp_path, "--only", "contract", "-k", "churn")
    assert code == 1
    churn = rep["contract"]["session_churn"]
    assert churn["ok"] is False and "memory grew" in churn["detail"]


def test_correct_provider_report_is_well_formed(tmp_path):
    code, rep, out = run_suite("CPUExecutionProvider", tmp_path, "-k", f"test_abs or {SELECT}", known=True)
    assert code == 0, out[-2000:]
    assert rep["verdict"] == "certified" and rep["reasons"] == []
    assert all(c["ok"] for name, c in rep["contract"].items() if c["detail"] != "not run")
    assert rep["totals"]["node"]["passed"] >= 2 and rep["operators"]["Abs"]["passed"] >= 1
    md = (tmp_path / "conformance-CPUExecutionProvider.md").read_text()
    assert md.startswith("# Conformance report: CPUExecutionProvider") and "**Verdict: certified**" in md
