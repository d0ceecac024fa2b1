"""The verdict of a report: a listed case whose expected values are random draws may pass by chance
(its xfail is not strict) without costing the certificate; any other listed case that passes does."""

from __future__ import annotations

from types import SimpleNamespace

from ort_conformance import known, report
from ort_conformance.report import CHECKS, CONTRACT


def _state(known_failures: dict[str, str]) -> SimpleNamespace:
    case = SimpleNamespace(case="test_bernoulli", kind="node", status="pass", ok=True, claimed=1, nodes=1,
                           ops=("Bernoulli",), claimed_ops=("Bernoulli",), phase="", message="", seconds=0.001)
    return SimpleNamespace(provider="CPUExecutionProvider", plugin_source=None, known=known_failures,
                           known_path="CPUExecutionProvider.txt", vendor_known={}, vendor_path=None,
                           results={"test_bernoulli": case}, outcomes={"test_node[test_bernoulli]": "xpassed"},
                           contract={name: (True, "") for name in CONTRACT + CHECKS})


def test_a_random_case_passing_by_chance_keeps_the_certificate():
    rep = report.build(_state({"test_bernoulli": f"{known.RANDOM_PREFIX} drawn from numpy's global state"}))
    assert rep["verdict"] == "certified" and rep["failed_tests"] == []


def test_another_listed_case_that_passes_must_come_off_the_list():
    rep = report.build(_state({"test_bernoulli": "a wrong result we know of"}))
    assert rep["verdict"] == "not certified" and rep["failed_tests"] == ["test_node[test_bernoulli]"]
    assert any("now pass" in r for r in rep["reasons"])
