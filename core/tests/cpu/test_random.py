"""Random generators: shapes, dtypes, ranges, rough statistics and seed determinism (values cannot
be compared with other runtimes: the spec leaves the generator open)."""

from __future__ import annotations

import threading

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto

from ort_core.errors import KernelError
from ort_core.ir.graph import Node
from ort_core.providers.cpu.registry import lookup

from .kernel_harness import run_ours


def kernel_for(op, attrs, n_inputs=0, opset=22):
    node = Node(op, [f"x{i}" for i in range(n_inputs)], ["y"], dict(attrs), name="r", id=0)
    return lookup("", op, opset).factory(node, opset)


# ---------------------------------------------------------------------------------------------
# RandomNormal / RandomUniform and the -Like variants
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("code,dtype", [(TensorProto.FLOAT, np.float32), (TensorProto.DOUBLE, np.float64),
                                        (TensorProto.FLOAT16, np.float16),
                                        (TensorProto.BFLOAT16, ml_dtypes.bfloat16)])
def test_random_normal_statistics(code, dtype):
    (y,) = run_ours("RandomNormal", [], dict(shape=[200, 300], dtype=code, mean=2.0, scale=3.0, seed=1.0),
                    opset=22)
    assert y.shape == (200, 300) and y.dtype == dtype
    v = y.astype(np.float64)
    assert abs(v.mean() - 2.0) < 0.05 and abs(v.std() - 3.0) < 0.05


def test_random_uniform_range_and_statistics():
    (y,) = run_ours("RandomUniform", [], dict(shape=[100000], low=-2.0, high=5.0, seed=3.0), opset=1)
    assert y.dtype == np.float32 and y.shape == (100000,)
    assert y.min() >= -2.0 and y.max() < 5.0
    assert abs(y.mean() - 1.5) < 0.05


def test_random_uniform_never_returns_high():
    # a range this narrow makes low + u * (high - low) round onto high for many draws
    (y,) = run_ours("RandomUniform", [], dict(shape=[10000], low=1.0, high=float(np.nextafter(np.float32(1),
                                                                                              np.float32(2))),
                                          seed=0.0), opset=22)
    assert (y == np.float32(1)).all()


def test_seed_gives_same_draws_every_run():
    k1 = kernel_for("RandomNormal", dict(shape=[4, 5], seed=7.0))
    k2 = kernel_for("RandomNormal", dict(shape=[4, 5], seed=7.0))
    a, b, c = k1()[0], k1()[0], k2()[0]
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, c)
    d = kernel_for("RandomNormal", dict(shape=[4, 5], seed=8.0))()[0]
    e = kernel_for("RandomNormal", dict(shape=[4, 5], seed=7.5))()[0]
    assert not np.array_equal(a, d) and not np.array_equal(a, e)


def test_no_seed_gives_fresh_draws():
    k = kernel_for("RandomUniform", dict(shape=[64]))
    assert not np.array_equal(k()[0], k()[0])


def test_seeded_kernel_is_thread_safe():
    k = kernel_for("RandomUniform", dict(shape=[1000], seed=11.0))
    expected = k()[0]
    results = []

    def work():
        for _ in range(20):
            results.append(k()[0])

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 80 and all(np.array_equal(r, expected) for r in results)


def test_like_variants_take_shape_and_type():
    x = np.zeros((3, 4), np.float16)
    (y,) = run_ours("RandomNormalLike", [x], dict(seed=1.0), opset=22)
    assert y.shape == (3, 4) and y.dtype == np.float16
    (y,) = run_ours("RandomUniformLike", [np.zeros((2, 5), np.int64)], dict(dtype=TensorProto.DOUBLE, low=3.0,
                                                                            high=4.0), opset=1)
    assert y.shape == (2, 5) and y.dtype == np.float64 and ((y >= 3) & (y < 4)).all()


def test_random_errors():
    with pytest.raises(KernelError, match="'shape' is required"):
        run_ours("RandomNormal", [], {}, opset=22)
    with pytest.raises(KernelError, match="not float"):
        run_ours("RandomUniform", [], dict(shape=[2], dtype=TensorProto.INT32), opset=22)
    with pytest.raises(KernelError, match="not float"):
        run_ours("RandomNormalLike", [np.zeros(3, np.int32)], {}, opset=22)
    with pytest.raises(KernelError, match="must not be below"):
        run_ours("RandomUniform", [], dict(shape=[2], low=1.0, high=0.0), opset=22)


# ---------------------------------------------------------------------------------------------
# Bernoulli
# ---------------------------------------------------------------------------------------------

def test_bernoulli_extremes_and_types():
    p = np.array([0.0, 1.0, 0.0, 1.0], np.float32)
    (y,) = run_ours("Bernoulli", [p], {}, opset=15)
    assert y.dtype == np.float32 and y.tolist() == [0, 1, 0, 1]
    (y,) = run_ours("Bernoulli", [p.astype(np.float64)], dict(dtype=TensorProto.BOOL), opset=22)
    assert y.dtype == np.bool_ and y.tolist() == [False, True, False, True]
    (y,) = run_ours("Bernoulli", [p], dict(dtype=TensorProto.INT64, seed=2.0), opset=22)
    assert y.dtype == np.int64 and y.tolist() == [0, 1, 0, 1]


def test_bernoulli_frequency_and_seed():
    p = np.full((200, 500), 0.3, np.float64)
    k = kernel_for("Bernoulli", dict(seed=5.0), n_inputs=1)
    a, b = k(p)[0], k(p)[0]
    np.testing.assert_array_equal(a, b)
    assert set(np.unique(a).tolist()) <= {0.0, 1.0}
    assert abs(a.mean() - 0.3) < 0.01


def test_bernoulli_rejects_integer_probabilities():
    with pytest.raises(KernelError, match="float probabilities"):
        run_ours("Bernoulli", [np.ones(3, np.int32)], {}, opset=22)


# ---------------------------------------------------------------------------------------------
# Multinomial
# ---------------------------------------------------------------------------------------------

def test_multinomial_frequencies():
    probs = np.array([[0.1, 0.2, 0.7], [0.5, 0.0, 0.5]])
    logits = np.log(np.where(probs > 0, probs, 1e-300)).astype(np.float32)
    logits[1, 1] = -np.inf
    (y,) = run_ours("Multinomial", [logits], dict(sample_size=60000, seed=4.0), opset=7)
    assert y.shape == (2, 60000) and y.dtype == np.int32
    assert y.min() >= 0 and y.max() <= 2
    for row in range(2):
        freq = np.bincount(y[row], minlength=3) / y.shape[1]
        np.testing.assert_allclose(freq, probs[row], atol=0.01)
    assert not (y[1] == 1).any()


def test_multinomial_types_and_determinism():
    logits = np.random.default_rng(0).standard_normal((5, 10)).astype(np.float16)
    k = kernel_for("Multinomial", dict(sample_size=3, dtype=TensorProto.INT64, seed=1.0), n_inputs=1)
    a, b = k(logits)[0], k(logits)[0]
    assert a.dtype == np.int64 and a.shape == (5, 3)
    np.testing.assert_array_equal(a, b)
    (y,) = run_ours("Multinomial", [logits.astype(np.float32)], {}, opset=22)
    assert y.shape == (5, 1) and y.dtype == np.int32 and ((y >= 0) & (y < 10)).all()


def test_multinomial_errors():
    with pytest.raises(KernelError, match="int32 or int64"):
        run_ours("Multinomial", [np.zeros((1, 2), np.float32)], dict(dtype=TensorProto.FLOAT), opset=7)
    with pytest.raises(KernelError, match="sample_size"):
        run_ours("Multinomial", [np.zeros((1, 2), np.float32)], dict(sample_size=0), opset=7)
    with pytest.raises(KernelError, match="batch_size, class_size"):
        run_ours("Multinomial", [np.zeros(3, np.float32)], {}, opset=7)
