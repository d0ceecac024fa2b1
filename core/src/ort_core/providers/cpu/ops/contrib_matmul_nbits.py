"""CPU kernel for onnxruntime's com.microsoft MatMulNBits: a float matmul whose right-hand side is
a weight quantized block-wise to 2, 4 or 8 bits (the usual format of quantized LLMs).

Y = A @ W^T (+ bias) where W is the logical (N, K) weight. B holds it packed as uint8 (N, k_blocks,
blob_size): each row n is cut along K into blocks of ``block_size`` values, each block stored in
block_size * bits / 8 bytes, the first value in the lowest bits of a byte. Dequantization is
W[n, k] = (q[n, k] - zero_point[n, b]) * scale[n, b] with b = k // block_size, or b = g_idx[k] when
g_idx (act-order) is given. scales are (N, k_blocks) (or flat), of A's type; zero points are uint8
packed like B, (N, ceil(k_blocks * bits / 8)), or of A's type (N, k_blocks); absent, they are
2 ** (bits - 1). B with one or more dimensions 0 (the others normal) is an omitted projection:
Y is zeros, or the bias broadcast. A is float32, float16 or bfloat16; 16-bit types are computed in
float32 and rounded once at the end, as onnxruntime does.

B is dequantized once, at build time, when B, scales and zero points are constant initializers of
the graph the factory receives; otherwise per call. Either way the product is one np.matmul.

accuracy_level 4: onnxruntime then quantizes A to int8 (per row, in blocks of min(block_size, 256)
along K, symmetric, scale = max|a| / 127, round half to even) and multiplies integers, but only where
its prepacked int8 kernel runs: B, scales and zero points constant, no g_idx, no float zero points,
and block_size in {32, 64, 128} for 2 bits. We reproduce that by rounding A to those int8 grid values
before the float matmul under the same conditions: the quantized A is bit for bit onnxruntime's, and
the results differ only by float summation order (~1e-6 of the output's scale). Elsewhere A stays
float, as onnxruntime's fallback keeps it. The conditions mirror x86-64 MLAS (AVX2/AVX-512); other
CPUs may take a different onnxruntime path.

Beyond onnxruntime 1.32's CPU kernel, which refuses or miscomputes these, we compute the documented
semantics for: g_idx with 2- or 8-bit weights or with uint8 zero points (onnxruntime ignores the zero
points there), 8-bit weights with float zero points, and B constant while its scales or zero points
are fed (onnxruntime then prepacks B with parameters it does not have).
weight_prepacked != 0 (CUDA layouts) is refused.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from ....errors import KernelError
from ....ir.graph import Node
from ....limits import check_tensor_size
from ..registry import register

_F32 = np.float32
_FLOATS = {np.dtype(np.float32), np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)}

# block sizes for which onnxruntime's int8 (accuracy_level 4) kernel exists, per bit width (None: all)
_INT8_BLOCKS = {2: (32, 64, 128), 4: None, 8: None}
_INT8_MAX_A_BLOCK = 256  # A is quantized in blocks of at most this many values along K


def unpack_bits(packed: np.ndarray, bits: int) -> np.ndarray:
    """uint8 bytes (..., n) -> uint8 values (..., n * 8 // bits), the first value in the lowest bits."""
    if bits == 8:
        return packed
    shifts = np.arange(0, 8, bits, dtype=np.uint8)
    values = packed[..., None] >> shifts
    values &= np.uint8((1 << bits) - 1)
    return values.reshape(*packed.shape[:-1], -1)


class _Layout:
    """The attribute-given geometry of one MatMulNBits node."""

    def __init__(self, label: str, k: int, n: int, bits: int, block: int):
        self.label, self.k, self.n, self.bits, self.block = label, k, n, bits, block
        self.k_blocks = -(-k // block)
        self.blob = block * bits // 8
        self.zp_bytes = -(-self.k_blocks * bits // 8)

    def per_block(self, name: str, p: np.ndarray, width: int) -> np.ndarray:
        """A per-block parameter, (N, width) or flat (N * width), as (N, width)."""
        if p.shape not in ((self.n * width,), (self.n, width)):
            raise KernelError(f"{self.label}: '{name}' must have shape ({self.n}, {width}) or ({self.n * width},), "
                              f"got {p.shape}")
        return p.reshape(self.n, width)

    def empty_b(self, b: np.ndarray) -> bool:
        """True for an omitted projection: some of B's dimensions 0, the others as expected."""
        if b.size or b.ndim != 3:
            return False
        want = (self.n, self.k_blocks, self.blob)
        for i, (d, w) in enumerate(zip(b.shape, want)):
            if d not in (0, w):
                raise KernelError(f"{self.label}: empty B dimension {i} must be 0 or {w}, got {d}")
        return True

    def dequantize(self, b, scales, zp, g_idx) -> np.ndarray | None:
        """The float32 weight (N, K), or None when B is empty."""
        label, n, k, bits = self.label, self.n, self.k, self.bits
        if b.dtype != np.uint8:
            raise KernelError(f"{label}: B must be uint8, got {b.dtype}")
        if self.empty_b(b):
            return None
        if b.shape != (n, self.k_blocks, self.blob):
            raise KernelError(f"{label}: B must have shape ({n}, {self.k_blocks}, {self.blob}) for K={k}, N={n}, "
                              f"bits={bits}, block_size={self.block}, got {b.shape}")
        if scales.dtype not in _FLOATS:
            raise KernelError(f"{label}: scales must be float, float16 or bfloat16, got {scales.dtype}")
        s = self.per_block("scales", scales, self.k_blocks).astype(_F32)
        z = self._zero_points(zp, scales.dtype)
        q = unpack_bits(b.reshape(n, -1), bits)  # (N, k_blocks * block_size)
        if g_idx is None:
            check_tensor_size(label, (n, q.shape[1]), _F32, "dequantized weight")
            w = q.reshape(n, self.k_blocks, self.block).astype(_F32)
            _apply(w, s[..., None], None if z is None else z[..., None], zp)
            return w.reshape(n, -1)[:, :k]
        blocks = self._group_index(g_idx)
        check_tensor_size(label, (n, k), _F32, "dequantized weight")
        w = q[:, :k].astype(_F32)
        _apply(w, s[:, blocks], None if z is None else z[:, blocks], zp)
        return w

    def _zero_points(self, zp, float_type) -> np.ndarray:
        """Zero points as float32 (N, k_blocks)."""
        if zp is None:
            return np.full((self.n, self.k_blocks), 1 << (self.bits - 1), _F32)
        if zp.dtype == np.uint8:
            packed = self.per_block("zero_points", zp, self.zp_bytes)
            return unpack_bits(packed, self.bits)[:, :self.k_blocks].astype(_F32)
        if zp.dtype != float_type:
            raise KernelError(f"{self.label}: zero_points must be uint8 or the scales' type {float_type}, "
                              f"got {zp.dtype}")
        return self.per_block("zero_points", zp, self.k_blocks).astype(_F32)

    def _group_index(self, g_idx: np.ndarray) -> np.ndarray:
        if g_idx.dtype != np.int32:
            raise KernelError(f"{self.label}: g_idx must be int32, got {g_idx.dtype}")
        if g_idx.shape not in ((self.k,), (self.k_blocks * self.block,)):
            raise KernelError(f"{self.label}: g_idx must have shape ({self.k},) or ({self.k_blocks * self.block},), "
                              f"got {g_idx.shape}")
        if g_idx.size and (g_idx.min() < 0 or g_idx.max() >= self.k_blocks):
            raise KernelError(f"{self.label}: g_idx values must lie in [0, {self.k_blocks}), got "
                              f"[{g_idx.min()}, {g_idx.max()}]")
        return g_idx[:self.k]


def _apply(w: np.ndarray, s: np.ndarray, z, zp) -> None:
    """w = (w - z) * s in place; float zero points as w * s - s * z, the order onnxruntime uses."""
    if zp is not None and zp.dtype != np.uint8:
        w *= s
        w -= s * z
        return
    w -= z
    w *= s


def int8_round_trip(x: np.ndarray, block: int) -> np.ndarray:
    """float32 (M, K) rounded to onnxruntime's int8 grid for accuracy_level 4: per row and block of
    ``block`` values along K, q = rint(a * (127 / max|a|)), back as q * (max|a| / 127)."""
    m, k = x.shape
    nb = -(-k // block)
    if nb * block != k:
        padded = np.zeros((m, nb * block), _F32)
        padded[:, :k] = x
        x = padded
    v = x.reshape(m, nb, block)
    amax = np.max(np.abs(v), axis=-1, keepdims=True)
    inv = np.zeros_like(amax)
    np.divide(_F32(127), amax, out=inv, where=amax != 0)
    q = v * inv
    np.rint(q, out=q)
    q *= amax / _F32(127)
    return q.reshape(m, -1)[:, :k]


def constant_inputs(node: Node, graph, positions) -> list | None:
    """The node's inputs at ``positions`` as arrays (None where omitted) when every given one is a
    constant initializer of ``graph``; None otherwise (or without a graph)."""
    if graph is None:
        return None
    consts = graph.constant_initializers()
    names = [node.inputs[i] if i < len(node.inputs) else "" for i in positions]
    if not names[0] or any(name and name not in consts for name in names):
        return None
    return [consts[name] if name else None for name in names]


@register("MatMulNBits", since=1, domain="com.microsoft")
def _matmul_nbits(node: Node, opset: int, graph=None):
    label = node.label
    if any(node.attr(name) is None for name in ("K", "N", "block_size")):
        raise KernelError(f"{label}: attributes K, N and block_size are required")
    k, n, block = (int(node.attr(name)) for name in ("K", "N", "block_size"))
    bits = int(node.attr("bits", 4))
    level = int(node.attr("accuracy_level", 0))
    if bits not in (2, 4, 8):
        raise KernelError(f"{label}: bits={bits} is not supported (2, 4 or 8)")
    if block < 16 or block & (block - 1):
        raise KernelError(f"{label}: block_size must be a power of 2 and >= 16, got {block}")
    if bits == 2 and block > 256:
        raise KernelError(f"{label}: 2-bit weights need block_size <= 256, got {block}")
    if k <= 0 or n <= 0:
        raise KernelError(f"{label}: K and N must be positive, got K={k}, N={n}")
    prepacked = int(node.attr("weight_prepacked", 0))
    if prepacked:
        raise KernelError(f"{label}: weight_prepacked={prepacked} (a CUDA weight layout) is not supported")
    lay = _Layout(label, k, n, bits, block)

    weight, a_block = None, 0
    consts = constant_inputs(node, graph, (1, 2, 3, 4))
    if consts is not None:
        b, scales, zp, g_idx = consts
        weight = lay.dequantize(b, scales, zp, g_idx)
        if weight is not None:
            weight.flags.writeable = False
        int8_blocks = _INT8_BLOCKS[bits]
        if (level == 4 and g_idx is None and (zp is None or zp.dtype == np.uint8)
                and (int8_blocks is None or block in int8_blocks)):
            a_block = min(block, _INT8_MAX_A_BLOCK)
    built = consts is not None

    def kernel(a, b, scales, zero_points=None, g_idx=None, bias=None):
        if a.dtype not in _FLOATS:
            raise KernelError(f"{label}: A must be float, float16 or bfloat16, got {a.dtype}")
        if scales.dtype != a.dtype:
            raise KernelError(f"{label}: scales have type {scales.dtype}, A has {a.dtype}")
        if a.ndim == 0 or a.shape[-1] != k:
            raise KernelError(f"{label}: A's last dimension must be K={k}, got shape {a.shape}")
        if bias is not None and (bias.shape != (n,) or bias.dtype != a.dtype):
            raise KernelError(f"{label}: bias must be ({n},) of A's type {a.dtype}, got {bias.shape} {bias.dtype}")
        w = weight if built else lay.dequantize(b, scales, zero_points, g_idx)
        out_shape = a.shape[:-1] + (n,)
        if w is None:  # omitted projection
            check_tensor_size(label, out_shape, a.dtype)
            y = np.zeros(out_shape, _F32)
        else:
            x = a.reshape(-1, k).astype(_F32, copy=False)
            if a_block:
                x = int8_round_trip(x, a_block)
            y = np.matmul(x, w.T).reshape(out_shape)
        if bias is not None:
            y += bias.astype(_F32, copy=False)
        return (y.astype(a.dtype, copy=False),)

    return kernel
