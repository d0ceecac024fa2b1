"""NVRTC: CUDA C++ source to a CUBIN for one GPU architecture, and the on-disk cache of CUBINs.

``compile_cubin`` runs NVRTC (no GPU needed) and raises CudaError with NVRTC's log when the source does not
compile; ``KernelCache.cubin`` returns a cached CUBIN when one was built from the same source, options, arch
and NVRTC version, else compiles and stores it. Loading a CUBIN onto a GPU is ``device``'s business.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import threading

from .runtime import CudaError, runtime

DEFAULT_OPTIONS = ("--std=c++17",)
"""NVRTC options for every kernel: precise division, square root and denormals (NVRTC's defaults), no fast
math; results are meant to match the CPU provider within 1e-4 relative."""

compiles = 0
"""How many NVRTC compilations this process ran (tests read it to see the cache work)."""
_count_lock = threading.Lock()


def compile_cubin(src: str, name: str, arch: int, options: tuple[str, ...] = DEFAULT_OPTIONS) -> bytes:
    """Compile ``src`` for ``sm_{arch}`` and return the CUBIN; CudaError naming the call (and NVRTC's log)."""
    global compiles
    rt = runtime()
    ffi, lib = rt.ffi, rt.nvrtc
    prog = ffi.new("nvrtcProgram *")
    rt.check_nvrtc(f"nvrtcCreateProgram({name})", lib.nvrtcCreateProgram(prog, src.encode(), f"{name}.cu".encode(),
                                                                          0, ffi.NULL, ffi.NULL))
    try:
        args = [ffi.new("char[]", o.encode()) for o in (*options, f"--gpu-architecture=sm_{arch}")]
        argv = ffi.new("const char *[]", args)
        status = lib.nvrtcCompileProgram(prog[0], len(args), argv)
        with _count_lock:
            compiles += 1
        if status != 0:
            rt.check_nvrtc(f"nvrtcCompileProgram({name}, sm_{arch})", status, _log(rt, prog[0]))
        size = ffi.new("size_t *")
        rt.check_nvrtc("nvrtcGetCUBINSize", lib.nvrtcGetCUBINSize(prog[0], size))
        if size[0] == 0:
            raise CudaError(f"nvrtcGetCUBINSize({name}): NVRTC produced no CUBIN for sm_{arch}")
        buf = ffi.new("char[]", size[0])
        rt.check_nvrtc("nvrtcGetCUBIN", lib.nvrtcGetCUBIN(prog[0], buf))
        return bytes(ffi.buffer(buf, size[0]))
    finally:
        lib.nvrtcDestroyProgram(prog)


def _log(rt, prog) -> str:
    size = rt.ffi.new("size_t *")
    if rt.nvrtc.nvrtcGetProgramLogSize(prog, size) != 0 or size[0] <= 1:
        return ""
    buf = rt.ffi.new("char[]", size[0])
    if rt.nvrtc.nvrtcGetProgramLog(prog, buf) != 0:
        return ""
    return rt.ffi.string(buf).decode(errors="replace")


class KernelCache:
    """CUBINs on disk under ``folder`` ('' keeps none), keyed by source, options, arch and NVRTC's version.
    Writes are atomic; a file that cannot be written or read only costs a compile."""

    def __init__(self, folder: str) -> None:
        self.folder = folder
        self.hits = 0

    def key(self, src: str, arch: int, options: tuple[str, ...]) -> str:
        h = hashlib.sha256()
        h.update(repr((runtime().nvrtc_version(), arch, tuple(options))).encode())
        h.update(src.encode())
        return h.hexdigest()[:40]

    def cubin(self, src: str, name: str, arch: int, options: tuple[str, ...] = DEFAULT_OPTIONS) -> bytes:
        if not self.folder:
            return compile_cubin(src, name, arch, options)
        path = os.path.join(self.folder, f"{self.key(src, arch, options)}.sm_{arch}.cubin")
        try:
            with open(path, "rb") as f:
                blob = f.read()
            if blob:
                self.hits += 1
                return blob
        except OSError:
            pass
        blob = compile_cubin(src, name, arch, options)
        try:
            os.makedirs(self.folder, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.folder, suffix=".tmp")
            with os.fdopen(fd, "wb") as f:
                f.write(blob)
            os.replace(tmp, path)
        except OSError:
            pass
        return blob
