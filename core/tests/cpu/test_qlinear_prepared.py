"""The kernels prepared at build time for constant quantized weights (qlinear_conv.py, qlinear_matmul.py,
the constant-B paths of contrib_quant_matmul.py) against exact integer arithmetic and against the general
kernels that take every input at run time."""

from __future__ import annotations

import numpy as np
import pytest

from ort_core.ir.graph import Node
from ort_core.providers.cpu.ops import contrib_quant_matmul as cq
from ort_core.providers.cpu.ops import qlinear
from ort_core.providers.cpu.ops.qexact import a_bound, dynamic_shifted, k_blocks
from ort_core.providers.cpu.ops.quantize import dynamic_quantize_linear

RNG = np.random.default_rng(11)


class _Graph:
    """The part of the IR graph a factory asks: its constant initializers."""

    def __init__(self, consts: dict) -> None:
        self.consts = consts

    def constant_initializers(self) -> dict:
        return self.consts


def _build(factory, op, names, consts, attrs=None, domain=""):
    node = Node(op, list(names), ["y"], dict(attrs or {}), domain=domain)
    prepared = factory(node, 13, graph=_Graph(consts))
    general = factory(node, 13, graph=None)
    return prepared, general


def test_k_blocks_keep_each_block_below_two_to_the_24():
    w = np.abs(RNG.integers(-127, 128, (4096, 5))).astype(np.float32)
    blocks = k_blocks(w, 255)
    assert blocks[0][0] == 0 and blocks[-1][1] == 4096 and len(blocks) > 1
    assert all(b[1] == c[0] for b, c in zip(blocks, blocks[1:]))
    assert all(255 * w[a:b].sum(axis=0).max() < 2 ** 24 for a, b in blocks)
    assert k_blocks(np.full((10, 2), 2.0 ** 17, np.float32), 255) is None  # one row alone too large
    assert a_bound(np.dtype(np.uint8), 0) == 255 and a_bound(np.dtype(np.int8), 0) == 128


@pytest.mark.parametrize("x_type,bias_scale,y_scale,levels", [(np.uint8, 1000, 0.5, 20), (np.int8, 10 ** 8, 100.0, 4)])
def test_prepared_qlinearconv_matches_exact_integers(x_type, bias_scale, y_scale, levels):
    """Long K (two exact blocks), per-channel scales, and an int32 bias too large for float32 exactness."""
    c, m = 512, 6
    lo, hi = (0, 256) if x_type == np.uint8 else (-128, 128)
    x = RNG.integers(lo, hi, (1, c, 5, 5)).astype(x_type)
    w = RNG.choice(np.array([-127, -90, 90, 127], np.int8), (m, c, 3, 3))
    consts = {"xs": np.float32(0.02), "xz": np.array(7, x_type), "w": w,
              "ws": RNG.uniform(0.001, 0.002, m).astype(np.float32), "wz": np.zeros(m, np.int8),
              "ys": np.float32(y_scale), "yz": np.array(3, x_type),
              "b": RNG.integers(-bias_scale, bias_scale, m).astype(np.int32)}
    names = ["x", *consts]
    prepared, general = _build(qlinear._qlinear_conv, "QLinearConv", names, consts, {"pads": [1, 1, 1, 1]})
    assert prepared.__module__.endswith("qlinear_conv")
    y = prepared(x, *consts.values())[0]
    # the exact accumulator, then onnxruntime's float32 requantization
    xs = np.pad(x.astype(np.int64) - 7, ((0, 0), (0, 0), (1, 1), (1, 1)))
    acc = np.zeros((m, 5, 5), np.int64)
    for i in range(3):
        for j in range(3):
            acc += np.einsum("mc,chw->mhw", w[:, :, i, j].astype(np.int64), xs[0, :, i:i + 5, j:j + 5])
    acc += consts["b"][:, None, None]
    mult = (np.float32(0.02) * consts["ws"] / np.float32(y_scale)).astype(np.float32)
    ref = acc.astype(np.int32).astype(np.float32) * mult[:, None, None]
    lo_, hi_ = (0, 255) if x_type == np.uint8 else (-128, 127)
    ref = np.clip(np.rint(np.clip(ref, lo_ - 3, hi_ - 3)) + 3, lo_, hi_).astype(x_type)
    assert np.array_equal(y[0], ref)
    assert len(np.unique(ref)) > levels
    gen = general(x, *consts.values())[0]
    assert np.abs(gen.astype(np.int32) - y.astype(np.int32)).max() <= 1


def test_prepared_qlinearmatmul_equals_general_kernel():
    a = RNG.integers(0, 256, (2, 7, 300)).astype(np.uint8)
    b = RNG.integers(-127, 128, (300, 9)).astype(np.int8)
    consts = {"as": np.float32(0.01), "az": np.uint8(128), "b": b, "bs": RNG.uniform(0.01, 0.02, 9).astype(np.float32),
              "bz": np.zeros(9, np.int8), "ys": np.float32(0.3), "yz": np.uint8(100)}
    names = ["a", "as", "az", "b", "bs", "bz", "ys", "yz"]
    prepared, general = _build(qlinear._qlinear_matmul, "QLinearMatMul", names, consts)
    assert prepared.__module__.endswith("qlinear_matmul")
    args = [a, *[consts[n] for n in names[1:]]]
    y, g = prepared(*args)[0], general(*args)[0]
    assert y.shape == (2, 7, 9) and y.dtype == np.uint8
    assert np.abs(y.astype(int) - g.astype(int)).max() <= 1 and np.mean(y == g) > 0.98
    assert len(np.unique(y)) > 30


def test_dynamic_shifted_is_dynamicquantizelinear_minus_its_zero_point():
    dql = dynamic_quantize_linear(Node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"]), 11)
    for x in (RNG.standard_normal((3, 50)).astype(np.float32) * 4, np.abs(RNG.standard_normal(40)).astype(np.float32),
              -np.abs(RNG.standard_normal(40)).astype(np.float32), np.zeros(5, np.float32),
              np.array([0.5, 1.5, 2.5, -2.5, 3.0], np.float32) * np.float32(3.0 / 255)):
        q, s, z = dql(x)
        shifted, scale, zp = dynamic_shifted(x)
        assert scale == s and zp == z
        assert np.array_equal(shifted, q.astype(np.float32) - np.float32(z))


def test_dynamic_quantize_matmul_constant_b_is_bit_exact_with_the_unfused_chain():
    """K = 3072 with large weights needs two exact blocks; the result equals MatMulInteger's exact int32
    accumulator cast to float32, times a_scale * b_scale, plus the bias."""
    k, n = 3072, 16
    b = RNG.choice(np.array([-127, 127], np.int8), (k, n))
    scale, bias = np.float32(0.003), RNG.standard_normal(n).astype(np.float32)
    node = Node("DynamicQuantizeMatMul", ["a", "b", "s", "z", "bias"], ["y"], domain="com.microsoft")
    kern = cq._dynamic_quantize_matmul(node, 1, graph=_Graph({"b": b, "s": scale, "z": np.int8(0), "bias": bias}))
    assert len(k_blocks(np.abs(b.astype(np.float32)), 255)) > 1
    a = RNG.standard_normal((4, k)).astype(np.float32)
    y = kern(a, b, scale, np.int8(0), bias)[0]
    q, s, z = dynamic_quantize_linear(node, 11)(a)
    acc = (q.astype(np.int64) - int(z)) @ b.astype(np.int64)
    ref = acc.astype(np.int32).astype(np.float32) * (np.float32(s) * scale) + bias
    assert np.array_equal(y, ref)


@pytest.mark.parametrize("multiply", [False, True])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_qlinear_add_mul_pair_table_equals_the_float32_arithmetic(multiply, dtype):
    """Large tensors go through the 65,536-entry table; small pieces of the same data through the float32
    passes: the results are the same bytes, ties included."""
    from ort_core.providers.cpu.ops.qlinear_contrib import _binary_factory

    kern = _binary_factory(Node("QLinearMul" if multiply else "QLinearAdd", [], ["y"]), multiply)
    lo, hi = np.iinfo(dtype).min, np.iinfo(dtype).max + 1
    a, b = (RNG.integers(lo, hi, (64, 128)).astype(dtype) for _ in range(2))
    params = [np.float32(0.031), np.array(3, dtype), np.float32(0.017), np.array(-2 if dtype == np.int8 else 9, dtype),
              np.float32(0.04 if not multiply else 0.5), np.array(5, dtype)]
    big = kern(a, params[0], params[1], b, *params[2:])[0]
    small = np.concatenate([kern(a[i:i + 16], params[0], params[1], b[i:i + 16], *params[2:])[0]
                            for i in range(0, 64, 16)])
    assert a[:16].size < 4096 <= a.size
    assert np.array_equal(big, small) and len(np.unique(big)) > 30


@pytest.mark.parametrize("zp,dtype", [(7, np.uint8), (255, np.uint8), (-3, np.int8), (0, np.int8)])
def test_requantize_rounds_ties_to_even_then_adds_the_zero_point(zp, dtype):
    from ort_core.providers.cpu.ops.qexact import RANGES, requantize

    y = RNG.integers(-400, 400, (100, 37)).astype(np.float32) + np.float32(0.5)  # every value an exact tie
    got = requantize(y.copy(), np.float32(1), zp, np.dtype(dtype))
    lo, hi = RANGES[np.dtype(dtype)]
    assert np.array_equal(got, (np.rint(np.clip(y, lo - zp, hi - zp)) + zp).astype(dtype))
    assert got.dtype == dtype and got.min() == lo and got.max() == hi
    assert np.array_equal(requantize(np.array([2.5, 3.5, -2.5], np.float32), np.float32(1), 0, np.dtype(np.int8)),
                          np.array([2, 4, -2], np.int8))
