"""Einsum against onnx's reference evaluator and numpy."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from ort_core.errors import KernelError

from .kernel_harness import check, run_ours

rng = np.random.default_rng(17)


@pytest.mark.parametrize("equation,shapes", [
    ("ij->ji", [(3, 4)]),
    ("ii->i", [(3, 3)]),
    ("ij", [(3, 4)]),
    ("ij,jk->ik", [(2, 3), (3, 4)]),
    ("bij, bjk -> bik", [(2, 3, 4), (2, 4, 5)]),
    ("...ij,...jk", [(2, 3, 4), (4, 2)]),
    ("i,i", [(5,), (5,)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)]),
    ("...ii->...i", [(2, 3, 3)]),
    ("->", [()]),
])
def test_einsum_matches_reference(equation, shapes):
    inputs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    check("Einsum", inputs, {"equation": equation}, opset=12, rtol=1e-5, atol=1e-5)


def test_einsum_integers_keep_dtype():
    a = np.arange(6, dtype=np.int32).reshape(2, 3)
    (y,) = run_ours("Einsum", [a, a], {"equation": "ij,ij->i"}, opset=28)
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, (a * a).sum(1))


def test_einsum_bfloat16():
    a = rng.standard_normal((2, 3)).astype(ml_dtypes.bfloat16)
    (y,) = run_ours("Einsum", [a, a], {"equation": "ij,kj->ik"}, opset=28)
    assert y.dtype == a.dtype
    a32 = a.astype(np.float32)
    np.testing.assert_allclose(y.astype(np.float32), a32 @ a32.T, rtol=1e-2, atol=1e-2)


def test_einsum_errors():
    a = np.ones((2, 3), np.float32)
    with pytest.raises(KernelError, match="operand terms"):
        run_ours("Einsum", [a], {"equation": "ij,jk->ik"}, opset=12)
    with pytest.raises(KernelError, match="does not fit"):
        run_ours("Einsum", [a, a], {"equation": "ij,jk->ik"}, opset=12)
