"""The cffi declarations against the real NVIDIA libraries (every symbol resolves), and status reporting.
These need NVIDIA's wheels (nvidia-cuda-runtime, nvidia-cuda-nvrtc, nvidia-cublas, cuda-pathfinder), not a GPU.
"""

from __future__ import annotations

import cffi
import pytest
from ort_ep_cuda import cuda_api as api
from ort_ep_cuda import libraries, runtime


@pytest.fixture(scope="module")
def rt() -> runtime.Runtime:
    return runtime.runtime()  # raises CudaUnavailable (failing the test) if the wheels are missing


def test_declared_function_lists_name_every_prototype():
    assert api.CUDART_FUNCTIONS[:3] == ("cudaGetErrorName", "cudaGetErrorString", "cudaGetLastError")
    assert "cudaLaunchKernel" in api.CUDART_FUNCTIONS and "cudaLibraryLoadData" in api.CUDART_FUNCTIONS
    assert len(api.CUDART_FUNCTIONS) == len(set(api.CUDART_FUNCTIONS)) == 43
    assert api.CUDART_FUNCTIONS[-6:] == ("cudaStreamBeginCapture", "cudaStreamEndCapture", "cudaGraphInstantiate",
                                         "cudaGraphLaunch", "cudaGraphExecDestroy", "cudaGraphDestroy")
    assert api.NVRTC_FUNCTIONS == ("nvrtcGetErrorString", "nvrtcVersion", "nvrtcGetNumSupportedArchs",
                                   "nvrtcGetSupportedArchs", "nvrtcCreateProgram", "nvrtcDestroyProgram",
                                   "nvrtcCompileProgram", "nvrtcGetProgramLogSize", "nvrtcGetProgramLog",
                                   "nvrtcGetCUBINSize", "nvrtcGetCUBIN")
    assert api.CUBLAS_FUNCTIONS == ("cublasGetStatusName", "cublasGetStatusString", "cublasCreate_v2",
                                    "cublasDestroy_v2", "cublasSetStream_v2", "cublasSetMathMode",
                                    "cublasSetWorkspace_v2", "cublasSgemmStridedBatched", "cublasGemmStridedBatchedEx")


@pytest.mark.parametrize("short, functions", [("cudart", api.CUDART_FUNCTIONS), ("nvrtc", api.NVRTC_FUNCTIONS),
                                              ("cublas", api.CUBLAS_FUNCTIONS)])
def test_every_declared_symbol_exists_in_the_library_found(short, functions):
    path, where = libraries.find(short)
    assert path is not None, where
    assert path.endswith(libraries.LIBRARIES[short])
    # a fresh ffi with only declarations: dlsym of each name through getattr
    ffi = cffi.FFI()
    ffi.cdef({"cudart": api.CUDART_CDEF, "nvrtc": api.NVRTC_CDEF, "cublas": api.CUBLAS_CDEF}[short])
    lib = ffi.dlopen(path)
    missing = [name for name in functions if not _resolves(lib, name)]
    assert missing == []


def _resolves(lib, name: str) -> bool:
    try:
        getattr(lib, name)
    except AttributeError:
        return False
    return True


def test_versions_are_cuda_13(rt):
    assert 13000 <= rt.runtime_version() < 14000
    assert rt.nvrtc_version()[0] == 13
    assert {80, 90} <= set(rt.nvrtc_archs())


def test_failed_statuses_name_the_call_and_the_status(rt):
    with pytest.raises(runtime.CudaError, match=r"cudaSetDevice\(7\) failed: cudaError\w+ \(\d+\)") as e:
        rt.check_cuda("cudaSetDevice(7)", 101)  # cudaErrorInvalidDevice
    assert "cudaErrorInvalidDevice" in str(e.value) and e.value.status == 101
    with pytest.raises(runtime.CudaError, match=r"nvrtcCompileProgram failed: NVRTC_ERROR_COMPILATION \(6\)\nlog"):
        rt.check_nvrtc("nvrtcCompileProgram", 6, "log")
    with pytest.raises(runtime.CudaError, match=r"cublasCreate failed: CUBLAS_STATUS_NOT_INITIALIZED \(1\)"):
        rt.check_cublas("cublasCreate", 1)
    rt.check_cuda("anything", 0)  # success raises nothing


def test_device_count_statuses_are_explained_in_words_a_user_can_act_on(rt):
    assert runtime.explain_device_count(rt, 0, 2) == ""
    assert "found no CUDA device" in runtime.explain_device_count(rt, 0, 0)
    no_device = runtime.explain_device_count(rt, api.ERROR_NO_DEVICE, 0)
    assert "no CUDA-capable GPU is visible" in no_device and "cudaErrorNoDevice (100)" in no_device
    driver = runtime.explain_device_count(rt, api.ERROR_INSUFFICIENT_DRIVER, 0)
    assert "cudaErrorInsufficientDriver (35)" in driver and "driver" in driver
    other = runtime.explain_device_count(rt, 999, 0)
    assert other.startswith("the GPU cannot be used (cudaGetDeviceCount failed: cudaErrorUnknown (999)")


def test_availability_reason_matches_what_cuda_device_count_says(rt):
    status, count = rt.device_count()
    assert runtime.unavailable_reason() == runtime.explain_device_count(rt, status, count)
