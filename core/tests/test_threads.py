"""One session run from several threads at once gives identical, correct results."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np

import ort_core as ort
from ort_core.cli import demo_input, demo_model_path


def test_concurrent_runs_agree():
    sess = ort.InferenceSession(demo_model_path())
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal((2, 1, 28, 28)).astype(np.float32) for _ in range(8)]
    expected = [sess.run(None, {"image": x})[0] for x in inputs]

    def work(k):
        return [sess.run(None, {"image": inputs[(k + j) % 8]})[0] for j in range(16)]

    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(work, range(4)))
    for k, outs in enumerate(results):
        for j, out in enumerate(outs):
            np.testing.assert_array_equal(out, expected[(k + j) % 8])
    assert not np.array_equal(expected[0], expected[1])  # different inputs, different outputs


def test_demo_model_outputs_probabilities():
    sess = ort.InferenceSession(demo_model_path())
    (p,) = sess.run(None, {"image": demo_input()})
    assert p.shape == (1, 10) and p.dtype == np.float32
    np.testing.assert_allclose(p.sum(), 1.0, rtol=1e-5)
