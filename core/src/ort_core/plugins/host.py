"""The memory hooks of a provider whose values live in host memory (libraries with a CPU engine,
such as oneDNN, or OpenVINO on its CPU device). A plugin module imports them:

    from ort_core.plugins.host import ort_allocator, ort_data_transfer  # noqa: F401

and pluggy registers them with that module like its own hook implementations.
"""

from __future__ import annotations

from ..memory import HOST, HostAllocator, HostDataTransfer
from .hookspecs import hookimpl

ALLOCATOR = HostAllocator()
TRANSFER = HostDataTransfer()


@hookimpl
def ort_allocator(provider, device):
    """The shared 64-byte-aligned host allocator; a ValueError for any device but the host."""
    if device != HOST:
        raise ValueError(f"{provider} keeps its values in host memory ({HOST}), not {device}")
    return ALLOCATOR


@hookimpl
def ort_data_transfer(provider):
    """The host-to-host copy (``HostDataTransfer``)."""
    return TRANSFER
