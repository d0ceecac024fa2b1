"""Every ONNX backend node case of the pinned onnx, run with providers=[NAME, CPU].

A case fails against the provider when it claimed nodes and the case does not pass (wrong
values, wrong dtype/shape, a kernel error, a claim that did not compile). Cases the provider
claims nothing in are skipped for plugins; for the CPU provider every case counts.
"""

from __future__ import annotations

import functools

import pytest

from ort_conformance import known
from ort_conformance.runner import CPU, run_case


def check_case(provider, case, ort_state):
    result = run_case(provider, case)
    ort_state.results[case.name] = result
    if result.ok:
        return
    if provider != CPU and case.name in _cpu_known_failures() and not run_case(CPU, case).ok:
        # the CPU part of the graph is what fails: the CPU provider's own list accounts for it
        pytest.skip(f"fails on the CPU provider alone too (CPU known failure: {_cpu_known_failures()[case.name]})")
    attributable = provider == CPU or result.claimed > 0 or result.phase in ("capability", "compile")
    if not attributable:
        pytest.skip(f"not claimed by {provider} ({result.phase}: {result.message[:120]})")
    if result.phase == "session" and provider != CPU and "no requested provider can run" in result.message:
        pytest.skip(f"another node of the case has no provider: {result.message[:160]}")
    pytest.fail(f"[{result.phase}] {result.message}", pytrace=False)


def test_node(provider, node_case, ort_state):
    check_case(provider, node_case, ort_state)


@functools.cache
def _cpu_known_failures() -> dict[str, str]:
    return known.load(known.default_path(CPU))
