"""``register_execution_provider_library(name, path)``: load an ort-core provider plugin that is not installed
(a module file, a package or project folder, or a wheel) into this process's registry, as a vendor tries a
plugin under development; ``unregister_execution_provider_library(name)`` takes it out again.

Loads Python plugins only: onnxruntime's native plugin-EP libraries (its C ABI) are refused with a message
saying so. Installs nothing (``pip install`` does that); sessions made before an unregistration keep theirs.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import sys
import tempfile
import threading
import zipfile
from dataclasses import dataclass, field
from typing import Any

from . import ep_devices
from .errors import Fail, InvalidArgument, NoSuchFile, PluginError
from .plugins.manager import ENTRY_POINT_GROUP, get_registry

NATIVE_SUFFIXES = (".so", ".dll", ".dylib", ".pyd")

# onnxruntime's native provider libraries -> the ort-core plugin doing that provider's work
_ORT_PLUGINS = {"openvino": "ort-ep-openvino", "qnn": "ort-ep-qnn", "dnnl": "ort-ep-onednn",
                "onednn": "ort-ep-onednn"}


@dataclass
class _Library:
    name: str
    path: str
    plugins: list  # (plugin object, its registration name)
    providers: list[str]
    modules: list[str] = field(default_factory=list)  # sys.modules entries it added
    sys_path: str | None = None
    folder: Any = None  # a wheel's extraction folder (TemporaryDirectory)


_libraries: dict[str, _Library] = {}
_lock = threading.Lock()


def register_execution_provider_library(registration_name: str, path: str | os.PathLike) -> None:
    """Register the providers of the ort-core plugin at ``path`` under ``registration_name``.

    ``path``: a plugin module file (``plugin.py``), a package folder (its ``__init__`` or its ``plugin``
    module holds the hooks), a project folder (its ``pyproject.toml`` names the entry points of the group
    ``ort_core.providers``) or a built wheel (``.whl``, its entry points). Its providers then appear in
    ``get_available_providers()`` and ``get_ep_devices()`` and sessions may use them. A native library
    (``.so``/``.dll``/``.dylib``) is onnxruntime's C ABI and is refused, naming the ort-core plugin to use.
    """
    if not isinstance(registration_name, str) or not registration_name:
        raise InvalidArgument(f"register_execution_provider_library: registration_name must be a non-empty string, "
                              f"got {registration_name!r}")
    if not isinstance(path, (str, os.PathLike)):
        raise InvalidArgument(f"register_execution_provider_library: path must be a string or os.PathLike, got "
                              f"{type(path).__name__}")
    path = os.path.abspath(os.fspath(path))
    _refuse_native(path)
    if not os.path.exists(path):
        raise NoSuchFile(f"register_execution_provider_library('{registration_name}'): {path} does not exist")
    with _lock:
        if registration_name in _libraries:
            raise Fail(f"an execution provider library is already registered as '{registration_name}' (from "
                       f"{_libraries[registration_name].path}); unregister it first")
        registry = get_registry()
        before = set(sys.modules)
        library = _Library(registration_name, path, [], [])
        try:
            for plugin_name, plugin in _load(library):
                _check_names(registry, plugin, plugin_name, path)
                added = registry.add_plugin(plugin, f"{registration_name}:{plugin_name}", path)
                library.plugins.append(plugin)
                if not added:
                    why = registry.skipped.get(f"{registration_name}:{plugin_name}", "it declares no provider")
                    raise PluginError(f"{path}: plugin '{plugin_name}' registered no provider ({why})")
                library.providers += added
        except BaseException:
            library.modules = [m for m in sys.modules if m not in before]
            _remove(registry, library)
            raise
        library.modules = [m for m in sys.modules if m not in before]
        _libraries[registration_name] = library


def unregister_execution_provider_library(registration_name: str) -> None:
    """Take the providers registered under ``registration_name`` out of the registry, and forget the modules
    its loading imported (registering it again loads the files afresh)."""
    if not isinstance(registration_name, str):
        raise InvalidArgument(f"unregister_execution_provider_library: registration_name must be a string, got "
                              f"{registration_name!r}")
    with _lock:
        library = _libraries.pop(registration_name, None)
        if library is None:
            registered = ", ".join(sorted(_libraries)) or "none"
            raise Fail(f"Execution provider library: {registration_name} was not registered (registered: "
                       f"{registered})")
        _remove(get_registry(), library)


def registered_libraries() -> dict[str, list[str]]:
    """Registration name -> the providers it registered."""
    with _lock:
        return {name: list(lib.providers) for name, lib in _libraries.items()}


# ------------------------------------------------------------------------------- loading

def _refuse_native(path: str) -> None:
    base = os.path.basename(path).lower()
    if not (base.endswith(NATIVE_SUFFIXES) or re.search(r"\.so(\.\d+)+$", base)):
        return
    vendor = next((plugin for key, plugin in _ORT_PLUGINS.items() if key in base), None)
    instead = f"install the ort-core plugin {vendor} (pip install {vendor})" if vendor else \
        "use the vendor's ort-core provider plugin (a Python module, package, project folder or wheel; see " \
        "'Writing a provider plugin' in ort-core's README), or write one over the vendor's C API with cffi"
    raise InvalidArgument(f"{path} is a native library: onnxruntime's plugin-EP libraries implement "
                          "onnxruntime's C ABI (CreateEpFactories), which ort-core does not load; ort-core needs an "
                          f"ort-core provider plugin instead: {instead}")


def _load(library: _Library) -> list[tuple[str, Any]]:
    """(entry-point name, plugin object) of each plugin at the library's path."""
    path = library.path
    if os.path.isfile(path):
        if path.endswith(".py"):
            name = os.path.splitext(os.path.basename(path))[0]
            folder = os.path.dirname(path)
            if os.path.isfile(os.path.join(folder, "__init__.py")) and name != "__init__":  # a package's module
                parent, package = os.path.split(folder)
                _import_under(library, parent, package)
                return [(name, importlib.import_module(f"{package}.{name}"))]
            return [(name, _import_file(f"_ort_core_library_{library.name}_{name}", path))]
        if path.endswith(".whl"):
            return _load_wheel(library)
        raise InvalidArgument(f"{path} is neither a plugin module (.py), a folder nor a wheel (.whl)")
    if os.path.isfile(os.path.join(path, "pyproject.toml")):
        return _load_project(library)
    if os.path.isfile(os.path.join(path, "__init__.py")):
        parent, package = os.path.split(path)
        module = _import_under(library, parent, package)
        if not _has_hooks(module) and os.path.isfile(os.path.join(path, "plugin.py")):
            module = importlib.import_module(f"{package}.plugin")
        return [(package, module)]
    raise InvalidArgument(f"{path} is a folder with neither pyproject.toml (a plugin project) nor __init__.py "
                          "(a plugin package)")


def _load_project(library: _Library) -> list[tuple[str, Any]]:
    folder = library.path
    toml = os.path.join(folder, "pyproject.toml")
    try:
        import tomllib  # Python >= 3.11
    except ImportError:  # pragma: no cover - Python 3.10
        raise Fail(f"{toml}: reading a project folder needs Python 3.11 (tomllib); give the package folder or a "
                   "wheel") from None
    with open(toml, "rb") as f:
        try:
            project = tomllib.load(f).get("project", {})
        except tomllib.TOMLDecodeError as e:
            raise InvalidArgument(f"{toml} is not valid TOML: {e}") from None
    eps = project.get("entry-points", {}).get(ENTRY_POINT_GROUP, {})
    if not eps:
        raise InvalidArgument(f"{toml} declares no entry point in the group '{ENTRY_POINT_GROUP}' (see 'Writing a "
                              "provider plugin' in ort-core's README)")
    root = os.path.join(folder, "src") if os.path.isdir(os.path.join(folder, "src")) else folder
    return _entry_points(library, root, eps)


def _load_wheel(library: _Library) -> list[tuple[str, Any]]:
    try:
        archive = zipfile.ZipFile(library.path)
    except zipfile.BadZipFile as e:
        raise InvalidArgument(f"{library.path} is not a wheel (not a zip archive: {e})") from None
    with archive:
        listing = [n for n in archive.namelist() if n.endswith(".dist-info/entry_points.txt")]
        if not listing:
            raise InvalidArgument(f"{library.path} has no entry_points.txt: not a wheel of an ort-core plugin")
        eps = _parse_entry_points(archive.read(listing[0]).decode("utf-8", "replace"))
        if not eps:
            raise InvalidArgument(f"{library.path} declares no entry point in the group '{ENTRY_POINT_GROUP}'")
        library.folder = tempfile.TemporaryDirectory(prefix="ort-core-plugin-")
        root = library.folder.name
        for member in archive.infolist():  # refuse names escaping the folder (../, absolute paths)
            target = os.path.abspath(os.path.join(root, member.filename))
            if not target.startswith(root + os.sep):
                raise InvalidArgument(f"{library.path}: member '{member.filename}' would be written outside its folder")
        archive.extractall(root)
    return _entry_points(library, root, eps)


def _parse_entry_points(text: str) -> dict[str, str]:
    eps, section = {}, None
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1].strip()
        elif section == ENTRY_POINT_GROUP and "=" in line:
            name, value = line.split("=", 1)
            eps[name.strip()] = value.strip()
    return eps


def _entry_points(library: _Library, root: str, eps: dict[str, str]) -> list[tuple[str, Any]]:
    found = []
    for name, value in eps.items():
        module_name, _, attr = str(value).partition(":")
        top = module_name.split(".")[0]
        module = _import_under(library, root, top)
        if module_name != top:
            module = importlib.import_module(module_name.strip())
        found.append((name, getattr(module, attr.strip()) if attr else module))
    return found


def _import_under(library: _Library, root: str, top: str) -> Any:
    """Import the top-level package ``top`` from folder ``root`` (put first on sys.path while registered)."""
    loaded = sys.modules.get(top)
    if loaded is not None:
        where = getattr(loaded, "__file__", None) or "?"
        if not os.path.abspath(where).startswith(os.path.join(root, top)):
            raise Fail(f"a module '{top}' is already imported from {where}: the plugin at {library.path} cannot be "
                       "loaded beside it (uninstall the installed copy, or register before importing it)")
        return loaded
    if library.sys_path is None:
        sys.path.insert(0, root)
        library.sys_path = root
    return importlib.import_module(top)


def _import_file(module_name: str, path: str) -> Any:
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise InvalidArgument(f"{path} cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        sys.modules.pop(module_name, None)
        raise PluginError(f"{path}: importing the plugin failed: {type(e).__name__}: {e}") from e
    return module


def _has_hooks(module: Any) -> bool:
    return any(callable(getattr(module, n, None)) for n in ("ort_register_providers", "ort_create_provider"))


def _check_names(registry: Any, plugin: Any, plugin_name: str, path: str) -> None:
    """Refuse a plugin declaring a provider some installed plugin offers already (the registry would keep the
    installed one and drop this one with a warning, the opposite of what registering means)."""
    declare = getattr(plugin, "ort_register_providers", None)
    if not callable(declare):
        return
    try:
        names = [getattr(i, "name", None) for i in (declare() or [])]
    except Exception:  # noqa: BLE001 - the registry reports it, naming the plugin
        return
    taken = [n for n in names if n in registry.providers]
    if taken:
        owners = ", ".join(f"'{n}' by {registry.providers[n].label}" for n in taken)
        raise Fail(f"{path}: plugin '{plugin_name}' declares providers already registered ({owners}); uninstall or "
                   "unregister those first")


def _remove(registry: Any, library: _Library) -> None:
    registry.remove_providers(library.providers, library.plugins)
    for name in library.providers:
        ep_devices.forget(name)
    for module in library.modules:
        sys.modules.pop(module, None)
    if library.sys_path is not None and library.sys_path in sys.path:
        sys.path.remove(library.sys_path)
    if library.folder is not None:
        library.folder.cleanup()
    importlib.invalidate_caches()
