"""Tensor-creating kernels (Constant, ConstantOfShape, Range, EyeLike) against the reference."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from ort_core.errors import KernelError

from .kernel_harness import check, run_ours

rng = np.random.default_rng(2)


# ---------------------------------------------------------------------------------- Constant

@pytest.mark.parametrize("value", [
    rng.standard_normal((2, 3)).astype(np.float32),
    np.arange(5, dtype=np.int64),
    np.array(True),
    np.array([1, 2], np.uint8),
    np.array(3.5, np.float64),
])
@pytest.mark.parametrize("opset", [1, 9, 13, 21])
def test_constant_value_tensor(value, opset):
    if opset == 1 and value.dtype.kind != "f":
        return
    (y,) = run_ours("Constant", [], {"value": value}, opset=opset)
    assert y.dtype == value.dtype and y.shape == value.shape
    np.testing.assert_array_equal(y, value)
    # the reference evaluator agrees (it needs the attribute as a TensorProto)
    node = helper.make_node("Constant", [], ["y"], value=numpy_helper.from_array(value))
    graph = helper.make_graph([node], "g", [], [helper.make_empty_tensor_value_info("y")])
    from onnx.reference import ReferenceEvaluator
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    np.testing.assert_array_equal(ReferenceEvaluator(model).run(None, {})[0], y)


def test_constant_scalar_and_list_attributes():
    cases = {
        "value_float": (2.5, np.float32, ()),
        "value_floats": ([1.0, 2.0], np.float32, (2,)),
        "value_int": (7, np.int64, ()),
        "value_ints": ([1, -2, 3], np.int64, (3,)),
    }
    for name, (v, dtype, shape) in cases.items():
        (y,) = check("Constant", [], {name: v}, opset=13)
        assert y.dtype == dtype and y.shape == shape
        np.testing.assert_array_equal(y, v)


def test_constant_strings():
    (y,) = run_ours("Constant", [], {"value_string": "hello"}, opset=13)
    assert y.shape == () and y.dtype == object and y[()] == "hello"
    (y,) = run_ours("Constant", [], {"value_strings": ["a", b"b"]}, opset=13)
    assert y.dtype == object and list(y) == ["a", "b"]


def test_constant_output_is_stable_and_read_only():
    value = np.arange(4, dtype=np.float32)
    kernel_out = run_ours("Constant", [], {"value": value}, opset=13)[0]
    value[0] = 100  # changing the attribute array afterwards does not leak into the kernel
    assert kernel_out[0] == 0
    with pytest.raises(ValueError):
        kernel_out[1] = 5


def test_constant_sparse_value():
    sparse = helper.make_sparse_tensor(
        numpy_helper.from_array(np.array([5.0, 6.0], np.float32), "values"),
        numpy_helper.from_array(np.array([1, 7], np.int64), "indices"), [2, 4])
    (y,) = run_ours("Constant", [], {"sparse_value": sparse}, opset=13)
    expected = np.zeros((2, 4), np.float32)
    expected.reshape(-1)[[1, 7]] = [5, 6]
    np.testing.assert_array_equal(y, expected)
    coo = helper.make_sparse_tensor(
        numpy_helper.from_array(np.array([1, 2], np.int32), "values"),
        numpy_helper.from_array(np.array([[0, 1], [1, 3]], np.int64), "indices"), [2, 4])
    (y,) = run_ours("Constant", [], {"sparse_value": coo}, opset=13)
    assert y.dtype == np.int32 and y[0, 1] == 1 and y[1, 3] == 2 and y.sum() == 3


def test_constant_errors():
    with pytest.raises(KernelError, match="exactly one"):
        run_ours("Constant", [], {}, opset=13)
    with pytest.raises(KernelError, match="exactly one"):
        run_ours("Constant", [], {"value_int": 1, "value_float": 2.0}, opset=13)


# ---------------------------------------------------------------------------------- ConstantOfShape

@pytest.mark.parametrize("shape", [(2, 3), (0, 4), (), (5,)])
@pytest.mark.parametrize("value", [None, np.array([7], np.int32), np.array([1.5], np.float64),
                                   np.array([True]), np.array([0], np.int64)])
def test_constant_of_shape(shape, value):
    (y,) = run_ours("ConstantOfShape", [np.array(shape, np.int64)],
                    {} if value is None else {"value": value}, opset=20)
    expected_dtype = np.float32 if value is None else value.dtype
    assert y.dtype == expected_dtype and y.shape == shape
    np.testing.assert_array_equal(y, 0 if value is None else value[0])
    if value is None:
        check("ConstantOfShape", [np.array(shape, np.int64)], opset=9)


def test_constant_of_shape_errors():
    with pytest.raises(KernelError, match="one element"):
        run_ours("ConstantOfShape", [np.array([2], np.int64)], {"value": np.zeros(2)}, opset=9)
    with pytest.raises(KernelError, match="negative"):
        run_ours("ConstantOfShape", [np.array([-1], np.int64)], opset=9)


# ---------------------------------------------------------------------------------- Range

@pytest.mark.parametrize("start,limit,delta", [(3, 9, 3), (10, 4, -2), (0, 10, 3), (1, 1, 1),
                                               (5, 1, 1), (-7, 8, 4), (2, -9, -5)])
@pytest.mark.parametrize("dtype", [np.int16, np.int32, np.int64, np.float32, np.float64])
def test_range(start, limit, delta, dtype):
    (y,) = check("Range", [np.array(start, dtype), np.array(limit, dtype), np.array(delta, dtype)],
                 opset=11)
    assert y.dtype == dtype
    np.testing.assert_array_equal(y, np.arange(start, limit, delta))


def test_range_fractional_and_float16():
    args = [np.array(v, np.float32) for v in (0.1, 1.0, 0.3)]
    (y,) = check("Range", args, opset=11)
    assert y.shape == (3,)
    h = [np.array(v, np.float16) for v in (1000.0, 1010.0, 0.5)]
    (y,) = check("Range", h, opset=27)
    assert y.dtype == np.float16 and y.shape == (20,)
    with pytest.raises(KernelError, match="zero"):
        run_ours("Range", [np.array(1, np.int64), np.array(5, np.int64), np.array(0, np.int64)],
                 opset=11)
    with pytest.raises(KernelError, match="stash_type"):
        run_ours("Range", h, {"stash_type": TensorProto.INT32}, opset=27)


# ---------------------------------------------------------------------------------- EyeLike

@pytest.mark.parametrize("shape", [(3, 3), (2, 5), (4, 2)])
@pytest.mark.parametrize("k", [0, 1, -1, 7])
def test_eye_like(shape, k):
    x = np.zeros(shape, np.int32)
    (y,) = check("EyeLike", [x], {"k": k}, opset=22)
    assert y.dtype == np.int32
    (y,) = check("EyeLike", [x], {"k": k, "dtype": TensorProto.FLOAT}, opset=9)
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y, np.eye(*shape, k=k))


def test_eye_like_errors():
    with pytest.raises(KernelError, match="2-D"):
        run_ours("EyeLike", [np.zeros((2, 2, 2), np.float32)], opset=9)
