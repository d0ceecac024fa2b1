"""Without a usable QNN library the provider says so, with a reason naming what to install, and sessions fall
back to the CPU provider; options are validated without the library. Not gated on the library: these are the
cases to check where it is missing. Nothing here loads libQnnHtp in this process.
"""

from __future__ import annotations

import ctypes.util
import importlib.util

import pytest
from ort_conformance.unavailable import check_falls_back_when_unavailable
from ort_ep_qnn import library, runtime
from ort_ep_qnn.options import DEFAULTS, Options, parse

NAME = "QNNExecutionProvider"


def test_missing_library_makes_it_unavailable_and_sessions_fall_back():
    check_falls_back_when_unavailable(NAME, {library.BACKEND_PATH_ENV: "/nonexistent/libQnnHtp.so"},
                                      "names /nonexistent/libQnnHtp.so, which does not exist")


def test_no_qnn_anywhere_names_the_package_to_install(monkeypatch):
    monkeypatch.delenv(library.BACKEND_PATH_ENV, raising=False)
    monkeypatch.delenv(library.SDK_ROOT_ENV, raising=False)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    path, why = library.find_backend()
    assert path is None
    assert "libQnnHtp.so was not found" in why and "pip install onnxruntime-qnn" in why and "QNN_SDK_ROOT" in why


def test_sdk_root_is_searched_for_this_platforms_library(monkeypatch, tmp_path):
    monkeypatch.delenv(library.BACKEND_PATH_ENV, raising=False)
    monkeypatch.setattr(library.platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(library.sys, "platform", "linux")
    folder = tmp_path / "lib" / "x86_64-linux-clang"
    folder.mkdir(parents=True)
    (folder / "libQnnHtp.so").write_bytes(b"")
    monkeypatch.setenv(library.SDK_ROOT_ENV, str(tmp_path))
    assert library.find_backend() == (str(folder / "libQnnHtp.so"), "$QNN_SDK_ROOT")
    monkeypatch.setenv(library.SDK_ROOT_ENV, str(tmp_path / "empty"))
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    path, why = library.find_backend()
    assert path is None and "has no lib/<platform>/libQnnHtp.so" in why


def test_a_library_that_is_not_qnn_is_refused_with_the_reason():
    libc = ctypes.util.find_library("c")
    if libc is None:
        pytest.skip("no libc to point at")
    with pytest.raises(runtime.QnnUnavailable, match="does not export QnnInterface_getProviders"):
        runtime.Backend(libc)


def test_options_are_parsed_and_bad_values_named():
    assert parse({}) == Options(cache_dir=parse({}).cache_dir)
    opts = parse({"soc_model": "57", "enable_htp_fp16_precision": "1", "profiling_level": "BASIC",
                  "htp_performance_mode": "burst", "cache_dir": "", "htp_arch": "v75"})
    assert (opts.soc_model, opts.fp16, opts.profile_level, opts.htp_performance_mode, opts.cache_dir) == \
        (57, True, 1, "burst", "")
    assert opts.target == (57, 75) and str(opts.target) == "soc_model=57, htp_arch=75"
    assert parse({}).target == (0, 0) and str(parse({}).target) == "soc_model=0"
    assert sorted(DEFAULTS) == ["backend_path", "backend_type", "cache_dir", "context_cache",
                                "enable_htp_fp16_precision", "htp_arch", "htp_performance_mode", "profiling_level",
                                "soc_model"]
    for bad, match in [({"soc_model": "x"}, "soc_model='x'"), ({"soc_model": "-1"}, "must be >= 0"),
                       ({"htp_arch": "70"}, "htp_arch='70': expected one of 0, 68, 69, 73, 75, 79, 81"),
                       ({"htp_arch": "x"}, "htp_arch='x'"),
                       ({"htp_performance_mode": "turbo"}, "htp_performance_mode='turbo'"),
                       ({"enable_htp_fp16_precision": "2"}, "expected '0' or '1'"),
                       ({"profiling_level": "optrace"}, "profiling_level='optrace'"),
                       ({"backend_type": "gpu"}, "only 'htp'"),
                       ({"backend_type": "htp", "backend_path": "x.so"}, "mutually exclusive"),
                       ({"backend": "htp"}, "unknown provider option")]:
        with pytest.raises(ValueError, match=match):
            parse(bad)


def test_default_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("ORT_EP_QNN_CACHE_DIR", str(tmp_path / "c"))
    assert parse({}).cache_dir == str(tmp_path / "c")
    monkeypatch.delenv("ORT_EP_QNN_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert parse({}).cache_dir == str(tmp_path / "xdg" / "ort-ep-qnn")
