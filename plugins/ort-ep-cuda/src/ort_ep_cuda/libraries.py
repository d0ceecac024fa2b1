"""Where NVIDIA's CUDA libraries are: found, never bundled.

In order: ``$ORT_EP_CUDA_LIBRARY_DIR`` (a folder holding all three), NVIDIA's ``cuda-pathfinder`` (NVIDIA's
wheels in site-packages, conda, then the system's search path), else the system's dynamic loader by soname.
Returns paths (or a reason naming what to install); loading and checking the libraries is ``runtime``'s.
"""

from __future__ import annotations

import ctypes
import os

LIBRARY_DIR_ENV = "ORT_EP_CUDA_LIBRARY_DIR"
LIBRARIES = {"cudart": "libcudart.so.13", "nvrtc": "libnvrtc.so.13", "cublas": "libcublas.so.13"}
"""Short name (cuda-pathfinder's) -> the CUDA 13 soname this plugin's declarations were written for."""

WHEELS = "nvidia-cuda-runtime nvidia-cuda-nvrtc nvidia-cublas cuda-pathfinder"
HOW_TO_GET = f"pip install {WHEELS} (NVIDIA's CUDA 13 wheels), or set {LIBRARY_DIR_ENV} to a folder holding " \
             f"{', '.join(LIBRARIES.values())}"


def _pathfinder(short: str) -> tuple[str | None, str]:
    try:
        from cuda import pathfinder
    except ImportError:
        return None, "cuda-pathfinder is not installed"
    try:
        loaded = pathfinder.load_nvidia_dynamic_lib(short)
    except Exception as e:  # noqa: BLE001 - DynamicLibNotFoundError and friends; any failure is "not found"
        return None, f"cuda-pathfinder: {type(e).__name__}: {e}"
    return loaded.abs_path, f"cuda-pathfinder ({getattr(loaded, 'found_via', 'found')})"


def find(short: str) -> tuple[str | None, str]:
    """(path or soname to dlopen, where it was found) for ``short`` ('cudart', 'nvrtc', 'cublas'), or
    (None, why it was not found, with what to install)."""
    soname = LIBRARIES[short]
    folder = os.environ.get(LIBRARY_DIR_ENV)
    if folder:
        path = os.path.join(folder, soname)
        if os.path.isfile(path):
            return path, f"${LIBRARY_DIR_ENV}"
        return None, f"${LIBRARY_DIR_ENV} names {folder}, which has no {soname}; unset it or {HOW_TO_GET}"
    path, how = _pathfinder(short)
    if path:
        return path, how
    if _loadable(soname):  # an exact soname: find_library could answer another CUDA major version
        return soname, "the system's library search path"
    return None, f"{soname} was not found ({how}): {HOW_TO_GET}"


def _loadable(soname: str) -> bool:
    try:
        ctypes.CDLL(soname)
    except OSError:
        return False
    return True
