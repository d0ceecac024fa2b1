"""cffi declarations (ABI mode) of the CUDA runtime, NVRTC and cuBLAS calls this provider makes, and their constants.

Written from NVIDIA's public API reference (CUDA Runtime API, NVRTC and cuBLAS documentation of CUDA 13); no
NVIDIA header is copied or shipped. ABI mode checks nothing against a header, so every signature here must
match the library exactly: enums are ``int``, handles are pointers, ``dim3`` is three unsigned ints passed by
value. The symbol lists name every function declared, so a test can check each one exists (dlsym) in the
libraries found. Nothing here loads a library.
"""

from __future__ import annotations

CUDART_CDEF = """
typedef int cudaError_t;
typedef void* cudaStream_t;
typedef void* cudaEvent_t;
typedef void* cudaMemPool_t;
typedef void* cudaLibrary_t;
typedef void* cudaKernel_t;
typedef void* cudaGraph_t;
typedef void* cudaGraphExec_t;
typedef struct { unsigned int x; unsigned int y; unsigned int z; } dim3;

const char* cudaGetErrorName(cudaError_t error);
const char* cudaGetErrorString(cudaError_t error);
cudaError_t cudaGetLastError(void);
cudaError_t cudaRuntimeGetVersion(int* runtimeVersion);
cudaError_t cudaDriverGetVersion(int* driverVersion);
cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaGetDeviceProperties(void* prop, int device);
cudaError_t cudaDeviceGetAttribute(int* value, int attr, int device);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaMemGetInfo(size_t* free, size_t* total);

cudaError_t cudaMalloc(void** devPtr, size_t size);
cudaError_t cudaFree(void* devPtr);
cudaError_t cudaMallocHost(void** ptr, size_t size);
cudaError_t cudaFreeHost(void* ptr);
cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* memPool, int device);
cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t memPool, int attr, void* value);
cudaError_t cudaMemPoolTrimTo(cudaMemPool_t memPool, size_t minBytesToKeep);
cudaError_t cudaMallocFromPoolAsync(void** ptr, size_t size, cudaMemPool_t memPool, cudaStream_t stream);
cudaError_t cudaFreeAsync(void* devPtr, cudaStream_t hStream);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, int kind, cudaStream_t stream);
cudaError_t cudaMemsetAsync(void* devPtr, int value, size_t count, cudaStream_t stream);
cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                              int kind, cudaStream_t stream);

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* pStream, unsigned int flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamQuery(cudaStream_t stream);
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);
cudaError_t cudaEventDestroy(cudaEvent_t event);

cudaError_t cudaLibraryLoadData(cudaLibrary_t* library, const void* code, int* jitOptions, void** jitOptionsValues,
                                unsigned int numJitOptions, int* libraryOptions, void** libraryOptionValues,
                                unsigned int numLibraryOptions);
cudaError_t cudaLibraryGetKernel(cudaKernel_t* pKernel, cudaLibrary_t library, const char* name);
cudaError_t cudaLibraryUnload(cudaLibrary_t library);
cudaError_t cudaLaunchKernel(const void* func, dim3 gridDim, dim3 blockDim, void** args, size_t sharedMem,
                             cudaStream_t stream);

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, int mode);
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* pGraph);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* pGraphExec, cudaGraph_t graph, unsigned long long flags);
cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t graphExec);
cudaError_t cudaGraphDestroy(cudaGraph_t graph);
"""

NVRTC_CDEF = """
typedef int nvrtcResult;
typedef void* nvrtcProgram;

const char* nvrtcGetErrorString(nvrtcResult result);
nvrtcResult nvrtcVersion(int* major, int* minor);
nvrtcResult nvrtcGetNumSupportedArchs(int* numArchs);
nvrtcResult nvrtcGetSupportedArchs(int* supportedArchs);
nvrtcResult nvrtcCreateProgram(nvrtcProgram* prog, const char* src, const char* name, int numHeaders,
                               const char* const* headers, const char* const* includeNames);
nvrtcResult nvrtcDestroyProgram(nvrtcProgram* prog);
nvrtcResult nvrtcCompileProgram(nvrtcProgram prog, int numOptions, const char* const* options);
nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram prog, size_t* logSizeRet);
nvrtcResult nvrtcGetProgramLog(nvrtcProgram prog, char* log);
nvrtcResult nvrtcGetCUBINSize(nvrtcProgram prog, size_t* cubinSizeRet);
nvrtcResult nvrtcGetCUBIN(nvrtcProgram prog, char* cubin);
"""

CUBLAS_CDEF = """
typedef int cublasStatus_t;
typedef void* cublasHandle_t;

const char* cublasGetStatusName(cublasStatus_t status);
const char* cublasGetStatusString(cublasStatus_t status);
cublasStatus_t cublasCreate_v2(cublasHandle_t* handle);
cublasStatus_t cublasDestroy_v2(cublasHandle_t handle);
cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, void* streamId);
cublasStatus_t cublasSetMathMode(cublasHandle_t handle, int mode);
cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void* workspace, size_t workspaceSizeInBytes);
cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t handle, int transa, int transb, int m, int n, int k,
                                         const float* alpha, const float* A, int lda, long long strideA,
                                         const float* B, int ldb, long long strideB, const float* beta,
                                         float* C, int ldc, long long strideC, int batchCount);
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, int transa, int transb, int m, int n, int k,
                                          const void* alpha, const void* A, int Atype, int lda, long long strideA,
                                          const void* B, int Btype, int ldb, long long strideB, const void* beta,
                                          void* C, int Ctype, int ldc, long long strideC, int batchCount,
                                          int computeType, int algo);
"""


def declared_functions(cdef: str) -> tuple[str, ...]:
    """The function names a cdef block declares (the identifier before each '(' that opens a prototype)."""
    names = []
    for statement in cdef.split(";"):
        statement = " ".join(statement.split())
        if "(" not in statement or statement.startswith("typedef"):
            continue
        head = statement.split("(", 1)[0].strip()
        names.append(head.replace("*", " ").split()[-1])
    return tuple(names)


CUDART_FUNCTIONS = declared_functions(CUDART_CDEF)
NVRTC_FUNCTIONS = declared_functions(NVRTC_CDEF)
CUBLAS_FUNCTIONS = declared_functions(CUBLAS_CDEF)

# cudaError_t values this provider tells apart (the rest are reported by name)
SUCCESS = 0
ERROR_NOT_READY = 600
ERROR_INSUFFICIENT_DRIVER = 35
ERROR_NO_DEVICE = 100

# cudaDeviceAttr
ATTR_MAX_THREADS_PER_BLOCK = 1
ATTR_MULTIPROCESSOR_COUNT = 16
ATTR_COMPUTE_CAPABILITY_MAJOR = 75
ATTR_COMPUTE_CAPABILITY_MINOR = 76
ATTR_MEMORY_POOLS_SUPPORTED = 115

MEMCPY_DEFAULT = 4  # cudaMemcpyDefault: direction inferred from unified virtual addresses
STREAM_NON_BLOCKING = 1  # cudaStreamNonBlocking: no implicit order with the legacy default stream
EVENT_DEFAULT = 0  # cudaEventDefault: timing enabled (elapsed_ns)
MEMPOOL_ATTR_RELEASE_THRESHOLD = 4  # cudaMemPoolAttrReleaseThreshold (cuuint64_t)
CAPTURE_MODE_THREAD_LOCAL = 1  # cudaStreamCaptureModeThreadLocal: only this thread's unsafe calls are refused

# cuBLAS
CUBLAS_OP_N, CUBLAS_OP_T = 0, 1
CUBLAS_DEFAULT_MATH = 0
CUBLAS_TF32_TENSOR_OP_MATH = 3
CUDA_R_32F, CUDA_R_16F = 0, 2  # cudaDataType
CUBLAS_COMPUTE_32F = 68
CUBLAS_COMPUTE_32F_FAST_TF32 = 77
CUBLAS_GEMM_DEFAULT = -1
