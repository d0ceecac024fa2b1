"""Without usable CUDA libraries or a GPU the provider says why, and sessions fall back to the CPU provider.
Each case forces its condition through the environment, so these hold where a GPU is too."""

from __future__ import annotations

import os
import subprocess
import sys

from cuda_helpers import NAME
from ort_conformance.unavailable import check_falls_back_when_unavailable
from ort_ep_cuda import libraries, nvml


def test_missing_libraries_make_it_unavailable_and_sessions_fall_back(tmp_path):
    check_falls_back_when_unavailable(NAME, {libraries.LIBRARY_DIR_ENV: str(tmp_path)},
                                      f"names {tmp_path}, which has no libcudart.so.13")


def test_no_visible_gpu_makes_it_unavailable_naming_why(monkeypatch):
    # where NVML answers (a driver is installed): the hidden GPUs; else the CUDA runtime's answer, no driver
    # (error 35) or no device (error 100)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    counted = nvml.probe()
    expected = "cudaGetDeviceCount failed" if counted is None else counted[1]
    check_falls_back_when_unavailable(NAME, {"CUDA_VISIBLE_DEVICES": ""}, expected)


def test_ort_core_providers_lists_it_unavailable_with_the_reason(tmp_path):
    cli = os.path.join(os.path.dirname(sys.executable), "ort-core")
    done = subprocess.run([cli, "providers"], env={**os.environ, libraries.LIBRARY_DIR_ENV: str(tmp_path)},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    line = next(line for line in done.stdout.splitlines() if line.startswith(NAME))
    assert "unavailable" in line and "pip install nvidia-cuda-runtime" in line and "[devices cuda:0" in line


def test_without_pathfinder_or_system_library_the_reason_names_the_wheels(monkeypatch):
    monkeypatch.delenv(libraries.LIBRARY_DIR_ENV, raising=False)
    monkeypatch.setattr(libraries, "_pathfinder", lambda short: (None, "cuda-pathfinder is not installed"))
    monkeypatch.setattr(libraries, "_loadable", lambda soname: False)
    path, why = libraries.find("nvrtc")
    assert path is None
    assert why == ("libnvrtc.so.13 was not found (cuda-pathfinder is not installed): pip install nvidia-cuda-runtime "
                   "nvidia-cuda-nvrtc nvidia-cublas cuda-pathfinder (NVIDIA's CUDA 13 wheels), or set "
                   "ORT_EP_CUDA_LIBRARY_DIR to a folder holding libcudart.so.13, libnvrtc.so.13, libcublas.so.13")


def test_library_dir_is_searched_first(monkeypatch, tmp_path):
    (tmp_path / "libcublas.so.13").write_bytes(b"")
    monkeypatch.setenv(libraries.LIBRARY_DIR_ENV, str(tmp_path))
    assert libraries.find("cublas") == (str(tmp_path / "libcublas.so.13"), "$ORT_EP_CUDA_LIBRARY_DIR")


def test_pathfinder_finds_nvidias_wheels(monkeypatch):
    monkeypatch.delenv(libraries.LIBRARY_DIR_ENV, raising=False)
    path, where = libraries.find("cudart")
    assert path is not None and path.endswith("libcudart.so.13") and where.startswith("cuda-pathfinder")
