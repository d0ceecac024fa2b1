"""The loaded CUDA runtime, NVRTC and cuBLAS libraries, and the checks every call goes through.

``runtime()`` loads the three libraries once per process (``LoadOnce``: a failure becomes the provider's
"unavailable" reason), checks that every declared symbol exists, and answers device questions. Every status
a call returns goes through ``check_cuda`` / ``check_nvrtc`` / ``check_cublas``, which raise an error naming
the call and the library's own name and text for the status. Nothing here decides what to compile.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import cffi

from ort_core.plugins import LoadOnce, missing_symbols

from . import cuda_api as api
from . import libraries, nvml


class CudaUnavailable(RuntimeError):
    """The CUDA libraries or a GPU cannot be used here; the message says why and what to do."""


class CudaError(RuntimeError):
    """A CUDA runtime, NVRTC or cuBLAS call failed; the message names the call and the status."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


class Runtime:
    """The three loaded libraries: ``ffi`` for types and buffers, ``cudart``, ``nvrtc``, ``cublas`` for calls,
    ``paths`` where each was found."""

    def __init__(self, ffi: cffi.FFI, cudart: Any, nvrtc: Any, cublas: Any, paths: dict[str, str]) -> None:
        self.ffi, self.cudart, self.nvrtc, self.cublas, self.paths = ffi, cudart, nvrtc, cublas, paths

    # --------------------------------------------------------------------------------- status checks
    def cuda_status_text(self, status: int) -> str:
        name = self.ffi.string(self.cudart.cudaGetErrorName(status)).decode(errors="replace")
        text = self.ffi.string(self.cudart.cudaGetErrorString(status)).decode(errors="replace")
        return f"{name} ({status}): {text}"

    def check_cuda(self, call: str, status: int) -> None:
        if status != api.SUCCESS:
            raise CudaError(f"{call} failed: {self.cuda_status_text(status)}", status)

    def check_nvrtc(self, call: str, status: int, log: str = "") -> None:
        if status != 0:
            text = self.ffi.string(self.nvrtc.nvrtcGetErrorString(status)).decode(errors="replace")
            raise CudaError(f"{call} failed: {text} ({status})" + (f"\n{log}" if log else ""), status)

    def check_cublas(self, call: str, status: int) -> None:
        if status != 0:
            name = self.ffi.string(self.cublas.cublasGetStatusName(status)).decode(errors="replace")
            text = self.ffi.string(self.cublas.cublasGetStatusString(status)).decode(errors="replace")
            raise CudaError(f"{call} failed: {name} ({status}): {text}", status)

    # ------------------------------------------------------------------------------------- versions
    def runtime_version(self) -> int:
        v = self.ffi.new("int *")
        self.check_cuda("cudaRuntimeGetVersion", self.cudart.cudaRuntimeGetVersion(v))
        return int(v[0])

    def driver_version(self) -> int:
        """The CUDA version the installed driver supports (0: no driver installed)."""
        v = self.ffi.new("int *")
        self.check_cuda("cudaDriverGetVersion", self.cudart.cudaDriverGetVersion(v))
        return int(v[0])

    def nvrtc_version(self) -> tuple[int, int]:
        major, minor = self.ffi.new("int *"), self.ffi.new("int *")
        self.check_nvrtc("nvrtcVersion", self.nvrtc.nvrtcVersion(major, minor))
        return int(major[0]), int(minor[0])

    def nvrtc_archs(self) -> tuple[int, ...]:
        """The SM architectures NVRTC compiles for (e.g. 75, 80, ..., 90, 100, ...)."""
        n = self.ffi.new("int *")
        self.check_nvrtc("nvrtcGetNumSupportedArchs", self.nvrtc.nvrtcGetNumSupportedArchs(n))
        archs = self.ffi.new("int[]", max(int(n[0]), 1))
        self.check_nvrtc("nvrtcGetSupportedArchs", self.nvrtc.nvrtcGetSupportedArchs(archs))
        return tuple(int(archs[i]) for i in range(int(n[0])))

    # -------------------------------------------------------------------------------------- devices
    def device_count(self) -> tuple[int, int]:
        """(cudaGetDeviceCount's status, the count): no exception, the caller explains the status."""
        n = self.ffi.new("int *")
        status = int(self.cudart.cudaGetDeviceCount(n))
        return status, int(n[0]) if status == api.SUCCESS else 0

    def attribute(self, attr: int, device: int) -> int:
        v = self.ffi.new("int *")
        self.check_cuda(f"cudaDeviceGetAttribute(attr={attr}, device={device})",
                        self.cudart.cudaDeviceGetAttribute(v, attr, device))
        return int(v[0])

    def device_name(self, device: int) -> str:
        # cudaDeviceProp starts with char name[256] in every CUDA version; the rest of its layout changes
        # between versions, so it is read into a buffer far larger than any version's struct and only the
        # name is taken
        buf = self.ffi.new("char[]", 16384)
        self.check_cuda(f"cudaGetDeviceProperties(device={device})", self.cudart.cudaGetDeviceProperties(buf, device))
        return self.ffi.string(buf, 256).decode(errors="replace")

    def set_device(self, device: int) -> None:
        self.check_cuda(f"cudaSetDevice({device})", self.cudart.cudaSetDevice(device))


def _dlopen(ffi: cffi.FFI, short: str, functions: tuple[str, ...]) -> tuple[Any, str]:
    path, where = libraries.find(short)
    if path is None:
        raise CudaUnavailable(where)
    try:
        lib = ffi.dlopen(path)
    except OSError as e:
        raise CudaUnavailable(f"cannot load {path} (found through {where}): {e}; {libraries.HOW_TO_GET}") from None
    missing = missing_symbols(lib, functions)  # ABI mode resolves lazily: probe every symbol now
    if missing:
        raise CudaUnavailable(f"{path} lacks {', '.join(missing)}: it is not the CUDA 13 library this plugin was "
                              f"written for; {libraries.HOW_TO_GET}")
    return lib, path


def load_runtime() -> Runtime:
    """Load libcudart, libnvrtc and libcublas and check their symbols; raises CudaUnavailable only."""
    ffi = cffi.FFI()
    ffi.cdef(api.CUDART_CDEF)
    ffi.cdef(api.NVRTC_CDEF)
    ffi.cdef(api.CUBLAS_CDEF)
    cudart, p1 = _dlopen(ffi, "cudart", api.CUDART_FUNCTIONS)
    nvrtc, p2 = _dlopen(ffi, "nvrtc", api.NVRTC_FUNCTIONS)
    cublas, p3 = _dlopen(ffi, "cublas", api.CUBLAS_FUNCTIONS)
    return Runtime(ffi, cudart, nvrtc, cublas, {"cudart": p1, "nvrtc": p2, "cublas": p3})


runtime: LoadOnce[Runtime] = LoadOnce(load_runtime, CudaUnavailable)
"""``runtime()``: the process-wide libraries, loaded once; raises CudaUnavailable when they cannot be."""


def explain_device_count(rt: Runtime, status: int, count: int) -> str:
    """Why no GPU can be used, in words a user can act on ("" when ``count`` GPUs are usable)."""
    if status == api.SUCCESS:
        return "" if count > 0 else "cudaGetDeviceCount found no CUDA device: check nvidia-smi and CUDA_VISIBLE_DEVICES"
    what = f"cudaGetDeviceCount failed: {rt.cuda_status_text(status)}"
    if status == api.ERROR_INSUFFICIENT_DRIVER:
        try:
            driver = rt.driver_version()
            needs = rt.runtime_version()
        except CudaError:
            driver, needs = 0, 0
        if driver == 0:
            return f"no NVIDIA driver is installed ({what}); install the NVIDIA driver (580 or newer for CUDA 13)"
        return (f"the NVIDIA driver supports CUDA {driver // 1000}.{driver % 1000 // 10} but the CUDA runtime found "
                f"is {needs // 1000}.{needs % 1000 // 10} ({what}); update the NVIDIA driver")
    if status == api.ERROR_NO_DEVICE:
        return f"no CUDA-capable GPU is visible ({what}); check nvidia-smi and CUDA_VISIBLE_DEVICES"
    return f"the GPU cannot be used ({what})"


@dataclass(frozen=True)
class DeviceInfo:
    """What this provider needs to know of one GPU."""

    id: int
    name: str
    major: int
    minor: int
    sm_count: int
    max_threads_per_block: int
    memory_pools: bool

    @property
    def arch(self) -> int:
        """Compute capability as NVRTC spells it: 90 for sm_90."""
        return self.major * 10 + self.minor


_devices: dict[str, Any] = {}
_devices_lock = threading.Lock()


def devices() -> tuple[list[DeviceInfo], str]:
    """(the usable GPUs, "") or ([], why none can be used); asked once per process, never raises."""
    with _devices_lock:
        if "answer" not in _devices:
            _devices["answer"] = _probe_devices()
        return _devices["answer"]


def _probe_devices() -> tuple[list[DeviceInfo], str]:
    try:
        rt = runtime()
    except CudaUnavailable as e:
        return [], str(e)
    status, count = rt.device_count()
    why = explain_device_count(rt, status, count)
    if why:
        return [], why
    found = []
    try:
        for d in range(count):
            found.append(DeviceInfo(
                d, rt.device_name(d), rt.attribute(api.ATTR_COMPUTE_CAPABILITY_MAJOR, d),
                rt.attribute(api.ATTR_COMPUTE_CAPABILITY_MINOR, d), rt.attribute(api.ATTR_MULTIPROCESSOR_COUNT, d),
                rt.attribute(api.ATTR_MAX_THREADS_PER_BLOCK, d),
                bool(rt.attribute(api.ATTR_MEMORY_POOLS_SUPPORTED, d))))
    except CudaError as e:
        return [], f"the GPU cannot be queried ({e})"
    return found, ""


def listed_devices() -> tuple[list[Any], str]:
    """Registration's answer: (the GPUs, each with ``id``, ``name`` and ``arch``, "") or ([], why none can be used),
    without initializing CUDA where NVML can tell (``nvml``): the libraries are loaded and their symbols checked
    (no CUDA call), the GPUs counted by NVML; the CUDA runtime is asked only where NVML cannot answer, or already
    was in this process. Asked once per process, never raises."""
    with _devices_lock:
        if "listed" not in _devices:
            _devices["listed"] = _devices.get("answer") or _list_devices()
        return _devices["listed"]


def _list_devices() -> tuple[list[Any], str]:
    try:
        runtime()
    except CudaUnavailable as e:
        return [], str(e)
    counted = nvml.probe()
    return counted if counted is not None else _probe_devices()


def unavailable_reason() -> str:
    """Why the provider cannot run here (libraries missing, no driver, no device), or "" when it can."""
    return devices()[1]
