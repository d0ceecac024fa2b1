"""Window kernels generated as CUDA C++ for NVRTC: im2col (a 2-D convolution's input laid out for one matrix
product per image) and 2-D pooling (max, average, global average), their numpy references and parameters.

A convolution runs as im2col into a column buffer [N, C*KH*KW, OH*OW] followed by cuBLAS (the weights as a
[Cout, C*KH*KW] matrix times each image's columns: the product lands in NCHW order), so only the gather is
generated here. Each kernel takes one parameter struct of 8-byte words (``pack``): the two pointers, then the
geometry in ``Geometry`` order. Every thread handles one output element (grid-stride); the index arithmetic
runs in 32 bits when the index space allows, as in ``codegen``. Pure functions only: nothing here loads CUDA.
"""

from __future__ import annotations

import hashlib
from dataclasses import astuple, dataclass

import numpy as np

from .codegen import _PRELUDE, DTYPES

KINDS = ("Im2col", "MaxPool", "AveragePool", "AveragePoolIncludePad")


@dataclass(frozen=True)
class Geometry:
    """A 2-D window over ``planes`` (N*C for pooling, N for im2col with ``channels`` C) images of H x W."""

    planes: int
    channels: int
    h: int
    w: int
    kh: int
    kw: int
    oh: int
    ow: int
    sh: int
    sw: int
    ph: int
    pw: int
    dh: int
    dw: int

    def elements(self, kind: str) -> int:
        """Output elements (the index space): the column buffer's for im2col, the pooled tensor's otherwise."""
        if kind == "Im2col":
            return self.planes * self.channels * self.kh * self.kw * self.oh * self.ow
        return self.planes * self.channels * self.oh * self.ow


def out_size(size: int, kernel: int, stride: int, pad_begin: int, pad_end: int, dilation: int) -> int:
    """ONNX's output length along one axis (floor mode): floor((in + pads - dilated kernel) / stride) + 1."""
    return (size + pad_begin + pad_end - (dilation * (kernel - 1) + 1)) // stride + 1


@dataclass(frozen=True)
class WindowProgram:
    kind: str
    dtype: str

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"window kernel {self.kind!r} is not one of {KINDS}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype {self.dtype!r} is not one of {sorted(DTYPES)}")

    @property
    def name(self) -> str:
        return "ort_win_" + hashlib.sha256(repr((self.kind, self.dtype)).encode()).hexdigest()[:16]

    def cuda(self) -> str:
        return source(self)


FIELDS = tuple(Geometry.__dataclass_fields__)


def source(p: WindowProgram) -> str:
    half = p.dtype == "float16"
    ctype = DTYPES[p.dtype]

    def load(index: str) -> str:
        text = f"x[{index}]"
        return f"ort_h2f({text})" if half else text

    def store(value: str) -> str:
        return f"ort_f2h({value})" if half else value

    fields = " ".join(f"long long {f};" for f in FIELDS)
    lines = [_PRELUDE if half else "",
             f"struct Params {{ unsigned long long x; unsigned long long y; {fields} long long n; }};",
             "template <typename I> __device__ __forceinline__ void ort_one(const Params& p, I i) {",
             f"  const {ctype}* x = (const {ctype}*)p.x; {ctype}* y = ({ctype}*)p.y;",
             "  I rem = i;",
             "  const I ow = rem % (I)p.ow; rem /= (I)p.ow; const I oh = rem % (I)p.oh; rem /= (I)p.oh;"]
    if p.kind == "Im2col":
        # i walks the column buffer [n][c][kh][kw][oh][ow]
        lines += ["  const I kw = rem % (I)p.kw; rem /= (I)p.kw; const I kh = rem % (I)p.kh; rem /= (I)p.kh;",
                  "  const I c = rem % (I)p.channels; const I n = rem / (I)p.channels;",
                  "  const long long ih = (long long)oh * p.sh - p.ph + (long long)kh * p.dh;",
                  "  const long long iw = (long long)ow * p.sw - p.pw + (long long)kw * p.dw;",
                  "  float v = 0.0f;",
                  "  if (ih >= 0 && ih < p.h && iw >= 0 && iw < p.w) "
                  f"v = {load('(((long long)n * p.channels + c) * p.h + ih) * p.w + iw')};",
                  f"  y[i] = {store('v')};", "}"]
    else:
        # i walks the pooled tensor [plane][oh][ow]
        is_max = p.kind == "MaxPool"
        lines += ["  const long long plane = (long long)rem * p.h * p.w;",
                  "  float acc = " + ("-INFINITY" if is_max else "0.0f") + "; long long count = 0;",
                  "  for (long long kh = 0; kh < p.kh; ++kh) {",
                  "    const long long ih = (long long)oh * p.sh - p.ph + kh * p.dh;",
                  "    for (long long kw = 0; kw < p.kw; ++kw) {",
                  "      const long long iw = (long long)ow * p.sw - p.pw + kw * p.dw;",
                  "      if (ih < 0 || ih >= p.h || iw < 0 || iw >= p.w) continue;",
                  f"      const float v = {load('plane + ih * p.w + iw')};",
                  "      " + ("acc = (v > acc || v != v) ? v : acc;" if is_max else "acc += v;") + " ++count;",
                  "    }", "  }"]
        if is_max:
            lines.append(f"  y[i] = {store('acc')};")
        else:
            divisor = "(float)(p.kh * p.kw)" if p.kind == "AveragePoolIncludePad" else "(float)count"
            lines.append(f"  y[i] = {store(f'count ? acc / {divisor} : 0.0f')};")
        lines.append("}")
    lines += [f'extern "C" __global__ void {p.name}(const Params p) {{',
              "  if (p.n < 2147483648LL) {",
              "    const unsigned int n = (unsigned int)p.n, step = gridDim.x * blockDim.x;",
              "    for (unsigned int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) ort_one(p, i);",
              "  } else {",
              "    const long long step = (long long)gridDim.x * blockDim.x;",
              "    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < p.n; i += step) "
              "ort_one(p, i);",
              "  }", "}", ""]
    text = "\n".join(lines)
    return ("#define INFINITY __int_as_float(0x7f800000)\n" + text) if "INFINITY" in text else text


def pack(program: WindowProgram, x: int, y: int, g: Geometry) -> np.ndarray:
    """The parameter struct as int64 words: x, y, the geometry in ``FIELDS`` order, the element count."""
    return np.array([np.uint64(x).astype(np.int64), np.uint64(y).astype(np.int64), *astuple(g),
                     g.elements(program.kind)], dtype=np.int64)


def reference(program: WindowProgram, x: np.ndarray, g: Geometry) -> np.ndarray:
    """What the kernel writes, with numpy (float32 arithmetic): the column buffer [N, C*KH*KW, OH*OW] for
    im2col, the pooled [planes, OH, OW] otherwise."""
    xf = np.asarray(x, np.float32).reshape(g.planes * g.channels, g.h, g.w)
    shape = (xf.shape[0], g.h + 2 * g.ph + g.dh * g.kh + g.sh * g.oh, g.w + 2 * g.pw + g.dw * g.kw + g.sw * g.ow)
    pad, inside = np.zeros(shape, np.float32), np.zeros(shape, bool)
    pad[:, g.ph:g.ph + g.h, g.pw:g.pw + g.w] = xf
    inside[:, g.ph:g.ph + g.h, g.pw:g.pw + g.w] = True

    def taps(a: np.ndarray) -> np.ndarray:  # [planes, kh, kw, oh, ow]
        return np.stack([np.stack([a[:, kh * g.dh:kh * g.dh + g.sh * g.oh:g.sh, kw * g.dw:kw * g.dw + g.sw * g.ow:g.sw]
                                   for kw in range(g.kw)], 1) for kh in range(g.kh)], 1)

    values, valid = taps(pad), taps(inside)
    if program.kind == "Im2col":
        return values.reshape(g.planes, g.channels * g.kh * g.kw, g.oh * g.ow).astype(program.dtype)
    if program.kind == "MaxPool":
        out = np.where(valid, values, -np.inf).max(axis=(1, 2))
    else:
        total = np.where(valid, values, 0).sum(axis=(1, 2))
        count = g.kh * g.kw if program.kind == "AveragePoolIncludePad" else valid.sum(axis=(1, 2))
        out = total / np.maximum(count, 1)
    return out.astype(program.dtype)
