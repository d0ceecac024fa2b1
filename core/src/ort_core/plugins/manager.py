"""Plugin discovery and validated hook calls.

Finds provider plugins through the ``ort_core.providers`` entry points (the CPU provider is
registered directly, through the same hooks), routes each hook call to the one plugin owning
the provider, and turns exceptions or malformed answers into PluginError naming the plugin.
It decides nothing about partitioning or execution.
"""

from __future__ import annotations

import threading
import warnings
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

import pluggy

from ..errors import OrtWarning, PluginError
from ..memory.device import Device
from ..memory.protocols import Allocator, DataTransfer
from . import hookspecs
from .types import Capability, GraphView, ProviderInfo

ENTRY_POINT_GROUP = "ort_core.providers"
CPU = "CPUExecutionProvider"


@dataclass(frozen=True)
class Registered:
    info: ProviderInfo
    plugin: Any
    plugin_name: str  # entry-point name ('builtin' for the CPU provider)
    distribution: str  # distribution that ships it, for messages


class PluginRegistry:
    """All providers known to this process, with the plugin that owns each."""

    def __init__(self) -> None:
        self.pm = pluggy.PluginManager("ort_core")
        self.pm.add_hookspecs(hookspecs)
        self.providers: dict[str, Registered] = {}
        self.skipped: dict[str, str] = {}  # plugin name -> why it was skipped

    # ---------------------------------------------------------------- discovery
    def load(self) -> PluginRegistry:
        from ..providers.cpu import provider as cpu_provider

        self._add(cpu_provider, "builtin", "ort-core")
        for ep in sorted(_provider_entry_points(), key=lambda e: e.name):
            dist = getattr(getattr(ep, "dist", None), "name", None) or ep.value
            try:
                plugin = ep.load()
            except Exception as e:  # noqa: BLE001 - a broken plugin must never break the core
                self._skip(ep.name, dist, f"failed to import '{ep.value}': {type(e).__name__}: {e}")
                continue
            self._add(plugin, ep.name, dist)
        return self

    def _add(self, plugin: Any, name: str, dist: str) -> None:
        try:
            self.pm.register(plugin, name=name)
        except Exception as e:  # noqa: BLE001
            self._skip(name, dist, f"cannot be registered: {type(e).__name__}: {e}")
            return
        try:
            infos = self._only(plugin).ort_register_providers()
            infos = [i for result in infos for i in (result or [])]
            for info in infos:
                _check_info(info)
        except Exception as e:  # noqa: BLE001
            self.pm.unregister(plugin)
            self._skip(name, dist, f"ort_register_providers failed: {type(e).__name__}: {e}")
            return
        for info in infos:
            if info.name in self.providers:
                other = self.providers[info.name]
                _warn(f"provider plugin '{name}' ({dist}) declares '{info.name}', already provided by "
                      f"plugin '{other.plugin_name}' ({other.distribution}); keeping the first")
                continue
            self.providers[info.name] = Registered(info, plugin, name, dist)

    def _skip(self, name: str, dist: str, why: str) -> None:
        self.skipped[name] = why
        _warn(f"provider plugin '{name}' ({dist}) skipped: {why}")

    def _only(self, plugin: Any):
        """A hook relay reaching only ``plugin``."""
        others = [p for p in self.pm.get_plugins() if p is not plugin]
        return _SubsetRelay(self.pm, others)

    # ------------------------------------------------------------ routed calls
    def _owner(self, provider: str) -> Registered:
        try:
            return self.providers[provider]
        except KeyError:
            raise PluginError(f"no installed plugin provides '{provider}'") from None

    def _call(self, provider: str, hook: str, **kwargs) -> Any:
        reg = self._owner(provider)
        try:
            return getattr(self._only(reg.plugin), hook)(provider=provider, **kwargs)
        except Exception as e:  # noqa: BLE001
            raise PluginError(f"plugin '{reg.plugin_name}' ({reg.distribution}): {hook} for "
                              f"'{provider}' raised {type(e).__name__}: {e}") from e

    def _bad(self, provider: str, hook: str, problem: str) -> PluginError:
        reg = self._owner(provider)
        return PluginError(f"plugin '{reg.plugin_name}' ({reg.distribution}): {hook} for "
                           f"'{provider}' {problem}")

    def get_capability(self, provider: str, view: GraphView, options: dict) -> Capability:
        cap = self._call(provider, "ort_get_capability", graph=view, options=options)
        if cap is None:
            raise self._bad(provider, "ort_get_capability", "is not implemented (returned None)")
        if not isinstance(cap, Capability):
            raise self._bad(provider, "ort_get_capability",
                            f"returned {type(cap).__name__}, expected ort_core.plugins.Capability")
        offered = set(view.offered)
        claimed = list(cap.claimed)
        bad = [c for c in claimed if not isinstance(c, int) or c not in offered]
        if bad:
            raise self._bad(provider, "ort_get_capability", f"claimed node ids not offered to it: {bad[:5]}")
        missing = offered - set(claimed) - set(cap.declined)
        if missing:
            ids = sorted(missing)[:5]
            raise self._bad(provider, "ort_get_capability",
                            f"gave no reason for declined node ids {ids}{'...' if len(missing) > 5 else ''}")
        if len(set(claimed)) != len(claimed):
            raise self._bad(provider, "ort_get_capability", "claimed some node ids twice")
        return cap

    def compile(self, provider: str, subgraph, options: dict):
        kernel = self._call(provider, "ort_compile", subgraph=subgraph, options=options)
        if not callable(kernel):
            raise self._bad(provider, "ort_compile", f"returned {type(kernel).__name__}, expected a callable kernel")
        return kernel

    def allocator(self, provider: str, device: Device) -> Allocator:
        alloc = self._call(provider, "ort_allocator", device=device)
        if not isinstance(alloc, Allocator):
            raise self._bad(provider, "ort_allocator", f"returned {type(alloc).__name__}, not an Allocator")
        return alloc

    def data_transfer(self, provider: str) -> DataTransfer:
        dt = self._call(provider, "ort_data_transfer")
        if not isinstance(dt, DataTransfer):
            raise self._bad(provider, "ort_data_transfer", f"returned {type(dt).__name__}, not a DataTransfer")
        return dt

    # ----------------------------------------------------------------- queries
    def available(self) -> list[str]:
        """Available provider names, plugins first (alphabetically), CPU last."""
        names = sorted(n for n, r in self.providers.items() if r.info.available and n != CPU)
        return names + [CPU]


class _SubsetRelay:
    def __init__(self, pm: pluggy.PluginManager, remove: list) -> None:
        self._pm, self._remove = pm, remove

    def __getattr__(self, hook: str):
        return self._pm.subset_hook_caller(hook, remove_plugins=self._remove)


def _check_info(info: Any) -> None:
    if not isinstance(info, ProviderInfo):
        raise TypeError(f"expected ProviderInfo entries, got {type(info).__name__}")
    if not isinstance(info.name, str) or not info.name:
        raise TypeError("a ProviderInfo has an empty name")
    if not info.devices or not all(isinstance(d, Device) for d in info.devices):
        raise TypeError(f"ProviderInfo '{info.name}' must list at least one ort_core.memory.Device")
    if not info.available and not info.reason:
        raise TypeError(f"ProviderInfo '{info.name}' is unavailable but gives no reason")


def _provider_entry_points():
    return list(entry_points(group=ENTRY_POINT_GROUP))


def _warn(msg: str) -> None:
    warnings.warn(msg, OrtWarning, stacklevel=3)


_lock = threading.Lock()
_registry: PluginRegistry | None = None


def get_registry(reload: bool = False) -> PluginRegistry:
    """The process-wide registry, discovered on first use; ``reload=True`` rescans entry points."""
    global _registry
    with _lock:
        if _registry is None or reload:
            _registry = PluginRegistry().load()
        return _registry
