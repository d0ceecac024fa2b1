"""Slice's clamping of starts and ends, which differs from Python's in one corner: stepping backward from a start
still below 0 after adding the dim, ONNX clamps the start to 0 (one element) where a Python slice reads nothing.
The CPU kernel and the shape-value helper are held to onnxruntime over a grid of bounds, except where onnxruntime
departs from the spec: it reads an end of INT_MAX with a negative step as "to the first element" (the spec clamps
it to dim - 1, and onnx's shape inference agrees, which onnxruntime then warns about); there they follow the
spec."""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

import ort_core as ort
from ort_core.ir.shape_values import slice_window

from .conftest import make_model

BIG = 2**63 - 1
BOUNDS = (-BIG - 1, -9, -5, -4, -3, -1, 0, 1, 3, 4, 5, 9, BIG)
STEPS = (-3, -1, 1, 2)


def _slice_model(length: int, start: int, end: int, step: int):
    inits = [numpy_helper.from_array(np.array([v], np.int64), n) for n, v in
             (("s", start), ("e", end), ("a", 0), ("t", step))]
    return make_model([helper.make_node("Slice", ["x", "s", "e", "a", "t"], ["y"])],
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [length])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits).SerializeToString()


@pytest.mark.parametrize("length", [0, 1, 4])
def test_the_cpu_kernel_and_shape_values_clamp_as_onnxruntime_does(length):
    x = np.arange(length, dtype=np.float32)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # the kernel, not constant folding
    for start, end, step in itertools.product(BOUNDS, BOUNDS, STEPS):
        model = _slice_model(length, start, end, step)
        if end == BIG and step < 0:
            want = x[:0]  # the spec: end clamped to dim - 1, where a backward slice from at most dim - 1 ends at once
        else:
            want = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        np.testing.assert_array_equal(got, want, err_msg=f"{start}:{end}:{step} of {length}")
        assert list(range(length))[slice_window(length, start, end, step)] == want.astype(int).tolist(), \
            (start, end, step, length)
