"""Runs that must stop: RunOptions.terminate set from another thread stops a long Loop or Scan promptly
with RunTerminated, and a session whose run failed or was stopped stays usable."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from onnx import TensorProto, helper

import ort_core as ort

from .conftest import make_model

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def _counting_loop():
    """y = x + M, one addition per Loop iteration (a long loop for a large M)."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["c_in"], ["c_out"]), helper.make_node("Add", ["acc", "one"], ["acc_out"])],
        "body", [helper.make_tensor_value_info("i", I64, []), helper.make_tensor_value_info("c_in", B, []),
                 helper.make_tensor_value_info("acc", F, [1])],
        [helper.make_tensor_value_info("c_out", B, []), helper.make_tensor_value_info("acc_out", F, [1])],
        initializer=[helper.make_tensor("one", F, [1], [1.0])])
    loop = helper.make_node("Loop", ["m", "", "x"], ["y"], name="counter", body=body)
    return ort.InferenceSession(make_model([loop], [helper.make_tensor_value_info("m", I64, []),
                                                    helper.make_tensor_value_info("x", F, [1])],
                                           [helper.make_tensor_value_info("y", F, [1])]))


def _terminate_after(ro: ort.RunOptions, seconds: float) -> threading.Timer:
    def stop():
        ro.terminate = True
    timer = threading.Timer(seconds, stop)
    timer.start()
    return timer


def test_terminate_stops_a_long_loop_promptly_and_session_stays_usable():
    sess = _counting_loop()
    ro = ort.RunOptions()
    timer = _terminate_after(ro, 0.2)
    t0 = time.perf_counter()
    with pytest.raises(ort.RunTerminated, match=r"node 'counter' \(Loop\).*terminated through RunOptions.terminate"):
        sess.run(None, {"m": np.array(10 ** 12, np.int64), "x": np.zeros(1, np.float32)}, ro)
    elapsed = time.perf_counter() - t0
    timer.join()
    assert elapsed < 5.0, f"terminate took {elapsed:.2f}s to take effect"
    (y,) = sess.run(None, {"m": np.array(5, np.int64), "x": np.zeros(1, np.float32)})
    assert y.tolist() == [5.0]
    ro.terminate = False  # the same RunOptions runs again once reset, as in onnxruntime
    assert sess.run(None, {"m": np.array(3, np.int64), "x": np.ones(1, np.float32)}, ro)[0].tolist() == [4.0]


def test_terminate_stops_a_long_scan():
    body = helper.make_graph([helper.make_node("Add", ["s", "e"], ["s_out"])], "body",
                             [helper.make_tensor_value_info("s", F, [1]), helper.make_tensor_value_info("e", F, [1])],
                             [helper.make_tensor_value_info("s_out", F, [1])])
    scan = helper.make_node("Scan", ["init", "seq"], ["total"], name="scanner", body=body, num_scan_inputs=1)
    sess = ort.InferenceSession(make_model([scan], [helper.make_tensor_value_info("init", F, [1]),
                                                    helper.make_tensor_value_info("seq", F, ["T", 1])],
                                           [helper.make_tensor_value_info("total", F, [1])]))
    ro = ort.RunOptions()
    timer = _terminate_after(ro, 0.2)
    t0 = time.perf_counter()
    with pytest.raises(ort.RunTerminated, match=r"node 'scanner' \(Scan\)"):
        sess.run(None, {"init": np.zeros(1, np.float32), "seq": np.ones((5_000_000, 1), np.float32)}, ro)
    timer.join()
    assert time.perf_counter() - t0 < 5.0
    assert sess.run(None, {"init": np.zeros(1, np.float32), "seq": np.ones((7, 1), np.float32)})[0].tolist() == [7.0]


def test_terminate_only_affects_the_run_it_belongs_to():
    sess = _counting_loop()
    ro = ort.RunOptions()
    results, errors = [], []

    def other():
        results.append(sess.run(None, {"m": np.array(2000, np.int64), "x": np.zeros(1, np.float32)})[0])

    timer = _terminate_after(ro, 0.1)
    thread = threading.Thread(target=other)
    thread.start()
    try:
        sess.run(None, {"m": np.array(10 ** 12, np.int64), "x": np.zeros(1, np.float32)}, ro)
    except ort.RunTerminated as e:
        errors.append(e)
    thread.join()
    timer.join()
    assert errors and results and results[0].tolist() == [2000.0]


def test_failing_body_kernel_leaves_the_session_usable():
    # Reshape inside the Loop body fails when the fed shape does not fit 2 x N
    body = helper.make_graph(
        [helper.make_node("Identity", ["c_in"], ["c_out"]),
         helper.make_node("Reshape", ["v", "shape"], ["r"], name="reshape_in_body"),
         helper.make_node("Reshape", ["r", "back"], ["v_out"])],
        "body", [helper.make_tensor_value_info("i", I64, []), helper.make_tensor_value_info("c_in", B, []),
                 helper.make_tensor_value_info("v", F, None)],
        [helper.make_tensor_value_info("c_out", B, []), helper.make_tensor_value_info("v_out", F, None)],
        initializer=[helper.make_tensor("shape", I64, [2], [2, -1]), helper.make_tensor("back", I64, [1], [-1])])
    loop = helper.make_node("Loop", ["m", "", "x"], ["y"], name="looper", body=body)
    sess = ort.InferenceSession(make_model([loop], [helper.make_tensor_value_info("m", I64, []),
                                                    helper.make_tensor_value_info("x", F, ["N"])],
                                           [helper.make_tensor_value_info("y", F, ["N"])]))
    m = np.array(3, np.int64)
    with pytest.raises(ort.KernelError, match=r"node 'looper' \(Loop\).*node 'reshape_in_body' \(Reshape\)"):
        sess.run(None, {"m": m, "x": np.ones(3, np.float32)})
    assert sess.run(None, {"m": m, "x": np.arange(4, dtype=np.float32)})[0].tolist() == [0, 1, 2, 3]
    with pytest.raises(ort.KernelError):
        sess.run(None, {"m": m, "x": np.ones(5, np.float32)})
    assert sess.run(None, {"m": m, "x": np.ones(2, np.float32)})[0].tolist() == [1, 1]
