"""BitCast: bit patterns preserved across same-width types."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto

from ort_core.errors import KernelError

from .kernel_harness import run_ours


@pytest.mark.parametrize("src,to,dst", [
    (np.float32, TensorProto.INT32, np.int32),
    (np.int64, TensorProto.DOUBLE, np.float64),
    (np.uint16, TensorProto.FLOAT16, np.float16),
    (np.uint16, TensorProto.BFLOAT16, ml_dtypes.bfloat16),
    (np.int8, TensorProto.FLOAT8E4M3FN, ml_dtypes.float8_e4m3fn),
    (np.complex64, TensorProto.UINT64, np.uint64),
])
def test_bitcast_same_bits(src, to, dst):
    x = (np.arange(12).reshape(3, 4) * 37).astype(src)
    (y,) = run_ours("BitCast", [x], {"to": to}, opset=26)
    assert y.dtype == np.dtype(dst) and y.shape == x.shape
    np.testing.assert_array_equal(y.view(np.uint8), x.view(np.uint8))


def test_bitcast_values_scalar_and_strided():
    (y,) = run_ours("BitCast", [np.array(1.0, np.float32)], {"to": TensorProto.INT32}, opset=26)
    assert y.shape == () and int(y) == 0x3F800000
    x = np.arange(8, dtype=np.int32).reshape(2, 4)[:, ::2]  # not contiguous
    (y,) = run_ours("BitCast", [x], {"to": TensorProto.UINT32}, opset=26)
    np.testing.assert_array_equal(y, [[0, 2], [4, 6]])


def test_bitcast_bool_and_sub_byte():
    (y,) = run_ours("BitCast", [np.array([0, 1, 2], np.uint8)], {"to": TensorProto.BOOL}, opset=26)
    assert y.dtype == np.bool_ and y.tolist() == [False, True, True]
    (y,) = run_ours("BitCast", [np.array([-1, 7, -8], ml_dtypes.int4)], {"to": TensorProto.UINT4},
                    opset=26)
    assert y.dtype == np.dtype(ml_dtypes.uint4) and y.astype(np.int32).tolist() == [15, 7, 8]
    (y,) = run_ours("BitCast", [np.array([15, 1], ml_dtypes.uint4)], {"to": TensorProto.FLOAT4E2M1},
                    opset=26)
    assert y.astype(np.float32).tolist() == [-6.0, 0.5]


def test_bitcast_errors():
    with pytest.raises(KernelError, match="widths differ"):
        run_ours("BitCast", [np.zeros(2, np.float32)], {"to": TensorProto.INT64}, opset=26)
    with pytest.raises(KernelError, match="string"):
        run_ours("BitCast", [np.zeros(2, np.float32)], {"to": TensorProto.STRING}, opset=26)
