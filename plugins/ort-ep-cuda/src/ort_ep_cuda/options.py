"""Provider options of CUDAExecutionProvider, with onnxruntime's names and value spellings.

``parse`` validates the options dict a session passes (values may be strings or Python values, as onnxruntime
accepts both) into ``Options``; a bad value is a ValueError naming the option and the valid values. Whether
``device_id`` names a GPU that exists is the provider's check (it needs the runtime); nothing here loads it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ort_core.plugins import user_cache_dir

CONV_ALGO_SEARCH = ("EXHAUSTIVE", "HEURISTIC", "DEFAULT")

DEFAULTS = {
    "device_id": "0",
    "use_tf32": "0",
    "cudnn_conv_algo_search": "EXHAUSTIVE",
    "gpu_mem_limit": str(2**64 - 1),
    "enable_cuda_graph": "0",
    "do_copy_in_default_stream": "1",
}
"""Accepted names and their defaults (onnxruntime's, except ``use_tf32``: onnxruntime turns TF32 on by default;
here it is off by default so that float32 results match the CPU provider within 1e-4; set use_tf32=1 for
TF32 Tensor Cores in MatMul/Gemm). ``gpu_mem_limit`` is in bytes; onnxruntime's default means "no limit"."""

CACHE_DIR_ENV = "ORT_EP_CUDA_CACHE_DIR"


def default_cache_dir() -> str:
    """Where compiled kernels are kept: $ORT_EP_CUDA_CACHE_DIR ('' keeps none), else $XDG_CACHE_HOME/ort-ep-cuda,
    else ~/.cache/ort-ep-cuda."""
    return user_cache_dir("ort-ep-cuda", CACHE_DIR_ENV)


@dataclass(frozen=True)
class Options:
    device_id: int = 0
    use_tf32: bool = False
    cudnn_conv_algo_search: str = "EXHAUSTIVE"
    gpu_mem_limit: int = 2**64 - 1
    enable_cuda_graph: bool = False
    do_copy_in_default_stream: bool = True


def parse(options: dict | None) -> Options:
    """Validate ``options``; raises ValueError naming the bad option and what it accepts."""
    options = dict(options or {})
    unknown = sorted(set(options) - set(DEFAULTS))
    if unknown:
        raise ValueError(f"unknown provider option(s) {unknown}; CUDAExecutionProvider accepts {sorted(DEFAULTS)}")
    device_id = _whole(options, "device_id", minimum=0)
    limit = _whole(options, "gpu_mem_limit", minimum=1)
    if limit > 2**64 - 1:
        raise ValueError(f"gpu_mem_limit={options['gpu_mem_limit']!r}: must be at most {2**64 - 1} bytes")
    search = str(options.get("cudnn_conv_algo_search", "EXHAUSTIVE")).strip().upper()
    if search not in CONV_ALGO_SEARCH:
        raise ValueError(f"cudnn_conv_algo_search={options['cudnn_conv_algo_search']!r}: expected one of "
                         f"{', '.join(CONV_ALGO_SEARCH)}")
    return Options(device_id, _flag(options, "use_tf32"), search, limit, _flag(options, "enable_cuda_graph"),
                   _flag(options, "do_copy_in_default_stream"))


def _whole(options: dict, key: str, minimum: int) -> int:
    raw = options.get(key, DEFAULTS[key])
    if isinstance(raw, bool):
        raise ValueError(f"{key}={raw!r}: expected a whole number >= {minimum}")
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise ValueError(f"{key}={raw!r}: expected a whole number >= {minimum}") from None
    if value < minimum:
        raise ValueError(f"{key}={raw!r}: expected a whole number >= {minimum}")
    return value


def _flag(options: dict, key: str) -> bool:
    raw = options.get(key, DEFAULTS[key])
    value = str(raw).strip().lower()
    if value in ("1", "true"):
        return True
    if value in ("0", "false"):
        return False
    raise ValueError(f"{key}={raw!r}: expected one of 0, 1 (or true, false)")
