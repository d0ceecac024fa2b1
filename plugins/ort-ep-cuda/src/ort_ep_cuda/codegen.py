"""Elementwise kernels generated as CUDA C++ for NVRTC, their numpy references, and launch configurations.

A ``Program`` is a chain of elementwise ops over one index space (the output shape, rank fixed at compile
time, sizes and broadcast strides passed at launch), fused into one kernel: every input is read through its
own element strides (0 where it is broadcast), intermediates stay in registers, and the values the rest of the
graph needs are written out. ``source`` writes the kernel, ``reference`` computes the same arithmetic with
numpy (float32 math, rounded to float16 after every op for float16 programs, as the kernel does), and
``pack_params`` lays out the launch parameters. Pure functions only: nothing here loads CUDA.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

SQRT1_2 = 0.70710678118654752440


def _relu(x: np.ndarray) -> np.ndarray:
    return np.where(x < 0, np.float32(0), x)  # NaN stays NaN, as in the kernel


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return np.float32(1) / (np.float32(1) + np.exp(-x))


def _gelu(x: np.ndarray) -> np.ndarray:
    from math import erf
    erf_v = np.vectorize(erf, otypes=[np.float64])(x.astype(np.float64) * SQRT1_2).astype(np.float32)
    return np.float32(0.5) * x * (np.float32(1) + erf_v)


def _erf(x: np.ndarray) -> np.ndarray:
    from math import erf
    return np.vectorize(erf, otypes=[np.float64])(x.astype(np.float64)).astype(np.float32)


@dataclass(frozen=True)
class Op:
    """An elementwise op: its arity, its CUDA expression over float operands ({0}, {1}), its numpy twin."""

    arity: int
    cuda: str
    numpy: object


OPS: dict[str, Op] = {
    "Add": Op(2, "({0} + {1})", np.add),
    "Sub": Op(2, "({0} - {1})", np.subtract),
    "Mul": Op(2, "({0} * {1})", np.multiply),
    "Div": Op(2, "({0} / {1})", np.divide),
    "Pow": Op(2, "powf({0}, {1})", np.power),
    "Relu": Op(1, "({0} < 0.0f ? 0.0f : {0})", _relu),
    "Sigmoid": Op(1, "(1.0f / (1.0f + expf(-{0})))", _sigmoid),
    "Tanh": Op(1, "tanhf({0})", np.tanh),
    "Exp": Op(1, "expf({0})", np.exp),
    "Log": Op(1, "logf({0})", np.log),
    "Sqrt": Op(1, "sqrtf({0})", np.sqrt),
    "Neg": Op(1, "(-{0})", np.negative),
    "Abs": Op(1, "fabsf({0})", np.absolute),
    "Erf": Op(1, "erff({0})", _erf),
    "Gelu": Op(1, f"(0.5f * {{0}} * (1.0f + erff({{0}} * {SQRT1_2!r}f)))", _gelu),
    "Where": Op(3, "({0} != 0.0f ? {1} : {2})", lambda c, x, y: np.where(c != 0, x, y)),  # condition as 0/1
    "Identity": Op(1, "{0}", lambda x: x),  # used to broadcast a value into a buffer (Gemm's C)
}
"""Every op the generator emits. ``Gelu`` is com.microsoft's (the erf form)."""

DTYPES = {"float32": "float", "float16": "unsigned short"}
"""Element types the generator handles, with the C type of their storage (float16 as its 16 bits)."""

Operand = tuple[str, int]
"""("in", i): the program's i-th input; ("t", j): the result of step j."""


@dataclass(frozen=True)
class Program:
    """One fused elementwise kernel: ``steps`` in order (op name, operands), ``outputs`` the steps whose result
    is written (one buffer each, in order), over ``n_inputs`` inputs of ``dtype`` and an index space of
    ``rank`` dimensions. ``out_dtype``: the type the outputs are stored as when it is not ``dtype`` (Cast)."""

    dtype: str
    rank: int
    n_inputs: int
    steps: tuple[tuple[str, tuple[Operand, ...]], ...]
    outputs: tuple[int, ...]
    out_dtype: str = ""

    def __post_init__(self) -> None:
        for dtype in (self.dtype, self.out_dtype or self.dtype):
            if dtype not in DTYPES:
                raise ValueError(f"dtype {dtype!r} is not one of {sorted(DTYPES)}")
        if self.rank < 1 or not self.steps or not self.outputs:
            raise ValueError("a program needs rank >= 1, a step and an output")
        for j, (op, operands) in enumerate(self.steps):
            if op not in OPS or len(operands) != OPS[op].arity:
                raise ValueError(f"step {j}: {op} with {len(operands)} operand(s)")
            for kind, k in operands:
                if not ((kind == "in" and 0 <= k < self.n_inputs) or (kind == "t" and 0 <= k < j)):
                    raise ValueError(f"step {j}: operand {(kind, k)} is not an input or an earlier step")
        if any(not 0 <= k < len(self.steps) for k in self.outputs):
            raise ValueError(f"outputs {self.outputs} name steps that do not exist")

    @property
    def name(self) -> str:
        """The kernel's name: derived from everything that shapes its source."""
        fields = (self.dtype, self.rank, self.n_inputs, self.steps, self.outputs)
        text = repr((*fields, self.out_dtype) if self.out_dtype else fields)
        return "ort_ew_" + hashlib.sha256(text.encode()).hexdigest()[:16]

    @property
    def result_dtype(self) -> str:
        """The type the outputs are stored as."""
        return self.out_dtype or self.dtype

    def cuda(self) -> str:
        return source(self)


_PRELUDE = r"""
__device__ __forceinline__ float ort_h2f(unsigned short h) {
  float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f;
}
__device__ __forceinline__ unsigned short ort_f2h(float f) {
  unsigned short h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h;
}
"""


def identity(dtype: str, rank: int) -> Program:
    """The copy program: one input broadcast into the output (a bias, Gemm's C, an expanded value)."""
    return Program(dtype, rank, 1, (("Identity", (("in", 0),)),), (0,))


def cast(dtype: str, to: str, rank: int) -> Program:
    """Cast between the generator's float types: the copy program storing its output as ``to``."""
    return Program(dtype, rank, 1, (("Identity", (("in", 0),)),), (0,), "" if to == dtype else to)


def source(program: Program) -> str:
    """The CUDA C++ of ``program``: one ``extern "C"`` kernel taking one parameter struct (``pack_params``).

    The index arithmetic (a division and a remainder per dimension) runs in 32 bits when the index space has
    fewer than 2**31 elements, which is several times cheaper on a GPU than 64-bit division; element offsets
    are 64-bit either way."""
    p = program
    half = p.dtype == "float16"
    n_ptr = p.n_inputs + len(p.outputs)
    lines = [_PRELUDE if "float16" in (p.dtype, p.result_dtype) else "",
             f"struct Params {{ unsigned long long ptr[{n_ptr}]; long long n; long long shape[{p.rank}]; "
             f"long long st[{max(p.n_inputs, 1)}][{p.rank}]; }};",
             f'extern "C" __global__ void {p.name}(const Params p) {{',
             "  if (p.n < 2147483648LL) {",
             "    const unsigned int n = (unsigned int)p.n, step = gridDim.x * blockDim.x;",
             "    for (unsigned int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {",
             *_body(p, "unsigned int", half),
             "    }",
             "  } else {",
             "    const long long step = (long long)gridDim.x * blockDim.x;",
             "    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < p.n; i += step) {",
             *_body(p, "long long", half),
             "    }",
             "  }",
             "}", ""]
    return "\n".join(lines)


def _body(p: Program, index: str, half: bool) -> list[str]:
    """One element's work at index ``i`` (of C type ``index``): offsets, loads, the ops, the stores."""
    ctype = DTYPES[p.dtype]
    used = sorted({k for _, ops in p.steps for kind, k in ops if kind == "in"})
    lines = [f"      {index} rem = i;"]
    lines += [f"      long long o{k} = 0;" for k in used]
    for d in reversed(range(p.rank)):
        lines.append(f"      {{ const {index} c = rem % ({index})p.shape[{d}]; rem /= ({index})p.shape[{d}];"
                     + "".join(f" o{k} += (long long)c * p.st[{k}][{d}];" for k in used) + " }")
    for k in used:
        load = f"((const {ctype}*)p.ptr[{k}])[o{k}]"
        lines.append(f"      const float x{k} = {'ort_h2f(' + load + ')' if half else load};")
    for j, (op, operands) in enumerate(p.steps):
        args = [f"x{k}" if kind == "in" else f"t{k}" for kind, k in operands]
        expr = OPS[op].cuda.format(*args)
        # float16: every op rounds its result, as the same ops run one by one would
        lines.append(f"      const float t{j} = {'ort_h2f(ort_f2h(' + expr + '))' if half else expr};")
    out_ctype = DTYPES[p.result_dtype]
    for slot, j in enumerate(p.outputs):
        value = f"ort_f2h(t{j})" if p.result_dtype == "float16" else f"t{j}"
        lines.append(f"      (({out_ctype}*)p.ptr[{p.n_inputs + slot}])[i] = {value};")
    return lines


def broadcast_strides(shape: Sequence[int], strides: Sequence[int] | None, itemsize: int,
                      out_shape: Sequence[int]) -> list[int]:
    """Element strides to read an input of ``shape`` (byte ``strides``, None: C-contiguous) at every index of
    ``out_shape``: numpy broadcasting (aligned right, size-1 dims repeat with stride 0). Raises ValueError
    when the shapes do not broadcast."""
    shape, out_shape = tuple(shape), tuple(out_shape)
    if len(shape) > len(out_shape):
        raise ValueError(f"shape {list(shape)} has more dimensions than {list(out_shape)}")
    if strides is None:
        elem, acc = [], 1
        for d in reversed(shape):
            elem.append(acc)
            acc *= max(d, 1)
        elem.reverse()
    else:
        if any(s % itemsize for s in strides):
            raise ValueError(f"byte strides {list(strides)} are not multiples of the item size {itemsize}")
        elem = [s // itemsize for s in strides]
    pad = len(out_shape) - len(shape)
    result = [0] * pad
    for d, (size, stride) in enumerate(zip(shape, elem)):
        target = out_shape[pad + d]
        if size == target:
            result.append(stride if size != 1 else 0)
        elif size == 1:
            result.append(0)
        else:
            raise ValueError(f"shape {list(shape)} does not broadcast to {list(out_shape)}")
    return result


def pack_params(program: Program, pointers: Sequence[int], out_shape: Sequence[int],
                input_strides: Sequence[Sequence[int]]) -> np.ndarray:
    """The kernel's parameter struct as int64 words (every field is 8 bytes, so there is no padding):
    input then output pointers, the element count, the shape, then each input's element strides. A 0-d
    index space is passed as shape [1]."""
    shape = list(out_shape) or [1]
    if len(shape) != program.rank:
        raise ValueError(f"index space {list(out_shape)} has rank {len(shape)}, the kernel was made for {program.rank}")
    if len(pointers) != program.n_inputs + len(program.outputs) or len(input_strides) != program.n_inputs:
        raise ValueError("pointers or strides do not match the program's inputs and outputs")
    strides = [list(s) or [0] for s in input_strides] or [[0] * program.rank]
    n = int(np.prod(shape, dtype=np.int64))
    words = [np.uint64(p).astype(np.int64) for p in pointers]
    return np.array([*words, n, *shape, *[v for s in strides for v in s]], dtype=np.int64)


def reference(program: Program, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """What the kernel computes, with numpy: float32 arithmetic on the broadcast inputs, rounded to float16
    after every step for float16 programs (as the kernel does), stored as ``result_dtype``. One array per
    output."""
    dtype = np.dtype(program.dtype)
    xs = [np.asarray(x).astype(np.float32) for x in inputs]
    out_shape = np.broadcast_shapes(*[x.shape for x in xs]) if xs else ()
    temps: list[np.ndarray] = []
    with np.errstate(all="ignore"):
        for op, operands in program.steps:
            args = [xs[k] if kind == "in" else temps[k] for kind, k in operands]
            value = np.asarray(OPS[op].numpy(*args), dtype=np.float32)
            if dtype == np.float16:
                value = value.astype(np.float16).astype(np.float32)
            temps.append(value)
        result = np.dtype(program.result_dtype)  # a float16 store overflows to inf, as the kernel's does
        return [np.broadcast_to(temps[j], out_shape).astype(result) for j in program.outputs]


@dataclass(frozen=True)
class LaunchConfig:
    grid: int
    block: int


MAX_GRID_X = 2**31 - 1


def launch_config(n: int, sm_count: int, max_threads_per_block: int = 1024, block: int = 256,
                  blocks_per_sm: int = 8) -> LaunchConfig | None:
    """Grid and block for a grid-stride loop over ``n`` elements; None when there is nothing to do.

    The block is ``block`` threads (fewer for small ``n``, rounded up to a warp, never above the device's
    limit); the grid covers ``n`` once but stops at ``blocks_per_sm`` blocks per multiprocessor (the loop does
    the rest), which keeps every multiprocessor busy without launching blocks that would only wait."""
    if n < 0 or sm_count < 1 or max_threads_per_block < 32:
        raise ValueError(f"launch_config(n={n}, sm_count={sm_count}, max_threads_per_block={max_threads_per_block})")
    if n == 0:
        return None
    threads = min(block, max_threads_per_block, -(-n // 32) * 32)
    grid = min(-(-n // threads), sm_count * blocks_per_sm, MAX_GRID_X)
    return LaunchConfig(grid, threads)
