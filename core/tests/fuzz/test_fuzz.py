"""Fuzz ort-core with hypothesis: mutated models (bytes and structure) and mutated feeds may only ever
produce sessions, results or OrtErrors. Bounded by --fuzz-examples per test (a short run by default;
``nox -s fuzz -- --examples N`` for a long one)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .harness import STATS, exercise, feeds_for, mutate_bytes, mutate_feeds, mutate_model, seeds, session_options

pytestmark = pytest.mark.fuzz


def _settings(request):
    cfg = request.config
    return settings(max_examples=cfg.getoption("--fuzz-examples"), deadline=None, database=None,
                    derandomize=not cfg.getoption("--fuzz-random"), print_blob=True,
                    suppress_health_check=list(HealthCheck))


def _draw_seed(data):
    all_seeds = seeds()
    return all_seeds[data.draw(st.integers(0, len(all_seeds) - 1), label="seed")]


def _run(request, test):
    """Run ``test(data)`` under hypothesis with the session's fuzz settings."""
    @_settings(request)
    @given(st.data())
    def fuzz(data):
        STATS.examples[request.node.name] += 1
        test(data)
    fuzz()


def _draw_rng(data):
    return np.random.default_rng(data.draw(st.integers(0, 2 ** 32 - 1), label="rng"))


def _fuzz_model(request, mutate):
    """Run each drawn seed's model, changed by ``mutate(draw, seed)``, through ``exercise``."""
    def one(data):
        seed = _draw_seed(data)
        mutated = mutate(data.draw, seed)
        exercise(mutated, seed.feeds, seed.name, _draw_rng(data))
    _run(request, one)


def test_mutated_model_bytes(request):
    _fuzz_model(request, lambda draw, seed: mutate_bytes(draw, st, seed.model.SerializeToString()))


def test_mutated_model_structure(request):
    _fuzz_model(request, lambda draw, seed: mutate_model(draw, st, seed.model))


def test_mutated_feeds(request):
    def one(data):
        seed = _draw_seed(data)
        rng = _draw_rng(data)
        import ort_core as ort

        try:
            sess = ort.InferenceSession(seed.model, session_options())
        except ort.OrtError:
            return  # a seed this provider cannot build: nothing to feed
        feeds = mutate_feeds(data.draw, st, feeds_for(sess, seed.feeds, rng), rng)
        exercise(seed.model, seed.feeds, seed.name, rng, feed_override=feeds)
    _run(request, one)


def test_every_seed_builds_and_runs():
    """The seeds themselves are valid: each builds and runs (so mutations start from working models)."""
    import ort_core as ort

    failures = []
    for seed in seeds():
        rng = np.random.default_rng(0)
        try:
            sess = ort.InferenceSession(seed.model, session_options())
            sess.run(None, feeds_for(sess, seed.feeds, rng))
        except ort.OrtError as e:
            failures.append(f"{seed.name}: {type(e).__name__}: {str(e)[:200]}")
    assert len(seeds()) >= 100
    assert not failures, failures
