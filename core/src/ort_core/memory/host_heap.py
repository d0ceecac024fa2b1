"""The C heap numpy's arrays come from, kept for reuse while the CPU arena is on (glibc only).

The CPU provider's kernels return numpy arrays, and numpy takes their memory from malloc. glibc serves a
block of 128 KiB and more (the threshold adapts, up to 32 MiB) with a fresh mmap and unmaps it when it is
freed, so every run's large intermediates come back as new, zero-filled pages: Whisper-tiny's encoder took
about 12,800 page faults (50 MiB) per run, and ran in 165 ms with them and 140 ms without.

onnxruntime's CPU arena keeps the memory it frees for the next run. ort-core does the same for numpy's
arrays: when a session is made with the CPU arena on (``SessionOptions.enable_cpu_mem_arena`` and the CPU
provider's ``use_arena``, both on by default), glibc is told once (``mallopt``) to serve blocks up to
``MMAP_THRESHOLD`` from its heap and to keep up to ``TRIM_THRESHOLD`` of freed memory at the heap's top
instead of handing it back. This is a setting of the whole process, as onnxruntime's arena is: the
process keeps its peak heap for reuse rather than returning it. It is made once and stays.

Nothing changes when the user set glibc's own variables for this (``MALLOC_MMAP_THRESHOLD_``,
``MALLOC_TRIM_THRESHOLD_``, or glibc's tunables), when ``ORT_CORE_KEEP_MALLOC=1``, or where the C library
is not glibc (macOS, Windows, musl).
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading

MMAP_THRESHOLD = 64 << 20
TRIM_THRESHOLD = 128 << 20
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameter numbers (malloc.h)
_USER_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES")
OPT_OUT = "ORT_CORE_KEEP_MALLOC"

_state = {"done": False, "applied": False}
_lock = threading.Lock()


def keep_freed_memory() -> bool:
    """Tell glibc to keep freed memory for reuse (see the module docstring), once per process; returns
    whether the setting is in effect."""
    with _lock:
        if not _state["done"]:
            _state["done"] = True
            _state["applied"] = _apply()
        return _state["applied"]


def _apply() -> bool:
    if not sys.platform.startswith("linux") or any(os.environ.get(name) for name in _USER_SETTINGS):
        return False
    if os.environ.get(OPT_OUT, "0").strip() not in ("", "0"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the C library the interpreter runs on
    except (OSError, AttributeError):
        return False
    mallopt.restype, mallopt.argtypes = ctypes.c_int, [ctypes.c_int, ctypes.c_int]
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
