"""Without a loadable OpenVINO the provider says so, with the reason, and sessions fall back to the
CPU provider. Not gated on the library: this is the case to check where it is missing."""

from __future__ import annotations

import importlib.util

import pytest
from ort_conformance.unavailable import check_falls_back_when_unavailable
from ort_ep_openvino import runtime

NAME = "OpenVINOExecutionProvider"


def test_missing_library_makes_it_unavailable_and_sessions_fall_back():
    with pytest.raises(runtime.RuntimeUnavailable, match=runtime.LIBRARY_ENV):
        runtime.load_runtime("/nonexistent/libopenvino_c.so")
    check_falls_back_when_unavailable(NAME, {runtime.LIBRARY_ENV: "/nonexistent/libopenvino_c.so"},
                                      runtime.LIBRARY_ENV)


def test_no_openvino_package_names_the_package_to_install(monkeypatch):
    monkeypatch.delenv(runtime.LIBRARY_ENV, raising=False)
    monkeypatch.setattr(runtime, "library_candidates", lambda: [])
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(runtime.RuntimeUnavailable, match="the openvino package is not installed: pip install openvino"):
        runtime.load_runtime()


def test_a_library_without_the_c_api_is_named_with_what_it_lacks():
    import ctypes.util

    libc = ctypes.util.find_library("c")
    with pytest.raises(runtime.RuntimeUnavailable, match=r"lacks ov_"):
        runtime.load_runtime(libc)
