"""Certification does not depend on the machine's load: the runner turns off ort-core's load-adaptive BLAS
threads (ort_core.threads), on which the ill-conditioned light SqueezeNet flips."""

from __future__ import annotations

import os

import pytest
from ort_conformance import runner
from ort_conformance.cases import model_cases
from threadpoolctl import threadpool_info

from ort_core import threads


def _blas_threads() -> list[int]:
    return [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]


@pytest.mark.skipif(max(_blas_threads(), default=1) < 2, reason="BLAS runs on one thread here: no load to adapt to")
def test_a_busy_machine_does_not_change_a_case_result(monkeypatch):
    monkeypatch.delenv(threads.ADAPTIVE_ENV, raising=False)
    case = next(c for c in model_cases() if c.name == "test_squeezenet" and c.kind == "light")
    before = max(_blas_threads())
    monkeypatch.setattr(threads, "others_running", lambda: threads.available_cpus())  # every CPU taken
    monkeypatch.setattr(threads.BLAS, "_next_check", 0.0)
    result = runner.run_case(runner.CPU, case)
    assert result.ok, result.message
    assert max(_blas_threads()) >= before  # BLAS was not given fewer threads for the load (an adjustment
    # left by earlier runs in this process is taken back)
    assert threads.ADAPTIVE_ENV not in os.environ  # the process's environment is as it was


def test_the_users_own_setting_is_kept(monkeypatch):
    monkeypatch.setenv(threads.ADAPTIVE_ENV, "1")
    with runner.steady_blas():
        assert os.environ[threads.ADAPTIVE_ENV] == "1"
    assert os.environ[threads.ADAPTIVE_ENV] == "1"
