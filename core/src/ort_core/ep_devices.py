"""onnxruntime's device discovery for users: ``get_ep_devices()``, the types it hands out (OrtEpDevice,
OrtHardwareDevice, OrtMemoryInfo, OrtDevice, OrtSyncStream) and ``copy_tensors``.

Everything is read from the provider registry (each available provider's ``ProviderInfo.devices``); nothing
here chooses providers (``ep_selection`` does) or looks inside a device tensor (the providers' transfers copy).
"""

from __future__ import annotations

import enum
import platform
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .errors import Fail, InvalidArgument
from .memory.device import HOST, Device
from .ortvalue import OrtValue, default_transfers, known_devices
from .plugins.manager import get_registry


class OrtHardwareDeviceType(enum.IntEnum):
    CPU = 0
    GPU = 1
    NPU = 2


class OrtDeviceMemoryType(enum.IntEnum):
    DEFAULT = 0
    HOST_ACCESSIBLE = 5


class OrtMemType(enum.IntEnum):
    CPU_INPUT = -2
    CPU_OUTPUT = -1
    CPU = -1  # an alias of CPU_OUTPUT, as in onnxruntime
    DEFAULT = 0


class OrtAllocatorType(enum.IntEnum):
    INVALID = -1
    ORT_DEVICE_ALLOCATOR = 0
    ORT_ARENA_ALLOCATOR = 1


class OrtMemoryInfoDeviceType(enum.IntEnum):
    CPU = 0
    GPU = 1
    FPGA = 2
    NPU = 3


class OrtDeviceVendorId(enum.IntEnum):
    """PCI vendor ids, as onnxruntime's ``OrtDeviceVendorId``."""

    NONE = 0x0000
    AMD = 0x1002
    NVIDIA = 0x10DE
    ARM = 0x13B5
    MICROSOFT = 0x1414
    HUAWEI = 0x19E5
    QUALCOMM = 0x5143
    INTEL = 0x8086


METADATA_ATTRIBUTE = "ORT_EP_METADATA"
"""Optional attribute of a provider plugin's object (the module its entry point names): provider name ->
``{key: value}`` strings, shown in that provider's ``OrtEpDevice.ep_metadata``. Keys ort-core reads:

- ``ort_core.hardware_type``: "GPU" or "NPU", how its non-host devices are classified (default below);
- ``ort_core.efficiency``: a positive number, relative work per joule (higher is better), read by the
  MAX_EFFICIENCY policy;
- ``ort_core.power_watts``: typical power while busy, in watts (lower is better), read by MIN_OVERALL_POWER.
"""
HARDWARE_TYPE_KEY = "ort_core.hardware_type"
EFFICIENCY_KEY = "ort_core.efficiency"
POWER_KEY = "ort_core.power_watts"

GPU_TYPES = frozenset({"gpu", "cuda", "rocm", "hip", "dml", "webgpu", "migraphx", "opencl", "vulkan", "metal",
                       "mps", "xpu"})
NPU_TYPES = frozenset({"npu", "qnn", "htp", "dsp", "nnapi", "ane", "vpu", "cann", "hailo"})
"""Device types ort-core classifies by name. Any other non-host type is an NPU (onnxruntime has no third kind of
accelerator) unless its provider declares ``ort_core.hardware_type``."""

_VENDOR_IDS = {v.name.lower(): int(v) for v in OrtDeviceVendorId if v.name != "NONE"} | {"apple": 0x106B}
_ORT_DEVICE_TYPES = {"cpu": 0, "gpu": 1, "cuda": 1, "webgpu": 1, "fpga": 2, "npu": 3, "cann": 3, "dml": 4}
_ORT_ALIAS_VENDORS = {"cuda": OrtDeviceVendorId.NVIDIA, "dml": OrtDeviceVendorId.MICROSOFT,
                      "cann": OrtDeviceVendorId.HUAWEI, "webgpu": OrtDeviceVendorId.NONE}
# onnxruntime's OrtMemoryInfo names (its first constructor accepts only these) -> ort-core's device
_ORT_MEMORY_NAMES = {"Cpu": ("cpu", "default", ""), "Cuda": ("cuda", "default", "nvidia"),
                     "CudaPinned": ("cpu", "host_pinned", "nvidia"), "DML": ("dml", "default", "microsoft"),
                     "WebGPU_Buffer": ("webgpu", "default", "")}


# ------------------------------------------------------------------ hardware and memory descriptions

class OrtHardwareDevice:
    """A piece of hardware (onnxruntime's OrtHardwareDevice): ``type`` (OrtHardwareDeviceType), ``vendor``,
    ``vendor_id`` (PCI vendor id, 0 when unknown), ``device_id`` (ort-core: the device's ordinal among devices
    of its type; onnxruntime: the PCI device id) and ``metadata``. Read-only; ``get_ep_devices()`` makes them."""

    __slots__ = ("_type", "_vendor", "_vendor_id", "_device", "_metadata")

    def __init__(self, device: Device, hw_type: OrtHardwareDeviceType, vendor: str, vendor_id: int) -> None:
        self._device, self._type, self._vendor, self._vendor_id = device, hw_type, vendor, vendor_id
        self._metadata = {"ort_core.device": str(device)}

    type = property(lambda self: self._type, doc="OrtHardwareDeviceType: CPU, GPU or NPU.")
    vendor = property(lambda self: self._vendor, doc="The hardware vendor's name ('' when unknown).")
    vendor_id = property(lambda self: self._vendor_id, doc="The PCI vendor id (0 when unknown).")
    device_id = property(lambda self: self._device.id, doc="The device's ordinal among devices of its type.")
    metadata = property(lambda self: dict(self._metadata), doc="Free-form strings ('ort_core.device': 'example:0').")
    ort_core_device = property(lambda self: self._device, doc="ort-core's Device (an ort-core extra).")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OrtHardwareDevice) and (self._device, self._type) == (other._device, other._type)

    def __hash__(self) -> int:
        return hash((self._device, self._type))

    def __repr__(self) -> str:
        return f"OrtHardwareDevice({self._type.name}, {self._device}, vendor={self._vendor!r})"


class OrtMemoryInfo:
    """Where a value lives (onnxruntime's OrtMemoryInfo): ``name``, ``device_id``, ``mem_type``,
    ``allocator_type``, ``device_mem_type``, ``device_vendor_id``; ``device`` is ort-core's Device (an extra).

    ``OrtMemoryInfo(name, allocator_type, device_id, mem_type)`` takes onnxruntime's names ("Cpu", "Cuda",
    "CudaPinned", "DML", "WebGPU_Buffer") or the type of a device an installed provider declares ("example");
    ``create_v2`` takes any name. ort-core describes memory with these; it registers no allocators from them.
    """

    __slots__ = ("name", "device_id", "mem_type", "allocator_type", "device_mem_type", "device_vendor_id",
                 "device")

    def __init__(self, name: str, allocator_type: Any, device_id: int, mem_type: Any) -> None:
        if not isinstance(name, str) or not name:
            raise InvalidArgument(f"OrtMemoryInfo: name must be a non-empty string, got {name!r}")
        device_id = _int("OrtMemoryInfo", "device_id", device_id)
        if name in _ORT_MEMORY_NAMES:
            kind, memory, vendor = _ORT_MEMORY_NAMES[name]
            device = HOST if (kind, memory) == ("cpu", "default") else Device(kind, device_id, vendor, memory)
        else:
            matches = [d for d in known_devices() if not d.is_host and d.type == name.lower() and d.id == device_id]
            if not matches:
                known = sorted({*_ORT_MEMORY_NAMES, *(d.type for d in known_devices() if not d.is_host)})
                raise InvalidArgument(f"OrtMemoryInfo: unknown device '{name}' id {device_id}: not one of "
                                      f"onnxruntime's names nor a device an installed provider declares (known: "
                                      f"{known}); OrtMemoryInfo.create_v2 takes any name")
            device = matches[0]
        self._fill(name, device, _enum(OrtAllocatorType, allocator_type, "allocator_type"),
                   _enum(OrtMemType, mem_type, "mem_type"))

    def _fill(self, name: str, device: Device, allocator_type: OrtAllocatorType, mem_type: OrtMemType) -> None:
        self.name, self.device = name, device
        self.device_id = device.id
        self.allocator_type, self.mem_type = allocator_type, mem_type
        self.device_mem_type = OrtDeviceMemoryType.HOST_ACCESSIBLE if device.memory != "default" and device.is_host \
            else OrtDeviceMemoryType.DEFAULT
        self.device_vendor_id = _vendor_id(device)

    @staticmethod
    def create_v2(name: str, device_type: Any, vendor_id: int, device_id: int, device_mem_type: Any,
                  alignment: int, allocator_type: Any) -> OrtMemoryInfo:
        """onnxruntime's CreateMemoryInfo_V2: any ``name``; ``device_type`` an OrtMemoryInfoDeviceType. A CPU
        type is host memory (page-locked for HOST_ACCESSIBLE); another type names the device ``name.lower()``."""
        if not isinstance(name, str) or not name:
            raise InvalidArgument(f"OrtMemoryInfo.create_v2: name must be a non-empty string, got {name!r}")
        kind = _enum(OrtMemoryInfoDeviceType, device_type, "device_type")
        memory = _enum(OrtDeviceMemoryType, device_mem_type, "device_mem_type")
        device_id = _int("OrtMemoryInfo.create_v2", "device_id", device_id)
        _int("OrtMemoryInfo.create_v2", "alignment", alignment)
        if kind == OrtMemoryInfoDeviceType.CPU:
            device = HOST if memory == OrtDeviceMemoryType.DEFAULT else Device("cpu", 0, "", "host_pinned")
        else:
            device = Device(name.lower(), device_id)
        info = OrtMemoryInfo.__new__(OrtMemoryInfo)
        info._fill(name, device, _enum(OrtAllocatorType, allocator_type, "allocator_type"), OrtMemType.DEFAULT)
        info.device_mem_type = memory
        info.device_vendor_id = _int("OrtMemoryInfo.create_v2", "vendor_id", vendor_id)
        return info

    @staticmethod
    def of(device: Device) -> OrtMemoryInfo:
        """The description of ``device``'s memory ("Cpu" for host memory, the device type otherwise)."""
        info = OrtMemoryInfo.__new__(OrtMemoryInfo)
        host = device.is_host and device.memory == "default"
        info._fill("Cpu" if host else device.type, device,
                   OrtAllocatorType.ORT_ARENA_ALLOCATOR if host else OrtAllocatorType.ORT_DEVICE_ALLOCATOR,
                   OrtMemType.DEFAULT)
        return info

    def _key(self) -> tuple:
        return (self.name, self.device, self.mem_type, self.allocator_type, self.device_mem_type, self.device_vendor_id)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OrtMemoryInfo) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return f"OrtMemoryInfo({self.name!r}, device={self.device}, {self.allocator_type.name}, {self.mem_type.name})"


class OrtDevice:
    """onnxruntime's Python OrtDevice: ``OrtDevice.make(name, device_id, vendor_id=-1)``, then ``device_id()``,
    ``device_type()`` (onnxruntime's codes: 0 CPU, 1 GPU, 2 FPGA, 3 NPU, 4 DML), ``device_vendor_id()`` and
    ``device_mem_type()``. ``name``: onnxruntime's ("cpu", "gpu", "npu", "cuda", "dml", "cann", "webgpu") or the
    type of a device an installed provider declares ("example", an NPU-type device to onnxruntime's codes)."""

    __slots__ = ("_device", "_type", "_vendor_id")

    def __init__(self, device: Device, type_code: int, vendor_id: int) -> None:
        if not isinstance(device, Device):
            raise InvalidArgument("OrtDevice(...) is made with OrtDevice.make(name, device_id, vendor_id=-1)")
        self._device, self._type, self._vendor_id = device, type_code, vendor_id

    @staticmethod
    def make(ort_device_name: str, device_id: int, vendor_id: int = -1) -> OrtDevice:
        if not isinstance(ort_device_name, str):
            raise InvalidArgument(f"OrtDevice.make: the device name must be a string, got {ort_device_name!r}")
        device_id = _int("OrtDevice.make", "device_id", device_id)
        vendor_id = _int("OrtDevice.make", "vendor_id", vendor_id)
        name = ort_device_name.strip().lower()
        if name in _ORT_DEVICE_TYPES:
            code = _ORT_DEVICE_TYPES[name]
            device = HOST if name == "cpu" else Device(name, device_id)
            vendor = vendor_id if vendor_id >= 0 else int(_ORT_ALIAS_VENDORS.get(name, 0))
            return OrtDevice(device, code, vendor)
        device = Device(name, device_id)
        if device not in known_devices():
            known = sorted({*_ORT_DEVICE_TYPES, *(d.type for d in known_devices())})
            raise InvalidArgument(f"OrtDevice.make: unsupported device type '{ort_device_name}' id {device_id} "
                                  f"(known: {known})")
        code = 1 if hardware_type(device) == OrtHardwareDeviceType.GPU else 3
        return OrtDevice(device, code, vendor_id if vendor_id >= 0 else _vendor_id(device))

    def device_id(self) -> int:
        return self._device.id

    def device_type(self) -> int:
        return self._type

    def device_vendor_id(self) -> int:
        return self._vendor_id

    def device_mem_type(self) -> int:
        return 0 if self._device.memory == "default" else 5

    @property
    def device(self) -> Device:
        """ort-core's Device (an ort-core extra)."""
        return self._device

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OrtDevice) and (self._device, self._type, self._vendor_id) == \
            (other._device, other._type, other._vendor_id)

    def __hash__(self) -> int:
        return hash((self._device, self._type, self._vendor_id))

    def __repr__(self) -> str:
        return f"OrtDevice({self._device}, type={self._type}, vendor_id={self._vendor_id:#x})"


# ------------------------------------------------------------------------------- streams

class OrtSyncStream:
    """A stream of a provider's device (onnxruntime's OrtSyncStream), from ``OrtEpDevice.create_sync_stream()``,
    for ``copy_tensors``. ``get_handle()``: an int identifying it (0 for a provider that computes synchronously,
    which has no streams). ``synchronize()`` (an ort-core extra) waits for the work queued on it."""

    __slots__ = ("_stream", "_device")

    def __init__(self, stream: Any, device: Device) -> None:
        self._stream, self._device = stream, device

    def get_handle(self) -> int:
        return 0 if self._stream is None else id(self._stream)

    def synchronize(self) -> None:
        if self._stream is not None:
            self._stream.synchronize()

    @property
    def device(self) -> Device:
        return self._device

    def __repr__(self) -> str:
        return f"OrtSyncStream({self._device}, handle={self.get_handle():#x})"


# ------------------------------------------------------------------------------ OrtEpDevice

class OrtEpDevice:
    """One (provider, device) pair an installed, available provider supports (onnxruntime's OrtEpDevice):
    ``ep_name``, ``ep_vendor`` (the distribution shipping the provider), ``ep_metadata`` (its version and what
    the plugin declares in ``ORT_EP_METADATA``), ``ep_options`` (the options it declares with their defaults,
    ``device_id`` set to this device's), ``device`` (an OrtHardwareDevice), ``memory_info(OrtDeviceMemoryType)``
    and ``create_sync_stream()``. Made by ``get_ep_devices()``; two describing the same pair are equal."""

    __slots__ = ("_ep_name", "_ep_vendor", "_ep_metadata", "_ep_options", "_hardware", "_pinned")

    def __init__(self, ep_name: str, ep_vendor: str, ep_metadata: dict, ep_options: dict,
                 hardware: OrtHardwareDevice, pinned: Device | None = None) -> None:
        self._ep_name, self._ep_vendor = ep_name, ep_vendor
        self._ep_metadata, self._ep_options = ep_metadata, ep_options
        self._hardware, self._pinned = hardware, pinned

    ep_name = property(lambda self: self._ep_name, doc="The execution provider's name.")
    ep_vendor = property(lambda self: self._ep_vendor, doc="Who ships the provider (its distribution).")
    ep_metadata = property(lambda self: dict(self._ep_metadata), doc="The provider's metadata strings.")
    ep_options = property(lambda self: dict(self._ep_options), doc="The provider's options and their defaults.")
    device = property(lambda self: self._hardware, doc="The OrtHardwareDevice.")

    @property
    def ort_core_device(self) -> Device:
        """ort-core's Device of this pair (an ort-core extra)."""
        return self._hardware.ort_core_device

    def memory_info(self, memory_type: Any) -> OrtMemoryInfo | None:
        """The memory of this device for ``memory_type`` (an OrtDeviceMemoryType): DEFAULT, the device's own
        memory; HOST_ACCESSIBLE, page-locked host memory where the provider declares some. None for the host
        (as onnxruntime answers for CPU devices) and for memory the provider does not have."""
        kind = _enum(OrtDeviceMemoryType, memory_type, "memory_type")
        device = self.ort_core_device
        if device.is_host:
            return None
        if kind == OrtDeviceMemoryType.DEFAULT:
            return OrtMemoryInfo.of(device)
        return None if self._pinned is None else OrtMemoryInfo.of(self._pinned)

    def create_sync_stream(self) -> OrtSyncStream:
        """A stream of this device's provider (its ``stream()``), for copy_tensors. A host device has none
        (onnxruntime refuses too); a provider computing synchronously gives a stream with handle 0."""
        device = self.ort_core_device
        if device.is_host:
            raise Fail(f"create_sync_stream: {self._ep_name} on {device} computes in host memory, which has no "
                       "streams (ep_device does not use DEFAULT memory of a non-CPU device)")
        instance = provider_instance(self._ep_name, device)
        stream = instance.ep.stream() if instance.asynchronous else None
        return OrtSyncStream(stream, device)

    def _key(self) -> tuple:
        return (self._ep_name, self._hardware)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OrtEpDevice) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return f"OrtEpDevice({self._ep_name!r}, {self._hardware.type.name} {self.ort_core_device})"


def get_ep_devices() -> list[OrtEpDevice]:
    """One OrtEpDevice per (provider, device) pair of every installed, available provider, in the registry's
    order (the CPU provider first, as in onnxruntime)."""
    found = []
    for name, reg in get_registry().providers.items():
        info = reg.info
        if not info.available:
            continue
        metadata = _metadata(reg)
        pinned = next((d for d in info.devices if d.is_host and d.memory != "default"), None)
        for device in dict.fromkeys(d for d in info.devices if not (d.is_host and d.memory != "default")):
            hw_type = hardware_type(device, metadata.get(HARDWARE_TYPE_KEY))
            vendor, vendor_id = _host_vendor() if device.is_host else (device.vendor, _vendor_id(device))
            options = {str(k): str(v) for k, v in (info.options or {}).items()}
            if "device_id" in options:
                options["device_id"] = str(device.id)
            found.append(OrtEpDevice(name, reg.distribution, metadata, options,
                                     OrtHardwareDevice(device, hw_type, vendor, vendor_id), pinned))
    return found


def hardware_type(device: Device, declared: str | None = None) -> OrtHardwareDeviceType:
    """How onnxruntime would classify ``device``: the host is a CPU; a non-host device is what its provider
    declares (``ort_core.hardware_type``), else a GPU or NPU by its type name, else an NPU."""
    if device.is_host:
        return OrtHardwareDeviceType.CPU
    if declared and declared.strip().upper() in ("GPU", "NPU"):
        return OrtHardwareDeviceType[declared.strip().upper()]
    return OrtHardwareDeviceType.GPU if device.type in GPU_TYPES else OrtHardwareDeviceType.NPU


def provider_instance(provider: str, device: Device):
    """A process-wide instance of ``provider`` computing on ``device`` (the registry's default instance, or
    one made with that ``device_id`` for a provider with several devices)."""
    registry = get_registry()
    instance = registry.default(provider)
    if device in instance.devices:
        return instance
    with _instances_lock:
        key = (provider, device)
        if key not in _instances:
            _instances[key] = registry.create(provider, {"device_id": str(device.id)})
        return _instances[key]


_instances: dict = {}
_instances_lock = threading.Lock()


def forget(provider: str) -> None:
    """Close and drop the process-wide instances of ``provider`` (it was unregistered)."""
    with _instances_lock:
        found = [_instances.pop(key) for key in [k for k in _instances if k[0] == provider]]
    for instance in found:
        instance.close()


# ------------------------------------------------------------------------------ copy_tensors

def copy_tensors(src: Sequence[OrtValue], dst: Sequence[OrtValue], stream: OrtSyncStream | None = None) -> None:
    """Copy each ``src[k]`` into the existing ``dst[k]`` (same shape and element type), between any devices the
    installed providers connect, host to host included. With a ``stream`` (OrtEpDevice.create_sync_stream()),
    copies its provider makes are ordered after the work already queued on it. Returns once every copy is done
    (onnxruntime may return earlier when given a stream)."""
    if isinstance(src, (OrtValue, str, bytes)) or not isinstance(src, Sequence):
        raise InvalidArgument(f"copy_tensors: src must be a list of OrtValue, got {type(src).__name__}")
    if isinstance(dst, (OrtValue, str, bytes)) or not isinstance(dst, Sequence):
        raise InvalidArgument(f"copy_tensors: dst must be a list of OrtValue, got {type(dst).__name__}")
    if not src or len(src) != len(dst):
        raise InvalidArgument(f"copy_tensors: src and dst must be lists of the same, non-zero length; got "
                              f"{len(src)} and {len(dst)}")
    if stream is not None and not isinstance(stream, OrtSyncStream):
        raise InvalidArgument(f"copy_tensors: stream must be an OrtSyncStream (OrtEpDevice.create_sync_stream()) "
                              f"or None, got {type(stream).__name__}")
    for k, (s, d) in enumerate(zip(src, dst)):
        for side, value in (("src", s), ("dst", d)):
            if not isinstance(value, OrtValue) or not value.is_tensor():
                given = repr(value) if isinstance(value, OrtValue) else type(value).__name__
                raise InvalidArgument(f"copy_tensors: {side}[{k}] must be a tensor OrtValue, got {given}")
        if tuple(s.shape()) != tuple(d.shape()) or np.dtype(s.value.dtype) != np.dtype(d.value.dtype):
            raise InvalidArgument(f"copy_tensors: src[{k}] is {s.data_type()} {s.shape()} but dst[{k}] is "
                                  f"{d.data_type()} {d.shape()}; shapes and element types must match")
    for s, d in zip(src, dst):
        _copy_one(s, d, stream)
    if stream is not None:
        stream.synchronize()


def _copy_one(src: OrtValue, dst: OrtValue, stream: OrtSyncStream | None) -> None:
    s_dev, d_dev = src.device, dst.device
    if s_dev.is_host and d_dev.is_host:
        np.copyto(dst.value, src.value)
        return
    transfers = default_transfers()
    t = transfers.direct(s_dev, d_dev)
    if t is not None and hasattr(t, "copy_into"):
        own = stream is not None and stream.device in (s_dev, d_dev)
        t.copy_into(src.value, dst.value, stream._stream if own else None)
        return
    value = transfers.copier(s_dev, HOST)(src.value)  # staged through the host (or a transfer without copy_into)
    if d_dev.is_host:
        np.copyto(dst.value, value)
        return
    t = transfers.direct(HOST, d_dev)
    if t is not None and hasattr(t, "copy_into"):
        t.copy_into(value, dst.value, None)
    else:  # the provider cannot write into existing memory: the destination gets a new buffer
        dst._set(transfers.copier(HOST, d_dev)(value), d_dev)


# ------------------------------------------------------------------------------ helpers

def _metadata(reg: Any) -> dict[str, str]:
    out = {"version": reg.info.version} if reg.info.version else {}
    declared = getattr(reg.plugin, METADATA_ATTRIBUTE, None)
    entries = declared.get(reg.info.name) if isinstance(declared, Mapping) else None
    if isinstance(entries, Mapping):
        out.update({str(k): str(v) for k, v in entries.items()})
    return out


def _vendor_id(device: Device) -> int:
    return _VENDOR_IDS.get(device.vendor.strip().lower(), 0)


_host: list = []


def _host_vendor() -> tuple[str, int]:
    """The host CPU's vendor and PCI vendor id, as onnxruntime reports them ('AMD', 0x1022), read once."""
    if not _host:
        vendor, vid = "", 0
        try:
            with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
                text = f.read(8192)
        except OSError:
            text = ""
        if "AuthenticAMD" in text:
            vendor, vid = "AMD", 0x1022
        elif "GenuineIntel" in text:
            vendor, vid = "Intel", 0x8086
        elif platform.machine().lower() in ("arm64", "aarch64"):
            vendor, vid = "ARM", int(OrtDeviceVendorId.ARM)
        _host.append((vendor, vid))
    return _host[0]


def _int(where: str, what: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise InvalidArgument(f"{where}: {what} must be an int, got {value!r}")
    return int(value)


def _enum(cls: type[enum.IntEnum], value: Any, what: str) -> Any:
    if isinstance(value, cls):
        return value
    if isinstance(value, enum.Enum) or isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise InvalidArgument(f"{what} must be an ort_core.{cls.__name__} ({', '.join(cls.__members__)}), "
                              f"got {value!r}")
    try:
        return cls(int(value))
    except ValueError:
        raise InvalidArgument(f"{what}: {value} is not a value of {cls.__name__} "
                              f"({', '.join(f'{n}={int(m)}' for n, m in cls.__members__.items())})") from None
