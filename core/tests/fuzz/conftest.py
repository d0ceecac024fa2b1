"""Fuzz session plumbing: the optional address-space cap, and the summary (examples per test, outcomes
by kind, findings) printed after the tests."""

from __future__ import annotations

import pytest

from .harness import STATS


@pytest.fixture(scope="session", autouse=True)
def _memory_cap(request):
    """--fuzz-memory-gib: RLIMIT_AS for this process while the fuzz tests run."""
    gib = request.config.getoption("--fuzz-memory-gib")
    if not gib:
        yield
        return
    import resource

    old = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (int(gib * (1 << 30)), old[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, old)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not STATS.examples:
        return
    tr = terminalreporter
    tr.section("ort-core fuzz summary")
    total = sum(STATS.examples.values())
    tr.write_line(f"examples run: {total} ({', '.join(f'{k}: {v}' for k, v in sorted(STATS.examples.items()))})")
    tr.write_line("outcomes: " + ", ".join(f"{k}: {v}" for k, v in STATS.outcomes.most_common()))
    tr.write_line(f"findings: {len(STATS.findings)}")
    for f in STATS.findings[:20]:
        tr.write_line("  " + f)
