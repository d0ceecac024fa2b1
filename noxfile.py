"""Developer sessions: tests, lint, demo, bench.

    python3 -m nox -s tests            # unit, kernel and light-model tests
    python3 -m nox -s lint             # ruff
    python3 -m nox -s demo             # install ort-core and run the bundled demo
    python3 -m nox -s bench            # latency side by side with onnxruntime (ratios)
    python3 -m nox -s conformance      # certify every installed provider (-- --provider NAME for one)
"""

from __future__ import annotations

import glob
import json
import os

import nox

nox.options.sessions = ["lint", "tests"]
nox.options.default_venv_backend = "venv"

CORE = "core"
RECORDER = "core/tests/fixtures/ort-ep-recorder"
CONFORMANCE = "conformance"
BROKEN = "conformance/fixtures/ort-ep-broken"
PLUGINS = sorted(os.path.dirname(p) for p in glob.glob("plugins/*/pyproject.toml"))
REPORTS = "reports"


@nox.session
def tests(session: nox.Session) -> None:
    """Unit, kernel, plugin and suite tests, then the CPU provider's conformance run.

    onnxruntime is installed here as the yardstick some tests compare with; never a runtime dependency.
    """
    session.install("-e", f"{CORE}[test,image]", "-e", RECORDER, "-e", CONFORMANCE, "-e", BROKEN, "onnxruntime",
                    *[a for p in PLUGINS for a in ("-e", p)])
    test_dirs = ["core/tests", "conformance/tests", *[f"{p}/tests" for p in PLUGINS if os.path.isdir(f"{p}/tests")]]
    session.run("pytest", *test_dirs, "-q", "-p", "no:cacheprovider", *session.posargs)
    session.run("ort-conformance", "--provider", "CPUExecutionProvider", "--report", REPORTS)


@nox.session
def conformance(session: nox.Session) -> None:
    """Certify providers: every installed, available one, or `-- --provider NAME`.

    Reports go to reports/conformance-<provider>.{json,md}; the session fails when any
    provider run is not certified.
    """
    session.install("-e", f"{CORE}[image]", "-e", CONFORMANCE, *[a for p in PLUGINS for a in ("-e", p)])
    args = list(session.posargs)
    if "--provider" in args:
        names = [args[args.index("--provider") + 1]]
        del args[args.index("--provider"):args.index("--provider") + 2]
    else:
        query = "import json, ort_core; print(json.dumps(ort_core.get_available_providers()))"
        out = session.run("python", "-c", query, silent=True)
        names = json.loads(out.strip().splitlines()[-1])
    failed = []
    for name in names:
        session.run("ort-conformance", "--provider", name, "--report", REPORTS, *args, success_codes=[0, 1])
        report = os.path.join(REPORTS, f"conformance-{name}.json")
        with open(report, encoding="utf-8") as f:
            if json.load(f)["verdict"] != "certified":
                failed.append(name)
    if failed:
        session.error(f"not certified: {', '.join(failed)} (see {REPORTS}/)")


@nox.session
def lint(session: nox.Session) -> None:
    session.install("ruff")
    session.run("ruff", "check", "core", "conformance", "plugins", "noxfile.py", "bench")


@nox.session
def demo(session: nox.Session) -> None:
    """What a new user sees: install the core and run its bundled demo model."""
    session.install(CORE)
    session.run("ort-core", "demo")


@nox.session
def bench(session: nox.Session) -> None:
    """Median latency of ort-core vs onnxruntime on the same models in the same run.

    onnxruntime is installed here only, as the yardstick; it is never a runtime dependency.
    Pass model names or paths after `--` (default: light ResNet-50 and the demo CNN).
    """
    session.install(CORE, "onnxruntime")
    session.run("python", "bench/bench_latency.py", *session.posargs)
