"""Provider options of OpenVINOExecutionProvider, named as in onnxruntime's OpenVINO EP.

Parses and validates the options dict a session passes to every hook and turns it into
OpenVINO compile properties; whether the chosen device exists is asked of OpenVINO elsewhere.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ort_core.plugins import user_cache_dir

DEVICE_TYPES = ("CPU", "GPU", "NPU", "AUTO", "HETERO", "MULTI")
PRECISIONS = {
    # option value -> OpenVINO compile properties
    "FP32": {"INFERENCE_PRECISION_HINT": "f32"},
    "BF16": {"INFERENCE_PRECISION_HINT": "bf16"},
    "FP16": {"INFERENCE_PRECISION_HINT": "f16"},
    # the model's own precision, whatever the device would prefer (onnxruntime's "ACCURACY")
    "ACCURACY": {"EXECUTION_MODE_HINT": "ACCURACY"},
}
# OPTIMIZATION_CAPABILITIES entry a device must list for a reduced precision
PRECISION_CAPABILITY = {"BF16": "BF16", "FP16": "FP16"}
DEFAULTS = {"device_type": "CPU", "precision": "FP32", "num_of_threads": 0, "num_streams": 0, "cache_dir": "",
            "enable_qdq_optimizer": False}
VERDICT_DIR_ENV = "ORT_EP_OPENVINO_CACHE_DIR"
FLAGS = {"true": True, "1": True, "false": False, "0": False}


def verdict_dir() -> str:
    """Where probe verdicts are kept when ``cache_dir`` is not given (``cache_dir`` holds them beside OpenVINO's
    compiled models): $ORT_EP_OPENVINO_CACHE_DIR ('' keeps them in memory, for the session only), else
    $XDG_CACHE_HOME/ort-ep-openvino, else ~/.cache/ort-ep-openvino."""
    return user_cache_dir("ort-ep-openvino", VERDICT_DIR_ENV)


@dataclass(frozen=True)
class Options:
    """Validated options. ``device_type`` is OpenVINO's device string ('CPU', 'GPU.1', 'AUTO:GPU,CPU')."""

    device_type: str = "CPU"
    precision: str = "FP32"
    num_of_threads: int = 0  # 0: OpenVINO's default (every core)
    num_streams: int = 0  # 0: OpenVINO's default for its latency hint (one stream)
    cache_dir: str = ""
    enable_qdq_optimizer: bool = False  # claim QuantizeLinear too: OpenVINO runs the whole QDQ graph in int8

    @property
    def devices(self) -> list[str]:
        """The physical devices named (for 'AUTO:GPU,CPU' -> ['GPU', 'CPU']; plain 'AUTO' -> [])."""
        head, _, rest = self.device_type.partition(":")
        if head in ("AUTO", "HETERO", "MULTI"):
            return [d.strip() for d in rest.split(",") if d.strip()]
        return [self.device_type]

    def compile_properties(self) -> dict[str, str]:
        props = dict(PRECISIONS[self.precision])
        if self.num_of_threads:
            props["INFERENCE_NUM_THREADS"] = str(self.num_of_threads)
        if self.num_streams:
            props["NUM_STREAMS"] = str(self.num_streams)
        if self.cache_dir:
            props["CACHE_DIR"] = self.cache_dir
        return props


def parse(options: dict | None) -> Options:
    """Validate ``options`` (values may be strings, as onnxruntime passes them); raises ValueError
    naming the bad option and what is accepted. Unknown options are refused, never ignored."""
    options = dict(options or {})
    unknown = sorted(set(options) - set(DEFAULTS))
    if unknown:
        raise ValueError(f"unknown provider option(s) {unknown}; OpenVINOExecutionProvider accepts "
                         f"{sorted(DEFAULTS)}")
    device = str(options.get("device_type", "CPU")).strip().upper() or "CPU"
    if device.split(":")[0].split(".")[0] not in DEVICE_TYPES:
        raise ValueError(f"device_type={options['device_type']!r}: expected one of {', '.join(DEVICE_TYPES)} "
                         "(optionally with an index, 'GPU.1', or a list, 'AUTO:GPU,CPU')")
    precision = str(options.get("precision", "FP32")).strip().upper() or "FP32"
    if precision not in PRECISIONS:
        raise ValueError(f"precision={options['precision']!r}: expected one of {', '.join(PRECISIONS)}")
    threads = _count(options, "num_of_threads", minimum=0)
    streams = _count(options, "num_streams", minimum=0)
    cache_dir = str(options.get("cache_dir", "") or "")
    if cache_dir:
        cache_dir = os.path.abspath(os.path.expanduser(cache_dir))
        try:
            os.makedirs(cache_dir, exist_ok=True)
        except OSError as e:
            raise ValueError(f"cache_dir={options['cache_dir']!r}: cannot create it ({e})") from None
    qdq = str(options.get("enable_qdq_optimizer", False)).strip().lower()
    if qdq not in FLAGS:
        raise ValueError(f"enable_qdq_optimizer={options['enable_qdq_optimizer']!r}: expected true or false")
    return Options(device, precision, threads, streams, cache_dir, FLAGS[qdq])


def _count(options: dict, key: str, minimum: int) -> int:
    value = options.get(key, 0)
    try:
        n = int(str(value).strip() or 0)
    except ValueError:
        raise ValueError(f"{key}={value!r}: expected a whole number") from None
    if n < minimum:
        raise ValueError(f"{key}={value!r}: must be >= {minimum}")
    return n
