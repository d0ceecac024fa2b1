"""Developer sessions: tests, lint, demo, bench.

    python3 -m nox -s tests            # unit, kernel and light-model tests
    python3 -m nox -s lint             # ruff
    python3 -m nox -s demo             # install ort-core and run the bundled demo
    python3 -m nox -s bench            # latency side by side with onnxruntime (ratios)
"""

from __future__ import annotations

import nox

nox.options.sessions = ["lint", "tests"]
nox.options.default_venv_backend = "venv"

CORE = "core"
RECORDER = "core/tests/fixtures/ort-ep-recorder"


@nox.session
def tests(session: nox.Session) -> None:
    """Install ort-core with the test plugin fixture and run the test suite."""
    session.install("-e", f"{CORE}[test]", "-e", RECORDER)
    session.run("pytest", "core/tests", "-q", "-p", "no:cacheprovider", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    session.install("ruff")
    session.run("ruff", "check", "core", "noxfile.py", "bench")


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
