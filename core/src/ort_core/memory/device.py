"""Device identity: a type name ('cpu', 'cuda', 'gpu', 'npu', ...) plus an ordinal.

Devices are plain values; they own no memory.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Device:
    type: str = "cpu"
    id: int = 0

    def __str__(self) -> str:
        return f"{self.type}:{self.id}"

    @property
    def is_host(self) -> bool:
        return self.type == "cpu"


HOST = Device("cpu", 0)
