"""Which kernels numpy's OpenBLAS runs on this CPU, and picking the AVX-512 ones where it would not.

OpenBLAS chooses its kernels once, when the library loads (at ``import numpy``). On CPUs it does not
recognise (AMD EPYC Zen 4 under a hypervisor reports a generic model, for one) it falls back to its
AVX2 "Haswell" kernels even though AVX-512 is there, and float32 matrix products run ~1.7x slower.
Imported before numpy, ort-core sets ``OPENBLAS_CORETYPE=SkylakeX`` (AVX-512 kernels) when the CPU
has the AVX-512 subsets those kernels use and the variable is not set already; a value the user set
always wins. Imported after numpy, it cannot change the choice: ``blas_info()`` says what happened.
Nothing here touches other BLAS builds (MKL, Accelerate) or non-x86 machines.
"""

from __future__ import annotations

import ctypes
import glob
import os
import sys

ENV = "OPENBLAS_CORETYPE"
AVX512_CORE = "SkylakeX"
# the instruction subsets OpenBLAS's SkylakeX kernels are built with
_AVX512_FLAGS = {"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"}
# cores that already use AVX-512 sgemm kernels (OpenBLAS's own names, lower case)
_AVX512_CORES = {"skylakex", "cooperlake", "sapphirerapids"}

_state = {"set_by_ort_core": False, "numpy_loaded_first": False}


def cpu_flags() -> set[str]:
    """The CPU's feature flags from /proc/cpuinfo (Linux); empty elsewhere or when unreadable."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def choose_kernels_before_numpy() -> None:
    """Set OPENBLAS_CORETYPE for an AVX-512 CPU when numpy is not loaded yet and the user set nothing."""
    if "numpy" in sys.modules:
        _state["numpy_loaded_first"] = True
        return
    if os.environ.get(ENV) or os.environ.get("ORT_CORE_KEEP_BLAS_CORETYPE"):
        return
    if _AVX512_FLAGS <= cpu_flags():
        os.environ[ENV] = AVX512_CORE
        _state["set_by_ort_core"] = True


def _openblas_core() -> str:
    """OpenBLAS's chosen core name, read from the library numpy loaded ("" when unknown)."""
    try:
        import numpy as np
    except ImportError:
        return ""
    libs = os.path.join(os.path.dirname(np.__file__), os.pardir, "numpy.libs")
    for path in glob.glob(os.path.join(libs, "*openblas*")):
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for symbol in ("scipy_openblas_get_corename64_", "scipy_openblas_get_corename",
                       "openblas_get_corename64_", "openblas_get_corename"):
            fn = getattr(lib, symbol, None)
            if fn is not None:
                fn.restype = ctypes.c_char_p
                return (fn() or b"").decode("ascii", "replace")
    return ""


def blas_info() -> dict[str, object]:
    """What numpy's BLAS runs here: ``core`` (OpenBLAS's kernel family, "" if not OpenBLAS),
    ``avx512_cpu``, ``set_by_ort_core`` and, when AVX-512 kernels are left unused, ``advice``."""
    core = _openblas_core()
    avx512 = _AVX512_FLAGS <= cpu_flags()
    info: dict[str, object] = {"core": core, "avx512_cpu": avx512, "set_by_ort_core": _state["set_by_ort_core"],
                               "advice": ""}
    if core and avx512 and core.lower() not in _AVX512_CORES:
        if os.environ.get(ENV):
            how = f"{ENV}={os.environ[ENV]!r} chose them; set it to {AVX512_CORE}"
        else:
            how = f"numpy was imported before ort_core; import ort_core first or set {ENV}={AVX512_CORE}"
        info["advice"] = (f"numpy's OpenBLAS runs its {core} kernels on this AVX-512 CPU ({how} for faster "
                          "matrix products)")
    return info
