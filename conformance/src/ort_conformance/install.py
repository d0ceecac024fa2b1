"""Out-of-tree plugins for ``ort-conformance --plugin``: tell the distribution a project folder or a
wheel holds, pip-install it into the running environment, and list the providers it registers.

Installing is pip's job (run as ``python -m pip`` of this interpreter, its output shown as it goes);
which providers a distribution offers is read from its installed metadata and the core's registry.
Nothing comes from an index but what pip needs to build the plugin and for its dependencies.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from importlib import metadata

GROUP = "ort_core.providers"


class PluginError(Exception):
    """A plugin that cannot be installed or found, in words the user can act on."""


@dataclass(frozen=True)
class PluginSource:
    """What ``--plugin`` named: a project ``folder``, a ``wheel`` file, or an ``installed`` distribution."""

    kind: str
    path: str | None  # absolute path of the folder or wheel; None for an installed distribution
    distribution: str


def normalize(name: str) -> str:
    """PEP 503 spelling, so that "ort_ep_x", "ort-ep-x" and "Ort.Ep.X" compare equal."""
    return re.sub(r"[-_.]+", "-", name).lower()


def resolve(spec: str) -> PluginSource:
    """The plugin ``spec`` names: a folder with pyproject.toml, a ``.whl`` file, or the name of an
    installed distribution. Raises PluginError saying which of these it is not."""
    path = os.path.abspath(os.path.expanduser(spec))
    if os.path.isdir(path):
        return PluginSource("folder", path, _project_name(path))
    if os.path.isfile(path):
        if not path.endswith(".whl"):
            raise PluginError(f"{spec} is a file but not a wheel (.whl); give a wheel or a project folder")
        return PluginSource("wheel", path, os.path.basename(path).split("-")[0])
    if os.sep not in spec and not spec.endswith(".whl") and _installed(spec) is not None:
        return PluginSource("installed", None, spec)
    raise PluginError(f"{spec}: no such folder or wheel, nor an installed distribution of that name")


def _project_name(folder: str) -> str:
    """[project] name of the folder's pyproject.toml (PEP 621)."""
    toml = os.path.join(folder, "pyproject.toml")
    if not os.path.isfile(toml):
        raise PluginError(f"{folder} has no pyproject.toml: give the plugin's project folder or a built wheel")
    with open(toml, "rb") as f:
        text = f.read().decode("utf-8")
    try:
        import tomllib  # Python >= 3.11

        name = tomllib.loads(text).get("project", {}).get("name")
    except ImportError:  # Python 3.10: the one key needed, read by hand
        section = re.search(r"^\[project\]\s*$(.*?)(?=^\[|\Z)", text, re.M | re.S)
        found = section and re.search(r"^name\s*=\s*[\"']([^\"']+)[\"']", section.group(1), re.M)
        name = found.group(1) if found else None
    if not name:
        raise PluginError(f"{toml} declares no [project] name; install the plugin yourself (pip install "
                          f"{folder}) and pass its distribution name to --plugin")
    return name


def _installed(name: str) -> metadata.Distribution | None:
    try:
        return metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return None


def pip_install(source: PluginSource) -> None:
    """``python -m pip install PATH`` into this interpreter's environment, pip's output shown live."""
    if subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True).returncode:
        raise PluginError(f"pip is not available in this environment ({sys.executable} -m pip failed); install "
                          "pip, or install the plugin yourself and rerun with --no-install")
    print(f"ort-conformance: installing {source.distribution} from {source.path} into {sys.prefix} "
          "(pip install; this may take a minute) ...", flush=True)
    before = _installed(source.distribution)
    pip = [sys.executable, "-m", "pip", "install", "--disable-pip-version-check"]
    code = subprocess.run([*pip, source.path]).returncode
    same_version = before is not None and before.version == os.path.basename(source.path).split("-")[1]
    if not code and source.kind == "wheel" and same_version:
        # pip keeps an installed distribution of the wheel's version: put this wheel's files in place
        print(f"ort-conformance: replacing the installed {source.distribution} {before.version} with the wheel's "
              "files ...", flush=True)
        code = subprocess.run([*pip, "--force-reinstall", "--no-deps", source.path]).returncode
    if code:
        raise PluginError(f"pip could not install {source.path} (exit status {code}); pip's output above says why")


def describe(source: PluginSource) -> dict:
    """The installed distribution: name, version and its entry points in the providers' group.
    Raises PluginError when it is not installed or declares no such entry point."""
    dist = _installed(source.distribution)
    if dist is None:
        raise PluginError(f"{source.distribution} is not installed in {sys.prefix}; drop --no-install to install it")
    eps = [ep for ep in dist.entry_points if ep.group == GROUP]
    if not eps:
        raise PluginError(f"{dist.metadata['Name']} {dist.version} declares no entry point in the group '{GROUP}' "
                          "(see 'Writing a provider plugin' in ort-core's README)")
    return {"distribution": dist.metadata["Name"], "version": dist.version,
            "entry_points": {ep.name: ep.value for ep in eps}}


def providers_of(dist: dict) -> list[str]:
    """The providers the core's registry holds from this distribution, in registration order. Raises
    PluginError with the registry's reason when its plugin was skipped or registered none."""
    from ort_core.plugins.manager import get_registry

    reg = get_registry()
    wanted = normalize(dist["distribution"])
    names = [n for n, r in reg.providers.items() if normalize(r.distribution) == wanted]
    if not names:
        why = "; ".join(f"'{ep}': {reg.skipped[ep]}" for ep in dist["entry_points"] if ep in reg.skipped)
        detail = f"skipped by ort-core: {why}" if why else "its ort_register_providers answered none"
        raise PluginError(f"{dist['distribution']} {dist['version']} registers no provider ({detail})")
    return names
