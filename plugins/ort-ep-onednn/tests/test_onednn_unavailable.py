"""Without a loadable oneDNN the provider says so, with the reason, and sessions fall back to the CPU
provider. Not gated on the library: this is the case to check where it is missing."""

from __future__ import annotations

import pytest
from ort_conformance.unavailable import check_falls_back_when_unavailable
from ort_ep_onednn import library as L

NAME = "DnnlExecutionProvider"


def test_missing_library_makes_it_unavailable_and_sessions_fall_back():
    with pytest.raises(L.LibraryUnavailable, match=L.LIBRARY_ENV):
        L.load_library("/nonexistent/libdnnl.so.3")
    check_falls_back_when_unavailable(NAME, {L.LIBRARY_ENV: "/nonexistent/libdnnl.so.3"}, L.LIBRARY_ENV)


def test_no_installed_library_names_the_wheel_to_install(monkeypatch):
    monkeypatch.delenv(L.LIBRARY_ENV, raising=False)
    monkeypatch.setattr(L, "library_candidates", lambda: [])
    with pytest.raises(L.LibraryUnavailable, match=r"libdnnl.so.3 not found: pip install onednn-cpu-gomp==2023.2.0"):
        L.load_library()


def test_the_reason_is_remembered_and_given_again():
    calls = []

    def load():
        calls.append(1)
        raise L.LibraryUnavailable("no oneDNN here")

    holder = type(L.library)(load, L.LibraryUnavailable)
    assert holder.reason() == holder.reason() == "no oneDNN here"
    with pytest.raises(L.LibraryUnavailable, match="no oneDNN here"):
        holder()
    assert len(calls) == 1  # looked for once
