"""Known-failures lists: one file per provider, one line per case with the reason it fails.

Format: ``case_name  # reason``; blank lines and lines starting with '#' are ignored. Listed
cases are expected to fail (strictly: a listed case that passes is reported, so lists stay true),
except those whose reason starts with ``random:`` (expected values drawn at random may match).
"""

from __future__ import annotations

import os
from importlib import resources

RANDOM_PREFIX = "random:"


def default_path(provider: str) -> str:
    return str(resources.files("ort_conformance") / "known_failures" / f"{provider}.txt")


def load(path: str | None) -> dict[str, str]:
    if not path or not os.path.exists(path):
        return {}
    out: dict[str, str] = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            name, _, reason = line.partition("#")
            out[name.strip()] = reason.strip() or "no reason given"
    return out


def write(path: str, provider: str, failures: dict[str, str], header: str) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(f"# Known failures of {provider}: case  # reason\n# {header}\n")
        for name in sorted(failures):
            reason = " ".join(failures[name].split())[:200]
            f.write(f"{name}  # {reason}\n")
