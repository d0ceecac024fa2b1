"""Plugin discovery and validated hook calls.

Finds provider plugins through the ``ort_core.providers`` entry points (the CPU provider too:
ort-core declares its own entry point, and nothing here imports it), routes each hook call to the one plugin owning
the provider, and turns exceptions or malformed answers into PluginError naming the plugin.
It decides nothing about partitioning or execution.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

import pluggy

from ..errors import InvalidArgument, PluginError, warn
from ..memory.device import Device
from ..memory.protocols import Allocator, DataTransfer
from . import hookspecs
from .kernel import ContextKernel
from .provider import ExecutionProvider, HookProvider, Preferences, SessionContext, UnsupportedSubgraph
from .types import Capability, GraphView, ProviderInfo, TransformView

ENTRY_POINT_GROUP = "ort_core.providers"
CPU = "CPUExecutionProvider"
CORE_DIST = "ort-core"  # ships the CPU provider's entry point


@dataclass(frozen=True)
class Registered:
    info: ProviderInfo
    plugin: Any
    plugin_name: str  # entry-point name ('cpu' for the CPU provider)
    distribution: str  # distribution that ships it, for messages

    @property
    def label(self) -> str:
        """How messages name the plugin: "plugin 'recorder' (ort-ep-recorder)"."""
        return f"plugin '{self.plugin_name}' ({self.distribution})"


class PluginRegistry:
    """All providers known to this process, with the plugin that owns each."""

    def __init__(self) -> None:
        self.pm = pluggy.PluginManager("ort_core")
        self.pm.add_hookspecs(hookspecs)
        self.providers: dict[str, Registered] = {}
        self.skipped: dict[str, str] = {}  # plugin name -> why it was skipped
        self._defaults: dict[str, SessionProvider] = {}
        self._defaults_lock = threading.Lock()
        self.generation = 0  # changes whenever providers are added or removed after discovery

    # ---------------------------------------------------------------- discovery
    def load(self) -> PluginRegistry:
        # ort-core's own entry point (the CPU provider) first: no plugin can take its name
        for ep in sorted(_provider_entry_points(), key=lambda e: (_dist_name(e) != CORE_DIST, e.name)):
            dist = _dist_name(ep) or ep.value
            try:
                plugin = ep.load()
            except Exception as e:  # noqa: BLE001 - a broken plugin must never break the core
                self._skip(ep.name, dist, f"failed to import '{ep.value}': {type(e).__name__}: {e}")
                continue
            self._add(plugin, ep.name, dist)
        return self

    def add_plugin(self, plugin: Any, name: str, source: str) -> list[str]:
        """Register a plugin object found elsewhere than in entry points (a plugin under development, by
        path): the names of the providers it added (none when it was skipped: ``skipped[name]`` says why)."""
        count = len(self.providers)
        self._add(plugin, name, source)
        self.generation += 1
        return list(self.providers)[count:]

    def remove_providers(self, names: Any, plugins: Any = ()) -> None:
        """Take providers out of the registry (their default instances closed) and unregister the plugin
        objects that declared them."""
        for name in names:
            self.providers.pop(name, None)
            with self._defaults_lock:
                instance = self._defaults.pop(name, None)
            if instance is not None:
                instance.close()
        for plugin in plugins:
            if self.pm.is_registered(plugin):
                self.pm.unregister(plugin)
        self.generation += 1

    def _add(self, plugin: Any, name: str, dist: str) -> None:
        """Register one plugin object and the providers it declares (skipped with a warning if broken)."""
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
                warn(f"provider plugin '{name}' ({dist}) declares '{info.name}', already provided by "
                      f"plugin '{other.plugin_name}' ({other.distribution}); keeping the first")
                continue
            self.providers[info.name] = Registered(info, plugin, name, dist)

    def _skip(self, name: str, dist: str, why: str) -> None:
        self.skipped[name] = why
        warn(f"provider plugin '{name}' ({dist}) skipped: {why}")

    def _only(self, plugin: Any):
        """A hook relay reaching only ``plugin``."""
        others = [p for p in self.pm.get_plugins() if p is not plugin]
        return _SubsetRelay(self.pm, others)

    # ------------------------------------------------------------ instances
    def create(self, provider: str, options: Mapping[str, Any] | None = None,
               session: SessionContext | None = None) -> SessionProvider:
        """A new instance of ``provider`` for one session, from its plugin's factory
        (``ort_create_provider``), or one routing the v1 hooks for a plugin without a factory.

        Unknown option names are refused (InvalidArgument naming them and the valid ones) when the
        provider declares its options; a factory refusing an option value (ValueError) gives an
        InvalidArgument too. Any other failure is a PluginError naming the plugin.
        """
        reg = self._owner(provider)
        opts = check_options(reg.info, options)
        session = session or SessionContext()
        relay = self._only(reg.plugin)
        if "ort_create_provider" not in self._hooks_of(reg.plugin):
            def call(hook: str, **kwargs: Any) -> Any:
                return getattr(relay, hook)(provider=provider, **kwargs)

            return SessionProvider(HookProvider(reg.info, opts, session, call), reg)
        try:
            ep = relay.ort_create_provider(provider=provider, options=dict(opts), session=session)
        except (ValueError, InvalidArgument) as e:
            raise InvalidArgument(f"provider '{provider}': {e}") from e
        except Exception as e:  # noqa: BLE001 - a broken plugin must never break the core
            raise PluginError(f"{reg.label}: ort_create_provider for '{provider}' raised "
                              f"{type(e).__name__}: {e}") from e
        if not isinstance(ep, ExecutionProvider):
            raise PluginError(f"{reg.label}: ort_create_provider for '{provider}' returned "
                              f"{type(ep).__name__}, expected an ort_core.plugins.ExecutionProvider")
        if ep.name != provider:
            raise PluginError(f"{reg.label}: ort_create_provider for '{provider}' returned an instance "
                              f"named '{ep.name}'")
        bad = [d for d in ep.devices if not isinstance(d, Device)] if ep.devices else ["none"]
        if bad:
            raise PluginError(f"{reg.label}: the '{provider}' instance lists no valid devices ({bad[:3]})")
        return SessionProvider(ep, reg)

    def default(self, provider: str) -> SessionProvider:
        """A process-wide instance of ``provider`` with default options: for values made outside a
        session (OrtValue on a device) and for the conformance suite's direct hook checks."""
        with self._defaults_lock:
            found = self._defaults.get(provider)
            if found is None:
                found = self._defaults[provider] = self.create(provider)
            return found

    def _hooks_of(self, plugin: Any) -> set[str]:
        return {h.name for h in (self.pm.get_hookcallers(plugin) or [])}

    def _owner(self, provider: str) -> Registered:
        try:
            return self.providers[provider]
        except KeyError:
            raise PluginError(f"no installed plugin provides '{provider}'") from None

    # ------------------------------------------- one call each, default instance
    def get_capability(self, provider: str, view: GraphView, options: dict | None = None) -> Capability:
        return self._instance(provider, options).get_capability(view)

    def compile(self, provider: str, subgraph, options: dict | None = None):
        """One subgraph's kernel; an UnsupportedSubgraph answer is raised as a PluginError here."""
        (kernel,) = self._instance(provider, options).compile([subgraph])
        if isinstance(kernel, UnsupportedSubgraph):
            raise PluginError(f"'{provider}' does not support {subgraph.name}: {kernel}") from kernel
        return kernel

    def allocator(self, provider: str, device: Device) -> Allocator:
        return self.default(provider).allocator(device)

    def data_transfer(self, provider: str) -> DataTransfer:
        return self.default(provider).data_transfer()

    def _instance(self, provider: str, options: dict | None) -> SessionProvider:
        return self.create(provider, options) if options else self.default(provider)

    # ----------------------------------------------------------------- queries
    def available(self) -> list[str]:
        """Available provider names, plugins first (alphabetically), CPU last."""
        names = sorted(n for n, r in self.providers.items() if r.info.available and n != CPU)
        return names + [CPU]


class SessionProvider:
    """A provider instance as the core uses it: every answer of the plugin's object is checked, and a
    plugin that raises or breaks the contract becomes a PluginError naming the plugin and the call."""

    def __init__(self, ep: ExecutionProvider, reg: Registered) -> None:
        self.ep, self.reg, self.name = ep, reg, ep.name
        self._closed = False

    @property
    def device(self) -> Device:
        return self.ep.device

    @property
    def devices(self) -> tuple[Device, ...]:
        return self.ep.devices

    @property
    def options(self) -> dict[str, str]:
        return self.ep.options

    @property
    def asynchronous(self) -> bool:
        return bool(self.ep.asynchronous)

    def _bad(self, call: str, problem: str) -> PluginError:
        return PluginError(f"{self.reg.label}: {call} for '{self.name}' {problem}")

    def _failed(self, call: str, e: BaseException) -> PluginError:
        return self._bad(call, f"raised {type(e).__name__}: {e}")

    def _ask(self, call: str, method, *args) -> Any:
        """``method(*args)``, any exception from the plugin becoming a PluginError naming it."""
        try:
            return method(*args)
        except Exception as e:  # noqa: BLE001 - a broken plugin must never break the core
            raise self._failed(call, e) from e

    def _typed(self, call: str, value: Any, cls: type, expected: str) -> Any:
        if not isinstance(value, cls):
            raise self._bad(call, f"returned {type(value).__name__}, {expected}")
        return value

    def preferences(self) -> Preferences:
        prefs = self._ask("preferences", self.ep.preferences)
        self._typed("preferences", prefs, Preferences, "expected ort_core.plugins.Preferences")
        if not all(isinstance(op, str) and "::" in op for op in prefs.fused_ops):
            raise self._bad("preferences", f"fused_ops must hold 'domain::op_type' strings, got {prefs.fused_ops!r}")
        if prefs.layout not in ("NCHW", "NHWC"):
            raise self._bad("preferences", f"layout must be 'NCHW' or 'NHWC', got {prefs.layout!r}")
        return prefs

    def get_capability(self, view: GraphView) -> Capability:
        cap = self._ask("ort_get_capability", self.ep.get_capability, view)
        if cap is None:
            raise self._bad("ort_get_capability", "is not implemented (returned None)")
        self._typed("ort_get_capability", cap, Capability, "expected ort_core.plugins.Capability")
        offered = set(view.offered)
        claimed = list(cap.claimed)
        bad = [c for c in claimed if not isinstance(c, int) or c not in offered]
        if bad:
            raise self._bad("ort_get_capability", f"claimed node ids not offered to it: {bad[:5]}")
        missing = offered - set(claimed) - set(cap.declined)
        if missing:
            ids = sorted(missing)[:5]
            raise self._bad("ort_get_capability",
                            f"gave no reason for declined node ids {ids}{'...' if len(missing) > 5 else ''}")
        if len(set(claimed)) != len(claimed):
            raise self._bad("ort_get_capability", "claimed some node ids twice")
        return cap

    def transform(self, view: TransformView) -> int:
        """The provider's rewrite of its own nodes; a failure is an error naming the plugin (the graph may be
        half rewritten, so the session cannot go on without it)."""
        count = self._ask("transform", self.ep.transform, view)
        return self._typed("transform", count, int, "expected the number of rewrites (an int)")

    def compile(self, subgraphs: list) -> list:
        """One kernel per subgraph, or an UnsupportedSubgraph in the place of one handed on."""
        try:
            kernels = list(self.ep.compile(list(subgraphs)))
        except UnsupportedSubgraph as e:
            if len(subgraphs) != 1:
                raise self._bad("ort_compile", f"raised UnsupportedSubgraph for a batch of {len(subgraphs)} "
                                "subgraphs; return it in the list in place of the one it hands on") from e
            kernels = [e]
        except Exception as e:  # noqa: BLE001
            raise self._failed("ort_compile", e) from e
        if len(kernels) != len(subgraphs):
            raise self._bad("ort_compile", f"returned {len(kernels)} kernels for {len(subgraphs)} subgraphs")
        for k in kernels:
            if not callable(k) and not isinstance(k, (ContextKernel, UnsupportedSubgraph)):
                raise self._bad("ort_compile", f"returned {type(k).__name__}, expected a callable kernel or "
                                "an ort_core.plugins.ContextKernel")
        return kernels

    def allocator(self, device: Device) -> Allocator:
        alloc = self._ask("ort_allocator", self.ep.allocator, device)
        return self._typed("ort_allocator", alloc, Allocator, "not an Allocator")

    def data_transfer(self) -> DataTransfer:
        dt = self._ask("ort_data_transfer", self.ep.data_transfer)
        return self._typed("ort_data_transfer", dt, DataTransfer, "not a DataTransfer")

    def staging_allocator(self) -> Allocator | None:
        """The provider's pinned host staging allocator, or None (also for providers of contract v1)."""
        method = getattr(self.ep, "staging_allocator", None)
        if method is None:
            return None
        alloc = self._ask("staging_allocator", method)
        if alloc is None:
            return None
        self._typed("staging_allocator", alloc, Allocator, "not an Allocator")
        device = getattr(alloc, "device", None)
        if device is None or not device.is_host or device.memory != "host_pinned":
            raise self._bad("staging_allocator", f"returned an allocator for {device}, expected host_pinned memory "
                            "(Device('cpu', 0, memory='host_pinned'))")
        return alloc

    def close(self) -> None:
        """Close the instance once; a failing close is a warning, never an error at exit."""
        if self._closed:
            return
        self._closed = True
        try:
            self.ep.close()
        except Exception as e:  # noqa: BLE001
            warn(f"{self.reg.label}: closing '{self.name}' raised {type(e).__name__}: {e}")


def check_options(info: ProviderInfo, options: Mapping[str, Any] | None) -> dict[str, str]:
    """The user's options, refusing names the provider does not declare (when it declares its
    options). Values are passed as given (strings from onnxruntime-style code, Python values from
    others) and defaults are not filled in: the factory parses and completes them."""
    opts = {str(k): v for k, v in (options or {}).items()}
    if info.options is not None:
        unknown = sorted(set(opts) - set(info.options))
        if unknown:
            valid = ", ".join(sorted(info.options)) or "none"
            raise InvalidArgument(f"unknown provider option(s) {unknown} for '{info.name}'; valid options: {valid}")
    return opts


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


def _dist_name(ep: Any) -> str | None:
    return getattr(getattr(ep, "dist", None), "name", None)


_lock = threading.Lock()
_registry: PluginRegistry | None = None


def get_registry(reload: bool = False) -> PluginRegistry:
    """The process-wide registry, discovered on first use; ``reload=True`` rescans entry points."""
    global _registry
    with _lock:
        if _registry is None or reload:
            _registry = PluginRegistry().load()
            if CPU not in _registry.providers:
                raise PluginError(f"{CPU} is not registered: the entry point '{ENTRY_POINT_GROUP}' of the "
                                  f"'{CORE_DIST}' distribution is missing (run ort-core from an installed copy: "
                                  "pip install ./core, or pip install -e ./core for development)")
        return _registry
