"""Host (CPU) memory: an aligned numpy allocator and the host-to-host data transfer.

Arena pooling and device copies are not here: providers bring their own for their devices.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .device import HOST, Device


class HostAllocator:
    """Allocates 64-byte aligned host buffers as uint8 numpy arrays (AVX-512 friendly)."""

    device = HOST
    alignment = 64

    def allocate(self, nbytes: int) -> np.ndarray:
        """A writable uint8 array of exactly ``nbytes`` whose address is a multiple of ``alignment``."""
        nbytes = int(nbytes)
        if nbytes < 0:
            raise ValueError(f"cannot allocate a negative size ({nbytes} bytes)")
        raw = np.empty(nbytes + self.alignment, dtype=np.uint8)
        offset = (-raw.ctypes.data) % self.alignment
        # slice a non-empty window first: numpy points a directly-empty slice at the base
        return raw[offset:offset + max(nbytes, 1)][:nbytes]

    def address(self, buffer: np.ndarray) -> int:
        """The address of a buffer's first byte."""
        return int(buffer.ctypes.data)

    def free(self, buffer: Any) -> None:
        """Host buffers are owned by numpy; dropping the reference frees them."""


class HostDataTransfer:
    """Copies between host arrays (the only pair the CPU provider knows)."""

    def can_copy(self, src: Device, dst: Device) -> bool:
        """True for host to host only."""
        return src.is_host and dst.is_host

    def copy(self, value: Any, src: Device, dst: Device) -> Any:
        """A new numpy array with ``value``'s contents."""
        if not self.can_copy(src, dst):
            raise ValueError(f"host transfer cannot copy {src} -> {dst}")
        return np.array(value, copy=True)
