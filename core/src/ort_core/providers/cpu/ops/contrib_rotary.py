"""CPU kernel for onnxruntime's RotaryEmbedding contrib op (domain com.microsoft), and ``rotate``, the pairwise
rotation that GroupQueryAttention (contrib_gqa.py) shares; the ONNX RotaryEmbedding-23 (rotary.py) could use it too.

RotaryEmbedding(input, position_ids, cos_cache, sin_cache): input is (B, S, hidden) with heads of size
hidden / num_heads (num_heads inferred as hidden / (2 * cos_cache.shape[1]) when 0) or (B, N, S, H). The first
rotary_embedding_dim channels of every head (all of them by default) are turned pair by pair, the pairs being
(i, i + dim/2) or, with ``interleaved``, (2i, 2i + 1): (a, b) -> (a cos - b sin, a sin + b cos), with the angle
of the token's position. position_ids is (B, S), or a single offset p that gives token s the position p + s.
The caches are (max_position, dim / 2); like onnxruntime, a cache row is read at position * (dim / 2) of the
flattened cache, which matters when the cache is head_size / 2 wide but the rotary dim is smaller. ``scale``
only matters for regenerating caches, which onnxruntime does not do on CPU (S > max_position is refused
unless ``is_packed_batching``). float32 and float16 (computed in float32, rounded once), as onnxruntime's CPU.
"""

from __future__ import annotations

import numpy as np

from ....errors import KernelError
from ..registry import register

DOMAIN = "com.microsoft"
_F32 = np.dtype(np.float32)
FLOATS = (np.dtype(np.float32), np.dtype(np.float16))


def rotate(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, interleaved: bool) -> np.ndarray:
    """x (..., D) with its first 2 * cos.shape[-1] channels rotated pairwise, as a new array of x's dtype.

    cos and sin broadcast against x[..., :rot // 2]; pairs are (i, i + rot/2), or (2i, 2i + 1) when interleaved.
    The channels past the rotary dim are copied. 16-bit floats are computed in float32 and rounded once."""
    half = cos.shape[-1]
    rot = 2 * half
    ct = _F32 if x.dtype.itemsize < 4 else x.dtype
    out = x.copy()
    head = x[..., :rot].astype(ct, copy=False)
    x1, x2 = (head[..., 0::2], head[..., 1::2]) if interleaved else (head[..., :half], head[..., half:])
    c, s = cos.astype(ct, copy=False), sin.astype(ct, copy=False)
    real, imag = x1 * c, x1 * s
    real -= x2 * s
    imag += x2 * c
    if interleaved:
        out[..., 0:rot:2], out[..., 1:rot:2] = real, imag
    else:
        out[..., :half], out[..., half:rot] = real, imag
    return out


def cache_rows(cache: np.ndarray, half: int) -> np.ndarray:
    """The (rows, half) table that onnxruntime indexes by position: row p starts at p * half of the flattened
    cache, which is the cache itself when its rows are ``half`` wide."""
    if cache.shape[1] == half:
        return cache
    flat = cache.reshape(-1)
    return flat[: flat.size // half * half].reshape(-1, half)


def _flag(node, name: str, default: int = 0) -> bool:
    value = int(node.attr(name, default))
    if value not in (0, 1):
        raise KernelError(f"{node.label}: attribute {name} must be 0 or 1, got {value}")
    return bool(value)


@register("RotaryEmbedding", since=1, domain=DOMAIN)
def rotary_embedding_factory(node, opset):
    label = node.label
    interleaved = _flag(node, "interleaved")
    packed_batching = _flag(node, "is_packed_batching")
    num_heads = int(node.attr("num_heads", 0))
    rot_attr = int(node.attr("rotary_embedding_dim", 0))
    if num_heads < 0 or rot_attr < 0:
        raise KernelError(f"{label}: num_heads and rotary_embedding_dim must be >= 0, got {num_heads} and {rot_attr}")
    if rot_attr and not num_heads:
        raise KernelError(f"{label}: num_heads must be given with rotary_embedding_dim")
    if rot_attr % 2:
        raise KernelError(f"{label}: rotary_embedding_dim must be even, got {rot_attr}")

    def kernel(x, position_ids, cos_cache, sin_cache):
        if x.dtype not in FLOATS:
            raise KernelError(f"{label}: input must be float32 or float16 (onnxruntime's CPU kernels), got {x.dtype}")
        if cos_cache.dtype != x.dtype or sin_cache.dtype != x.dtype:
            raise KernelError(f"{label}: cos_cache/sin_cache must have the input's type {x.dtype}, got "
                              f"{cos_cache.dtype}/{sin_cache.dtype}")
        if cos_cache.ndim != 2 or cos_cache.shape != sin_cache.shape:
            raise KernelError(f"{label}: cos_cache and sin_cache must be 2-D and of one shape, got {cos_cache.shape} "
                              f"and {sin_cache.shape}")
        if position_ids.dtype.kind not in "iu":
            raise KernelError(f"{label}: position_ids must be int64, got {position_ids.dtype}")
        max_pos, width = cos_cache.shape
        if x.ndim == 4:  # (B, N, S, H): the caches broadcast over heads
            b, _, s, head = x.shape
            xv, head_axis = x, 1
        elif x.ndim == 3:
            b, s, hidden = x.shape
            head = hidden // num_heads if num_heads else 2 * width
            if head == 0 or hidden % head or (num_heads and hidden % num_heads):
                raise KernelError(f"{label}: hidden size {hidden} does not split into heads (num_heads={num_heads}, "
                                  f"cos_cache width {width})")
            xv, head_axis = x.reshape(b, s, hidden // head, head), 2
        else:
            raise KernelError(f"{label}: input must be 3-D (B, S, hidden) or 4-D (B, N, S, H), got shape {x.shape}")
        rot = rot_attr or head
        if rot > head:
            raise KernelError(f"{label}: rotary_embedding_dim {rot} exceeds the head size {head}")
        if width != head // 2 and not (rot_attr and width == rot // 2):
            raise KernelError(f"{label}: cos_cache width {width} must be head_size / 2 ({head // 2}) or "
                              f"rotary_embedding_dim / 2")
        if s > max_pos and not packed_batching:
            raise KernelError(f"{label}: sequence length {s} exceeds the caches' {max_pos} positions (regenerating "
                              f"the caches is not implemented, as in onnxruntime)")
        pos = positions(label, position_ids, b, s, max_pos)
        half = rot // 2
        cos = np.expand_dims(cache_rows(cos_cache, half)[pos], head_axis)
        sin = np.expand_dims(cache_rows(sin_cache, half)[pos], head_axis)
        return (rotate(xv, cos, sin, interleaved).reshape(x.shape),)

    return kernel


def positions(label: str, position_ids: np.ndarray, b: int, s: int, max_pos: int) -> np.ndarray:
    """(B, S) or (1, S) positions from position_ids: (B, S) as given, or one offset p giving p .. p + S - 1;
    every position must index the caches' max_pos rows."""
    if position_ids.size == 1 and position_ids.ndim <= 1:
        base = int(position_ids.reshape(-1)[0])
        if base < 0 or base > max_pos - s:
            raise KernelError(f"{label}: position offset {base} with sequence length {s} leaves the caches' "
                              f"{max_pos} positions")
        return (base + np.arange(s, dtype=np.int64)).reshape(1, s)
    if position_ids.shape != (b, s):
        raise KernelError(f"{label}: position_ids must be a single offset or of shape ({b}, {s}), got "
                          f"{position_ids.shape}")
    if position_ids.size and (position_ids.min() < 0 or position_ids.max() >= max_pos):
        raise KernelError(f"{label}: position_ids must lie in [0, {max_pos}), got [{position_ids.min()}, "
                          f"{position_ids.max()}]")
    return position_ids
