"""cffi binding (ABI mode) to oneDNN's C API: the libdnnl.so.3 of the onednn-cpu-gomp wheel.

Declares only the functions called, finds and loads the library (and libgomp for thread counts),
creates the CPU engine and turns failed statuses into errors naming the call; builds no primitives.
"""

from __future__ import annotations

import ctypes.util
import glob
import importlib.metadata
import os
import sys
from typing import Any

import cffi

from ort_core.plugins import LoadOnce

from . import enums as E

LIBRARY_ENV = "ORT_EP_ONEDNN_LIBRARY"
"""Environment variable naming a libdnnl.so.3 to load instead of the onednn-cpu-gomp wheel's."""
DISTRIBUTION = "onednn-cpu-gomp"
REQUIRED_VERSION = (3, 2)
SPIN_COUNT = "3000"
"""GOMP_SPINCOUNT this plugin sets before libgomp loads, unless the user set it or OMP_WAIT_POLICY. libgomp's
idle threads otherwise spin for ~300k iterations after every oneDNN call, stealing the cores from the CPU
provider's numpy/OpenBLAS kernels running between oneDNN subgraphs: a dynamically quantized Inception v2
(its int8 ops on the CPU provider, float convolutions on oneDNN) took 624 ms with the default and 60 ms with
3000, while float models entirely on oneDNN kept their speed (PASSIVE waits cost them up to 2x)."""

# Declarations written from oneDNN 3.2's dnnl.h/dnnl_types.h for the calls made here. Enums are
# passed as int (their C ABI size); handles are pointers to opaque structs.
_CDEF = """
typedef int dnnl_status_t;
typedef int64_t dnnl_dim_t;
typedef dnnl_dim_t dnnl_dims_t[12];
typedef struct dnnl_engine *dnnl_engine_t;
typedef struct dnnl_stream *dnnl_stream_t;
typedef struct dnnl_memory_desc *dnnl_memory_desc_t;
typedef const struct dnnl_memory_desc *const_dnnl_memory_desc_t;
typedef struct dnnl_memory *dnnl_memory_t;
typedef struct dnnl_primitive_desc *dnnl_primitive_desc_t;
typedef const struct dnnl_primitive_desc *const_dnnl_primitive_desc_t;
typedef struct dnnl_primitive *dnnl_primitive_t;
typedef const struct dnnl_primitive *const_dnnl_primitive_t;
typedef struct dnnl_primitive_attr *dnnl_primitive_attr_t;
typedef const struct dnnl_primitive_attr *const_dnnl_primitive_attr_t;
typedef struct dnnl_post_ops *dnnl_post_ops_t;
typedef const struct dnnl_post_ops *const_dnnl_post_ops_t;
typedef struct { int arg; dnnl_memory_t memory; } dnnl_exec_arg_t;
typedef struct { int major; int minor; int patch; const char *hash; unsigned cpu_runtime; unsigned gpu_runtime; }
    dnnl_version_t;

const dnnl_version_t *dnnl_version(void);
int dnnl_get_effective_cpu_isa(void);

const char *dnnl_status2str(int v);
const char *dnnl_dt2str(int v);
const char *dnnl_fmt_tag2str(int v);
const char *dnnl_fmt_kind2str(int v);
const char *dnnl_prop_kind2str(int v);
const char *dnnl_prim_kind2str(int v);
const char *dnnl_alg_kind2str(int v);
const char *dnnl_engine_kind2str(int v);
const char *dnnl_fpmath_mode2str(int v);
const char *dnnl_scratchpad_mode2str(int v);
const char *dnnl_cpu_isa2str(int v);

dnnl_status_t dnnl_engine_create(dnnl_engine_t *engine, int kind, size_t index);
dnnl_status_t dnnl_stream_create(dnnl_stream_t *stream, dnnl_engine_t engine, unsigned flags);
dnnl_status_t dnnl_stream_wait(dnnl_stream_t stream);
dnnl_status_t dnnl_stream_destroy(dnnl_stream_t stream);

dnnl_status_t dnnl_memory_desc_create_with_strides(dnnl_memory_desc_t *memory_desc, int ndims,
    const dnnl_dims_t dims, int data_type, const dnnl_dims_t strides);
dnnl_status_t dnnl_memory_desc_create_with_tag(dnnl_memory_desc_t *memory_desc, int ndims,
    const dnnl_dims_t dims, int data_type, int tag);
dnnl_status_t dnnl_memory_desc_create_submemory(dnnl_memory_desc_t *memory_desc,
    const_dnnl_memory_desc_t parent_memory_desc, const dnnl_dims_t dims, const dnnl_dims_t offsets);
dnnl_status_t dnnl_memory_desc_clone(dnnl_memory_desc_t *memory_desc, const_dnnl_memory_desc_t existing);
dnnl_status_t dnnl_memory_desc_destroy(dnnl_memory_desc_t memory_desc);
dnnl_status_t dnnl_memory_desc_query(const_dnnl_memory_desc_t memory_desc, int what, void *result);
size_t dnnl_memory_desc_get_size(const_dnnl_memory_desc_t memory_desc);
int dnnl_memory_desc_equal(const_dnnl_memory_desc_t lhs, const_dnnl_memory_desc_t rhs);

dnnl_status_t dnnl_memory_create(dnnl_memory_t *memory, const_dnnl_memory_desc_t memory_desc,
    dnnl_engine_t engine, void *handle);
dnnl_status_t dnnl_memory_set_data_handle(dnnl_memory_t memory, void *handle);
dnnl_status_t dnnl_memory_destroy(dnnl_memory_t memory);

dnnl_status_t dnnl_primitive_attr_create(dnnl_primitive_attr_t *attr);
dnnl_status_t dnnl_primitive_attr_destroy(dnnl_primitive_attr_t attr);
dnnl_status_t dnnl_primitive_attr_set_scratchpad_mode(dnnl_primitive_attr_t attr, int mode);
dnnl_status_t dnnl_primitive_attr_set_post_ops(dnnl_primitive_attr_t attr, const_dnnl_post_ops_t post_ops);
dnnl_status_t dnnl_primitive_attr_set_zero_points_mask(dnnl_primitive_attr_t attr, int arg, int mask);
dnnl_status_t dnnl_post_ops_create(dnnl_post_ops_t *post_ops);
dnnl_status_t dnnl_post_ops_destroy(dnnl_post_ops_t post_ops);
dnnl_status_t dnnl_post_ops_append_eltwise(dnnl_post_ops_t post_ops, int alg_kind, float alpha, float beta);
dnnl_status_t dnnl_post_ops_append_sum(dnnl_post_ops_t post_ops, float scale, int32_t zero_point, int data_type);
dnnl_status_t dnnl_post_ops_append_binary(dnnl_post_ops_t post_ops, int alg_kind,
    const_dnnl_memory_desc_t src1_desc);

dnnl_status_t dnnl_convolution_forward_primitive_desc_create(dnnl_primitive_desc_t *primitive_desc,
    dnnl_engine_t engine, int prop_kind, int alg_kind, const_dnnl_memory_desc_t src_desc,
    const_dnnl_memory_desc_t weights_desc, const_dnnl_memory_desc_t bias_desc, const_dnnl_memory_desc_t dst_desc,
    const dnnl_dims_t strides, const dnnl_dims_t dilates, const dnnl_dims_t padding_l,
    const dnnl_dims_t padding_r, const_dnnl_primitive_attr_t attr);
dnnl_status_t dnnl_matmul_primitive_desc_create(dnnl_primitive_desc_t *primitive_desc, dnnl_engine_t engine,
    const_dnnl_memory_desc_t src_desc, const_dnnl_memory_desc_t weights_desc, const_dnnl_memory_desc_t bias_desc,
    const_dnnl_memory_desc_t dst_desc, const_dnnl_primitive_attr_t attr);
dnnl_status_t dnnl_inner_product_forward_primitive_desc_create(dnnl_primitive_desc_t *primitive_desc,
    dnnl_engine_t engine, int prop_kind, const_dnnl_memory_desc_t src_desc, const_dnnl_memory_desc_t weights_desc,
    const_dnnl_memory_desc_t bias_desc, const_dnnl_memory_desc_t dst_desc, const_dnnl_primitive_attr_t attr);
dnnl_status_t dnnl_pooling_forward_primitive_desc_create(dnnl_primitive_desc_t *primitive_desc,
    dnnl_engine_t engine, int prop_kind, int alg_kind, const_dnnl_memory_desc_t src_desc,
    const_dnnl_memory_desc_t dst_desc, const dnnl_dims_t strides, const dnnl_dims_t kernel,
    const dnnl_dims_t dilation, const dnnl_dims_t padding_l, const dnnl_dims_t padding_r,
    const_dnnl_primitive_attr_t attr);
dnnl_status_t dnnl_eltwise_forward_primitive_desc_create(dnnl_primitive_desc_t *primitive_desc,
    dnnl_engine_t engine, int prop_kind, int alg_kind, const_dnnl_memory_desc_t src_desc,
    const_dnnl_memory_desc_t dst_desc, float alpha, float beta, const_dnnl_primitive_attr_t attr);
dnnl_status_t dnnl_binary_primitive_desc_create(dnnl_primitive_desc_t *primitive_desc, dnnl_engine_t engine,
    int alg_kind, const_dnnl_memory_desc_t src0_desc, const_dnnl_memory_desc_t src1_desc,
    const_dnnl_memory_desc_t dst_desc, const_dnnl_primitive_attr_t attr);
dnnl_status_t dnnl_softmax_forward_primitive_desc_create(dnnl_primitive_desc_t *primitive_desc,
    dnnl_engine_t engine, int prop_kind, int alg_kind, const_dnnl_memory_desc_t src_desc,
    const_dnnl_memory_desc_t dst_desc, int softmax_axis, const_dnnl_primitive_attr_t attr);
dnnl_status_t dnnl_layer_normalization_forward_primitive_desc_create(dnnl_primitive_desc_t *primitive_desc,
    dnnl_engine_t engine, int prop_kind, const_dnnl_memory_desc_t src_desc, const_dnnl_memory_desc_t dst_desc,
    const_dnnl_memory_desc_t stat_desc, float epsilon, unsigned flags, const_dnnl_primitive_attr_t attr);
dnnl_status_t dnnl_batch_normalization_forward_primitive_desc_create(dnnl_primitive_desc_t *primitive_desc,
    dnnl_engine_t engine, int prop_kind, const_dnnl_memory_desc_t src_desc, const_dnnl_memory_desc_t dst_desc,
    float epsilon, unsigned flags, const_dnnl_primitive_attr_t attr);
dnnl_status_t dnnl_reduction_primitive_desc_create(dnnl_primitive_desc_t *primitive_desc, dnnl_engine_t engine,
    int alg_kind, const_dnnl_memory_desc_t src_desc, const_dnnl_memory_desc_t dst_desc, float p, float eps,
    const_dnnl_primitive_attr_t attr);
dnnl_status_t dnnl_reorder_primitive_desc_create(dnnl_primitive_desc_t *reorder_primitive_desc,
    const_dnnl_memory_desc_t src_desc, dnnl_engine_t src_engine, const_dnnl_memory_desc_t dst_desc,
    dnnl_engine_t dst_engine, const_dnnl_primitive_attr_t attr);
dnnl_status_t dnnl_concat_primitive_desc_create(dnnl_primitive_desc_t *concat_primitive_desc,
    dnnl_engine_t engine, const_dnnl_memory_desc_t dst_desc, int n, int concat_dimension,
    const const_dnnl_memory_desc_t *src_descs, const_dnnl_primitive_attr_t attr);
const_dnnl_memory_desc_t dnnl_primitive_desc_query_md(const_dnnl_primitive_desc_t primitive_desc, int what,
    int index);
dnnl_status_t dnnl_primitive_desc_query(const_dnnl_primitive_desc_t primitive_desc, int what, int index,
    void *result);
dnnl_status_t dnnl_primitive_desc_destroy(dnnl_primitive_desc_t primitive_desc);

dnnl_status_t dnnl_primitive_create(dnnl_primitive_t *primitive, const_dnnl_primitive_desc_t primitive_desc);
dnnl_status_t dnnl_primitive_execute(const_dnnl_primitive_t primitive, dnnl_stream_t stream, int nargs,
    const dnnl_exec_arg_t *args);
dnnl_status_t dnnl_primitive_destroy(dnnl_primitive_t primitive);
"""

_GOMP_CDEF = """
void omp_set_num_threads(int num_threads);
int omp_get_max_threads(void);
"""


class LibraryUnavailable(RuntimeError):
    """libdnnl could not be found, loaded or used here; the message says why and what to do."""


class DnnlError(RuntimeError):
    """A oneDNN call returned a failing status; ``status`` is its dnnl_status_t."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def library_candidates() -> list[str]:
    """libdnnl.so.3 files of the installed onednn-cpu-gomp distribution (found through its RECORD),
    then ``<sys.prefix>/lib``, where that wheel puts it."""
    found: list[str] = []
    try:
        dist = importlib.metadata.distribution(DISTRIBUTION)
        for f in dist.files or ():
            name = os.path.basename(str(f))
            if name in ("libdnnl.so.3", "libdnnl.3.dylib", "dnnl.dll"):
                found.append(os.path.normpath(str(dist.locate_file(f))))
    except importlib.metadata.PackageNotFoundError:
        pass
    found += sorted(glob.glob(os.path.join(sys.prefix, "lib", "libdnnl.so.3")))
    unique: list[str] = []
    for path in found:
        if os.path.exists(path) and path not in unique:
            unique.append(path)
    return unique


class Library:
    """The loaded library: ``ffi`` for types, ``lib`` for calls, ``engine`` (CPU), ``version``."""

    def __init__(self, ffi: cffi.FFI, lib: Any, path: str) -> None:
        self.ffi, self.lib, self.path = ffi, lib, path
        v = lib.dnnl_version()
        self.version_info = (v.major, v.minor, v.patch)
        self.version = f"{v.major}.{v.minor}.{v.patch}"
        self.cpu_runtime = int(v.cpu_runtime)
        engine = ffi.new("dnnl_engine_t *")
        self.check(lib.dnnl_engine_create(engine, E.ENGINE_CPU, 0), "dnnl_engine_create(cpu)")
        self.engine = engine[0]  # lives as long as the process: primitives keep references to it
        self.gomp = _load_gomp()
        # OpenMP's own thread count (OMP_NUM_THREADS, else every core), read before anything changes it: what
        # a thread goes back to after a small program ran on one thread
        self.default_threads = int(self.gomp.omp_get_max_threads()) if self.gomp is not None else 0
        self.isa = int(lib.dnnl_get_effective_cpu_isa())

    def check(self, status: int, call: str) -> None:
        if status != E.SUCCESS:
            text = self.ffi.string(self.lib.dnnl_status2str(status)).decode()
            raise DnnlError(f"{call} failed: {text}", status)

    @property
    def has_bf16(self) -> bool:
        """Whether the CPU has native bf16 instructions oneDNN uses (AVX512-BF16 or AMX)."""
        return (self.isa & E.CPU_ISA_AVX512_CORE_BF16) == E.CPU_ISA_AVX512_CORE_BF16

    @property
    def has_vnni(self) -> bool:
        """Whether oneDNN uses VNNI int8 dot products here (AVX512-VNNI and up, or AVX-VNNI): without them
        its u8 x s8 kernels add pairs of products in saturating 16-bit registers (vpmaddubsw), which
        can differ from the exact int32 sums ONNX asks for."""
        return (self.isa & E.CPU_ISA_AVX512_CORE_VNNI) == E.CPU_ISA_AVX512_CORE_VNNI or "vnni" in self.isa_name()

    def isa_name(self) -> str:
        return self.ffi.string(self.lib.dnnl_cpu_isa2str(self.isa)).decode()

    def set_num_threads(self, n: int) -> None:
        """omp_set_num_threads(n) for the calling thread (libgomp keeps one setting per thread)."""
        if n and self.gomp is not None:
            self.gomp.omp_set_num_threads(n)


def _load_gomp() -> Any:
    """libgomp, already loaded by libdnnl (the OpenMP build links it); None when it cannot be found."""
    ffi = cffi.FFI()
    ffi.cdef(_GOMP_CDEF)
    for name in ("libgomp.so.1", ctypes.util.find_library("gomp")):
        if not name:
            continue
        try:
            return ffi.dlopen(name)
        except OSError:
            continue
    return None


def load_library(path: str | None = None) -> Library:
    """dlopen libdnnl ($ORT_EP_ONEDNN_LIBRARY, else onednn-cpu-gomp's), check its version and create
    the CPU engine. Raises LibraryUnavailable with an actionable reason; never any other error."""
    path = path or os.environ.get(LIBRARY_ENV)
    if not path:
        candidates = library_candidates()
        if not candidates:
            raise LibraryUnavailable(f"libdnnl.so.3 not found: pip install {DISTRIBUTION}==2023.2.0 "
                                     f"(oneDNN 3.2, OpenMP build), or set {LIBRARY_ENV} to its path")
        path = candidates[0]
    ffi = cffi.FFI()
    ffi.cdef(_CDEF)
    if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
        os.environ["GOMP_SPINCOUNT"] = SPIN_COUNT  # read by libgomp when libdnnl pulls it in (see above)
    try:
        lib = ffi.dlopen(path)
    except OSError as e:
        raise LibraryUnavailable(f"cannot load {path} ({e}); pip install --force-reinstall "
                                 f"{DISTRIBUTION}==2023.2.0 or set {LIBRARY_ENV}") from None
    try:
        lib.dnnl_version  # noqa: B018 - a symbol lookup, which raises when the library is not oneDNN
        lib.dnnl_layer_normalization_forward_primitive_desc_create  # noqa: B018
    except AttributeError as e:
        raise LibraryUnavailable(f"{path} is not a oneDNN 3.x library ({e}); pip install "
                                 f"{DISTRIBUTION}==2023.2.0") from None
    v = lib.dnnl_version()
    if (v.major, v.minor) != REQUIRED_VERSION:
        raise LibraryUnavailable(f"{path} is oneDNN {v.major}.{v.minor}.{v.patch}; this provider's enum values "
                                 f"are those of oneDNN 3.2: pip install {DISTRIBUTION}==2023.2.0")
    try:
        return Library(ffi, lib, path)
    except DnnlError as e:
        raise LibraryUnavailable(f"oneDNN {v.major}.{v.minor}.{v.patch} at {path} cannot create a CPU engine "
                                 f"({e}); pip install {DISTRIBUTION}==2023.2.0") from None


library: LoadOnce[Library] = LoadOnce(load_library, LibraryUnavailable)
"""``library()``: the process-wide library, loaded once; raises LibraryUnavailable when it cannot be."""


def unavailable_reason() -> str:
    """Why oneDNN cannot run here, or "" when it can. Never raises."""
    try:
        return library.reason()
    except Exception as e:  # noqa: BLE001 - registration must never raise
        return f"oneDNN could not be initialised: {type(e).__name__}: {e}"
