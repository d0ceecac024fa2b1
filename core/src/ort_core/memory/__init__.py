"""Memory types shared by the core and providers: devices, allocators, data transfers.

Only the types and the host implementations (allocator, arena, transfer) live here;
device-specific allocators and copies come from providers through their hooks.
"""

from .arena import HostArena, host_arena
from .device import HOST, MEMORY_KINDS, Device
from .host import HostAllocator, HostDataTransfer
from .protocols import Allocator, DataTransfer
from .stream import Event, Stream
from .tensor import DeviceTensor

__all__ = ["Allocator", "DataTransfer", "Device", "DeviceTensor", "Event", "HOST", "HostAllocator", "HostArena",
           "HostDataTransfer", "MEMORY_KINDS", "Stream", "host_arena"]
