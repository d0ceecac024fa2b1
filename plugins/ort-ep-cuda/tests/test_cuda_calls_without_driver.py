"""The device-side calls, made for real where no NVIDIA driver is: cffi marshals every argument (dim3 by value,
the parameter struct, cuBLAS's pointers and enums) and the runtime's failure comes back as a CudaError naming
the call and CUDA's status. Where a GPU is, these calls succeed and test_cuda_gpu covers them instead."""

from __future__ import annotations

import pytest
from cuda_helpers import gpu_reason
from ort_ep_cuda import codegen, runtime, shapes
from ort_ep_cuda.launch import Executor
from ort_ep_cuda.memory import cuda_device
from ort_ep_cuda.nvrtc import KernelCache
from ort_ep_cuda.record import StepRecorder
from ort_ep_cuda.stream import CudaStream
from ort_ep_cuda.trace import Recorder, bases

pytestmark = pytest.mark.skipif(not gpu_reason() or "cudaGetDeviceCount" not in gpu_reason(),
                                reason="a GPU (or no CUDA library) is here: the calls would not fail")

FAILS = r"failed: cudaError(InsufficientDriver|NoDevice) \(\d+\)"


class _FakeStream:
    """Stands in for a run's stream whose creation (a CUDA call) is itself what fails here: the legacy default
    stream's handle (NULL)."""

    handle = runtime.runtime().ffi.NULL

    def keep(self, *objects):
        pass


@pytest.fixture()
def executor(tmp_path):
    info = runtime.DeviceInfo(0, "none", 9, 0, 132, 1024, True)
    return Executor(runtime.runtime(), info, None, None, KernelCache(str(tmp_path)), use_tf32=False)


def test_stream_creation_names_the_failed_call():
    with pytest.raises(runtime.CudaError, match=r"cudaSetDevice\(0\) " + FAILS):
        CudaStream(runtime.runtime(), cuda_device(0))


def _steps(executor) -> StepRecorder:
    return StepRecorder(executor.info, executor.use_tf32, executor.rt.ffi, executor.device)


def _issue(executor, rec):
    """Replay what ``rec`` recorded with every symbolic address resolved as if each value sat at 4096."""
    trace = executor.finish(rec)
    table = bases(trace, [4096] * trace.n_inputs, dict.fromkeys(trace.outputs, 4096), 4096)
    executor.issue(trace, table, _FakeStream(), None)


def test_kernel_launch_marshals_its_arguments_and_reports_the_status(executor):
    program = codegen.Program("float32", 2, 2, (("Add", (("in", 0), ("in", 1))),), (0,))
    rec = Recorder(0, 0, cuda_device(0))
    _steps(executor)._launch(runtime.runtime().ffi.NULL, program, [16, 32, 48], (2, 3), [[3, 1], [0, 1]], rec)
    with pytest.raises(runtime.CudaError, match=r"cudaLaunchKernel\(ort_ew_\w+, grid=1, block=32\) " + FAILS):
        _issue(executor, rec)


def test_loading_a_compiled_kernel_reports_the_status(executor):
    program = codegen.Program("float16", 1, 1, (("Gelu", (("in", 0),)),), (0,))
    with pytest.raises(runtime.CudaError, match=r"cudaSetDevice\(0\) " + FAILS):
        executor.kernel(program)  # compiled with NVRTC for sm_90 first: only the device step fails


def test_cublas_reports_its_status(executor):
    from ort_core.memory import DeviceTensor

    t = DeviceTensor(4096, (2, 2), "float32", cuda_device(0))
    rec = Recorder(0, 0, cuda_device(0))
    _steps(executor)._gemm_ex(shapes.gemm_call(2, 2, 2, False, False), t, t, t, 1.0, 0.0, rec, "gemm")
    with pytest.raises(runtime.CudaError, match=r"cublasCreate failed: CUBLAS_STATUS_NOT_INITIALIZED \(1\)"):
        _issue(executor, rec)
