"""Choosing a session's providers from its SessionOptions, as onnxruntime's plugin-EP API does: providers added
explicitly (``add_provider``, ``add_provider_for_devices``), else a selection policy or a delegate function.

Turns the options into the ``providers=[(name, options), ...]`` list a session resolves; it creates no provider
instance and reads nothing but the OrtEpDevices of ``ep_devices`` and the model's metadata.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .ep_devices import (
    EFFICIENCY_KEY,
    POWER_KEY,
    OrtEpDevice,
    OrtHardwareDeviceType,
    get_ep_devices,
)
from .errors import Fail, InvalidArgument
from .plugins.manager import CPU, get_registry


class OrtExecutionProviderDevicePolicy(enum.IntEnum):
    """onnxruntime's device policies. DEFAULT and PREFER_CPU: the CPU provider; PREFER_NPU: the first NPU, then
    the CPU provider; PREFER_GPU and MAX_PERFORMANCE: the first GPU, then the CPU provider; MAX_EFFICIENCY: the
    device whose provider declares the highest ``ort_core.efficiency``, MIN_OVERALL_POWER: the lowest
    ``ort_core.power_watts``, each then the CPU provider, and PREFER_NPU's choice when no provider declares the
    hint (what onnxruntime does for both). Devices are taken NPUs first, then GPUs, by provider name."""

    DEFAULT = 0
    PREFER_CPU = 1
    PREFER_NPU = 2
    PREFER_GPU = 3
    MAX_PERFORMANCE = 4
    MAX_EFFICIENCY = 5
    MIN_OVERALL_POWER = 6


MAX_SELECTIONS = 8
"""How many OrtEpDevices a delegate may return (onnxruntime's limit; passed to it as ``max_selections``)."""


@dataclass(frozen=True)
class Added:
    """A provider added to SessionOptions: its name, the options given, and the OrtEpDevices it was added for
    (empty for ``add_provider``)."""

    name: str
    options: dict
    devices: tuple = ()


def added_for_devices(ep_devices: Any, provider_options: Any) -> Added:
    """Check ``add_provider_for_devices``'s arguments -> the provider to add, ``device_id`` filled in from the
    device for a provider that takes one (unless the options set it)."""
    if isinstance(ep_devices, (str, bytes, OrtEpDevice)) or not isinstance(ep_devices, Sequence):
        raise InvalidArgument(f"add_provider_for_devices: ep_devices must be a list of OrtEpDevice "
                              f"(ort_core.get_ep_devices()), got {type(ep_devices).__name__}")
    if not ep_devices:
        raise InvalidArgument("add_provider_for_devices: must provide one or more OrtEpDevice instances")
    for k, d in enumerate(ep_devices):
        if not isinstance(d, OrtEpDevice):
            raise InvalidArgument(f"add_provider_for_devices: ep_devices[{k}] is a {type(d).__name__}, not an "
                                  "OrtEpDevice (take them from ort_core.get_ep_devices())")
    names = sorted({d.ep_name for d in ep_devices})
    if len(names) > 1:
        raise InvalidArgument(f"add_provider_for_devices: all OrtEpDevices must belong to one provider, got {names}")
    options = _options("add_provider_for_devices", provider_options)
    name = names[0]
    reg = get_registry().providers.get(name)
    if reg is None:
        raise InvalidArgument(f"add_provider_for_devices: unknown device: provider '{name}' is no longer installed "
                              "(was its plugin library unregistered?)")
    devices = tuple(dict.fromkeys(ep_devices))
    takes_id = reg.info.options is not None and "device_id" in reg.info.options
    ids = sorted({d.ort_core_device.id for d in devices})
    if takes_id and "device_id" not in options:
        if len(ids) > 1:
            raise InvalidArgument(f"add_provider_for_devices: {name} computes on one device per session (its "
                                  f"device_id option); got devices {[str(d.ort_core_device) for d in devices]}")
        options["device_id"] = str(ids[0])
    return Added(name, options, devices)


def added_provider(provider_name: Any, provider_options: Any) -> Added:
    """Check ``add_provider``'s arguments (the provider's name and its options)."""
    if not isinstance(provider_name, str) or not provider_name:
        raise InvalidArgument(f"add_provider: provider_name must be a provider's name, got {provider_name!r}")
    return Added(provider_name, _options("add_provider", provider_options))


def checked_policy(policy: Any) -> OrtExecutionProviderDevicePolicy:
    if not isinstance(policy, OrtExecutionProviderDevicePolicy):
        raise InvalidArgument(f"set_provider_selection_policy: policy must be an "
                              f"ort_core.OrtExecutionProviderDevicePolicy "
                              f"({', '.join(OrtExecutionProviderDevicePolicy.__members__)}), got {policy!r}")
    return policy


def checked_delegate(fn: Any) -> Callable:
    if not callable(fn):
        raise InvalidArgument("set_provider_selection_policy_delegate: expected a function (ep_devices, "
                              f"model_metadata, runtime_metadata, max_selections) -> [OrtEpDevice], got {fn!r}")
    return fn


def providers_from_options(options: Any, model: Any, strict: bool = False) -> list[tuple[str, dict]] | None:
    """The provider list SessionOptions ``options`` ask for, or None when they ask for none: the providers
    added explicitly, in order (a policy is then ignored, as in onnxruntime), else the policy's or the
    delegate's choice. ``strict`` (session.disable_cpu_ep_fallback): the CPU provider they choose is left out."""
    if options._ep_added:
        return [(a.name, dict(a.options)) for a in options._ep_added]
    if options._ep_delegate is not None:
        chosen = _run_delegate(options._ep_delegate, ordered(get_ep_devices()), model)
    elif options._ep_policy is not None:
        chosen = select(options._ep_policy, get_ep_devices())
    else:
        return None
    if strict:  # as onnxruntime: the CPU provider is then no fallback (nodes it would take are refused)
        chosen = [d for d in chosen if d.ep_name != CPU]
    return _fold(chosen)


def select(policy: OrtExecutionProviderDevicePolicy, devices: Sequence[OrtEpDevice]) -> list[OrtEpDevice]:
    """The devices ``policy`` picks, in priority order, the CPU provider last."""
    P = OrtExecutionProviderDevicePolicy
    cpu = [d for d in devices if d.ep_name == CPU][:1]
    accelerators = [d for d in ordered(devices) if d.device.type != OrtHardwareDeviceType.CPU]

    def first(kind: OrtHardwareDeviceType) -> list[OrtEpDevice]:
        return [d for d in accelerators if d.device.type == kind][:1]

    if policy in (P.DEFAULT, P.PREFER_CPU):
        return cpu
    if policy in (P.PREFER_GPU, P.MAX_PERFORMANCE):
        return first(OrtHardwareDeviceType.GPU) + cpu
    if policy in (P.MAX_EFFICIENCY, P.MIN_OVERALL_POWER):
        key, best = (EFFICIENCY_KEY, max) if policy == P.MAX_EFFICIENCY else (POWER_KEY, min)
        hinted = [(h, d) for d in accelerators if (h := _hint(d, key)) is not None]
        if hinted:
            target = best(h for h, _ in hinted)
            return [next(d for h, d in hinted if h == target)] + cpu
    return first(OrtHardwareDeviceType.NPU) + cpu  # PREFER_NPU, and the two above without hints


def ordered(devices: Sequence[OrtEpDevice]) -> list[OrtEpDevice]:
    """Devices as onnxruntime orders them for a policy or delegate: NPUs, GPUs, then CPUs, by provider name
    within a type, the CPU provider last."""
    rank = {OrtHardwareDeviceType.NPU: 0, OrtHardwareDeviceType.GPU: 1, OrtHardwareDeviceType.CPU: 2}
    return sorted(devices, key=lambda d: (rank[d.device.type], d.ep_name == CPU, d.ep_name, d.device.device_id))


def model_metadata(model: Any) -> dict[str, str]:
    """The model's metadata as onnxruntime hands it to a delegate (field names of onnx.proto)."""
    meta = {"producer_name": model.producer_name, "producer_version": model.producer_version,
            "domain": model.domain, "model_version": str(model.model_version), "doc_string": model.doc_string,
            "graph_name": model.graph.name, "graph_description": model.graph.doc_string}
    meta.update({str(k): str(v) for k, v in model.metadata_props.items()})
    return meta


def _run_delegate(fn: Callable, devices: list[OrtEpDevice], model: Any) -> list[OrtEpDevice]:
    try:
        chosen = fn(list(devices), model_metadata(model), {}, MAX_SELECTIONS)
    except Exception as e:  # noqa: BLE001 - the user's function: its error, named as onnxruntime names it
        raise Fail(f"EP selection delegate failed: {type(e).__name__}: {e}") from e
    if isinstance(chosen, OrtEpDevice) or not isinstance(chosen, Sequence):
        raise Fail(f"EP selection delegate returned {type(chosen).__name__}; expected a list of OrtEpDevice")
    if not chosen:
        raise Fail("EP selection delegate did not select anything.")
    if len(chosen) > MAX_SELECTIONS:
        raise Fail(f"EP selection delegate selected too many EP devices ({len(chosen)}). The limit is "
                   f"{MAX_SELECTIONS} EP devices.")
    offered = set(devices)
    for k, d in enumerate(chosen):
        if not isinstance(d, OrtEpDevice) or d not in offered:
            raise Fail(f"EP selection delegate returned {d!r} at [{k}], which is not one of the OrtEpDevices it "
                       "was given")
    return list(chosen)


def _fold(devices: list[OrtEpDevice]) -> list[tuple[str, dict]]:
    """One (provider, options) entry per provider, in the order of its first device (device_id from it)."""
    out: dict[str, dict] = {}
    for d in devices:
        if d.ep_name not in out:
            out[d.ep_name] = {"device_id": d.ep_options["device_id"]} if "device_id" in d.ep_options else {}
    return list(out.items())


def _hint(device: OrtEpDevice, key: str) -> float | None:
    try:
        value = float(device.ep_metadata[key])
    except (KeyError, ValueError):
        return None
    return value if value == value else None  # NaN is no hint


def _options(where: str, provider_options: Any) -> dict:
    if provider_options is None:
        return {}
    if not isinstance(provider_options, Mapping):
        raise InvalidArgument(f"{where}: provider_options must be a dict of option name -> value, got "
                              f"{type(provider_options).__name__}")
    return {str(k): v for k, v in provider_options.items()}
