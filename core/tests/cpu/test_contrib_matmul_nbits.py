"""com.microsoft MatMulNBits against onnxruntime 1.32 and an independent numpy dequantization.

Tolerances: float32 outputs at rtol = atol = 1e-5 (float32 summation order only: onnxruntime's MLAS
kernels and BLAS add the K products in different orders); float16/bfloat16 outputs at 1e-3, one
float16 ulp (both round the same float32 result once, which may straddle a rounding boundary).
accuracy_level 4 with constant weights, where onnxruntime quantizes A to int8: we round A to the same
int8 grid bit for bit, so only the summation order differs again and the same 1e-5 holds, relative to
the output's largest value; the test also checks that skipping that rounding would miss by > 1e-3."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest

from ort_core.errors import KernelError
from ort_core.ir.graph import Node
from ort_core.providers.cpu.ops.contrib_matmul_nbits import unpack_bits
from ort_core.providers.cpu.registry import lookup

from .kernel_harness import check_onnxruntime, run_ours
from .test_contrib_quant_matmul import run_sessions

MS = "com.microsoft"


def quantized(rng, bits, block, k, n, zp="uint8", dtype=np.float32):
    """Random B (N, k_blocks, blob), scales and zero points of the given kind."""
    kb = -(-k // block)
    b = rng.integers(0, 256, (n, kb, block * bits // 8), dtype=np.uint8)
    scales = (rng.random((n, kb)) * 0.1 + 0.01).astype(dtype)
    if zp == "uint8":
        z = rng.integers(0, 256, (n, -(-kb * bits // 8)), dtype=np.uint8)
    elif zp == "float":
        z = (rng.random((n, kb)) * 2 ** bits).astype(dtype)
    else:
        z = None
    return b, scales, z


def reference(a, b, scales, zp, k, n, bits, block, g_idx=None, bias=None):
    """Y from the spec's formula, value by value through index arithmetic (float64)."""
    kb = -(-k // block)
    j = np.arange(kb * block)
    bytes_ = b.reshape(n, -1)
    q = (bytes_[:, j * bits // 8] >> (j * bits % 8)) & ((1 << bits) - 1)
    s = scales.reshape(n, kb).astype(np.float64)
    if zp is None:
        z = np.full((n, kb), 2.0 ** (bits - 1))
    elif zp.dtype == np.uint8:
        jz = np.arange(kb)
        zb = zp.reshape(n, -1)
        z = ((zb[:, jz * bits // 8] >> (jz * bits % 8)) & ((1 << bits) - 1)).astype(np.float64)
    else:
        z = zp.reshape(n, kb).astype(np.float64)
    group = (np.arange(k) // block) if g_idx is None else g_idx[:k]
    w = (q[:, :k] - z[:, group]) * s[:, group]
    y = a.astype(np.float64) @ w.T
    return y if bias is None else y + bias.astype(np.float64)


def attrs(k, n, bits, block, **extra):
    return dict(K=k, N=n, bits=bits, block_size=block, **extra)


def ours(inputs, attributes):
    return run_ours("MatMulNBits", inputs, attributes, opset=1, domain=MS)[0]


def test_unpack_bits_low_bits_first():
    np.testing.assert_array_equal(unpack_bits(np.array([0x21, 0xF0], np.uint8), 4), [1, 2, 0, 15])
    np.testing.assert_array_equal(unpack_bits(np.array([[0b11100100]], np.uint8), 2), [[0, 1, 2, 3]])
    np.testing.assert_array_equal(unpack_bits(np.array([7, 200], np.uint8), 8), [7, 200])


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("zp", ["uint8", "float", None])
@pytest.mark.parametrize("bits", [2, 4, 8])
def test_matmul_nbits_against_onnxruntime(bits, zp, dtype):
    rng = np.random.default_rng(bits)
    k, n, block = 80, 16, 32  # K is not a multiple of the block: the last block is padded
    b, scales, z = quantized(rng, bits, block, k, n, zp, dtype)
    a = rng.standard_normal((3, k)).astype(dtype)
    bias = rng.standard_normal(n).astype(dtype)
    tol = 1e-5 if dtype == np.float32 else 1e-3
    if bits == 8 and zp == "float":  # onnxruntime refuses this pair; the formula is the same
        y = ours([a, b, scales, z, None, bias], attrs(k, n, bits, block))
        np.testing.assert_allclose(y, reference(a, b, scales, z, k, n, bits, block, bias=bias), rtol=tol, atol=tol)
        return
    y = check_onnxruntime("MatMulNBits", [a, b, scales, z, None, bias], attrs(k, n, bits, block), rtol=tol,
                          atol=tol)[0]
    assert y.dtype == dtype and y.shape == (3, n)
    np.testing.assert_allclose(y, reference(a, b, scales, z, k, n, bits, block, bias=bias), rtol=tol, atol=tol)


def test_matmul_nbits_shapes_flat_parameters_and_bfloat16():
    rng = np.random.default_rng(1)
    k, n, block = 64, 8, 16
    b, scales, z = quantized(rng, 4, block, k, n)
    for a in (rng.standard_normal((2, 3, k)), rng.standard_normal(k), np.zeros((0, k))):
        a = a.astype(np.float32)
        y = check_onnxruntime("MatMulNBits", [a, b, scales.reshape(-1), z.reshape(-1)], attrs(k, n, 4, block),
                              rtol=1e-5, atol=1e-5)[0]
        assert y.shape == a.shape[:-1] + (n,)
    # bfloat16 (onnxruntime's CPU has no kernel for it): computed in float32, rounded once
    a = rng.standard_normal((3, k)).astype(ml_dtypes.bfloat16)
    y = ours([a, b, scales.astype(ml_dtypes.bfloat16), z], attrs(k, n, 4, block))
    assert y.dtype == ml_dtypes.bfloat16
    np.testing.assert_allclose(y.astype(np.float32), reference(a, b, scales.astype(ml_dtypes.bfloat16), z, k, n, 4,
                                                               block), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("bits,zp", [(4, None), (4, "float"), (4, "uint8"), (2, None), (8, "uint8")])
def test_matmul_nbits_g_idx(bits, zp):
    rng = np.random.default_rng(bits)
    k, n, block = 40, 8, 16
    b, scales, z = quantized(rng, bits, block, k, n, zp)
    g_idx = rng.integers(0, 3, k).astype(np.int32)
    a = rng.standard_normal((3, k)).astype(np.float32)
    inputs = [a, b, scales, z, g_idx]
    if bits == 4 and zp != "uint8":
        check_onnxruntime("MatMulNBits", inputs, attrs(k, n, bits, block), rtol=1e-5, atol=1e-5)
    # onnxruntime 1.32 ignores uint8 zero points with g_idx, misreads 2-bit and refuses 8-bit weights:
    # the documented formula is the reference
    np.testing.assert_allclose(ours(inputs, attrs(k, n, bits, block)),
                               reference(a, b, scales, z, k, n, bits, block, g_idx), rtol=1e-5, atol=1e-5)
    padded = np.concatenate([g_idx, np.zeros(8, np.int32)])  # g_idx may cover the padded K too
    np.testing.assert_allclose(ours([a, b, scales, z, padded], attrs(k, n, bits, block)),
                               reference(a, b, scales, z, k, n, bits, block, g_idx), rtol=1e-5, atol=1e-5)


def test_matmul_nbits_accuracy_level_4_with_fed_weights_stays_float():
    """onnxruntime quantizes A only with prepacked (constant) weights; fed weights keep A float."""
    rng = np.random.default_rng(2)
    b, scales, z = quantized(rng, 4, 32, 300, 24)
    a = rng.standard_normal((5, 300)).astype(np.float32)
    check_onnxruntime("MatMulNBits", [a, b, scales, z], attrs(300, 24, 4, 32, accuracy_level=4), rtol=1e-5,
                      atol=1e-5)


@pytest.mark.parametrize("bits,block,k,level,dtype,zp,int8", [
    (4, 32, 300, 4, np.float32, "uint8", True),
    (2, 64, 300, 4, np.float32, None, True),
    (8, 512, 600, 4, np.float16, "uint8", True),  # A quantized in blocks of 256
    (4, 16, 200, 4, np.float32, None, True),
    (2, 16, 100, 4, np.float32, "uint8", False),  # no int8 kernel for 2 bits in blocks of 16
    (4, 32, 300, 0, np.float32, "uint8", False),
    (4, 32, 300, 4, np.float32, "float", False),  # float zero points: not prepacked
])
def test_matmul_nbits_constant_weights_through_sessions(bits, block, k, level, dtype, zp, int8):
    rng = np.random.default_rng(k + bits)
    n = 24
    b, scales, z = quantized(rng, bits, block, k, n, zp, dtype)
    a = rng.standard_normal((5, k)).astype(dtype)
    bias = rng.standard_normal(n).astype(dtype)
    out_type = onnx.TensorProto.FLOAT if dtype == np.float32 else onnx.TensorProto.FLOAT16
    y, ref = run_sessions("MatMulNBits", [a, b, scales, z, None, bias], attrs(k, n, bits, block, accuracy_level=level),
                          {1, 2, 3, 5}, out_type)
    ref = ref.astype(np.float64)
    scale = np.abs(ref).max()
    tol = 1e-5 if dtype == np.float32 else 1e-3
    np.testing.assert_allclose(y.astype(np.float64), ref, rtol=tol, atol=tol * scale)
    float_error = np.abs(reference(a, b, scales, z, k, n, bits, block, bias=bias) - ref).max() / scale
    assert (float_error > 1e-3) == int8, f"float-A result is {float_error:.1e} from onnxruntime's"


def test_matmul_nbits_constant_g_idx_through_sessions():
    rng = np.random.default_rng(3)
    k, n, block = 64, 8, 16
    b, scales, _ = quantized(rng, 4, block, k, n)
    g_idx = rng.integers(0, 4, k).astype(np.int32)
    a = rng.standard_normal((2, k)).astype(np.float32)
    y, ref = run_sessions("MatMulNBits", [a, b, scales, None, g_idx], attrs(k, n, 4, block, accuracy_level=4),
                          {1, 2, 4}, onnx.TensorProto.FLOAT)
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)


class _Graph:
    """The one method of ort_core's Graph a factory uses."""

    def __init__(self, constants):
        self.constants = constants

    def constant_initializers(self):
        return dict(self.constants)


def test_matmul_nbits_dequantizes_constant_weights_once():
    rng = np.random.default_rng(4)
    k, n, block = 64, 8, 32
    b, scales, z = quantized(rng, 4, block, k, n)
    a = rng.standard_normal((3, k)).astype(np.float32)
    node = Node("MatMulNBits", ["a", "b", "s", "z"], ["y"], attrs(k, n, 4, block), domain=MS, name="nb", id=0)
    factory = lookup(MS, "MatMulNBits", 1).factory
    built = factory(node, 1, graph=_Graph({"b": b, "s": scales, "z": z}))
    per_call = factory(node, 1, graph=None)
    expected = reference(a, b, scales, z, k, n, 4, block)
    other_b = np.zeros_like(b)
    # the built kernel multiplies by the weight dequantized at build time, whatever B it is handed
    np.testing.assert_allclose(built(a, other_b, scales, z)[0], expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(per_call(a, b, scales, z)[0], expected, rtol=1e-5, atol=1e-5)
    assert np.abs(per_call(a, other_b, scales, z)[0] - expected).max() > 0.1
    # a non-constant zero point: dequantized per call
    partly = factory(node, 1, graph=_Graph({"b": b, "s": scales}))
    np.testing.assert_allclose(partly(a, b, scales, z)[0], expected, rtol=1e-5, atol=1e-5)


def test_matmul_nbits_empty_weight_gives_bias():
    rng = np.random.default_rng(5)
    a = rng.standard_normal((3, 64)).astype(np.float32)
    bias = rng.standard_normal(8).astype(np.float32)
    att = attrs(64, 8, 4, 32)
    y = check_onnxruntime("MatMulNBits", [a, np.zeros((0, 2, 16), np.uint8), np.ones((8, 2), np.float32), None, None,
                                          bias], att, rtol=0, atol=0)[0]
    np.testing.assert_array_equal(y, np.tile(bias, (3, 1)))
    y = check_onnxruntime("MatMulNBits", [a, np.zeros((8, 0, 16), np.uint8), np.zeros(0, np.float32)], att,
                          rtol=0, atol=0)[0]
    np.testing.assert_array_equal(y, np.zeros((3, 8), np.float32))
    with pytest.raises(KernelError, match="test_MatMulNBits.*empty B dimension 1 must be 0 or 2"):
        ours([a, np.zeros((0, 3, 16), np.uint8), np.ones((8, 2), np.float32)], att)
    with pytest.raises(KernelError, match="test_MatMulNBits.*would take"):  # N from the attribute alone
        ours([a, np.zeros((0, 2, 16), np.uint8), np.zeros(0, np.float32)], attrs(64, 2 ** 40, 4, 32))


@pytest.mark.parametrize("bad,match", [
    ({"bits": 3}, "bits=3 is not supported"),
    ({"block_size": 24}, "power of 2"),
    ({"block_size": 8}, "power of 2"),
    ({"bits": 2, "block_size": 512}, "block_size <= 256"),
    ({"weight_prepacked": 1}, "weight_prepacked=1"),
    ({"N": 0}, "must be positive"),
])
def test_matmul_nbits_bad_attributes(bad, match):
    node = Node("MatMulNBits", ["a", "b", "s"], ["y"], {**attrs(64, 8, 4, 32), **bad}, domain=MS, name="nb", id=0)
    with pytest.raises(KernelError, match=f"nb.*{match}"):
        lookup(MS, "MatMulNBits", 1).factory(node, 1)
    node = Node("MatMulNBits", ["a", "b", "s"], ["y"], {"K": 64, "N": 8}, domain=MS, name="nb", id=0)
    with pytest.raises(KernelError, match="nb.*block_size are required"):
        lookup(MS, "MatMulNBits", 1).factory(node, 1)


def test_matmul_nbits_bad_inputs():
    rng = np.random.default_rng(6)
    k, n, block = 64, 8, 32
    b, scales, z = quantized(rng, 4, block, k, n)
    a = rng.standard_normal((3, k)).astype(np.float32)
    att = attrs(k, n, 4, block)
    cases = [
        ([a, b[:, :1].copy(), scales], "B must have shape \\(8, 2, 16\\)"),
        ([a[:, :60].copy(), b, scales], "last dimension must be K=64"),
        ([a.astype(np.int32), b, scales], "A must be float"),
        ([a, b, scales.astype(np.float16)], "scales have type float16"),
        ([a, b, scales[:, :1].copy()], "'scales' must have shape \\(8, 2\\)"),
        ([a, b, scales, np.zeros((8, 2), np.uint8)], "'zero_points' must have shape \\(8, 1\\)"),
        ([a, b, scales, np.zeros((8, 2), np.float16)], "zero_points must be uint8 or the scales' type"),
        ([a, b, scales, z, np.full(k, 2, np.int32)], "g_idx values must lie in \\[0, 2\\)"),
        ([a, b, scales, z, np.zeros(k - 1, np.int32)], "g_idx must have shape"),
        ([a, b, scales, z, np.zeros(k, np.int64)], "g_idx must be int32"),
        ([a, b, scales, z, None, np.zeros(n + 1, np.float32)], "bias must be \\(8,\\)"),
        ([a, b.astype(np.int8), scales], "B must be uint8"),
    ]
    for inputs, match in cases:
        with pytest.raises(KernelError, match=f"test_MatMulNBits.*{match}"):
            ours(inputs, att)
