"""``ort_core.install_as_onnxruntime()``: after it, ``import onnxruntime`` anywhere in this process gives ort-core.

After PyMySQL's ``install_as_MySQLdb()``: libraries that import onnxruntime themselves then run on ort-core
unchanged. Call it first thing, before importing them. What it puts into ``sys.modules``:

- ``onnxruntime``: a module of its own forwarding every attribute to ``ort_core`` (``onnxruntime.InferenceSession
  is ort_core.InferenceSession``, the error classes too), carrying onnxruntime's metadata. Its ``__version__``
  is ``ONNXRUNTIME_API_VERSION``, the onnxruntime release whose Python API ort-core mirrors and is checked
  against, not ort-core's own 0.1.0: libraries compare it with onnxruntime releases (``onnxruntime>=1.10.0``,
  "older than 1.17: skip"), and 0.1.0 would send them down the paths for a years-old onnxruntime or make them
  refuse to run. PyMySQL does the same with ``__version__``; ``get_version_string()`` agrees with it, as in
  onnxruntime; ``get_build_info()`` and ``ort_core.__version__`` say ort-core's.
- ``onnxruntime.capi`` and every module of ``ort_core.capi`` under the same name there
  (``onnxruntime_pybind11_state``, ``_pybind_state``, ``onnxruntime_inference_collection``,
  ``build_and_package_info``): the paths libraries import error classes and types from.
- a finder for the subpackages ort-core does not reimplement, onnxruntime's tooling (``TOOLING``): they load
  from the files of an installed onnxruntime distribution (whose own ``__init__`` never runs), so their
  ``import onnxruntime`` gives ort-core and the sessions they make are ort-core's. With no onnxruntime
  installed, ``onnxruntime.quantization`` is ort_core.quantization (``FALLBACKS``) and importing any other
  raises ModuleNotFoundError saying what to install. The few native routines they
  import from ``capi._pybind_state`` (``NATIVE_TOOLING``: the quantizers' weight packing, no inference) are
  lent from that onnxruntime's compiled module, loaded under a private name on first use.

Calling it again does nothing. If a real onnxruntime was imported before, it raises Fail rather than replace it:
what libraries already hold (sessions, the error classes of their ``except`` clauses) would stay onnxruntime's
while new imports got ort-core's, a mix that fails far from its cause.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.metadata
import importlib.util
import pathlib
import sys
import threading
import types
from typing import Any

from .errors import Fail
from .onnxruntime_dist import ONNXRUNTIME_API_VERSION, real_onnxruntime_dirs

TOOLING = ("transformers", "quantization", "tools", "backend", "datasets")
"""onnxruntime's pure-Python subpackages that ort-core does not reimplement (optimizers, quantizers, shape
inference, the ONNX backend): taken from an installed onnxruntime."""

FALLBACKS = {"quantization": "ort_core.quantization"}
"""Tooling that ort-core does provide, served when no installed onnxruntime has it: ``onnxruntime.quantization``
is then ort_core.quantization (its submodules too, as the same module objects, never second copies)."""

_NAME = "onnxruntime"
_lock = threading.Lock()


class _OnnxruntimeModule(types.ModuleType):
    """``sys.modules['onnxruntime']``: forwards every attribute to ort_core; a name ort-core lacks raises an
    AttributeError saying so (``hasattr`` probes still answer False)."""

    def __getattr__(self, name: str) -> Any:
        target = sys.modules["ort_core"]
        try:
            return getattr(target, name)
        except AttributeError:
            if name.startswith("__"):
                raise
            raise AttributeError(f"module 'onnxruntime' has no attribute '{name}': onnxruntime is ort-core here "
                                 f"(ort_core.install_as_onnxruntime()), which does not provide it") from None

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(dir(sys.modules["ort_core"])))


class _ToolingFinder(importlib.abc.MetaPathFinder):
    """Finds ``onnxruntime.<sub>`` (any but ``capi``, ort-core's) in the installed onnxruntime's files; for a
    TOOLING name it does not find, raises ModuleNotFoundError saying what to install."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        head, _, sub = fullname.partition(".")
        if head != _NAME or not sub or sub == "capi":
            return None
        top = sub.partition(".")[0]
        if top in FALLBACKS and f"{_NAME}.{top}" in _ALIASED:
            return _alias_spec(fullname, FALLBACKS[top] + sub[len(top):])  # inside ort-core's fallback
        if "." in sub:
            return None  # deeper names follow their parent's __path__ (the real files) on their own
        locations = real_onnxruntime_dirs()
        spec = importlib.machinery.PathFinder.find_spec(fullname, locations) if locations else None
        if spec is not None:
            return spec
        if sub in FALLBACKS:
            return _alias_spec(fullname, FALLBACKS[sub])
        if sub in TOOLING:
            missing = f"the installed onnxruntime ({locations[0]}) has none" if locations else \
                "no onnxruntime is installed"
            raise ModuleNotFoundError(
                f"{fullname} is onnxruntime's tooling, which ort-core does not reimplement, and {missing}: "
                "`pip install onnxruntime` beside ort-core (any build of it); with ort_core.install_as_onnxruntime() "
                "in effect its tooling is loaded from there and runs on ort-core", name=fullname)
        return None


class _AliasLoader(importlib.abc.Loader):
    """Loads ``onnxruntime.<name>`` as the ort-core module ``target``: the same module object, whose own spec
    is put back after the import system recorded the alias's."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.own_spec: Any = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = importlib.import_module(self.target)
        self.own_spec = module.__spec__
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        module.__spec__ = self.own_spec


_ALIASED: set[str] = set()  # onnxruntime.<name> served by an ort-core module


def _alias_spec(fullname: str, target: str) -> importlib.machinery.ModuleSpec | None:
    try:
        found = importlib.util.find_spec(target)
    except ModuleNotFoundError:
        return None
    if found is None:
        return None
    _ALIASED.add(fullname)
    return importlib.machinery.ModuleSpec(fullname, _AliasLoader(target),
                                          is_package=found.submodule_search_locations is not None)


class _ServedDistribution(importlib.metadata.Distribution):
    """The package metadata of ``onnxruntime`` when ort-core serves it and no onnxruntime distribution is
    installed: libraries asking ``importlib.metadata.version("onnxruntime")`` get the release ort-core's API
    mirrors (ONNXRUNTIME_API_VERSION), as ``onnxruntime.__version__`` says."""

    def read_text(self, filename: str) -> str | None:
        if filename == "METADATA":
            return (f"Metadata-Version: 2.1\nName: {_NAME}\nVersion: {ONNXRUNTIME_API_VERSION}\n"
                    "Summary: onnxruntime's Python API, served by ort-core (ort_core.install_as_onnxruntime())\n")
        return None

    def locate_file(self, path: Any) -> Any:
        return pathlib.Path(sys.modules["ort_core"].__file__).parent / str(path)


class _MetadataFinder(importlib.abc.MetaPathFinder):
    """Answers package-metadata lookups for ``onnxruntime`` while no real onnxruntime distribution is on
    sys.path (an installed one always answers for itself)."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> None:
        return None

    def find_distributions(self, context: Any = None) -> Any:
        name = getattr(context, "name", None)
        if name is not None and name.replace("-", "_").replace(".", "_").lower() != _NAME:
            return iter(())
        real = importlib.metadata.MetadataPathFinder.find_distributions(importlib.metadata.DistributionFinder.Context(
            name=_NAME, path=getattr(context, "path", sys.path)))
        if any(True for _ in real):
            return iter(())
        return iter((_ServedDistribution(),))


def install_as_onnxruntime() -> types.ModuleType:
    """Make ``import onnxruntime`` (and its ``capi`` paths) give ort-core in this process; returns that module.

    Idempotent. Raises Fail if a real onnxruntime was imported already: call it before anything imports
    onnxruntime. Tooling subpackages (``onnxruntime.transformers``, ``quantization``, ``tools``...) come from
    an installed onnxruntime; without one, ``quantization`` is ort_core.quantization and importing the others
    raises ModuleNotFoundError naming what to install.
    """
    with _lock:
        current = sys.modules.get(_NAME)
        if isinstance(current, _OnnxruntimeModule):
            return current
        _refuse_if_imported()
        module = _make_module()
        entries = _capi_modules(module)  # imported first: a failure leaves sys.modules as it was
        if not any(isinstance(f, _ToolingFinder) for f in sys.meta_path):
            sys.meta_path.insert(0, _ToolingFinder())
        if not any(isinstance(f, _MetadataFinder) for f in sys.meta_path):
            sys.meta_path.append(_MetadataFinder())
        sys.modules.update(entries)
        sys.modules[_NAME] = module
        return module


def _refuse_if_imported() -> None:
    loaded = sorted(n for n, m in list(sys.modules.items())
                    if m is not None and (n == _NAME or n.startswith(_NAME + ".")))
    if loaded:
        where = getattr(sys.modules[loaded[0]], "__file__", None) or "?"
        raise Fail(f"onnxruntime is already imported ({loaded[0]} from {where}): call "
                   "ort_core.install_as_onnxruntime() before anything imports onnxruntime (first thing in the program, "
                   "before importing the libraries that use it); what they already hold, sessions and error classes, "
                   "would stay onnxruntime's")


def _make_module() -> _OnnxruntimeModule:
    from .capi import onnxruntime_pybind11_state as pybind_state  # capi imports the ort_core package itself

    ort_core = sys.modules["ort_core"]
    module = _OnnxruntimeModule(_NAME, "onnxruntime's Python API, served by ort-core (install_as_onnxruntime())")
    module.__file__ = ort_core.__file__
    module.__path__ = []  # submodules: capi from sys.modules, tooling through _ToolingFinder, nothing else
    module.__package__ = _NAME
    module.__spec__ = importlib.machinery.ModuleSpec(_NAME, None, origin=ort_core.__file__, is_package=True)
    module.__version__ = ONNXRUNTIME_API_VERSION
    module.get_version_string = pybind_state.get_version_string  # the same version, as in onnxruntime
    return module


def _capi_modules(module: types.ModuleType) -> dict[str, types.ModuleType]:
    """``onnxruntime.capi`` and each ``onnxruntime.capi.<name>``: the ort_core.capi module of that name."""
    import pkgutil

    from . import capi  # the package itself (its __path__): onnxruntime.capi

    entries = {f"{_NAME}.capi.{info.name}": importlib.import_module(f"{capi.__name__}.{info.name}")
               for info in pkgutil.iter_modules(capi.__path__)}
    entries[f"{_NAME}.capi"] = module.capi = capi
    return entries
