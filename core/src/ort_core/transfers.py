"""Copies between devices, worked out in one place: which provider's data transfer connects two devices,
and staging through host memory where none connects them directly.

A ``Transfers`` is made from a set of provider instances: a session's (its plan's copies and its
IOBinding routes) or the registry's default ones (OrtValues made outside any session). It decides
nothing about when to copy; the planner and routes do.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from .errors import InvalidArgument
from .memory.device import HOST, Device


class Transfers:
    """The data transfers of some providers, by the devices they own (the first provider declaring a
    device owns it; host-only providers own nothing: host to host is a reference or a numpy copy)."""

    def __init__(self, providers: Iterable[Any], fallback: Transfers | None = None) -> None:
        self._fallback = fallback  # for devices none of these providers owns (IOBinding to another device)
        self._owners: dict[Device, Any] = {}  # SessionProviders; their transfers are asked for lazily
        for ep in providers:
            for device in ep.devices:
                if not device.is_host:
                    self._owners.setdefault(device, ep)
        self._found: dict[Device, Any] = {}

    def _of(self, device: Device):
        found = self._found.get(device)
        if found is None:
            if device in self._owners:
                found = self._found[device] = self._owners[device].data_transfer()
            elif self._fallback is not None:
                found = self._fallback._of(device)
        return found

    def direct(self, src: Device, dst: Device):
        """The DataTransfer copying ``src`` -> ``dst`` in one step: the destination owner's, else the
        source owner's (a device value the CPU provider reads can only be copied by its producer's)."""
        for device in (dst, src):
            t = self._of(device)
            if t is not None and t.can_copy(src, dst):
                return t
        return None

    def find(self, src: Device | None, dst: Device):
        """A transfer for ``src`` -> ``dst``: direct, or a StagedTransfer through the host; None for the same
        place or when no installed provider connects them."""
        if src is None or src == dst:
            return None
        t = self.direct(src, dst)
        if t is None and not src.is_host and not dst.is_host:
            down, up = self.direct(src, HOST), self.direct(HOST, dst)
            if down is not None and up is not None:
                return StagedTransfer(down, up)
        return t

    def direct_copier(self, src: Device, dst: Device) -> Callable[[Any], Any] | None:
        """copy(value) moving a value from ``src`` to ``dst`` with one transfer (host to host and same
        device: the value itself), or None."""
        if (src.is_host and dst.is_host) or src == dst:
            return _same
        t = self.direct(src, dst)
        return None if t is None else (lambda v: t.copy(v, src, dst))

    def copier(self, src: Device, dst: Device) -> Callable[[Any], Any]:
        """Like direct_copier, staging through the host between devices no single transfer connects;
        raises InvalidArgument when no installed provider can copy the pair."""
        direct = self.direct_copier(src, dst)
        if direct is not None:
            return direct
        t = self.find(src, dst)
        if t is None:
            raise InvalidArgument(f"no data transfer of an installed provider copies {src} -> {dst}")
        return lambda v: t.copy(v, src, dst)


class StagedTransfer:
    """Copies between two devices no single transfer connects, through host memory."""

    def __init__(self, down, up) -> None:
        self.down, self.up = down, up

    def can_copy(self, src: Device, dst: Device) -> bool:
        return self.down.can_copy(src, HOST) and self.up.can_copy(HOST, dst)

    def copy(self, value: Any, src: Device, dst: Device) -> Any:
        return self.up.copy(self.down.copy(value, src, HOST), HOST, dst)


def _same(value: Any) -> Any:
    return value
