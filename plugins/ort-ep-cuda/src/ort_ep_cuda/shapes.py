"""Shape arithmetic for MatMul, Gemm and the view ops, as pure functions the CPU tests check against numpy.

``matmul_calls`` and ``gemm_call`` turn row-major operands into cuBLAS's column-major strided-batched calls
(C = A @ B is computed as C^T = B^T @ A^T, so cuBLAS's A is the right operand); ``emulate`` runs such calls with
numpy exactly as cuBLAS defines them. ``reshape_shape`` and friends give the output shapes of the view ops.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

INT32_MAX = 2**31 - 1


@dataclass(frozen=True)
class GemmCall:
    """One cublasGemmStridedBatchedEx call in cuBLAS's terms (column-major), with element offsets into the
    buffers passed as its A, B and C."""

    trans_a: bool
    trans_b: bool
    m: int
    n: int
    k: int
    lda: int
    ldb: int
    ldc: int
    a_offset: int
    b_offset: int
    c_offset: int
    stride_a: int
    stride_b: int
    stride_c: int
    count: int


def _check_int32(**sizes: int) -> None:
    for name, v in sizes.items():
        if v > INT32_MAX:
            raise ValueError(f"{name}={v} exceeds cuBLAS's 32-bit limit")


def matmul_shape(a: Sequence[int], b: Sequence[int]) -> tuple[int, ...]:
    """numpy.matmul's result shape (ONNX MatMul); ValueError for rank 0 or mismatched inner dimensions."""
    a, b = tuple(a), tuple(b)
    if not a or not b:
        raise ValueError(f"MatMul needs inputs of rank >= 1, got shapes {list(a)} and {list(b)}")
    a2 = a if len(a) > 1 else (1, *a)
    b2 = b if len(b) > 1 else (*b, 1)
    if a2[-1] != b2[-2]:
        raise ValueError(f"MatMul inner dimensions differ: {list(a)} x {list(b)}")
    batch = np.broadcast_shapes(a2[:-2], b2[:-2])
    return (*batch, *((a2[-2],) if len(a) > 1 else ()), *((b2[-1],) if len(b) > 1 else ()))


def matmul_calls(a: Sequence[int], b: Sequence[int]) -> list[GemmCall]:
    """The calls computing row-major ``a @ b`` (numpy broadcasting of the batch dimensions) into a C-contiguous
    result of ``matmul_shape(a, b)``; cuBLAS's A is ``b``, its B is ``a``. One call per index of the leading
    batch dimensions that cannot be folded into one strided batch (broadcast in one operand only)."""
    out = matmul_shape(a, b)
    a2 = tuple(a) if len(a) > 1 else (1, *a)
    b2 = tuple(b) if len(b) > 1 else (*b, 1)
    m, k, n = a2[-2], a2[-1], b2[-1]
    if m == 0 or n == 0 or not all(out):
        return []
    batch = tuple(np.broadcast_shapes(a2[:-2], b2[:-2]))
    pa = (1,) * (len(batch) - len(a2) + 2) + a2[:-2]
    pb = (1,) * (len(batch) - len(b2) + 2) + b2[:-2]

    def strides(dims: tuple[int, ...], matrix: int) -> list[int]:
        out_s, acc = [], matrix
        for d in reversed(dims):
            out_s.append(acc)
            acc *= d
        return list(reversed(out_s))

    sa = [0 if pa[d] == 1 else s for d, s in enumerate(strides(pa, m * k))]
    sb = [0 if pb[d] == 1 else s for d, s in enumerate(strides(pb, k * n))]
    sc = strides(batch, m * n)
    split = next(s for s in range(len(batch) + 1)
                 if all(p[s:] == batch[s:] or all(d == 1 for d in p[s:]) for p in (pa, pb)))
    count = int(np.prod(batch[split:], dtype=np.int64))
    stride_a = m * k if pa[split:] == batch[split:] and count > 1 else 0
    stride_b = k * n if pb[split:] == batch[split:] and count > 1 else 0
    _check_int32(m=m, n=n, k=k, count=count)
    calls = []
    for idx in np.ndindex(*batch[:split]):
        off_a = sum(i * s for i, s in zip(idx, sa))
        off_b = sum(i * s for i, s in zip(idx, sb))
        off_c = sum(i * s for i, s in zip(idx, sc))
        calls.append(GemmCall(False, False, n, m, k, n, k, n, off_b, off_a, off_c, stride_b, stride_a, m * n, count))
    return calls


def gemm_shape(a: Sequence[int], b: Sequence[int], trans_a: bool, trans_b: bool) -> tuple[int, int, int]:
    """(M, N, K) of ONNX Gemm for 2-D ``a`` and ``b``; ValueError when they do not fit."""
    if len(a) != 2 or len(b) != 2:
        raise ValueError(f"Gemm needs 2-D A and B, got shapes {list(a)} and {list(b)}")
    m, k = (a[1], a[0]) if trans_a else (a[0], a[1])
    k2, n = (b[1], b[0]) if trans_b else (b[0], b[1])
    if k != k2:
        raise ValueError(f"Gemm inner dimensions differ: A {list(a)} (transA={int(trans_a)}) and B {list(b)} "
                         f"(transB={int(trans_b)})")
    return m, n, k


def gemm_call(m: int, n: int, k: int, trans_a: bool, trans_b: bool) -> GemmCall:
    """The call computing row-major Y (M x N) = op(A) @ op(B): cuBLAS's A is ONNX's B, its B is ONNX's A."""
    _check_int32(m=m, n=n, k=k)
    return GemmCall(trans_b, trans_a, n, m, k, k if trans_b else n, m if trans_a else k, n, 0, 0, 0, 0, 0, 0, 1)


def emulate(call: GemmCall, a: np.ndarray, b: np.ndarray, c: np.ndarray, alpha: float = 1.0,
            beta: float = 0.0) -> None:
    """Run ``call`` on flat arrays with numpy, as cuBLAS defines it (column-major, lda/ldb/ldc, strides)."""
    for t in range(call.count):
        ao = call.a_offset + t * call.stride_a
        bo = call.b_offset + t * call.stride_b
        co = call.c_offset + t * call.stride_c
        rows_a, cols_a = (call.k, call.m) if call.trans_a else (call.m, call.k)
        rows_b, cols_b = (call.n, call.k) if call.trans_b else (call.k, call.n)
        A = np.array([[a[ao + i + j * call.lda] for j in range(cols_a)] for i in range(rows_a)]).reshape(rows_a, cols_a)
        B = np.array([[b[bo + i + j * call.ldb] for j in range(cols_b)] for i in range(rows_b)]).reshape(rows_b, cols_b)
        A = A.T if call.trans_a else A
        B = B.T if call.trans_b else B
        result = alpha * (A.astype(np.float64) @ B.astype(np.float64))
        for i in range(call.m):
            for j in range(call.n):
                at = co + i + j * call.ldc
                c[at] = result[i, j] + (beta * c[at] if beta else 0.0)


def reshape_shape(shape: Sequence[int], target: Sequence[int], allowzero: bool = False) -> tuple[int, ...]:
    """ONNX Reshape's output shape: 0 copies the input's dimension (unless ``allowzero``), -1 is inferred."""
    shape, target = tuple(int(d) for d in shape), [int(d) for d in target]
    size = int(np.prod(shape, dtype=np.int64))
    out = []
    for i, d in enumerate(target):
        if d == 0 and not allowzero:
            if i >= len(shape):
                raise ValueError(f"Reshape: 0 at position {i} has no input dimension to copy ({list(shape)})")
            d = shape[i]
        elif d < -1:
            raise ValueError(f"Reshape: invalid dimension {d} in {target}")
        out.append(d)
    if out.count(-1) > 1:
        raise ValueError(f"Reshape: more than one -1 in {target}")
    if -1 in out:
        known = int(np.prod([d for d in out if d != -1], dtype=np.int64))
        if known == 0 or size % known:
            raise ValueError(f"Reshape: cannot infer -1 reshaping {list(shape)} to {target}")
        out[out.index(-1)] = size // known
    if int(np.prod(out, dtype=np.int64)) != size:
        raise ValueError(f"Reshape: cannot reshape {list(shape)} ({size} elements) to {target}")
    return tuple(out)


def _axes(axes: Sequence[int], rank: int, op: str) -> list[int]:
    norm = [a + rank if a < 0 else a for a in (int(x) for x in axes)]
    if any(not 0 <= a < rank for a in norm) or len(set(norm)) != len(norm):
        raise ValueError(f"{op}: axes {list(axes)} are out of range or repeated for rank {rank}")
    return norm


def squeeze_shape(shape: Sequence[int], axes: Sequence[int] | None) -> tuple[int, ...]:
    shape = tuple(shape)
    if axes is None:
        return tuple(d for d in shape if d != 1)
    drop = _axes(axes, len(shape), "Squeeze")
    if any(shape[a] != 1 for a in drop):
        raise ValueError(f"Squeeze: axes {list(axes)} of shape {list(shape)} are not all 1")
    return tuple(d for i, d in enumerate(shape) if i not in drop)


def unsqueeze_shape(shape: Sequence[int], axes: Sequence[int]) -> tuple[int, ...]:
    rank = len(shape) + len(axes)
    insert = _axes(axes, rank, "Unsqueeze")
    it = iter(shape)
    return tuple(1 if i in insert else next(it) for i in range(rank))


def flatten_shape(shape: Sequence[int], axis: int) -> tuple[int, int]:
    rank = len(shape)
    if not -rank <= axis <= rank:
        raise ValueError(f"Flatten: axis {axis} is out of range for rank {rank}")
    axis = axis + rank if axis < 0 else axis
    return int(np.prod(shape[:axis], dtype=np.int64)), int(np.prod(shape[axis:], dtype=np.int64))
