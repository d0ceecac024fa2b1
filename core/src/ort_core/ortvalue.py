"""OrtValue: a value (numpy array on the host, a provider's tensor on its device) and its Device.

Mirrors onnxruntime.OrtValue. Device values are created and read only through the owning
provider's data transfer (the registry's default instance of it); this module never looks inside
a device tensor. It stands above the plugin registry, beside IOBinding, so ``memory/`` stays free
of any plugin import.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from . import dlpack
from .errors import Fail, InvalidArgument, NotImplementedOp
from .ir.types import elem_type_name, elem_type_of, np_dtype
from .memory.device import HOST, Device
from .memory.protocols import host_array
from .memory.tensor import DeviceTensor
from .plugins.manager import CPU, get_registry
from .transfers import Transfers


class OrtValue:
    """A tensor (or sequence of tensors) and the device its memory lives on.

    Host values are numpy arrays; ``ortvalue_from_numpy(array)`` aliases the array (no copy, as
    in onnxruntime), so later writes to either show in both. Values on another device are what
    that device's provider produces (opaque objects with ``shape`` and ``dtype``); ``numpy()``
    copies them to the host through the provider's data transfer.
    """

    __slots__ = ("_value", "_device", "__weakref__")

    def __init__(self, value: Any, device: Device = HOST) -> None:
        self._value = value
        self._device = HOST if device.is_host else device

    # ----------------------------------------------------------------- creation
    @staticmethod
    def ortvalue_from_numpy(numpy_obj: Any, device_type: str = "cpu", device_id: int = 0) -> OrtValue:
        """An OrtValue holding ``numpy_obj``: aliased on 'cpu' (copied only if not C-contiguous),
        copied to the device through its provider's data transfer otherwise."""
        device = find_device(device_type, device_id)
        arr = numpy_obj if isinstance(numpy_obj, np.ndarray) else np.asarray(numpy_obj)
        if not arr.flags.c_contiguous:
            arr = arr.copy(order="C")  # keeps 0-d arrays 0-d
        if device.is_host:
            return OrtValue(arr, HOST)
        return OrtValue(copier(HOST, device)(arr), device)

    @staticmethod
    def ortvalue_from_numpy_with_onnx_type(data: Any, onnx_element_type: int) -> OrtValue:
        """A host OrtValue of ONNX element type ``onnx_element_type`` over the bytes of ``data``, a numpy array
        whose items have that type's size (uint16 for bfloat16, uint8 for float8 types): the array is
        reinterpreted, not converted, and aliased as ortvalue_from_numpy aliases it."""
        if not isinstance(data, np.ndarray):
            raise InvalidArgument(f"ortvalue_from_numpy_with_onnx_type: data must be a numpy array, "
                                  f"got {type(data).__name__}")
        if isinstance(onnx_element_type, bool) or not isinstance(onnx_element_type, (int, np.integer)):
            raise InvalidArgument(f"onnx_element_type must be an ONNX element type number (onnx.TensorProto), "
                                  f"got {onnx_element_type!r}")
        dtype = to_dtype(int(onnx_element_type))
        if data.dtype.kind in "OUS" or dtype.kind in "OUS":
            raise InvalidArgument("ortvalue_from_numpy_with_onnx_type reinterprets fixed-size items; string "
                                  "tensors go through ortvalue_from_numpy")
        if data.dtype.itemsize != dtype.itemsize:
            raise InvalidArgument(f"ortvalue_from_numpy_with_onnx_type: item size {data.dtype.itemsize} of "
                                  f"{data.dtype} differs from the {dtype.itemsize} byte(s) of ONNX type "
                                  f"{elem_type_name(int(onnx_element_type))}")
        arr = data if data.flags.c_contiguous else data.copy(order="C")
        return OrtValue(arr.view(dtype), HOST)

    @staticmethod
    def ortvalue_from_shape_and_type(shape: Sequence[int], element_type: Any, device_type: str = "cpu",
                                     device_id: int = 0) -> OrtValue:
        """A tensor of ``shape`` and ``element_type`` (a numpy dtype or type, or an ONNX element type
        number) whose contents are undefined.

        Host memory comes from the CPU provider's allocator (the host arena). For another
        device a host buffer from the arena is copied there through the provider's data
        transfer: the contract's device allocators hand out raw buffers, not typed tensors.
        """
        device = find_device(device_type, device_id)
        dtype = to_dtype(element_type)
        try:
            shape = tuple(int(d) for d in shape)
        except (TypeError, ValueError):
            raise InvalidArgument(f"shape must be a sequence of ints, got {shape!r}") from None
        if any(d < 0 for d in shape):
            raise InvalidArgument(f"shape {list(shape)} has a negative dimension")
        if dtype.kind in "OUS":
            if not device.is_host:
                raise InvalidArgument(f"string tensors live on the host only, not on {device}")
            return OrtValue(np.full(shape, "", dtype=object), HOST)
        host = _host_empty(shape, dtype)
        if device.is_host:
            return OrtValue(host, HOST)
        return OrtValue(copier(HOST, device)(host), device)

    @staticmethod
    def ort_value_from_sparse_tensor(sparse_tensor: Any) -> OrtValue:
        """An OrtValue holding ``sparse_tensor`` (an ort_core.SparseTensor, kept as it is)."""
        from .sparse import SparseTensor

        if not isinstance(sparse_tensor, SparseTensor):
            raise InvalidArgument(f"ort_value_from_sparse_tensor: expected an ort_core.SparseTensor, "
                                  f"got {type(sparse_tensor).__name__}")
        return OrtValue(sparse_tensor, HOST)

    def as_sparse_tensor(self) -> Any:
        """The SparseTensor this OrtValue holds."""
        if not self.is_sparse_tensor():
            raise Fail("This OrtValue does not contain SparseTensor. Check data_type() value.")
        return self._value

    def is_sparse_tensor(self) -> bool:
        from .sparse import SparseTensor

        return isinstance(self._value, SparseTensor)

    # ------------------------------------------------------------------ queries
    def numpy(self) -> Any:
        """The value as a numpy array: the array itself on the host, a host copy otherwise."""
        if self.is_sparse_tensor():
            raise Fail("Only OrtValues that are Tensors are convertible to Numpy objects (this one holds a "
                       "SparseTensor: as_sparse_tensor())")
        if self._device.is_host or self._value is None:
            return self._value
        return copier(self._device, HOST)(self._value)

    def shape(self) -> list[int]:
        if self.is_sparse_tensor():
            return self._value.dense_shape()
        self._need_tensor("shape")
        return [int(d) for d in self._value.shape]

    def data_type(self) -> str:
        """The ONNX type string: 'tensor(float)', 'seq(tensor(int64))', ..."""
        if isinstance(self._value, (list, tuple)):
            inner = OrtValue(self._value[0]).data_type() if self._value else "tensor(undefined)"
            return f"seq({inner})"
        if self.is_sparse_tensor():
            return self._value.data_type()
        self._need_tensor("data_type")
        code = self.element_type()
        return f"tensor({elem_type_name(code)})"

    def element_type(self) -> int:
        """The ONNX element type number (onnx.TensorProto.FLOAT is 1), as onnxruntime returns."""
        self._need_tensor("element_type")
        code = elem_type_of(np.dtype(self._value.dtype))
        if code is None:
            raise InvalidArgument(f"dtype {self._value.dtype} has no ONNX element type")
        return code

    def tensor_size_in_bytes(self) -> int:
        """Bytes the tensor's data takes (element count times item size), on whichever device it lives."""
        self._need_tensor("tensor_size_in_bytes")
        dtype = np.dtype(self._value.dtype)
        if dtype.kind in "OUS":
            raise InvalidArgument("tensor_size_in_bytes() of a string tensor: its strings have no fixed size")
        count = 1
        for d in self._value.shape:
            count *= int(d)
        return count * dtype.itemsize

    def device_name(self) -> str:
        """The device type: 'cpu', or what the provider declares ('cuda', 'example', ...)."""
        return self._device.type

    @property
    def device(self) -> Device:
        """Where the value lives (an ort_core.memory.Device)."""
        return self._device

    @property
    def value(self) -> Any:
        """The held object itself: a numpy array on the host, the provider's tensor elsewhere."""
        return self._value

    def is_tensor(self) -> bool:
        v = self._value
        return v is not None and not isinstance(v, (list, tuple, dict)) and hasattr(v, "shape") \
            and hasattr(v, "dtype")

    def is_tensor_sequence(self) -> bool:
        return isinstance(self._value, (list, tuple))

    def has_value(self) -> bool:
        return self._value is not None

    def data_ptr(self) -> int:
        """Address of the tensor's data: in host memory, or on its device for a DeviceTensor."""
        self._need_tensor("data_ptr")
        if self._device.is_host:
            return int(self._value.ctypes.data)
        if isinstance(self._value, DeviceTensor):
            return self._value.ptr
        raise NotImplementedOp(f"data_ptr() of a value on {self._device}: its provider keeps values of its own "
                               f"type ({type(self._value).__name__}), not ort_core.memory.DeviceTensor")

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        """numpy's array protocol, so that ``np.asarray(ortvalue)`` and ``np.array(ortvalue)`` work: the held
        array itself on the host (no copy unless ``dtype`` or ``copy`` asks for one), a host copy otherwise."""
        self._need_tensor("__array__")
        arr = self.numpy()
        if copy is not None:
            return np.array(arr, dtype=dtype, copy=copy)
        return arr if dtype is None else np.asarray(arr, dtype=dtype)

    # ----------------------------------------------------------------- DLPack
    @staticmethod
    def from_dlpack(data: Any, is_bool_tensor: bool = False) -> OrtValue:
        """An OrtValue over the memory of ``data``, any object speaking the DLPack protocol (``__dlpack__``:
        numpy arrays, torch tensors, ...) or a DLPack capsule, without a copy. Host tensors become numpy
        arrays; tensors on a device of an installed provider (CUDA, or a provider's own device type as
        kDLExtDev) become that device's values; another device is refused, naming it. Types come from the
        DLPack metadata; ``is_bool_tensor`` (older onnxruntime releases' second argument) reads uint8 data as
        bool."""
        where = _dlpack_device_of(data)
        if where is not None and where[0] not in (dlpack.KDL_CPU, dlpack.KDL_CUDA_HOST):
            try:
                capsule = data.__dlpack__(stream=None) if hasattr(data, "__dlpack__") else data
                tensor = dlpack.import_capsule(capsule, _dlpack_devices())
            except (BufferError, TypeError, ValueError) as e:
                raise InvalidArgument(f"OrtValue.from_dlpack: cannot read {type(data).__name__} through DLPack "
                                      f"({e})") from e
            if is_bool_tensor and tensor.dtype == np.uint8:
                tensor = DeviceTensor(tensor.ptr, tensor.shape, np.bool_, tensor.device, tensor.owner, tensor.strides)
            return OrtValue(tensor, tensor.device)
        try:
            arr = np.from_dlpack(data) if hasattr(data, "__dlpack__") else np.from_dlpack(_Capsule(data))
        except (BufferError, RuntimeError, TypeError, ValueError) as e:
            raise InvalidArgument(f"OrtValue.from_dlpack: cannot read {type(data).__name__} as a tensor through "
                                  f"DLPack ({e})") from e
        if is_bool_tensor and arr.dtype == np.uint8:
            arr = arr.view(np.bool_)
        return OrtValue(arr, HOST)

    def __dlpack__(self, *, stream: Any = None, **kwargs: Any) -> Any:
        """The DLPack capsule of the held tensor, without a copy: for ``np.from_dlpack``, ``torch.from_dlpack``,
        ... A device value is complete when run() returns it, so ``stream`` needs no wait."""
        self._need_tensor("__dlpack__")
        if self._device.is_host:
            return self._value.__dlpack__(stream=stream, **kwargs)
        try:
            return dlpack.export(self._value)
        except BufferError as e:
            raise InvalidArgument(f"OrtValue.__dlpack__: {e}") from e

    def __dlpack_device__(self) -> tuple[int, int]:
        """(device type, device id) in DLPack's codes: (1, 0) for host values, (2, id) for CUDA, (12, id)
        (kDLExtDev) for a provider's own device type."""
        self._need_tensor("__dlpack_device__")
        return self._value.__dlpack_device__() if self._device.is_host else dlpack.device_code(self._device)

    def _need_host_tensor(self, what: str) -> None:
        self._need_tensor(what)
        if not self._device.is_host or not isinstance(self._value, np.ndarray):
            raise InvalidArgument(f"OrtValue.{what}: DLPack export of a value on {self._device} is not supported "
                                  "yet; copy it to the host with numpy()")

    # ----------------------------------------------------------------- updating
    def update_inplace(self, np_arr: Any) -> None:
        """Overwrite the contents with ``np_arr`` (same shape and dtype).

        The bytes are written into the existing memory: on the host into the array, on a device
        through its provider's data transfer (``copy_into``). A provider whose transfer cannot
        write into existing memory gets a fresh device copy instead (another address).
        """
        self._need_tensor("update_inplace")
        arr = np.asarray(np_arr)
        if arr.dtype != self._value.dtype or tuple(arr.shape) != tuple(self._value.shape):
            raise InvalidArgument(f"update_inplace: given {arr.dtype} {list(arr.shape)}, the OrtValue holds "
                                  f"{self._value.dtype} {list(self._value.shape)}")
        if self._device.is_host:
            np.copyto(self._value, arr)
        elif not write_into(self._value, arr, HOST, self._device):
            self._value = copier(HOST, self._device)(arr)

    def _set(self, value: Any, device: Device) -> None:
        """Replace the held value (IOBinding's pre-allocated device outputs)."""
        self._value, self._device = value, (HOST if device.is_host else device)

    def _need_tensor(self, what: str) -> None:
        if not self.is_tensor():
            kind = "no value" if self._value is None else type(self._value).__name__
            raise InvalidArgument(f"{what}() needs a tensor OrtValue; this one holds {kind}")

    def __repr__(self) -> str:
        if self.is_tensor():
            return f"OrtValue({self.data_type()}, shape={self.shape()}, device={self._device})"
        return f"OrtValue({type(self._value).__name__}, device={self._device})"


# --------------------------------------------------------------------- devices

def to_dtype(element_type: Any) -> np.dtype:
    """numpy dtype of an element type given as a numpy dtype/type or an ONNX element type number."""
    if isinstance(element_type, (int, np.integer)) and not isinstance(element_type, bool):
        try:
            return np_dtype(int(element_type))
        except (KeyError, TypeError, ValueError):
            raise InvalidArgument(f"unknown ONNX element type {element_type}") from None
    try:
        return np.dtype(element_type)
    except TypeError:
        raise InvalidArgument(f"element_type must be a numpy dtype or an ONNX element type number, "
                              f"got {element_type!r}") from None


def known_devices() -> dict[Device, str]:
    """Every device of an installed, available provider -> the first such provider's name."""
    found: dict[Device, str] = {HOST: CPU}
    for name, reg in get_registry().providers.items():
        if reg.info.available:
            for d in reg.info.devices:
                found.setdefault(HOST if d.is_host else d, name)
    return found


def find_device(device_type: Any, device_id: Any = 0) -> Device:
    """The Device named by onnxruntime-style ``device_type``/``device_id``; any 'cpu' id is the host."""
    if isinstance(device_type, Device):
        device = device_type
    else:
        if not isinstance(device_type, str):
            raise InvalidArgument(f"device_type must be a string such as 'cpu', got {device_type!r}")
        try:
            device = Device(device_type.strip().lower(), int(device_id))
        except (TypeError, ValueError):
            raise InvalidArgument(f"device_id must be an int, got {device_id!r}") from None
    if device.is_host:
        return HOST
    known = known_devices()
    if device in known:
        return device
    # a name and an ordinal, as onnxruntime's calls give them: the provider's own Device (its vendor included)
    for d in known:
        if (d.type, d.id, d.memory) == (device.type, device.id, device.memory) and not device.vendor:
            return d
    names = ", ".join(f"'{d.type}' id {d.id} ({p})" for d, p in known.items())
    raise InvalidArgument(f"unknown device {device}: no installed, available provider declares it; "
                          f"known devices: {names}")


_defaults: list = [None, None]  # ((registry, its generation), its Transfers): made again when providers change


class _DefaultInstance:
    """A provider's process-wide default instance as ``default_transfers`` holds it: made the first time a copy to
    or from one of its devices asks for its data transfer. A session that never copies there never makes it (nor
    wakes its device: a CPU session in a process where a GPU provider is installed), and one that cannot be made
    fails that copy with the reason, not every session."""

    def __init__(self, registry: Any, name: str, devices: tuple[Device, ...]) -> None:
        self.registry, self.name, self.devices = registry, name, devices

    def data_transfer(self) -> Any:
        return self.registry.default(self.name).data_transfer()


def default_transfers() -> Transfers:
    """The transfers of every installed, available provider's default instance (values outside sessions)."""
    registry = get_registry()
    key = (registry, registry.generation)
    if _defaults[0] != key:
        devices: dict[str, list[Device]] = {}
        for device, name in known_devices().items():
            if name != CPU:
                devices.setdefault(name, []).append(device)
        _defaults[:] = [key, Transfers(_DefaultInstance(registry, name, tuple(ds))
                                       for name, ds in sorted(devices.items()))]
    return _defaults[1]


def write_into(target: Any, value: Any, src: Device, dst: Device, transfers: Transfers | None = None) -> bool:
    """Copy ``value`` (on ``src``) into the existing DeviceTensor ``target`` (on ``dst``) through ``transfers``
    (default: the installed providers'), complete on return; False when none can write into existing memory."""
    t = (transfers or default_transfers()).direct(src, dst)
    if not isinstance(target, DeviceTensor) or t is None or not hasattr(t, "copy_into"):
        return False
    t.copy_into(value, target, None)
    return True


def copier(src: Device, dst: Device) -> Callable[[Any], Any]:
    """copy(value) from ``src`` to ``dst`` through the installed providers (see Transfers.copier)."""
    return default_transfers().copier(src, dst)


def _host_empty(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """An uninitialized host array from the CPU provider's allocator (the arena)."""
    alloc = get_registry().allocator(CPU, HOST)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    return host_array(alloc.allocate(nbytes), shape, dtype)


def _dlpack_device_of(data: Any) -> tuple[int, int] | None:
    """The DLPack (device type, id) of an exporter or a capsule, None when it cannot be told."""
    if hasattr(data, "__dlpack_device__"):
        try:
            kind, index = data.__dlpack_device__()
            return int(kind), int(index)
        except Exception:  # noqa: BLE001 - an odd exporter: numpy's path says what is wrong
            return None
    return dlpack.capsule_device(data)


def _dlpack_devices() -> dict[tuple[int, int], Device]:
    """DLPack (device type, id) -> the Device of an installed, available provider (kDLExtDev codes shared by
    two device types are left out: they cannot be told apart)."""
    found: dict[tuple[int, int], Device] = {}
    shared: set[tuple[int, int]] = set()
    for device in known_devices():
        if device.is_host:
            continue
        code = dlpack.device_code(device)
        if code in found and found[code] != device:
            shared.add(code)
        found.setdefault(code, device)
    return {k: v for k, v in found.items() if k not in shared}


class _Capsule:
    """A bare DLPack capsule presented as a host exporter, for numpy's from_dlpack (which takes objects)."""

    def __init__(self, capsule: Any) -> None:
        self._capsule = capsule

    def __dlpack__(self, **_: Any) -> Any:
        return self._capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)
