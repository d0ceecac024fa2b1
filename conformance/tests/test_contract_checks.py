"""The behaviour checks (ort_conformance.contract_checks) flag each deliberately broken fixture of
ort-ep-broken (contract.py there) by the check aimed at its fault, and by no other; the correct
providers pass them all; the report shows them as a section with one verdict line per check."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings

import pytest
from ort_conformance import contract_checks, report
from ort_conformance.contract_checks import CHECKS

WRITES_INPUT = "BrokenWritesInputExecutionProvider"
ALIASED = "BrokenAliasedOutputExecutionProvider"
REUSED = "BrokenReusedOutputExecutionProvider"
RECOMPILES = "BrokenRecompilesExecutionProvider"
DOUBLE = "BrokenDoubleWeightsExecutionProvider"
UNSYNCED = "BrokenUnsyncedExecutionProvider"
CLAIM_FAIL = "BrokenClaimThenFailExecutionProvider"
READ_ONLY = "BrokenReadOnlyOutputExecutionProvider"

FLAGGED_BY = {WRITES_INPUT: "input_mutation", ALIASED: "output_aliasing", REUSED: "output_aliasing",
              RECOMPILES: "recompile", DOUBLE: "baked_weights", UNSYNCED: "stream_sync",
              CLAIM_FAIL: "claim_then_fail", READ_ONLY: "output_aliasing"}
CORRECT = ("CPUExecutionProvider", "ExampleExecutionProvider", "OpenVINOExecutionProvider", "DnnlExecutionProvider")


@pytest.fixture(scope="module", autouse=True)
def providers_installed():
    import ort_core

    missing = [p for p in [*FLAGGED_BY, "ExampleExecutionProvider"] if p not in ort_core.get_available_providers()]
    if missing:
        pytest.fail(f"{missing} not installed (nox -s tests installs conformance/fixtures/ort-ep-broken "
                    "and the plugins)")


def _run(provider: str, check: str, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the broken fixtures make the session warn, as they should
        return CHECKS[check](provider, **kwargs)


@pytest.mark.parametrize("provider", list(FLAGGED_BY))
def test_each_fixture_fails_its_check_and_only_it(provider):
    failed = {name for name in CHECKS if not _run(provider, name).ok}
    assert failed == {FLAGGED_BY[provider]}


def test_kernel_writing_into_a_feed_and_a_weight():
    v = _run(WRITES_INPUT, "input_mutation")
    assert not v.ok
    assert "elementwise: run() changed the caller's feed 'x'" in v.detail
    assert f"on {WRITES_INPUT} wrote into its input 'x' (a feed)" in v.detail
    assert f"on {WRITES_INPUT} wrote into its input 'w' (a weight)" in v.detail


def test_outputs_aliasing_a_weight_a_feed_and_each_other():
    v = _run(ALIASED, "output_aliasing")
    assert not v.ok and v.detail.startswith("identities: ")
    assert "returned output 'a' in the memory of its input 'w' (a weight), an undeclared view" in v.detail
    assert "returned output 'm' in the memory of its input 'x' (a feed)" in v.detail
    assert "returned outputs 'm' and 'q' in the same memory" in v.detail


def test_outputs_handed_back_read_only():
    v = _run(READ_ONLY, "output_aliasing")
    assert not v.ok
    assert f"on {READ_ONLY} returned output 'r' read-only" in v.detail


def test_output_buffer_reused_by_the_next_run():
    v = _run(REUSED, "output_aliasing")
    assert not v.ok
    assert ("elementwise: the array run() returned for 'r' changed when run() was called again (an output buffer "
            "reused across runs)") in v.detail


def test_recompiling_on_every_run_is_counted():
    v = _run(RECOMPILES, "recompile")
    assert not v.ok
    assert v.detail.startswith("compiled again in 2 runs with the shapes of an earlier run: ")
    assert "elementwise: compile_program x2" in v.detail  # one subgraph, compiled again in each of 2 runs


def test_second_copy_of_baked_weights():
    v = _run(DOUBLE, "baked_weights")
    assert not v.ok
    assert v.detail.startswith("big_weight_matmul: keeps 16.0 MiB allocated by its own code after compile for "
                               "weights of 8.0 MiB")
    one_copy = _run(DOUBLE, "baked_weights", options={"second_copy": "0"})  # the same provider without the fault
    assert one_copy.ok and one_copy.detail.startswith("big_weight_matmul: keeps 8.0 MiB in Python memory")


def test_read_before_the_stream_finished():
    v = _run(UNSYNCED, "stream_sync")
    assert not v.ok
    assert "unary+busy Relu: run 1 output" in v.detail
    assert "a value was read before its stream finished writing it" in v.detail


def test_claimed_nodes_that_fail_are_named():
    v = _run(CLAIM_FAIL, "claim_then_fail")
    assert not v.ok
    assert ("elementwise: claimed node 's' (Add), node 'p' (Mul), node 'r' (Relu), node 'd' (Sub), then compile "
            "failed and the session fell back to the CPU provider") in v.detail
    assert "RuntimeError: the backend cannot compile Mul" in v.detail
    assert "unary: claimed node 'a' (Abs), node 'r' (Relu), node 'n' (Neg), node 'e' (Exp) and 1 more, then run() " \
           "failed: KernelError" in v.detail and "the backend's Relu failed" in v.detail


@pytest.mark.parametrize("provider", CORRECT)
def test_correct_providers_pass(provider):
    import ort_core

    if provider not in ort_core.get_available_providers():
        pytest.skip(f"{provider} is not available here")
    verdicts = {name: _run(provider, name) for name in CHECKS}
    assert {n: v.detail for n, v in verdicts.items() if not v.ok} == {}
    assert "elementwise" in verdicts["input_mutation"].detail and "matmul" in verdicts["output_aliasing"].detail
    assert verdicts["recompile"].detail.startswith("no compile call in 2 runs after the first")
    assert verdicts["baked_weights"].detail.startswith("n/a: the provider does not declare")


def test_example_provider_is_checked_with_a_busy_stream():
    v = _run("ExampleExecutionProvider", "stream_sync")
    assert v.ok and v.detail.startswith(f"{contract_checks.SYNC_RUNS} runs of elementwise+busy Relu")
    assert v.detail.endswith("a copy through the stream was complete at synchronize")
    assert _run("CPUExecutionProvider", "stream_sync").detail == "n/a: the provider is synchronous (no stream)"


def test_report_lists_every_check():
    assert report.CHECKS == contract_checks.NAMES == tuple(CHECKS)


def _suite(provider: str, tmp_path) -> tuple[int, dict, str, str]:
    cmd = [sys.executable, "-m", "ort_conformance.cli", "--provider", provider, "--report", str(tmp_path),
           "--only", "contract", "-k", "test_check", "--known-failures", str(tmp_path / "none.txt")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    rep = json.loads((tmp_path / f"conformance-{provider}.json").read_text())
    md = (tmp_path / f"conformance-{provider}.md").read_text()
    return proc.returncode, rep, md, proc.stdout + proc.stderr


def test_report_section_of_a_broken_plugin(tmp_path):
    code, rep, md, out = _suite(WRITES_INPUT, tmp_path)
    assert code == 1 and rep["verdict"] == "not certified", out[-2000:]
    checks = rep["contract_checks"]
    assert list(checks) == list(report.CHECKS)
    assert checks["input_mutation"]["ok"] is False and "wrote into its input 'w' (a weight)" in \
        checks["input_mutation"]["detail"]
    assert all(checks[n]["ok"] for n in report.CHECKS if n != "input_mutation")
    assert any(r.startswith("contract check 'input_mutation' failed: elementwise: run() changed the caller's feed")
               for r in rep["reasons"])
    assert "## Contract checks" in md and "- **input_mutation: FAIL** — elementwise: run() changed" in md
    assert "- **recompile: pass** — no compile call" in md


def test_report_section_of_a_correct_plugin(tmp_path):
    code, rep, md, out = _suite("ExampleExecutionProvider", tmp_path)
    assert all(c["ok"] for c in rep["contract_checks"].values()), rep["contract_checks"]
    # only the behaviour checks ran: the hook checks are 'not run', so no certificate
    assert code == 1 and all("was not run" in r for r in rep["reasons"]), rep["reasons"]
    assert "- **stream_sync: pass** — 4 runs of elementwise+busy Relu" in md
    assert "- **registration: " not in md and "| registration | FAIL | not run |" in md


def test_operator_case_names_the_claimed_nodes_that_failed_to_compile():
    from ort_conformance.cases import node_cases
    from ort_conformance.runner import run_case

    case = next(c for c in node_cases() if c.name == "test_mul")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = run_case(CLAIM_FAIL, case)
    assert (res.status, res.phase) == ("error", "compile")
    assert res.message.startswith("claimed node #0 (Mul), then: plugin 'broken' (ort-ep-broken): ort_compile for "
                                  f"'{CLAIM_FAIL}' raised RuntimeError: the backend cannot compile Mul")
