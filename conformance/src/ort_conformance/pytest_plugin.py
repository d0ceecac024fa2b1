"""pytest plugin of the conformance suite: options, case parametrization, result collection.

Loaded with ``-p ort_conformance.pytest_plugin`` (the ``ort-conformance`` command does this);
the checks themselves live in ``ort_conformance.suite``; reports are written by report.py.
"""

from __future__ import annotations

import pytest

from . import known, report, vendor
from .cases import model_cases, node_cases


def pytest_addoption(parser):
    g = parser.getgroup("ort-conformance")
    g.addoption("--ort-provider", default=None, help="provider under test, e.g. CPUExecutionProvider")
    g.addoption("--ort-report", default=None, help="folder for the JSON and Markdown reports")
    g.addoption("--ort-known-failures", default=None, help="known-failures file (default: the packaged one)")
    g.addoption("--ort-update-known-failures", action="store_true",
                help="rewrite the known-failures file from this run's failing cases")
    g.addoption("--ort-plugin-source", default=None,
                help="the folder or wheel the plugin was installed from (for the report's provenance)")


class State:
    """Everything the run learns, for the report."""

    def __init__(self, config) -> None:
        self.provider: str = config.getoption("--ort-provider")
        kf = config.getoption("--ort-known-failures") or known.default_path(self.provider)
        self.known_path = kf
        self.known = known.load(kf)
        # the plugin's own list (vendor.py): excused, but reported apart from the verdict
        self.vendor_path, self.vendor_known = vendor.load(self.provider)
        self.plugin_source: str | None = config.getoption("--ort-plugin-source")
        self.results: dict[str, object] = {}  # case name -> CaseResult
        self.outcomes: dict[str, str] = {}  # case or contract test -> passed/failed/skipped/xfailed/xpassed
        self.contract: dict[str, tuple[bool, str]] = {}
        self.report_dir = config.getoption("--ort-report")
        self.update = config.getoption("--ort-update-known-failures")


def pytest_configure(config):
    if config.getoption("--ort-provider"):
        config._ort_state = State(config)
        config.pluginmanager.register(_Collector(config._ort_state), "ort-conformance-collector")


def _state(config) -> State:
    state = getattr(config, "_ort_state", None)
    if state is None:
        raise pytest.UsageError("the conformance suite needs --ort-provider NAME")
    return state


@pytest.fixture(scope="session")
def ort_state(request) -> State:
    return _state(request.config)


@pytest.fixture(scope="session")
def provider(ort_state) -> str:
    from ort_core.plugins.manager import get_registry

    reg = get_registry().providers.get(ort_state.provider)
    if reg is None:
        pytest.fail(f"provider '{ort_state.provider}' is not installed; installed: {sorted(get_registry().providers)}")
    if not reg.info.available:
        pytest.fail(f"provider '{ort_state.provider}' is unavailable: {reg.info.reason}")
    return ort_state.provider


def pytest_generate_tests(metafunc):
    if "node_case" in metafunc.fixturenames:
        cases = node_cases()
        metafunc.parametrize("node_case", cases, ids=[c.name for c in cases])
    if "model_case" in metafunc.fixturenames:
        cases = model_cases()
        metafunc.parametrize("model_case", cases, ids=[f"{c.kind}/{c.name}" for c in cases])


def _case_name(item) -> str | None:
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return None
    case = callspec.params.get("node_case") or callspec.params.get("model_case")
    return None if case is None else case.name


def pytest_collection_modifyitems(config, items):
    state = getattr(config, "_ort_state", None)
    if state is None or state.update:
        return
    for item in items:
        name = _case_name(item)
        if name in state.known:
            reason = state.known[name]
            # a case whose expected values are random draws may match by chance: not strict
            strict = not reason.startswith(known.RANDOM_PREFIX)
            item.add_marker(pytest.mark.xfail(reason=f"known failure: {reason}", strict=strict))
        elif name in state.vendor_known:
            # not strict: a vendor's case that now passes is reported as such, not as a failure
            item.add_marker(pytest.mark.xfail(reason=f"known by the vendor: {state.vendor_known[name]}", strict=False))


class _Collector:
    """Records each test's outcome into the run's State (registered per run: no module state)."""

    def __init__(self, state: State) -> None:
        self.state = state

    def pytest_runtest_logreport(self, report):
        key = report.nodeid.split("::")[-1]
        if hasattr(report, "wasxfail"):
            outcome = "xpassed" if report.passed else "xfailed"
        else:
            outcome = report.outcome
        # the call phase decides; setup/teardown only when they did not pass
        if report.when == "call" or outcome != "passed":
            self.state.outcomes[key] = outcome


def pytest_sessionfinish(session, exitstatus):
    state = getattr(session.config, "_ort_state", None)
    if state is None:
        return
    if state.update:
        # keep reviewed reasons of cases that still fail; new failures get the run's message
        failing = {name: state.known.get(name) or r.message or r.status
                   for name, r in state.results.items() if not r.ok}
        import onnx

        known.write(state.known_path, state.provider, failing,
                    f"generated by ort-conformance --ort-update-known-failures with onnx {onnx.__version__}")
    if state.report_dir:
        report.write(state, state.report_dir)
