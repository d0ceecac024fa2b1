"""Provider options of QNNExecutionProvider, with onnxruntime's QNN names where it has them.

Parses and validates the options dict a session passes (values may be strings, as onnxruntime passes them)
into ``Options``; whether the backend can honour them (its precision on the chosen SoC) is checked by the
provider against the loaded library.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ort_core.plugins import user_cache_dir

from . import qnn_api as q
from .runtime import Target

PERFORMANCE_MODES = ("default", "burst", "balanced", "high_performance", "high_power_saver", "low_balanced",
                     "low_power_saver", "power_saver", "extreme_power_saver", "sustained_high_performance")
PROFILING_LEVELS = {"off": 0, "basic": q.PROFILE_BASIC, "detailed": q.PROFILE_DETAILED}
CACHE_DIR_ENV = "ORT_EP_QNN_CACHE_DIR"


def default_cache_dir() -> str:
    """$ORT_EP_QNN_CACHE_DIR, else $XDG_CACHE_HOME/ort-ep-qnn, else ~/.cache/ort-ep-qnn."""
    return user_cache_dir("ort-ep-qnn", CACHE_DIR_ENV)


HTP_ARCHS = (0, 68, 69, 73, 75, 79, 81)  # QnnHtpDevice_Arch_t's values (0: the backend's default)
DEFAULTS = {"backend_type": "htp", "backend_path": "", "soc_model": "0", "htp_arch": "0",
            "htp_performance_mode": "default", "enable_htp_fp16_precision": "0", "profiling_level": "off",
            "cache_dir": "(default)", "context_cache": "0"}
"""Accepted names and their defaults. ``cache_dir`` '(default)' stands for ``default_cache_dir()``; an empty
string keeps probe verdicts in memory only. ``context_cache`` '1' keeps every compiled QNN context in
``cache_dir`` too, so that a later session with the same subgraph, options, SoC and QNN build loads it instead of
building it (ort-core's own option: onnxruntime's QNN reaches the same through EPContext models only)."""


@dataclass(frozen=True)
class Options:
    backend_path: str = ""  # "": the discovered libQnnHtp (see library.find_backend)
    soc_model: int = 0  # 0: the backend's default target (on the x86 simulator: an HTP v68)
    htp_performance_mode: str = "default"
    fp16: bool = False
    profiling_level: str = "off"
    cache_dir: str = ""
    context_cache: bool = False
    htp_arch: int = 0  # 0: the backend's default (v68 on the x86 simulator)

    @property
    def target(self) -> Target:
        return Target(self.soc_model, self.htp_arch)

    @property
    def precision(self) -> int:
        return q.PRECISION_FLOAT16 if self.fp16 else q.PRECISION_FLOAT32

    @property
    def profile_level(self) -> int:
        return PROFILING_LEVELS[self.profiling_level]


def parse(options: dict | None) -> Options:
    """Validate ``options``; raises ValueError naming the bad option and what is accepted (unknown names are
    refused by the core before this runs, against ``DEFAULTS``)."""
    options = dict(options or {})
    unknown = sorted(set(options) - set(DEFAULTS))
    if unknown:
        raise ValueError(f"unknown provider option(s) {unknown}; QNNExecutionProvider accepts {sorted(DEFAULTS)}")
    backend_path = str(options.get("backend_path", "") or "")
    backend_type = str(options.get("backend_type", "htp")).strip().lower() or "htp"
    if backend_type != "htp":
        raise ValueError(f"backend_type={options['backend_type']!r}: only 'htp' (QNN's HTP backend) is driven so far")
    if "backend_type" in options and backend_path:
        raise ValueError("backend_type and backend_path are mutually exclusive; give one")
    raw_soc = str(options.get("soc_model", "0")).strip() or "0"
    try:
        soc = int(raw_soc)
    except ValueError:
        raise ValueError(f"soc_model={options['soc_model']!r}: expected a whole number (Qualcomm's SoC model id, "
                         "e.g. 57 for SM8650; 0 leaves the backend's default)") from None
    if soc < 0:
        raise ValueError(f"soc_model={soc}: must be >= 0")
    mode = str(options.get("htp_performance_mode", "default")).strip().lower() or "default"
    if mode not in PERFORMANCE_MODES:
        raise ValueError(f"htp_performance_mode={options['htp_performance_mode']!r}: expected one of "
                         f"{', '.join(PERFORMANCE_MODES)}")
    fp16 = _flag(options, "enable_htp_fp16_precision")
    level = str(options.get("profiling_level", "off")).strip().lower() or "off"
    if level not in PROFILING_LEVELS:
        raise ValueError(f"profiling_level={options['profiling_level']!r}: expected one of "
                         f"{', '.join(PROFILING_LEVELS)}")
    cache_dir = str(options.get("cache_dir", "(default)"))
    if cache_dir == "(default)":
        cache_dir = default_cache_dir()
    if cache_dir:
        cache_dir = os.path.abspath(os.path.expanduser(cache_dir))
    raw_arch = str(options.get("htp_arch", "0")).strip().lower().removeprefix("v") or "0"
    if not raw_arch.isdigit() or int(raw_arch) not in HTP_ARCHS:
        raise ValueError(f"htp_arch={options['htp_arch']!r}: expected one of {', '.join(map(str, HTP_ARCHS))} (the "
                         "Hexagon HTP architecture, e.g. 73 for v73; 0 leaves the backend's default)")
    context_cache = _flag(options, "context_cache")
    if context_cache and not cache_dir:
        raise ValueError("context_cache=1 keeps compiled contexts in cache_dir, which is empty: give cache_dir a "
                         f"folder (or leave it at its default, ${CACHE_DIR_ENV} or ~/.cache/ort-ep-qnn)")
    return Options(backend_path, soc, mode, fp16, level, cache_dir, context_cache, int(raw_arch))


def _flag(options: dict, key: str) -> bool:
    value = str(options.get(key, "0")).strip().lower()
    if value in ("1", "true"):
        return True
    if value in ("0", "false", ""):
        return False
    raise ValueError(f"{key}={options[key]!r}: expected '0' or '1'")
