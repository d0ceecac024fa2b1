"""Memory types shared by the core and providers: devices, allocators, data transfers.

Only the types and the host implementations (allocator, arena, transfer) live here;
device-specific allocators and copies come from providers through their hooks.
"""

from .arena import HostArena, host_arena
from .device import HOST, Device
from .host import HostAllocator, HostDataTransfer
from .protocols import Allocator, DataTransfer

__all__ = ["Allocator", "DataTransfer", "Device", "HOST", "HostAllocator", "HostArena", "HostDataTransfer",
           "host_arena"]
