"""Soak: one session run from 8 threads for a sustained period agrees with itself, and 1,000 session
create/drop cycles do not grow memory beyond a small bound. Durations are bounded (a few seconds)."""

from __future__ import annotations

import gc
import os
import sys
import threading
import time
import weakref

import numpy as np
import pytest

import ort_core as ort
from ort_core.cli import demo_model_path

SOAK_SECONDS = float(os.environ.get("ORT_CORE_SOAK_SECONDS", "5"))


def test_eight_threads_for_a_sustained_period_give_identical_results():
    sess = ort.InferenceSession(demo_model_path())
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal((k % 3 + 1, 1, 28, 28)).astype(np.float32) for k in range(16)]
    expected = [sess.run(None, {"image": x})[0] for x in inputs]
    deadline = time.monotonic() + SOAK_SECONDS
    runs = [0] * 8
    failures: list[str] = []

    def work(k: int) -> None:
        j = k
        while time.monotonic() < deadline and not failures:
            i = j % len(inputs)
            try:
                (out,) = sess.run(None, {"image": inputs[i]})
            except Exception as e:  # noqa: BLE001 - reported below, with the thread
                failures.append(f"thread {k}: {type(e).__name__}: {e}")
                return
            if not np.array_equal(out, expected[i]):
                failures.append(f"thread {k}, input {i}: result differs from the single-threaded one")
                return
            runs[k] += 1
            j += 3

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures[:3]
    assert all(r > 0 for r in runs), runs


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads RSS from /proc")
def test_thousand_create_drop_cycles_do_not_grow_memory():
    with open(demo_model_path(), "rb") as f:
        data = f.read()
    x = np.zeros((1, 1, 28, 28), np.float32)
    for _ in range(50):  # warm caches (imports, schemas, arena) first
        ort.InferenceSession(data).run(None, {"image": x})
    gc.collect()
    before = _rss_bytes()
    last = None
    for _ in range(1000):
        sess = ort.InferenceSession(data)
        sess.run(None, {"image": x})
        last = weakref.ref(sess)
        del sess
    gc.collect()
    grown = _rss_bytes() - before
    assert last() is None, "the last session is still referenced after being dropped"
    assert grown < 20 << 20, f"RSS grew by {grown / 2 ** 20:.1f} MiB over 1000 sessions"
