"""Which GPUs there are, asked of NVML (``libnvidia-ml.so.1``, part of the NVIDIA driver) instead of CUDA.

Registration has to say whether the provider is available in every process that lists providers, and asking the
CUDA runtime (``cudaGetDeviceCount``) initializes CUDA in that process: a process that forks afterwards (Ray,
multiprocessing, a web server's workers) can no longer use CUDA in its children. NVML counts and names the GPUs
without creating a CUDA context, as PyTorch's NVML-based device count does. ``CUDA_VISIBLE_DEVICES`` is applied as
the CUDA runtime applies it: indices or GPU UUID prefixes, up to the first entry that names no GPU. The sessions
still ask the CUDA runtime itself (``runtime.devices``), when they start.

``probe()`` answers ``None`` where NVML cannot answer (no ``libnvidia-ml``, a MIG entry in ``CUDA_VISIBLE_DEVICES``):
the caller then asks the CUDA runtime, as before. Declarations written from NVIDIA's public NVML API reference.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import cffi

LIBRARY = "libnvidia-ml.so.1"
VISIBLE_ENV = "CUDA_VISIBLE_DEVICES"
_CDEF = """
typedef struct nvmlDevice_st* nvmlDevice_t;
int nvmlInit_v2(void);
int nvmlShutdown(void);
const char* nvmlErrorString(int result);
int nvmlDeviceGetCount_v2(unsigned int* count);
int nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device);
int nvmlDeviceGetName(nvmlDevice_t device, char* name, unsigned int length);
int nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned int length);
int nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int* major, int* minor);
"""
_SUCCESS = 0
_DRIVER_NOT_LOADED = 9


@dataclass(frozen=True)
class Gpu:
    """One GPU as the CUDA runtime will number it (its place in ``CUDA_VISIBLE_DEVICES``'s list)."""

    id: int
    name: str
    major: int
    minor: int

    @property
    def arch(self) -> int:
        return self.major * 10 + self.minor


def probe() -> tuple[list[Gpu], str] | None:
    """(the GPUs CUDA will see, "") or ([], why there are none), without initializing CUDA; None when NVML
    cannot tell (then ask the CUDA runtime)."""
    visible = os.environ.get(VISIBLE_ENV)
    entries = None if visible is None else [e.strip() for e in visible.split(",")]
    if entries is not None and any(e.upper().startswith("MIG-") for e in entries):
        return None  # MIG instances are not NVML's top-level devices
    ffi = cffi.FFI()
    ffi.cdef(_CDEF)
    try:
        lib = ffi.dlopen(LIBRARY)
    except OSError:
        return None
    try:
        status = lib.nvmlInit_v2()
    except AttributeError:
        return None
    if status != _SUCCESS:
        text = ffi.string(lib.nvmlErrorString(status)).decode(errors="replace")
        if status == _DRIVER_NOT_LOADED:
            return [], f"the NVIDIA driver is not loaded (NVML: {text}); check nvidia-smi"
        return None
    try:
        return _gpus(ffi, lib, entries)
    finally:
        lib.nvmlShutdown()


def _gpus(ffi, lib, entries: list[str] | None) -> tuple[list[Gpu], str] | None:
    count = ffi.new("unsigned int*")
    if lib.nvmlDeviceGetCount_v2(count) != _SUCCESS:
        return None
    all_gpus = []
    for index in range(int(count[0])):
        handle = ffi.new("nvmlDevice_t*")
        name, uuid = ffi.new("char[96]"), ffi.new("char[96]")
        major, minor = ffi.new("int*"), ffi.new("int*")
        if (lib.nvmlDeviceGetHandleByIndex_v2(index, handle) != _SUCCESS
                or lib.nvmlDeviceGetName(handle[0], name, 96) != _SUCCESS
                or lib.nvmlDeviceGetUUID(handle[0], uuid, 96) != _SUCCESS
                or lib.nvmlDeviceGetCudaComputeCapability(handle[0], major, minor) != _SUCCESS):
            return None
        all_gpus.append((ffi.string(name).decode(errors="replace"), ffi.string(uuid).decode(errors="replace"),
                         int(major[0]), int(minor[0])))
    if not all_gpus:
        return [], "NVML finds no NVIDIA GPU; check nvidia-smi"
    chosen = all_gpus if entries is None else _visible(all_gpus, entries)
    if not chosen:
        return [], (f"{VISIBLE_ENV}={os.environ.get(VISIBLE_ENV)!r} hides every GPU (NVML finds {len(all_gpus)}); "
                    f"unset it or name a GPU in it")
    return [Gpu(k, name, major, minor) for k, (name, _, major, minor) in enumerate(chosen)], ""


def _visible(gpus: list[tuple], entries: list[str]) -> list[tuple]:
    """The GPUs ``CUDA_VISIBLE_DEVICES`` keeps, in its order: indices or UUID prefixes (with or without ``GPU-``),
    up to the first entry naming none, each GPU once (the CUDA runtime's reading)."""
    chosen: list[tuple] = []
    for entry in entries:
        if entry.lstrip("+-").isdigit():
            k = int(entry)
            found = gpus[k] if 0 <= k < len(gpus) else None
        else:
            want = entry.lower() if entry.lower().startswith("gpu-") else f"gpu-{entry.lower()}"
            matches = [g for g in gpus if g[1].lower().startswith(want)] if len(want) > 4 else []
            found = matches[0] if len(matches) == 1 else None
        if found is None or found in chosen:
            break
        chosen.append(found)
    return chosen
