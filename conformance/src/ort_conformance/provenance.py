"""Where a report comes from: which suite certified which plugin version, installed from where, on
which provider devices and machine, and when. Read from installed metadata and the platform; it
judges nothing.
"""

from __future__ import annotations

import datetime
import hashlib
import os
import platform
from importlib import metadata

from . import PINNED_ONNX, __version__


def collect(provider: str, source: str | None = None) -> dict:
    """The provenance part of a report; ``source``: the folder or wheel ``--plugin`` installed from."""
    import onnx

    import ort_core
    from ort_core.plugins.manager import get_registry

    reg = get_registry().providers.get(provider)
    now = datetime.datetime.now(datetime.timezone.utc)
    return {
        "suite": {"ort_conformance": __version__, "ort_core": ort_core.__version__, "onnx": onnx.__version__,
                  "onnx_pinned": PINNED_ONNX, "python": platform.python_version(),
                  "machine": f"{platform.system()} {platform.machine()}"},
        "plugin": None if reg is None else {
            "distribution": reg.distribution, "version": _version(reg.distribution),
            "entry_point": reg.plugin_name, "module": getattr(reg.plugin, "__name__", None),
            "installed_from": source, "wheel_sha256": _sha256(source) if source and source.endswith(".whl") else None},
        "device": {
            "provider_devices": [str(d) for d in reg.info.devices] if reg else [],
            "provider_version": reg.info.version if reg else None,
            "provider_description": reg.info.description if reg else None,
            "os": platform.platform(), "arch": platform.machine(), "cpu": _cpu_name(), "cpus": os.cpu_count()},
        "date": now.strftime("%Y-%m-%d"),
        "timestamp": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def _sha256(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return None


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def markdown(rep: dict) -> list[str]:
    """The report page's provenance table."""
    s, p, d = rep["suite"], rep.get("plugin"), rep["device"]
    plugin = "not installed" if not p else (
        f"{p['distribution']} {p['version'] or '(version unknown)'}, entry point '{p['entry_point']}'"
        + (f" -> `{p['module']}`" if p["module"] else "")
        + (f", installed from `{p['installed_from']}`" if p["installed_from"] else "")
        + (f" (wheel sha256 {p['wheel_sha256']})" if p["wheel_sha256"] else ""))
    devices = ", ".join(d["provider_devices"]) or "none declared"
    rows = [
        ("suite", f"ort-conformance {s['ort_conformance']}, cases of onnx {s['onnx']} (pinned {s['onnx_pinned']})"),
        ("plugin", plugin),
        ("provider", f"{rep['provider']} {d['provider_version'] or ''} on {devices}".replace("  ", " ")),
        ("ort-core", s["ort_core"]),
        ("machine", f"{d['os']}, {d['cpu']}, {d['cpus']} CPUs, Python {s['python']}"),
        ("date", rep.get("timestamp", rep["date"])),
    ]
    return ["", "## Provenance", "", "| | |", "|---|---|"] + [f"| {k} | {v} |" for k, v in rows]
