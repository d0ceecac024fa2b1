"""Device identity: a type name ('cpu', 'cuda', 'npu', ...), an ordinal, the vendor and the kind of memory.

Devices are plain values; they own no memory. Two values live in the same place exactly when their
devices are equal, so two providers declaring the same device share values without a copy.
"""

from __future__ import annotations

from dataclasses import dataclass

MEMORY_KINDS = ("default", "host_pinned", "shared")
"""``default``: the device's own memory (host RAM for 'cpu'); ``host_pinned``: page-locked host memory a
device copies to and from asynchronously (type 'cpu', allocated by that device's provider); ``shared``:
memory both the host and the device address (unified memory), still copied through the provider."""


@dataclass(frozen=True)
class Device:
    """Where a value lives: ``Device("cpu")`` for host memory, ``Device("cuda", 1, "nvidia")`` for a GPU.

    ``type``: the kind of device, lower case ("cpu", "cuda", "npu", or a vendor's own name); "cpu" means
    host memory, whose values are numpy arrays. ``id``: the ordinal among devices of that type.
    ``vendor``: free text, informative. ``memory``: one of ``MEMORY_KINDS``. Equal devices are one place:
    a value moves between two providers without a copy exactly when their devices are equal.
    """

    type: str = "cpu"
    id: int = 0
    vendor: str = ""
    memory: str = "default"

    def __post_init__(self) -> None:
        if self.memory not in MEMORY_KINDS:
            raise ValueError(f"memory kind {self.memory!r} is not one of {MEMORY_KINDS}")

    def __str__(self) -> str:
        kind = "" if self.memory == "default" else f" ({self.memory})"
        return f"{self.type}:{self.id}{kind}"

    @property
    def is_host(self) -> bool:
        """Whether values here are numpy arrays of this process (host memory, pinned or not)."""
        return self.type == "cpu"


HOST = Device("cpu", 0)
"""Host memory, where numpy arrays live and providers computing on the CPU keep their values."""
