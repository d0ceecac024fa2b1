"""Gemm and MatMul kernels against onnx's reference evaluator."""

from __future__ import annotations

import numpy as np
import pytest

from ort_core.errors import KernelError

from .kernel_harness import check, run_ours


def rand(rng, *shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


# ---------------------------------------------------------------------------------------------
# MatMul
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("sa,sb", [
    ((3, 4), (4, 5)),
    ((4,), (4, 5)),
    ((3, 4), (4,)),
    ((4,), (4,)),
    ((2, 3, 4), (4, 5)),
    ((3, 4), (2, 4, 5)),
    ((2, 1, 3, 4), (3, 4, 5)),
    ((5,), (2, 5, 3)),
    ((2, 3, 5), (5,)),
    ((1, 3, 4), (6, 4, 2)),
], ids=str)
def test_matmul_shapes(sa, sb):
    rng = np.random.default_rng(0)
    (y,) = check("MatMul", [rand(rng, *sa), rand(rng, *sb)], {}, rtol=1e-5, atol=1e-5)
    assert isinstance(y, np.ndarray)


@pytest.mark.parametrize("opset,dtype", [(1, np.float32), (1, np.float64)]  # integer MatMul since 9
                         + [(o, d) for o in (9, 13) for d in (np.float32, np.float64, np.int32, np.int64)])
def test_matmul_dtypes(opset, dtype):
    rng = np.random.default_rng(1)
    a = (rng.standard_normal((2, 3, 4)) * 4).astype(dtype)
    b = (rng.standard_normal((4, 5)) * 4).astype(dtype)
    check("MatMul", [a, b], {}, opset=opset, rtol=1e-5, atol=1e-5)


def test_matmul_float16():
    rng = np.random.default_rng(2)
    a, b = rand(rng, 3, 8, dtype=np.float16), rand(rng, 8, 4, dtype=np.float16)
    (y,) = run_ours("MatMul", [a, b], {})
    assert y.dtype == np.float16
    np.testing.assert_allclose(y.astype(np.float32), a.astype(np.float32) @ b.astype(np.float32),
                               rtol=2e-3, atol=2e-3)


def test_matmul_errors():
    with pytest.raises(KernelError, match="do not match"):
        run_ours("MatMul", [np.zeros((2, 3), np.float32), np.zeros((4, 5), np.float32)], {})
    with pytest.raises(KernelError, match="rank"):
        run_ours("MatMul", [np.zeros((), np.float32), np.zeros((4, 5), np.float32)], {})


# ---------------------------------------------------------------------------------------------
# Gemm
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("trans_a", [0, 1])
@pytest.mark.parametrize("trans_b", [0, 1])
@pytest.mark.parametrize("c_shape", [None, (), (1,), (5,), (3, 1), (1, 5), (3, 5)], ids=str)
def test_gemm_transpose_and_broadcast(trans_a, trans_b, c_shape):
    rng = np.random.default_rng(10)
    a = rand(rng, 4, 3) if trans_a else rand(rng, 3, 4)
    b = rand(rng, 5, 4) if trans_b else rand(rng, 4, 5)
    inputs = [a, b] + ([] if c_shape is None else [rand(rng, *c_shape)])
    check("Gemm", inputs, dict(transA=trans_a, transB=trans_b), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("alpha,beta", [(1.0, 1.0), (0.5, 2.0), (-1.5, 0.0), (2.0, -0.25)])
def test_gemm_alpha_beta(alpha, beta):
    rng = np.random.default_rng(11)
    a, b, c = rand(rng, 3, 4), rand(rng, 4, 5), rand(rng, 1, 5)
    (y,) = check("Gemm", [a, b, c], dict(alpha=alpha, beta=beta), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(y, alpha * (a @ b) + beta * c, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("opset", [6, 7, 9, 11, 13])
def test_gemm_opsets(opset):
    rng = np.random.default_rng(12)
    a, b, c = rand(rng, 3, 4), rand(rng, 4, 5), rand(rng, 5)
    attrs = dict(alpha=0.5, beta=2.0, transB=0)
    if opset < 7:
        attrs["broadcast"] = 1
    check("Gemm", [a, b, c], attrs, opset=opset, rtol=1e-5, atol=1e-5)


def test_gemm_optional_c_omitted_and_dtypes():
    rng = np.random.default_rng(13)
    a, b = rand(rng, 3, 4, dtype=np.float64), rand(rng, 4, 5, dtype=np.float64)
    check("Gemm", [a, b], dict(alpha=3.0), opset=13, rtol=1e-12, atol=1e-12)
    (y,) = run_ours("Gemm", [a, b, None], dict(alpha=3.0))
    np.testing.assert_allclose(y, 3.0 * a @ b, rtol=1e-12)
    ai, bi, ci = (rng.integers(-5, 5, s).astype(np.int32) for s in ((3, 4), (4, 5), (5,)))
    check("Gemm", [ai, bi, ci], {}, opset=13)


def test_gemm_float32_stays_float32_and_inputs_untouched():
    rng = np.random.default_rng(14)
    a, b, c = rand(rng, 3, 4), rand(rng, 4, 5), rand(rng, 3, 5)
    c0 = c.copy()
    (y,) = run_ours("Gemm", [a, b, c], dict(alpha=0.1, beta=0.3))
    assert y.dtype == np.float32
    np.testing.assert_array_equal(c, c0)


def test_gemm_errors():
    rng = np.random.default_rng(15)
    with pytest.raises(KernelError, match="inner dimensions"):
        run_ours("Gemm", [rand(rng, 3, 4), rand(rng, 5, 4)], {})
    with pytest.raises(KernelError, match="2-D"):
        run_ours("Gemm", [rand(rng, 2, 3, 4), rand(rng, 4, 5)], {})
    with pytest.raises(KernelError, match="broadcast"):
        run_ours("Gemm", [rand(rng, 3, 4), rand(rng, 4, 5), rand(rng, 2, 5)], {})
