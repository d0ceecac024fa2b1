"""The generated CUDA C++ built for the host with g++ (a compile of the same source with CUDA's keywords and
built-ins defined away, and the two float16 conversions done with the host's _Float16): its grid-stride loop,
index arithmetic, parameter struct and arithmetic are run over every element and compared with the numpy
reference. Not a GPU run: the CUDA math functions are the host's libm here, and the launch is sequential."""

from __future__ import annotations

import shutil
import subprocess

import cffi
import numpy as np
import pytest
from ort_ep_cuda import codegen

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ to build the generated source for the host")

HOST_PRELUDE = r"""
__device__ __forceinline__ float ort_h2f(unsigned short h) { _Float16 f; memcpy(&f, &h, 2); return (float)f; }
__device__ __forceinline__ unsigned short ort_f2h(float f) {
  _Float16 h = (_Float16)f; unsigned short u; memcpy(&u, &h, 2); return u;
}
"""

SHIM = r"""
#include <cmath>
#include <cstring>
#include <cstddef>
struct ort_dim3 { unsigned int x, y, z; };
static ort_dim3 blockIdx, threadIdx, gridDim, blockDim;
#define __global__
#define __device__
#define __forceinline__ inline
"""


def _host_source(programs: list[codegen.Program]) -> str:
    parts = [SHIM]
    for k, p in enumerate(programs):
        src = codegen.source(p)
        if "float16" in (p.dtype, p.result_dtype):
            assert codegen._PRELUDE in src
            src = src.replace(codegen._PRELUDE, HOST_PRELUDE)
        parts.append(f"namespace p{k} {{\n{src}\n}}\n")
        parts.append(f"""extern "C" size_t size_{k}(void) {{ return sizeof(p{k}::Params); }}
extern "C" void run_{k}(const void* bytes, unsigned grid, unsigned block) {{
  p{k}::Params p; memcpy(&p, bytes, sizeof(p));
  gridDim.x = grid; blockDim.x = block;
  for (unsigned b = 0; b < grid; ++b) for (unsigned t = 0; t < block; ++t) {{
    blockIdx.x = b; threadIdx.x = t; p{k}::{p.name}(p);
  }}
}}
""")
    return "\n".join(parts)


CASES = []
for op, spec in codegen.OPS.items():
    for dtype in codegen.DTYPES:
        shapes = [[(2, 3, 4)], [(2, 3, 4), (3, 1)], [(2, 3, 4), (3, 1), (4,)]][spec.arity - 1]
        CASES.append((codegen.Program(dtype, 3, spec.arity, ((op, tuple(("in", k) for k in range(spec.arity))),),
                                      (0,)), shapes))
CASES.append((codegen.Program("float32", 3, 3, (
    ("Div", (("in", 0), ("in", 1))), ("Erf", (("t", 0),)), ("Add", (("t", 1), ("in", 2))),
    ("Mul", (("in", 0), ("t", 2))), ("Mul", (("t", 3), ("in", 1)))), (0, 4)), [(5, 1, 7), (), (6, 1)]))
CASES.append((codegen.Program("float16", 2, 2, (
    ("Sub", (("in", 0), ("in", 1))), ("Sigmoid", (("t", 0),)), ("Mul", (("t", 1), ("in", 1)))), (2, 1)),
    [(1, 9), (4, 1)]))
CASES.append((codegen.Program("float32", 1, 1, (("Relu", (("in", 0),)),), (0,)), [()]))  # a 0-d tensor
CASES.append((codegen.cast("float32", "float16", 2), [(3, 5)]))
CASES.append((codegen.cast("float16", "float32", 3), [(2, 1, 4)]))


@pytest.fixture(scope="module")
def host_lib(tmp_path_factory):
    folder = tmp_path_factory.mktemp("host_kernels")
    (folder / "kernels.cpp").write_text(_host_source([p for p, _ in CASES]))
    done = subprocess.run(["g++", "-std=c++17", "-O1", "-shared", "-fPIC", "-o", str(folder / "kernels.so"),
                           str(folder / "kernels.cpp")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    ffi = cffi.FFI()
    ffi.cdef("\n".join(f"size_t size_{k}(void); void run_{k}(const void*, unsigned, unsigned);"
                       for k in range(len(CASES))))
    return ffi, ffi.dlopen(str(folder / "kernels.so"))


def _inputs(shapes, dtype, seed):
    rng = np.random.default_rng(seed)
    return [np.asarray(rng.uniform(-2, 2, s)).astype(dtype) for s in shapes]


@pytest.mark.parametrize("k", range(len(CASES)), ids=lambda k: f"{CASES[k][0].steps[0][0]}-{CASES[k][0].dtype}-"
                                                               f"{CASES[k][0].result_dtype}-{len(CASES[k][0].steps)}")
def test_generated_source_built_for_the_host_computes_the_reference(host_lib, k):
    ffi, lib = host_lib
    program, shapes = CASES[k]
    dtype = np.dtype(program.dtype)
    xs = _inputs(shapes, dtype, k)
    if program.steps[0][0] in ("Log", "Sqrt", "Pow"):
        xs = [np.abs(x) + dtype.type(0.1) for x in xs]
    out_shape = np.broadcast_shapes(*[x.shape for x in xs])
    index_shape = out_shape or (1,)
    outs = [np.full(out_shape, np.nan, program.result_dtype) for _ in program.outputs]
    strides = [codegen.broadcast_strides(x.shape, x.strides, dtype.itemsize, index_shape) for x in xs]
    words = codegen.pack_params(program, [x.ctypes.data for x in xs] + [o.ctypes.data for o in outs],
                                index_shape, strides)
    assert getattr(lib, f"size_{k}")() == words.nbytes  # the C struct is exactly what pack_params lays out
    n = int(np.prod(index_shape))
    cfg = codegen.launch_config(n, sm_count=1, block=32, blocks_per_sm=1)  # few blocks: the loop strides
    getattr(lib, f"run_{k}")(ffi.from_buffer(words), cfg.grid, cfg.block)
    expected = codegen.reference(program, xs)
    tol = 1e-3 if np.float16 in (dtype, np.dtype(program.result_dtype)) else 1e-5
    for got, want in zip(outs, expected):
        assert got.shape == want.shape and got.dtype == want.dtype and not np.isnan(got).any()
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol)
