"""DLPack for device values: DeviceTensors exported as DLPack capsules and device capsules read back as
DeviceTensors, without a copy (host values go through numpy's own DLPack support, in ortvalue.py).

The structures are DLPack's C ABI (``DLManagedTensor``: data pointer, device, shape, strides, dtype and a
deleter), built with ctypes. A capsule handed out keeps the exported value, and so its memory, alive until
the consumer calls the deleter. A capsule nobody consumes (a consumer that refuses the device, as numpy
refuses every non-host one) keeps it for the process's life: a capsule destructor written in Python cannot
run safely while the refusing consumer's exception is pending, and freeing the memory early would leave any
later consumer reading freed memory. A capsule read in is renamed ``used_dltensor`` as the protocol asks, and
its deleter runs when the last DeviceTensor viewing it goes.

Devices: DLPack numbers device types (``kDLCUDA`` = 2, ``kDLCUDAHost`` = 3, ``kDLROCM`` = 10, ...); a
provider's device whose type has no DLPack number (the example provider's) is exported as ``kDLExtDev``
(12) and read back as the one such device of the installed providers. Values ort-core hands out are complete
(run() synchronizes its streams at its end), so the ``stream`` of ``__dlpack__`` needs no wait here.
"""

from __future__ import annotations

import ctypes
import itertools
import threading
from typing import Any

import numpy as np

from .memory.device import Device
from .memory.tensor import DeviceTensor

KDL_CPU, KDL_CUDA, KDL_CUDA_HOST, KDL_ROCM, KDL_EXT_DEV = 1, 2, 3, 10, 12
DEVICE_CODES = {"cuda": KDL_CUDA, "rocm": KDL_ROCM}
"""DLPack device type of each ort-core device type that has one; any other non-host type is kDLExtDev."""

_INT, _UINT, _FLOAT, _BOOL = 0, 1, 2, 6  # DLDataTypeCode


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    pass


_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))
DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _DELETER)]

_NAME, _USED = b"dltensor", b"used_dltensor"
# private function objects over the Python C API (setting argtypes on ctypes.pythonapi's shared ones would
# change them for every other library in the process)
_API = ctypes.pythonapi
_capsule_new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)(
    ("PyCapsule_New", _API))
_capsule_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", _API))
_capsule_rename = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(("PyCapsule_SetName", _API))
_capsule_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(("PyCapsule_IsValid", _API))

_exported: dict[int, tuple] = {}  # manager_ctx key -> what an exported capsule keeps alive
_keys = itertools.count(1)
_lock = threading.Lock()


def _delete(managed: Any) -> None:
    key = managed.contents.manager_ctx
    with _lock:
        _exported.pop(key, None)


_deleter = _DELETER(_delete)


def device_code(device: Device) -> tuple[int, int]:
    """``__dlpack_device__`` of a value on ``device``: (DLPack device type, id)."""
    if device.is_host:
        return (KDL_CUDA_HOST if device.memory == "host_pinned" else KDL_CPU, 0)
    return (DEVICE_CODES.get(device.type, KDL_EXT_DEV), device.id)


def export(tensor: DeviceTensor) -> Any:
    """A DLPack capsule over ``tensor``'s memory (no copy); it keeps ``tensor`` alive until consumed and
    deleted."""
    code, bits = _dtype_code(tensor.dtype)
    ndim = tensor.ndim
    shape = (ctypes.c_int64 * max(ndim, 1))(*tensor.shape)
    strides = None
    if tensor.strides is not None:
        itemsize = tensor.dtype.itemsize
        if any(s % itemsize for s in tensor.strides):
            raise BufferError(f"a tensor with strides {tensor.strides} not in whole elements has no DLPack form")
        strides = (ctypes.c_int64 * max(ndim, 1))(*[s // itemsize for s in tensor.strides])
    managed = DLManagedTensor()
    dtype, index = device_code(tensor.device)
    managed.dl_tensor = DLTensor(tensor.ptr, DLDevice(dtype, index), ndim, DLDataType(code, bits, 1),
                                 ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64)),
                                 None if strides is None else ctypes.cast(strides, ctypes.POINTER(ctypes.c_int64)),
                                 0)
    with _lock:
        key = next(_keys)
        _exported[key] = (tensor, managed, shape, strides)
    managed.manager_ctx = key
    managed.deleter = _deleter
    return _capsule_new(ctypes.addressof(managed), _NAME, None)


class _Imported:
    """Owner of an imported capsule's memory: calls the producer's deleter when the last view goes."""

    def __init__(self, managed: Any, capsule: Any) -> None:
        self.managed, self.capsule = managed, capsule

    def __del__(self) -> None:
        deleter = self.managed.contents.deleter
        if deleter:
            deleter(self.managed)


def import_capsule(capsule: Any, devices: dict[tuple[int, int], Device]) -> DeviceTensor:
    """The DeviceTensor over a DLPack capsule of device memory (no copy); ``devices``: DLPack (type, id) ->
    the ort-core Device it is. Raises BufferError for a capsule already consumed or a device not known."""
    if not _capsule_valid(capsule, _NAME):
        raise BufferError("not an unconsumed DLPack capsule (its name is not 'dltensor')")
    managed = ctypes.cast(_capsule_pointer(capsule, _NAME), ctypes.POINTER(DLManagedTensor))
    t = managed.contents.dl_tensor
    where = (int(t.device.device_type), int(t.device.device_id))
    with _lock:
        ours = _exported.get(managed.contents.manager_ctx) if _is_ours(managed) else None
    device = ours[0].device if ours is not None else devices.get(where)  # a round trip knows its device
    if device is None:
        raise BufferError(f"DLPack device (type {where[0]}, id {where[1]}) is not a device of an installed, "
                          "available provider (or two of their device types share it)")
    if t.dtype.lanes != 1:
        raise BufferError(f"DLPack vector types ({t.dtype.lanes} lanes) are not supported")
    dtype = _numpy_dtype(int(t.dtype.code), int(t.dtype.bits))
    shape = tuple(int(t.shape[k]) for k in range(t.ndim))
    strides = None if not t.strides else tuple(int(t.strides[k]) * dtype.itemsize for k in range(t.ndim))
    _capsule_rename(capsule, _USED)  # consumed: its destructor leaves the tensor to us
    owner = _Imported(managed, capsule)
    return DeviceTensor(int(t.data or 0) + int(t.byte_offset), shape, dtype, device, owner, strides)


def _is_ours(managed: Any) -> bool:
    """Whether a DLManagedTensor was made by ``export`` (its deleter is this module's)."""
    return ctypes.cast(managed.contents.deleter, ctypes.c_void_p).value == ctypes.cast(_deleter, ctypes.c_void_p).value


def capsule_device(capsule: Any) -> tuple[int, int] | None:
    """The DLPack (device type, id) of an unconsumed capsule, None for anything else."""
    if not _capsule_valid(capsule, _NAME):  # any Python object may be asked: not a capsule is 0
        return None
    managed = ctypes.cast(_capsule_pointer(capsule, _NAME), ctypes.POINTER(DLManagedTensor))
    device = managed.contents.dl_tensor.device
    return int(device.device_type), int(device.device_id)


def _dtype_code(dtype: np.dtype) -> tuple[int, int]:
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return _BOOL, 8
    if dtype.kind in "iuf":
        return {"i": _INT, "u": _UINT, "f": _FLOAT}[dtype.kind], dtype.itemsize * 8
    raise BufferError(f"{dtype} has no DLPack type here")


def _numpy_dtype(code: int, bits: int) -> np.dtype:
    kinds = {_INT: "i", _UINT: "u", _FLOAT: "f"}
    if code == _BOOL and bits == 8:
        return np.dtype(np.bool_)
    if code in kinds and bits in (8, 16, 32, 64) and not (code == _FLOAT and bits == 8):
        return np.dtype(f"{kinds[code]}{bits // 8}")
    raise BufferError(f"DLPack type code {code} with {bits} bits is not supported")
