"""Small programs run on one OpenMP thread (waking a second costs more than their primitives take), and the
calling thread's OpenMP setting comes back afterwards; larger ones use the configured threads."""

from __future__ import annotations

import numpy as np
import pytest
from ort_ep_onednn import kernel as K
from ort_ep_onednn import library as L

if L.unavailable_reason():
    pytest.skip(f"oneDNN unavailable: {L.unavailable_reason()}", allow_module_level=True)

from onnx import helper  # noqa: E402
from test_onednn_plugin import CPU, const, make_model, session, vi  # noqa: E402


def conv_model(size):
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])]
    return make_model(nodes, [vi("x", [1, 8, size, size])], [vi("y", [1, 8, size, size])], [const("w", [8, 8, 3, 3])])


@pytest.mark.parametrize("size,small", [(8, True), (96, False)])
def test_programs_below_the_size_run_on_one_thread_and_restore_the_setting(monkeypatch, size, small):
    lib = L.library()
    calls = []
    real = L.Library.set_num_threads
    monkeypatch.setattr(L.Library, "set_num_threads", lambda self, n: (calls.append(n), real(self, n))[1])
    seen = []
    compiled = K.Compiled.__init__

    def spy(self, lib_, program):
        compiled(self, lib_, program)
        seen.append(self.small)

    monkeypatch.setattr(K.Compiled, "__init__", spy)
    model = conv_model(size)
    x = np.random.default_rng(1).standard_normal((1, 8, size, size)).astype(np.float32)
    got = session(model).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, session(model, (CPU,)).run(None, {"x": x})[0], rtol=1e-4, atol=1e-5)
    assert seen == [small]
    if small:
        assert calls[-2:] == [1, lib.default_threads]  # one thread for it, then back to OpenMP's own count
    else:
        assert 1 not in calls
    assert lib.gomp.omp_get_max_threads() == lib.default_threads
