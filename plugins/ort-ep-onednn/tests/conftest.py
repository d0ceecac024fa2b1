"""Fixtures shared by the oneDNN provider's tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def programs(monkeypatch):
    """The lowered programs the kernels build while the test runs (their steps name the op and the
    implementation oneDNN picked)."""
    from ort_ep_onednn import kernel as K

    built = []
    orig = K.Compiled.__init__

    def spy(self, lib, program):
        orig(self, lib, program)
        built.append(program)

    monkeypatch.setattr(K.Compiled, "__init__", spy)
    return built
