"""The enums of onnxruntime.quantization's API (QuantType, QuantFormat, CalibrationMethod), with the same
names and values so that scripts written for onnxruntime work unchanged. Nothing here quantizes."""

from __future__ import annotations

from enum import Enum

import ml_dtypes
import numpy as np
from onnx import TensorProto


class QuantType(Enum):
    """Element type of quantized values. QFLOAT8E4M3FN is listed for compatibility and refused."""

    QInt8 = 0
    QUInt8 = 1
    QFLOAT8E4M3FN = 2
    QInt16 = 3
    QUInt16 = 4
    QInt4 = 5
    QUInt4 = 6

    def __str__(self) -> str:
        return self.name

    @staticmethod
    def from_string(t: str) -> QuantType:
        try:
            return QuantType[t]
        except KeyError:
            raise ValueError(f"unknown QuantType '{t}'") from None

    @property
    def tensor_type(self) -> int:
        return _TENSOR_TYPES[self]


_TENSOR_TYPES = {
    QuantType.QInt8: TensorProto.INT8, QuantType.QUInt8: TensorProto.UINT8,
    QuantType.QFLOAT8E4M3FN: TensorProto.FLOAT8E4M3FN, QuantType.QInt16: TensorProto.INT16,
    QuantType.QUInt16: TensorProto.UINT16, QuantType.QInt4: TensorProto.INT4, QuantType.QUInt4: TensorProto.UINT4,
}


class QuantFormat(Enum):
    """QOperator: quantized operators (QLinearConv, ...); QDQ: QuantizeLinear/DequantizeLinear around float ops."""

    QOperator = 0
    QDQ = 1

    def __str__(self) -> str:
        return self.name

    @staticmethod
    def from_string(format: str) -> QuantFormat:  # noqa: A002 - onnxruntime's argument name
        try:
            return QuantFormat[format]
        except KeyError:
            raise ValueError(f"unknown QuantFormat '{format}'") from None


class CalibrationMethod(Enum):
    """How activation ranges are chosen from calibration data. Distribution is listed and refused."""

    MinMax = 0
    Entropy = 1
    Percentile = 2
    Distribution = 3


# numpy dtype and (min, max) of each integer type quantized values may take
NP_TYPES: dict[int, np.dtype] = {
    TensorProto.INT8: np.dtype(np.int8), TensorProto.UINT8: np.dtype(np.uint8),
    TensorProto.INT16: np.dtype(np.int16), TensorProto.UINT16: np.dtype(np.uint16),
    TensorProto.INT4: np.dtype(ml_dtypes.int4), TensorProto.UINT4: np.dtype(ml_dtypes.uint4),
}
FULL_RANGE = {TensorProto.INT8: (-128, 127), TensorProto.UINT8: (0, 255), TensorProto.INT16: (-32768, 32767),
              TensorProto.UINT16: (0, 65535), TensorProto.INT4: (-8, 7), TensorProto.UINT4: (0, 15)}
SYMMETRIC_RANGE = {TensorProto.INT8: (-127, 127), TensorProto.INT16: (-32767, 32767)}
REDUCED_RANGE = {TensorProto.INT8: (-64, 64), TensorProto.UINT8: (0, 127), TensorProto.INT16: (-16384, 16384),
                 TensorProto.UINT16: (0, 32767), TensorProto.INT4: (-4, 3), TensorProto.UINT4: (0, 7)}
SIGNED = {TensorProto.INT4, TensorProto.INT8, TensorProto.INT16}


def tensor_type_of(qtype: QuantType | int) -> int:
    """The ONNX element type of a QuantType (or an ONNX element type given as is); float8 is refused."""
    t = qtype.tensor_type if isinstance(qtype, QuantType) else int(qtype)
    if t not in NP_TYPES:
        raise ValueError(f"quantization to {qtype} is not supported by ort_core.quantization "
                         "(QInt8, QUInt8, QInt16, QUInt16, QInt4 and QUInt4 are)")
    return t
