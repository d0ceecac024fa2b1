"""TfIdfVectorizer against the reference evaluator and hand-counted n-grams."""

from __future__ import annotations

import numpy as np
import pytest

from ort_core.errors import KernelError

from .kernel_harness import run_ours, run_reference

rng = np.random.default_rng(7)

# pool: unigrams [2, 3, 5, 4], bigrams (5, 6), (7, 8), (6, 7), trigram (2, 3, 5)
POOL = dict(pool_int64s=[2, 3, 5, 4, 5, 6, 7, 8, 6, 7, 2, 3, 5], ngram_counts=[0, 4, 10],
            ngram_indexes=[0, 1, 2, 3, 4, 5, 6, 7])


def both(x, attrs):
    (ours,) = run_ours("TfIdfVectorizer", [x], attrs, opset=9)
    (ref,) = run_reference("TfIdfVectorizer", [x], attrs, opset=9)
    assert ours.dtype == np.float32 and ours.shape == ref.shape
    np.testing.assert_allclose(ours, ref, rtol=1e-6)
    return ours


@pytest.mark.parametrize("mode", ["TF", "IDF", "TFIDF"])
@pytest.mark.parametrize("min_n, max_n", [(1, 1), (1, 2), (2, 2), (1, 3), (2, 3), (3, 3)])
@pytest.mark.parametrize("skip", [0, 1, 3])
@pytest.mark.parametrize("shape", [(12,), (3, 9)])
def test_tfidf_int_pool_matches_reference(mode, min_n, max_n, skip, shape):
    x = rng.integers(2, 9, size=shape).astype(np.int32)
    attrs = dict(POOL, mode=mode, min_gram_length=min_n, max_gram_length=max_n, max_skip_count=skip)
    if mode != "TF":
        attrs["weights"] = [float(w) for w in rng.uniform(0.5, 2.0, 8)]
    both(x, attrs)


@pytest.mark.parametrize("skip", [0, 2])
def test_tfidf_string_pool_matches_reference(skip):
    words = np.array(["the", "cat", "sat", "on", "mat", "dog"], dtype=object)
    x = words[rng.integers(0, 6, size=(4, 7))]
    attrs = dict(mode="TF", min_gram_length=1, max_gram_length=2, max_skip_count=skip,
                 pool_strings=["cat", "mat", "the", "cat", "on", "the", "sat", "on"],
                 ngram_counts=[0, 2], ngram_indexes=[1, 0, 2, 3, 4])
    both(x, attrs)


def test_tfidf_hand_counted():
    # bigrams at skip 0 and 1 (distance 1 and 2); unigrams once
    x = np.array([5, 6, 7, 5, 9, 6], dtype=np.int64)
    attrs = dict(POOL, mode="TF", min_gram_length=1, max_gram_length=2, max_skip_count=1)
    (y,) = run_ours("TfIdfVectorizer", [x], attrs, opset=9)
    # unigram 5 twice; (5,6): 5-6 at 0..1 and 5-.-6 at 3..5; (6,7) once; (7,8) never
    assert y.tolist() == [0, 0, 2, 0, 2, 0, 1, 0]


def test_tfidf_idf_weights_and_empty_input():
    attrs = dict(POOL, mode="IDF", min_gram_length=1, max_gram_length=1, max_skip_count=0,
                 weights=[1, 2, 3, 4, 5, 6, 7, 8])
    (y,) = run_ours("TfIdfVectorizer", [np.array([[3, 3, 4], [9, 9, 9]], np.int64)], attrs, opset=9)
    assert y.tolist() == [[0, 2, 0, 4, 0, 0, 0, 0], [0] * 8]
    (y,) = run_ours("TfIdfVectorizer", [np.zeros((0,), np.int64)], attrs, opset=9)
    assert y.shape == (8,) and not y.any()


def test_tfidf_output_width_from_indexes():
    attrs = dict(pool_int64s=[1, 2], ngram_counts=[0], ngram_indexes=[5, 2], mode="TF",
                 min_gram_length=1, max_gram_length=1, max_skip_count=0)
    (y,) = run_ours("TfIdfVectorizer", [np.array([2, 2, 1], np.int64)], attrs, opset=9)
    assert y.tolist() == [0, 0, 2, 0, 0, 1]


def test_tfidf_errors():
    base = dict(POOL, mode="TF", min_gram_length=1, max_gram_length=2, max_skip_count=0)
    with pytest.raises(KernelError, match="mode"):
        run_ours("TfIdfVectorizer", [np.array([1])], dict(base, mode="BM25"), opset=9)
    with pytest.raises(KernelError, match="min_gram_length"):
        run_ours("TfIdfVectorizer", [np.array([1])], dict(base, min_gram_length=3), opset=9)
    with pytest.raises(KernelError, match="does not match"):
        run_ours("TfIdfVectorizer", [np.array(["a"], dtype=object)], base, opset=9)
    with pytest.raises(KernelError, match=r"\[C\] or \[N, C\]"):
        run_ours("TfIdfVectorizer", [np.zeros((2, 2, 2), np.int64)], base, opset=9)
    with pytest.raises(KernelError, match="exactly one"):
        run_ours("TfIdfVectorizer", [np.array([1])], dict(base, pool_strings=["a"]), opset=9)
