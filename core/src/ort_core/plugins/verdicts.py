"""Probe verdicts a plugin remembers: whether its vendor library compiles a one-node graph of a given
signature ("" for yes, else the reason), in memory and, when the plugin has a cache folder, in one JSON
file per folder and tag (the tag names what the verdicts depend on: the vendor build, the device model,
the plugin's version), so that a later process does not probe again. Thread-safe; a file that cannot be
read or written only costs probes.

A provider instance owns its VerdictCache (per session, released with it); what outlives a session is the
file, which ``save`` merges with what other sessions or processes wrote meanwhile. ``user_cache_dir`` is the
conventional default folder for such files.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading


class VerdictCache:
    """signature -> verdict ("" or the reason), read from and saved to one file: ``<prefix>-probes-<tag hash>.json``
    in ``folder`` (none: memory only). The tag names what the verdicts depend on, so a file of another tag is never
    read. The file's verdicts are loaded when the cache is made."""

    def __init__(self, prefix: str, folder: str = "", tag: str = "") -> None:
        self.tag = tag
        self.path = os.path.join(folder, f"{prefix}-probes-{hashlib.sha1(tag.encode()).hexdigest()[:12]}.json") \
            if folder else ""
        self._results: dict[str, str] = _read(self.path, tag) if self.path else {}
        self._dirty = False
        self._lock = threading.Lock()

    def get(self, key: str) -> str | None:
        """The verdict for signature ``key`` ("" or the reason), or None when it was never probed."""
        with self._lock:
            return self._results.get(key)

    def put(self, key: str, reason: str) -> None:
        """Remember the verdict for ``key`` ("" when it compiles), to be written by the next ``save``."""
        with self._lock:
            self._results[key] = reason
            self._dirty = True

    def keys(self) -> list[str]:
        """Every signature with a verdict."""
        with self._lock:
            return list(self._results)

    def __len__(self) -> int:
        with self._lock:
            return len(self._results)

    def save(self) -> None:
        """Write the verdicts to the file when some were added since the last save (atomically), keeping those
        other sessions saved there meanwhile."""
        with self._lock:
            if not self.path or not self._dirty:
                return
            self._dirty = False
            results = dict(self._results)
        saved = _read(self.path, self.tag)
        write_atomically(self.path, json.dumps({"tag": self.tag, "results": {**saved, **results}}).encode())


def _read(path: str, tag: str) -> dict[str, str]:
    """The verdicts saved in ``path`` under ``tag``; {} when the file is absent, unreadable or of another tag."""
    try:
        with open(path, encoding="utf-8") as f:
            saved = json.load(f)
        results = saved.get("results", {}) if saved.get("tag") == tag else {}
        return {str(k): str(v) for k, v in results.items()}
    except (OSError, ValueError, AttributeError):
        return {}


def user_cache_dir(name: str, env: str) -> str:
    """A plugin's default cache folder: ``$<env>`` when set ('' keeps nothing on disk), else
    ``$XDG_CACHE_HOME/<name>``, else ``~/.cache/<name>``."""
    explicit = os.environ.get(env)
    if explicit is not None:
        return explicit
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, name)


def write_atomically(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file and a rename, so readers never see half a file;
    a cache that cannot be written only costs the work again, so failures are ignored."""
    tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
    try:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError:
        try:
            os.remove(tmp)
        except OSError:
            pass


def canonical(value):
    """A hashable, printable stand-in for an attribute or constant in a probe signature (tensors by dtype,
    shape and a digest of their bytes)."""
    import numpy as np  # the plugins' probe signatures only

    if isinstance(value, np.ndarray):
        return ("tensor", value.dtype.str, value.shape, hashlib.sha1(value.tobytes()).hexdigest()[:16])
    if isinstance(value, (list, tuple)):
        return tuple(canonical(v) for v in value)
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return value
