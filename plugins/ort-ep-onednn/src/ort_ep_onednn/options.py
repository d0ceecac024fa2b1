"""Provider options of DnnlExecutionProvider: ``precision`` (fp32 or bf16) and ``num_threads``.

Parses and validates the options dict a session passes to every hook (values may be strings, as
onnxruntime passes them); whether the CPU can do bf16 is asked of oneDNN in ``plugin``.
"""

from __future__ import annotations

from dataclasses import dataclass

PRECISIONS = ("fp32", "bf16")
DEFAULTS = {"precision": "fp32", "num_threads": 0}


@dataclass(frozen=True)
class Options:
    """Validated options. ``num_threads`` 0: OpenMP's default (OMP_NUM_THREADS, else every core)."""

    precision: str = "fp32"
    num_threads: int = 0


def parse(options: dict | None) -> Options:
    """Validate ``options``; raises ValueError naming the bad option and what is accepted.
    Unknown options are refused, never ignored."""
    options = dict(options or {})
    unknown = sorted(set(options) - set(DEFAULTS))
    if unknown:
        raise ValueError(f"unknown provider option(s) {unknown}; DnnlExecutionProvider accepts {sorted(DEFAULTS)}")
    precision = str(options.get("precision", "fp32")).strip().lower() or "fp32"
    if precision not in PRECISIONS:
        raise ValueError(f"precision={options['precision']!r}: expected one of {', '.join(PRECISIONS)}")
    value = options.get("num_threads", 0)
    try:
        threads = int(str(value).strip() or 0)
    except ValueError:
        raise ValueError(f"num_threads={value!r}: expected a whole number") from None
    if threads < 0:
        raise ValueError(f"num_threads={value!r}: must be >= 0 (0: OpenMP's default)")
    return Options(precision, threads)
