"""DeviceTensor: the one descriptor of a tensor in a device's memory, whatever the device.

Host values are plain numpy arrays and never wrapped. A DeviceTensor is what providers exchange for
everything else: a data pointer, shape, dtype, byte strides, the Device, and an owner object that keeps
the memory alive (an allocator's buffer). The core reads its metadata only; the bytes are reached through
the owning provider's kernels and data transfer, never as numpy.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .device import Device
from .protocols import allocate_bytes


class DeviceTensor:
    """A tensor of ``shape`` and numpy ``dtype`` at address ``ptr`` on ``device``.

    ``strides`` are in bytes (None: C-contiguous). ``owner`` keeps the memory alive for as long as the
    tensor (or a view of it) is referenced: a value that outlives its session keeps its buffer this way.
    """

    __slots__ = ("ptr", "shape", "dtype", "strides", "device", "owner")

    def __init__(self, ptr: int, shape: tuple[int, ...], dtype: Any, device: Device, owner: Any = None,
                 strides: tuple[int, ...] | None = None) -> None:
        self.ptr = int(ptr)
        self.shape = tuple(int(d) for d in shape)
        self.dtype = np.dtype(dtype)
        self.strides = None if strides is None else tuple(int(s) for s in strides)
        self.device = device
        self.owner = owner

    @classmethod
    def empty(cls, allocator: Any, shape: tuple[int, ...], dtype: Any, stream: Any = None) -> DeviceTensor:
        """A new C-contiguous tensor in a buffer from ``allocator`` (an ort_core.memory.Allocator); ``stream``:
        the stream that first uses it, for a stream-ordered allocator (ignored by others)."""
        dtype = np.dtype(dtype)
        if dtype.kind in "OUS":
            raise TypeError(f"{allocator.device} holds fixed-size numeric tensors only, not {dtype} (strings "
                            "stay on the host)")
        shape = tuple(int(d) for d in shape)
        buffer = allocate_bytes(allocator, int(np.prod(shape, dtype=np.int64)) * dtype.itemsize, stream)
        return cls(allocator.address(buffer), shape, dtype, allocator.device, buffer)

    @property
    def ndim(self) -> int:
        """The number of dimensions."""
        return len(self.shape)

    @property
    def size(self) -> int:
        """The number of elements."""
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        """The number of bytes of its elements (size times the dtype's itemsize)."""
        return self.size * self.dtype.itemsize

    @property
    def is_contiguous(self) -> bool:
        """Whether its elements are C-contiguous (``strides`` None or equal to C order's)."""
        return self.strides is None or self.strides == _c_strides(self.shape, self.dtype.itemsize)

    def reshaped(self, shape: tuple[int, ...]) -> DeviceTensor:
        """A view of the same contiguous memory with another shape of the same size (same owner)."""
        shape = tuple(int(d) for d in shape)
        if int(np.prod(shape, dtype=np.int64)) != self.size or not self.is_contiguous:
            raise ValueError(f"cannot view a {'strided ' if not self.is_contiguous else ''}tensor of shape "
                             f"{list(self.shape)} as {list(shape)}")
        return DeviceTensor(self.ptr, shape, self.dtype, self.device, self.owner)

    def __array__(self, *args: Any, **kwargs: Any) -> np.ndarray:
        raise TypeError(f"a tensor on {self.device} is not host memory: copy it to the host first "
                        "(OrtValue.numpy(), or the provider's data transfer)")

    def __repr__(self) -> str:
        return f"DeviceTensor(shape={list(self.shape)}, dtype={self.dtype}, device={self.device}, ptr={self.ptr:#x})"


def _c_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    strides, step = [], itemsize
    for d in reversed(shape):
        strides.append(step)
        step *= max(d, 1)
    return tuple(reversed(strides))
