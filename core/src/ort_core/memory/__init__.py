"""Memory types shared by the core and providers: devices, allocators, data transfers.

Only the types and the host implementations live here; device-specific allocators come from
providers through the ``ort_allocator`` hook.
"""

from .device import HOST, Device
from .host import HostAllocator, HostDataTransfer
from .protocols import Allocator, DataTransfer

__all__ = ["Allocator", "DataTransfer", "Device", "HOST", "HostAllocator", "HostDataTransfer"]
