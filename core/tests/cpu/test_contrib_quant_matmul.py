"""com.microsoft DynamicQuantizeMatMul, MatMulIntegerToFloat and QGemm against onnxruntime 1.32.

The integer part is exact and the float rescale is done in onnxruntime's float32 order, so float outputs
are compared at rtol 1e-6 (a few float32 ulps, room for an FMA elsewhere; they are bit-identical on the
x86-64 machine these were written on) and quantized outputs exactly."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import ort_core
from ort_core.errors import KernelError
from ort_core.ir.types import elem_type_of

from .kernel_harness import check_onnxruntime, run_ours

MS = "com.microsoft"
RTOL = 1e-6


def f32(v):
    return np.asarray(v, np.float32)


def ints(rng, shape, dtype):
    info = np.iinfo(dtype)
    return rng.integers(info.min, int(info.max) + 1, shape).astype(dtype)


def ours(op, inputs, attrs=None):
    return run_ours(op, inputs, attrs, opset=1, domain=MS)


def run_sessions(op, inputs, attrs, constants, out_type):
    """Outputs of ort_core.InferenceSession and of onnxruntime on one com.microsoft node whose inputs at
    positions ``constants`` are initializers (the others are fed): the graph-constant build path."""
    ort = pytest.importorskip("onnxruntime")
    names = [f"x{i}" if x is not None else "" for i, x in enumerate(inputs)]
    inits, g_inputs, feeds = [], [], {}
    for i, (name, x) in enumerate(zip(names, inputs)):
        if not name:
            continue
        if i in constants:
            inits.append(numpy_helper.from_array(x, name))
        else:
            g_inputs.append(helper.make_tensor_value_info(name, elem_type_of(x.dtype), x.shape))
            feeds[name] = x
    node = helper.make_node(op, names, ["y"], domain=MS, **attrs)
    graph = helper.make_graph([node], "g", g_inputs, [helper.make_tensor_value_info("y", out_type, None)],
                              initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(MS, 1)])
    model.ir_version = 8
    data = model.SerializeToString()
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    ref = ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    return ort_core.InferenceSession(data).run(None, feeds)[0], ref


# ---------------------------------------------------------------------------------------------
# DynamicQuantizeMatMul
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("k", [5, 300])  # float32 and float64 exact accumulation
@pytest.mark.parametrize("b_type", [np.int8, np.uint8])
def test_dynamic_quantize_matmul_per_tensor_and_column(k, b_type):
    rng = np.random.default_rng(k)
    a = rng.standard_normal((3, k)).astype(np.float32)
    b = ints(rng, (k, 4), b_type)
    scales = (rng.random(4) * 0.05 + 0.01).astype(np.float32)
    bias = rng.standard_normal(4).astype(np.float32)
    check_onnxruntime("DynamicQuantizeMatMul", [a, b, f32(0.02)], rtol=RTOL, atol=0)
    check_onnxruntime("DynamicQuantizeMatMul", [a, b, f32([0.02]), np.array([7], b_type), bias], rtol=RTOL, atol=0)
    check_onnxruntime("DynamicQuantizeMatMul", [a, b, scales, ints(rng, 4, b_type), bias], rtol=RTOL, atol=0)
    check_onnxruntime("DynamicQuantizeMatMul", [a, b, f32(0.02), ints(rng, 4, b_type)], rtol=RTOL, atol=0)


def test_dynamic_quantize_matmul_batched_and_late_scale():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((2, 3, 6)).astype(np.float32)
    b = ints(rng, (2, 6, 4), np.uint8)
    bias = rng.standard_normal(4).astype(np.float32)
    # per batch and column: B's shape with 1 in place of K
    check_onnxruntime("DynamicQuantizeMatMul", [a, b, rng.random((2, 1, 4)).astype(np.float32),
                                                ints(rng, (2, 1, 4), np.uint8), bias], rtol=RTOL, atol=0)
    # a scale of another shape multiplies the output, bias included, afterwards
    y = check_onnxruntime("DynamicQuantizeMatMul", [a, b, rng.random((3, 1)).astype(np.float32), None, bias],
                          rtol=RTOL, atol=0)[0]
    assert y.shape == (2, 3, 4)
    check_onnxruntime("DynamicQuantizeMatMul", [a[0, 0].copy(), b[0].copy(), f32(0.1)], rtol=RTOL, atol=0)


def test_dynamic_quantize_matmul_uses_dynamic_quantize_linear():
    """Y is exactly the integer product of DynamicQuantizeLinear(A) and B, rescaled."""
    rng = np.random.default_rng(2)
    a = rng.standard_normal((4, 8)).astype(np.float32)
    b = ints(rng, (8, 3), np.int8)
    qa, a_scale, a_zp = run_ours("DynamicQuantizeLinear", [a], opset=11, n_outputs=3)
    acc = (qa.astype(np.int64) - int(a_zp)) @ b.astype(np.int64)
    y = ours("DynamicQuantizeMatMul", [a, b, f32(0.25)])[0]
    np.testing.assert_array_equal(y, acc.astype(np.float32) * (a_scale * np.float32(0.25)))


def test_dynamic_quantize_matmul_errors():
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((2, 4)).astype(np.float32), ints(rng, (4, 3), np.int8)
    with pytest.raises(KernelError, match="test_DynamicQuantizeMatMul.*do not match"):
        ours("DynamicQuantizeMatMul", [a, b[:3].copy(), f32(1)])
    with pytest.raises(KernelError, match="test_DynamicQuantizeMatMul.*b_zero_point"):
        ours("DynamicQuantizeMatMul", [a, b, f32(1), np.zeros(2, np.int8)])
    with pytest.raises(KernelError, match="test_DynamicQuantizeMatMul.*zero point"):
        ours("DynamicQuantizeMatMul", [a, b, f32(1), np.zeros(3, np.uint8)])
    with pytest.raises(KernelError, match="test_DynamicQuantizeMatMul.*bias"):
        ours("DynamicQuantizeMatMul", [a, b, f32(1), None, f32([1, 2])])
    with pytest.raises(KernelError, match="test_DynamicQuantizeMatMul.*float32"):
        ours("DynamicQuantizeMatMul", [a.astype(np.float16), b, f32(1)])
    with pytest.raises(KernelError, match="test_DynamicQuantizeMatMul.*broadcast"):
        ours("DynamicQuantizeMatMul", [a, b, f32(np.ones((5, 1)))])


# ---------------------------------------------------------------------------------------------
# MatMulIntegerToFloat
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("k", [5, 300])
@pytest.mark.parametrize("a_type,b_type", [(np.uint8, np.int8), (np.uint8, np.uint8), (np.int8, np.int8)])
def test_matmul_integer_to_float(k, a_type, b_type):
    rng = np.random.default_rng(k)
    a, b = ints(rng, (3, k), a_type), ints(rng, (k, 4), b_type)
    scales = (rng.random(4) * 0.05).astype(np.float32)
    bias = rng.standard_normal(4).astype(np.float32)
    check_onnxruntime("MatMulIntegerToFloat", [a, b, f32(0.1), f32(0.3)], rtol=RTOL, atol=0)
    check_onnxruntime("MatMulIntegerToFloat", [a, b, f32(0.1), scales, ints(rng, (), a_type), ints(rng, 4, b_type),
                                               bias], rtol=RTOL, atol=0)


def test_matmul_integer_to_float_scale_shapes_and_float16():
    rng = np.random.default_rng(4)
    a, b = ints(rng, (2, 3, 7), np.uint8), ints(rng, (7, 4), np.int8)
    scales = (rng.random(4) * 0.05).astype(np.float32)
    bias = rng.standard_normal(4).astype(np.float32)
    # per-row a_scale: multiplied into the output after the bias
    check_onnxruntime("MatMulIntegerToFloat", [a, b, rng.random((3, 1)).astype(np.float32), scales, None, None, bias],
                      rtol=RTOL, atol=0)
    # a per-column scale given as a_scale is swapped with b_scale
    check_onnxruntime("MatMulIntegerToFloat", [a, b, scales, f32(0.5), None, None, bias], rtol=RTOL, atol=0)
    y = check_onnxruntime("MatMulIntegerToFloat", [a, b, f32(0.01).astype(np.float16), scales.astype(np.float16),
                                                   None, None, bias.astype(np.float16)], rtol=RTOL, atol=0)[0]
    assert y.dtype == np.float16


def test_matmul_integer_to_float_errors():
    rng = np.random.default_rng(5)
    a, b = ints(rng, (2, 4), np.uint8), ints(rng, (4, 3), np.int8)
    with pytest.raises(KernelError, match="test_MatMulIntegerToFloat.*a_zero_point must be a scalar"):
        ours("MatMulIntegerToFloat", [a, b, f32(1), f32(1), np.zeros(2, np.uint8)])
    with pytest.raises(KernelError, match="test_MatMulIntegerToFloat.*zero point"):
        ours("MatMulIntegerToFloat", [a, b, f32(1), f32(1), np.zeros((), np.int8)])
    with pytest.raises(KernelError, match="test_MatMulIntegerToFloat.*scales must"):
        ours("MatMulIntegerToFloat", [a, b, f32(1), np.ones((), np.float16)])
    with pytest.raises(KernelError, match="test_MatMulIntegerToFloat.*'B' must be int8 or uint8"):
        ours("MatMulIntegerToFloat", [a, b.astype(np.int32), f32(1), f32(1)])
    with pytest.raises(KernelError, match="test_MatMulIntegerToFloat.*batch dimensions"):
        ours("MatMulIntegerToFloat", [ints(rng, (2, 2, 4), np.uint8), ints(rng, (3, 4, 3), np.int8), f32(1), f32(1)])


def test_constant_b_through_sessions():
    """B and its zero point as initializers: shifted once at build time, same result as onnxruntime."""
    rng = np.random.default_rng(6)
    a, b = rng.standard_normal((5, 300)).astype(np.float32), ints(rng, (300, 8), np.int8)
    scales, zp = (rng.random(8) * 0.01).astype(np.float32), ints(rng, 8, np.int8)
    bias = rng.standard_normal(8).astype(np.float32)
    y, ref = run_sessions("DynamicQuantizeMatMul", [a, b, scales, zp, bias], {}, {1, 2, 3, 4}, onnx.TensorProto.FLOAT)
    np.testing.assert_allclose(y, ref, rtol=RTOL, atol=0)
    qa = ints(rng, (5, 300), np.uint8)
    y, ref = run_sessions("MatMulIntegerToFloat", [qa, b, f32(0.1), scales, np.array(3, np.uint8), zp, bias], {},
                          {1, 3, 5}, onnx.TensorProto.FLOAT)
    np.testing.assert_allclose(y, ref, rtol=RTOL, atol=0)


# ---------------------------------------------------------------------------------------------
# QGemm
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("k", [5, 300])
def test_qgemm_float_output(k):
    rng = np.random.default_rng(k)
    a, b = ints(rng, (3, k), np.uint8), ints(rng, (k, 4), np.int8)
    scales = (rng.random(4) * 0.05).astype(np.float32)
    zp_a, zp_b = np.array(3, np.uint8), np.array(-2, np.int8)
    check_onnxruntime("QGemm", [a, f32(0.1), zp_a, b, f32(0.2), zp_b], {"alpha": 0.7}, rtol=RTOL, atol=0)
    # per-column b, transposed operands, C broadcast per row
    check_onnxruntime("QGemm", [a.T.copy(), f32(0.1), zp_a, b.T.copy(), scales, ints(rng, 4, np.int8),
                                ints(rng, (3, 1), np.int32)], {"transA": 1, "transB": 1}, rtol=RTOL, atol=0)
    # y_scale without y_zero_point divides the float output
    check_onnxruntime("QGemm", [a, f32(0.1), zp_a, b, f32(0.2), zp_b, None, f32(0.3)], rtol=RTOL, atol=0)


@pytest.mark.parametrize("c_shape", [(), (1,), (4,), (1, 4), (3, 1), (3, 4)])
def test_qgemm_quantized_output(c_shape):
    rng = np.random.default_rng(len(c_shape))
    a, b = ints(rng, (3, 40), np.uint8), ints(rng, (40, 4), np.uint8)
    c = rng.integers(-20000, 20000, c_shape).astype(np.int32)
    y = check_onnxruntime("QGemm", [a, f32(0.01), np.array(120, np.uint8), b, f32(0.02), np.array(130, np.uint8), c,
                                    f32(0.4), np.array(128, np.uint8)], {"alpha": 1.5}, rtol=0, atol=0)[0]
    assert y.dtype == np.uint8 and 0 < np.count_nonzero((y > 0) & (y < 255))  # not all saturated
    ai, bi = ints(rng, (40, 3), np.int8), ints(rng, (40, 4), np.int8)
    check_onnxruntime("QGemm", [ai, f32(0.01), np.array(-3, np.int8), bi, (rng.random(4) * 0.02).astype(np.float32),
                                ints(rng, 4, np.int8), c, f32(0.3), np.array(-5, np.int8)], {"transA": 1},
                      rtol=0, atol=0)


def test_qgemm_k0_gives_scaled_bias():
    """onnxruntime 1.32 writes bytes into the float output here; we give C times the multiplier."""
    a, b = np.zeros((2, 0), np.uint8), np.zeros((0, 3), np.int8)
    c = np.array([10, -20, 30], np.int32)
    y = ours("QGemm", [a, f32(0.5), np.array(1, np.uint8), b, f32(0.25), np.array(0, np.int8), c], {"alpha": 2.0})[0]
    np.testing.assert_array_equal(y, np.tile(c * np.float32(0.25), (2, 1)))


def test_qgemm_errors():
    rng = np.random.default_rng(7)
    a, b = ints(rng, (2, 4), np.uint8), ints(rng, (4, 3), np.int8)
    zp_a, zp_b = np.array(0, np.uint8), np.array(0, np.int8)
    with pytest.raises(KernelError, match="test_QGemm.*2-D"):
        ours("QGemm", [a[None], f32(1), zp_a, b, f32(1), zp_b])
    with pytest.raises(KernelError, match="test_QGemm.*do not match"):
        ours("QGemm", [a, f32(1), zp_a, b, f32(1), zp_b], {"transB": 1})
    with pytest.raises(KernelError, match="test_QGemm.*a_scale and y_scale must be scalars"):
        ours("QGemm", [a, f32([1, 1]), zp_a, b, f32(1), zp_b])
    with pytest.raises(KernelError, match="test_QGemm.*a_zero_point must be a scalar"):
        ours("QGemm", [a, f32(1), np.zeros(2, np.uint8), b, f32(1), zp_b])
    with pytest.raises(KernelError, match="test_QGemm.*b_scale and b_zero_point"):
        ours("QGemm", [a, f32(1), zp_a, b, f32([1, 1, 1]), zp_b])
    with pytest.raises(KernelError, match="test_QGemm.*C must be int32"):
        ours("QGemm", [a, f32(1), zp_a, b, f32(1), zp_b, np.zeros(2, np.int32)])
    with pytest.raises(KernelError, match="test_QGemm.*C must be int32"):
        ours("QGemm", [a, f32(1), zp_a, b, f32(1), zp_b, np.zeros(3, np.float32)])
    with pytest.raises(KernelError, match="test_QGemm.*y_zero_point"):
        ours("QGemm", [a, f32(1), zp_a, b, f32(1), zp_b, None, None, np.array(0, np.uint8)])
    with pytest.raises(KernelError, match="test_QGemm.*float32"):
        ours("QGemm", [a, f32(1).astype(np.float16), zp_a, b, f32(1), zp_b])
