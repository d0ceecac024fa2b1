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
    """signature -> verdict ("" or the reason); ``prefix`` names the files (``<prefix>-probes-<tag hash>.json``)."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self._results: dict[str, str] = {}
        self._loaded: set[str] = set()
        self._dirty: set[str] = set()
        self._lock = threading.Lock()

    def get(self, key: str) -> str | None:
        """The verdict for signature ``key`` ("" or the reason), or None when it was never probed."""
        with self._lock:
            return self._results.get(key)

    def put(self, key: str, reason: str) -> None:
        """Remember the verdict for ``key`` ("" when it compiles), to be written by the next ``save``."""
        with self._lock:
            self._results[key] = reason
            self._dirty.update(self._loaded)

    def keys(self) -> list[str]:
        """Every signature with a verdict."""
        with self._lock:
            return list(self._results)

    def __len__(self) -> int:
        with self._lock:
            return len(self._results)

    def clear(self) -> None:
        """Forget every verdict (in memory; files stay)."""
        with self._lock:
            self._results.clear()
            self._loaded.clear()
            self._dirty.clear()

    def path(self, folder: str, tag: str) -> str:
        """The file holding the verdicts of ``tag`` in ``folder``."""
        return os.path.join(folder, f"{self.prefix}-probes-{hashlib.sha1(tag.encode()).hexdigest()[:12]}.json")

    def load(self, folder: str, tag: str) -> None:
        """Add the verdicts saved in ``folder`` under ``tag`` (once per file); no folder: memory only."""
        if not folder:
            return
        path = self.path(folder, tag)
        with self._lock:
            if path in self._loaded:
                return
        results = _read(path, tag)
        with self._lock:
            for k, v in results.items():
                self._results.setdefault(k, v)
            self._loaded.add(path)

    def save(self, folder: str, tag: str) -> None:
        """Write the verdicts back when some were added since that file was loaded (atomically)."""
        if not folder:
            return
        path = self.path(folder, tag)
        with self._lock:
            if path not in self._dirty:
                return
            self._dirty.discard(path)
            results = dict(self._results)
        saved = _read(path, tag)  # verdicts other sessions saved since this one loaded the file are kept
        write_atomically(path, json.dumps({"tag": tag, "results": {**saved, **results}}).encode())


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
