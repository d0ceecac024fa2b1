"""onnxruntime's arena settings and shared-allocator registration (``OrtArenaCfg``,
``create_and_register_allocator``, ``create_and_register_allocator_v2``), accepted for code written for it.

They are checked and recorded, and have no effect: ort-core's host memory comes from the CPU provider's own
arena (``use_arena``), device memory from each provider's allocator, and sessions do not take allocators from
the environment. Registering warns once that it has no effect; ``registered_allocators()`` lists what was given.
"""

from __future__ import annotations

from typing import Any

from .errors import Fail, InvalidArgument, warn

_FIELDS = ("max_mem", "arena_extend_strategy", "initial_chunk_size_bytes", "max_dead_bytes_per_chunk",
           "initial_growth_chunk_size_bytes", "max_power_of_two_extend_bytes")
_registered: list[tuple[str, Any, dict[str, str], OrtArenaCfg | None]] = []


class OrtArenaCfg:
    """An arena's settings, as onnxruntime's OrtArenaCfg: ``OrtArenaCfg(max_mem, arena_extend_strategy,
    initial_chunk_size_bytes, max_dead_bytes_per_chunk)`` or ``OrtArenaCfg({name: value})``; -1 (and max_mem 0)
    mean onnxruntime's default. Recorded only: see the module's docstring."""

    __slots__ = _FIELDS

    def __init__(self, *args: Any) -> None:
        for name in _FIELDS:
            object.__setattr__(self, name, 0 if name == "max_mem" else -1)
        if len(args) == 1 and isinstance(args[0], dict):
            for key, value in args[0].items():
                if key not in _FIELDS:
                    raise Fail(f"Invalid OrtArenaCfg option: {key}")
                setattr(self, key, value)
        elif len(args) == 4:
            for name, value in zip(_FIELDS[:4], args):
                setattr(self, name, value)
        else:
            raise InvalidArgument("OrtArenaCfg takes (max_mem, arena_extend_strategy, initial_chunk_size_bytes, "
                                  "max_dead_bytes_per_chunk) or one dict of those settings")

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidArgument(f"OrtArenaCfg.{name} must be an int, got {value!r}")
        if name == "max_mem" and value < 0:
            raise InvalidArgument(f"OrtArenaCfg.max_mem is a size in bytes (0: no limit), got {value}")
        object.__setattr__(self, name, value)

    def __repr__(self) -> str:
        return "OrtArenaCfg(" + ", ".join(f"{n}={getattr(self, n)}" for n in _FIELDS) + ")"


def create_and_register_allocator(mem_info: Any, arena_cfg: OrtArenaCfg | None) -> None:
    """Accepted and recorded (onnxruntime shares such an allocator among sessions that set
    ``session.use_env_allocators``); it has no effect in ort-core, which says so once."""
    _register("", mem_info, {}, arena_cfg)


def create_and_register_allocator_v2(provider_type: str, mem_info: Any, options: dict, arena_cfg: Any) -> None:
    """As create_and_register_allocator, for a provider's allocator with its options: recorded, no effect."""
    if not isinstance(provider_type, str):
        raise InvalidArgument(f"provider_type must be a provider name, got {provider_type!r}")
    _register(provider_type, mem_info, {str(k): str(v) for k, v in dict(options or {}).items()}, arena_cfg)


def registered_allocators() -> list[tuple[str, Any, dict[str, str], OrtArenaCfg | None]]:
    """What was registered: (provider type, memory info, options, arena settings), oldest first."""
    return list(_registered)


def _register(provider: str, mem_info: Any, options: dict[str, str], arena_cfg: Any) -> None:
    from .ep_devices import OrtMemoryInfo

    if not isinstance(mem_info, OrtMemoryInfo):
        raise InvalidArgument(f"create_and_register_allocator: mem_info must be an ort_core.OrtMemoryInfo, "
                              f"got {type(mem_info).__name__}")
    if arena_cfg is not None and not isinstance(arena_cfg, OrtArenaCfg):
        raise InvalidArgument(f"create_and_register_allocator: arena_cfg must be an ort_core.OrtArenaCfg or None, "
                              f"got {type(arena_cfg).__name__}")
    if not _registered:
        warn("create_and_register_allocator has no effect in ort-core: host memory comes from the CPU provider's "
             "arena and device memory from each provider's allocator (the registration is recorded only)")
    _registered.append((provider, mem_info, options, arena_cfg))
