"""The cffi declarations against NVIDIA's own headers (shipped in the nvidia-* wheels, found by cuda-pathfinder;
read at test time only, never copied): a small C++ program built with g++ prints, for every declared function,
the size and class (integer, floating, struct) of its result and of each parameter, and the values of the
constants this plugin hard-codes; both must match what cffi will pass in ABI mode."""

from __future__ import annotations

import os
import shutil
import subprocess

import cffi
import pytest
from ort_ep_cuda import cuda_api as api


def _include_dirs() -> list[str]:
    """The folders of the runtime's, NVRTC's and cuBLAS's headers (the nvidia-* wheels), plus those holding
    crt/host_defines.h (nvidia-cuda-crt, or a CUDA toolkit) and CCCL's nv/target (nvidia-cuda-cccl, or a
    toolkit) when those are elsewhere; [] when any is missing."""
    try:
        from cuda import pathfinder
        folders = [pathfinder.find_nvidia_header_directory(name) for name in ("cudart", "nvrtc", "cublas")]
        for needed, where in (("crt/host_defines.h", "nvcc"), ("nv/target", "cccl")):
            if not all(folders):
                return []
            if not any(os.path.isfile(os.path.join(f, needed)) for f in folders):
                folders.append(pathfinder.find_nvidia_header_directory(where))
        if not all(folders) or not all(any(os.path.isfile(os.path.join(f, n)) for f in folders)
                                       for n in ("crt/host_defines.h", "nv/target")):
            return []
    except Exception:  # noqa: BLE001 - no pathfinder or no headers: the test skips
        return []
    return list(dict.fromkeys(folders))


INCLUDES = _include_dirs()
pytestmark = pytest.mark.skipif(shutil.which("g++") is None or not INCLUDES,
                                reason="needs g++ and NVIDIA's headers (the nvidia-* wheels with nvidia-cuda-crt and "
                                       "nvidia-cuda-cccl, or a CUDA toolkit)")

CONSTANTS = {
    "SUCCESS": "cudaSuccess", "ERROR_NOT_READY": "cudaErrorNotReady",
    "ERROR_INSUFFICIENT_DRIVER": "cudaErrorInsufficientDriver", "ERROR_NO_DEVICE": "cudaErrorNoDevice",
    "ATTR_MAX_THREADS_PER_BLOCK": "cudaDevAttrMaxThreadsPerBlock",
    "ATTR_MULTIPROCESSOR_COUNT": "cudaDevAttrMultiProcessorCount",
    "ATTR_COMPUTE_CAPABILITY_MAJOR": "cudaDevAttrComputeCapabilityMajor",
    "ATTR_COMPUTE_CAPABILITY_MINOR": "cudaDevAttrComputeCapabilityMinor",
    "ATTR_MEMORY_POOLS_SUPPORTED": "cudaDevAttrMemoryPoolsSupported", "MEMCPY_DEFAULT": "cudaMemcpyDefault",
    "STREAM_NON_BLOCKING": "cudaStreamNonBlocking", "EVENT_DEFAULT": "cudaEventDefault",
    "MEMPOOL_ATTR_RELEASE_THRESHOLD": "cudaMemPoolAttrReleaseThreshold",
    "CAPTURE_MODE_THREAD_LOCAL": "cudaStreamCaptureModeThreadLocal", "CUBLAS_OP_N": "CUBLAS_OP_N",
    "CUBLAS_OP_T": "CUBLAS_OP_T", "CUBLAS_DEFAULT_MATH": "CUBLAS_DEFAULT_MATH",
    "CUBLAS_TF32_TENSOR_OP_MATH": "CUBLAS_TF32_TENSOR_OP_MATH", "CUDA_R_32F": "CUDA_R_32F", "CUDA_R_16F": "CUDA_R_16F",
    "CUBLAS_COMPUTE_32F": "CUBLAS_COMPUTE_32F", "CUBLAS_COMPUTE_32F_FAST_TF32": "CUBLAS_COMPUTE_32F_FAST_TF32",
    "CUBLAS_GEMM_DEFAULT": "CUBLAS_GEMM_DEFAULT",
}

HARNESS = r"""
#include <cuda_runtime_api.h>
#include <nvrtc.h>
#include <cublas_api.h>
#include <cstdio>
#include <type_traits>
template <typename T> void kind() {
  using U = std::remove_cv_t<T>;
  std::printf(" %zu%c", sizeof(U), std::is_floating_point_v<U> ? 'f' : std::is_class_v<U> ? 's' : 'i');
}
template <typename F> struct Sig;
template <typename R, typename... A> struct Sig<R (*)(A...)> {  // read from the type only: nothing is linked
  static void print(const char* name) {
    std::printf("fn %s", name); kind<R>(); std::printf(" |"); (kind<A>(), ...); std::printf("\n");
  }
};
int main() {
  std::printf("size dim3 %zu\n", sizeof(dim3));
"""


OVERLOADED = {
    # C++ also gets an inline overload taking cudaDataType for the compute type; the C symbol takes
    # cublasComputeType_t: its prototype, in the header's own types, picks it
    "cublasGemmStridedBatchedEx": "static_cast<cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, "
    "cublasOperation_t, int, int, int, const void*, const void*, cudaDataType, int, long long, const void*, "
    "cudaDataType, int, long long, const void*, void*, cudaDataType, int, long long, int, cublasComputeType_t, "
    "cublasGemmAlgo_t)>(&cublasGemmStridedBatchedEx)",
}


def _harness() -> str:
    lines = [HARNESS]
    for name in (*api.CUDART_FUNCTIONS, *api.NVRTC_FUNCTIONS, *api.CUBLAS_FUNCTIONS):
        lines.append(f'  Sig<decltype({OVERLOADED.get(name, "&" + name)})>::print("{name}");')
    for ours, theirs in CONSTANTS.items():
        lines.append(f'  std::printf("const {ours} %lld\\n", (long long){theirs});')
    lines.append("  return 0;\n}\n")
    return "\n".join(lines)


@pytest.fixture(scope="module")
def header_facts(tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("headers")
    (folder / "check.cpp").write_text(_harness())
    command = ["g++", "-std=c++17", *[f"-I{d}" for d in INCLUDES], "-o", str(folder / "check"),
               str(folder / "check.cpp")]
    built = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-4000:]
    ran = subprocess.run([str(folder / "check")], capture_output=True, text=True, timeout=60, check=True)
    facts: dict = {"fn": {}, "const": {}, "size": {}}
    for line in ran.stdout.splitlines():
        kind, name, rest = line.split(" ", 2)
        facts[kind][name] = rest.strip() if kind == "fn" else int(rest)
    return facts


def _ours(ffi: cffi.FFI, ctype) -> str:
    if ctype.kind == "struct":
        return f"{ffi.sizeof(ctype)}s"
    floating = ctype.kind == "primitive" and ctype.cname in ("float", "double")
    return f"{ffi.sizeof(ctype)}{'f' if floating else 'i'}"


def _declared_signatures() -> dict[str, str]:
    ffi = cffi.FFI()
    ffi.cdef(api.CUDART_CDEF)
    ffi.cdef(api.NVRTC_CDEF)
    ffi.cdef(api.CUBLAS_CDEF)
    out = {}
    for cdef, names in ((api.CUDART_CDEF, api.CUDART_FUNCTIONS), (api.NVRTC_CDEF, api.NVRTC_FUNCTIONS),
                        (api.CUBLAS_CDEF, api.CUBLAS_FUNCTIONS)):
        for name in names:
            statement = next(s for s in cdef.split(";") if f" {name}(" in " ".join(s.split()).replace("*", " "))
            head, params = " ".join(statement.split()).split(f"{name}(", 1)
            fn = ffi.typeof(f"{head.strip()} (*)({params.rsplit(')', 1)[0]})")
            out[name] = f"{_ours(ffi, fn.result)} |" + "".join(f" {_ours(ffi, a)}" for a in fn.args)
    return out


def test_every_declared_function_matches_the_header_in_arity_sizes_and_classes(header_facts):
    ours = _declared_signatures()
    assert set(ours) == set(header_facts["fn"])
    differ = {name: (sig, header_facts["fn"][name]) for name, sig in ours.items() if sig != header_facts["fn"][name]}
    assert differ == {}


def test_the_hard_coded_constants_are_the_headers(header_facts):
    assert {name: getattr(api, name) for name in CONSTANTS} == header_facts["const"]
    assert header_facts["size"]["dim3"] == 12
