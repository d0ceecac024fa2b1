"""Row kernels generated as CUDA C++ for NVRTC: Softmax, LayerNormalization and SkipLayerNormalization over the
last axis, and the reductions (ReduceSum, ReduceMean, ReduceMax, ReduceMin) of trailing axes, one value per
row (each row of ``cols`` elements is one block's work), their numpy references and launch layout.

A ``RowProgram`` names the op, the dtype and which optional inputs it reads; the kernel takes one parameter
struct of 8-byte words (``pack``): the input pointers in ``RowProgram.inputs`` order, the output pointer(s), the
row count, the row length and epsilon (as a double). Each block walks rows (grid-stride) with its threads
striding over the row; sums and maxima are reduced within warps by shuffles and across warps in shared
memory. Arithmetic is float32 (float16 storage is converted on load and rounded on store). Pure functions
only: nothing here loads CUDA.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from .codegen import _PRELUDE, DTYPES, LaunchConfig

REDUCTIONS = ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin")
KINDS = ("Softmax", "LayerNormalization", "SkipLayerNormalization", *REDUCTIONS)
OPTIONAL = {"Softmax": (), "LayerNormalization": ("beta",),
            "SkipLayerNormalization": ("beta", "bias"), **{op: () for op in REDUCTIONS}}
"""Per op, the inputs beyond its required ones that a program may read (present or not is in the name)."""
REQUIRED = {"Softmax": ("x",), "LayerNormalization": ("x", "gamma"), "SkipLayerNormalization": ("x", "skip", "gamma"),
            **{op: ("x",) for op in REDUCTIONS}}


@dataclass(frozen=True)
class RowProgram:
    op: str
    dtype: str
    present: tuple[str, ...] = ()  # the optional inputs it reads
    with_sum: bool = False  # SkipLayerNormalization also writes input + skip (+ bias), its 4th output

    def __post_init__(self) -> None:
        if self.op not in KINDS:
            raise ValueError(f"row op {self.op!r} is not one of {KINDS}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype {self.dtype!r} is not one of {sorted(DTYPES)}")
        if any(p not in OPTIONAL[self.op] for p in self.present):
            raise ValueError(f"{self.op} takes no optional input among {self.present}")
        if self.with_sum and self.op != "SkipLayerNormalization":
            raise ValueError(f"{self.op} has no summed output")

    @property
    def inputs(self) -> tuple[str, ...]:
        """The pointers the kernel reads, in parameter order."""
        return REQUIRED[self.op] + tuple(p for p in OPTIONAL[self.op] if p in self.present)

    @property
    def name(self) -> str:
        text = repr((self.op, self.dtype, self.present, self.with_sum))
        return "ort_row_" + hashlib.sha256(text.encode()).hexdigest()[:16]

    def cuda(self) -> str:
        return source(self)

    @property
    def reduces(self) -> bool:
        """Whether the kernel writes one value per row (a reduction) rather than a row per row."""
        return self.op in REDUCTIONS


_REDUCE = r"""
__device__ __forceinline__ float ort_warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float ort_warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// every thread of the block gets the result; ``scratch`` holds 32 floats, free again on return
__device__ float ort_block_reduce(float v, float* scratch, bool is_max) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  v = is_max ? ort_warp_max(v) : ort_warp_sum(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : (is_max ? -INFINITY : 0.0f);
  return is_max ? ort_warp_max(v) : ort_warp_sum(v);
}
// the larger of two values, NaN when either is (as numpy's maximum): ReduceMax and ReduceMin propagate NaN
__device__ __forceinline__ float ort_nanmax(float a, float b) { return (a != a || a > b) ? a : b; }
__device__ float ort_block_nanmax(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  for (int o = 16; o > 0; o >>= 1) v = ort_nanmax(v, __shfl_xor_sync(0xffffffffu, v, o));
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : -INFINITY;
  for (int o = 16; o > 0; o >>= 1) v = ort_nanmax(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
"""


def source(p: RowProgram) -> str:
    half = p.dtype == "float16"
    ctype = DTYPES[p.dtype]
    names = p.inputs

    def load(name: str, index: str) -> str:
        text = f"(({ctype} const*)p.{name})[{index}]"
        return f"ort_h2f({text})" if half else text

    def store(value: str) -> str:
        return f"ort_f2h({value})" if half else value

    fields = " ".join(f"unsigned long long {n};" for n in names) + " unsigned long long y;"
    if p.with_sum:
        fields += " unsigned long long sum;"
    rounding = "__device__ __forceinline__ float ort_r(float v) { return ort_h2f(ort_f2h(v)); }"
    lines = [_PRELUDE + rounding if half else "", "#define INFINITY __int_as_float(0x7f800000)", _REDUCE,
             f"struct Params {{ {fields} long long rows; long long cols; double eps; }};",
             f'extern "C" __global__ void {p.name}(const Params p) {{',
             "  __shared__ float scratch[32];",
             "  const long long cols = p.cols;",
             "  for (long long row = blockIdx.x; row < p.rows; row += gridDim.x) {",
             "    const long long base = row * cols;",
             f"    {ctype}* y = ({ctype}*)p.y + {'row' if p.reduces else 'base'};"]
    if p.reduces:
        x = load("x", "base + c")
        if p.op in ("ReduceSum", "ReduceMean"):
            total = "s / (float)cols" if p.op == "ReduceMean" else "s"
            lines += ["    float s = 0.0f;",
                      f"    for (long long c = threadIdx.x; c < cols; c += blockDim.x) s += {x};",
                      "    s = ort_block_reduce(s, scratch, false);",
                      f"    if (threadIdx.x == 0) y[0] = {store(total)};"]
        else:  # the minimum as the negated maximum of the negated values
            sign = "-" if p.op == "ReduceMin" else ""
            lines += ["    float m = -INFINITY;",
                      f"    for (long long c = threadIdx.x; c < cols; c += blockDim.x) m = ort_nanmax(m, {sign}{x});",
                      "    m = ort_block_nanmax(m, scratch);",
                      f"    if (threadIdx.x == 0) y[0] = {store(sign + 'm')};"]
    elif p.op == "Softmax":
        x = load("x", "base + c")
        # float16: each step rounds as the CPU provider's float16 arithmetic does (x - max, exp, the sum, the
        # quotient); the sum itself is accumulated in float32
        e = f"ort_r(expf(ort_r({x} - m)))" if half else f"expf({x} - m)"
        lines += ["    float m = -INFINITY;",
                  f"    for (long long c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, {x});",
                  "    m = ort_block_reduce(m, scratch, true);",
                  "    float s = 0.0f;",
                  f"    for (long long c = threadIdx.x; c < cols; c += blockDim.x) s += {e};",
                  "    s = ort_block_reduce(s, scratch, false);" + (" s = ort_r(s);" if half else ""),
                  f"    for (long long c = threadIdx.x; c < cols; c += blockDim.x) y[c] = {store(f'{e} / s')};"]
    else:
        v = load("x", "base + c")
        if p.op == "SkipLayerNormalization":
            skip = load("skip", "base + c")
            v = f"({v} + {skip}" + (" + " + load("bias", "c") + ")" if "bias" in names else ")")
        beta = " + " + load("beta", "c") if "beta" in names else ""
        gamma = load("gamma", "c")
        normed = store(f"({v} - mean) * inv * {gamma}{beta}")
        lines += ["    float s = 0.0f;",
                  f"    for (long long c = threadIdx.x; c < cols; c += blockDim.x) s += {v};",
                  "    const float mean = ort_block_reduce(s, scratch, false) / (float)cols;",
                  "    float ss = 0.0f;",
                  f"    for (long long c = threadIdx.x; c < cols; c += blockDim.x) {{ const float d = {v} - mean; "
                  "ss += d * d; }",
                  "    const float inv = rsqrtf(ort_block_reduce(ss, scratch, false) / (float)cols + (float)p.eps);",
                  f"    for (long long c = threadIdx.x; c < cols; c += blockDim.x) {{ y[c] = {normed};"
                  + (f" (({ctype}*)p.sum)[base + c] = {store(v)};" if p.with_sum else "") + " }"]
    lines += ["  }", "}", ""]
    return "\n".join(lines)


def pack(program: RowProgram, pointers: dict[str, int], y: int, rows: int, cols: int, eps: float,
         total: int | None = None) -> np.ndarray:
    """The parameter struct as int64 words: ``program.inputs`` pointers, y, the sum output (``total``, with
    ``with_sum``), rows, cols, eps (a double's bits)."""
    missing = [n for n in program.inputs if n not in pointers]
    if missing:
        raise ValueError(f"{program.op}: no pointer for {missing}")
    if program.with_sum != (total is not None):
        raise ValueError(f"{program.op}: the summed output's pointer is {'missing' if program.with_sum else 'extra'}")
    outs = [y] + ([total] if total is not None else [])
    words = [np.uint64(a).astype(np.int64) for a in [pointers[n] for n in program.inputs] + outs]
    return np.array([*words, rows, cols, np.float64(eps).view(np.int64)], dtype=np.int64)


def launch_config(rows: int, cols: int, sm_count: int, max_threads_per_block: int = 1024,
                  blocks_per_sm: int = 8) -> LaunchConfig | None:
    """A block per row (grid-stride past ``blocks_per_sm`` per multiprocessor), threads for the row's length
    rounded up to a warp, at most 256 (longer rows loop); None when there is nothing to do."""
    if rows < 0 or cols < 0 or sm_count < 1 or max_threads_per_block < 32:
        raise ValueError(f"launch_config(rows={rows}, cols={cols}, sm_count={sm_count})")
    if rows == 0 or cols == 0:
        return None
    block = min(256, max_threads_per_block, -(-cols // 32) * 32)
    return LaunchConfig(min(rows, sm_count * blocks_per_sm, 2**31 - 1), block)


def reference(program: RowProgram, arrays: dict[str, np.ndarray], eps: float = 1e-5) -> np.ndarray:
    """What the kernel computes, with numpy in float32 (float16 inputs converted, the result rounded); the summed
    output of SkipLayerNormalization is ``summed``."""
    a = {k: np.asarray(v).astype(np.float32) for k, v in arrays.items()}
    x = a["x"]
    if program.reduces:  # one value per row: the last axis reduced
        with np.errstate(invalid="ignore"):
            if program.op in ("ReduceMax", "ReduceMin"):
                pick = np.max if program.op == "ReduceMax" else np.min
                out = pick(x, axis=-1, initial=-np.inf if program.op == "ReduceMax" else np.inf)
            else:
                out = x.sum(axis=-1) / (np.float32(x.shape[-1]) if program.op == "ReduceMean" else np.float32(1))
        return out.astype(program.dtype)
    if program.op == "Softmax":
        if program.dtype == "float16":  # rounded step by step, the sum accumulated in float32
            def r(v):
                return v.astype(np.float16).astype(np.float32)
            e = r(np.exp(r(x - x.max(axis=-1, keepdims=True))))
            out = e / r(e.sum(axis=-1, keepdims=True))
        else:
            e = np.exp(x - x.max(axis=-1, keepdims=True))
            out = e / e.sum(axis=-1, keepdims=True)
    else:
        if program.op == "SkipLayerNormalization":
            x = x + a["skip"] + (a["bias"] if "bias" in a else 0)
        mean = x.mean(axis=-1, keepdims=True)
        var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
        out = (x - mean) / np.sqrt(var + np.float32(eps)) * a["gamma"] + (a["beta"] if "beta" in a else 0)
    return out.astype(program.dtype)


def summed(arrays: dict[str, np.ndarray], dtype: str) -> np.ndarray:
    """SkipLayerNormalization's 4th output as the kernel computes it: input + skip (+ bias) in float32."""
    a = {k: np.asarray(v).astype(np.float32) for k, v in arrays.items()}
    return (a["x"] + a["skip"] + (a["bias"] if "bias" in a else 0)).astype(dtype)
