"""ort_core.quantization: onnxruntime.quantization's API (quantize_dynamic, quantize_static, calibration,
quant_pre_process, matmul_nbits_quantizer's weight-only MatMulNBits quantization) written with numpy and onnx
only, calibrating on ort-core. Scripts change only the
import; where the output deliberately differs from onnxruntime's, the writing module says so."""

from __future__ import annotations

from . import matmul_nbits_quantizer
from .calibrate import CalibrationDataReader
from .dynamic import quantize_dynamic
from .matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig, MatMulNBitsQuantizer
from .preprocess import quant_pre_process
from .quant_config import DynamicQuantConfig, QuantConfig, StaticQuantConfig, quantize
from .static import quantize_static
from .types import CalibrationMethod, QuantFormat, QuantType

__all__ = ["CalibrationDataReader", "CalibrationMethod", "DefaultWeightOnlyQuantConfig", "DynamicQuantConfig",
           "MatMulNBitsQuantizer", "QuantConfig", "QuantFormat", "QuantType", "StaticQuantConfig",
           "matmul_nbits_quantizer", "quant_pre_process", "quantize", "quantize_dynamic", "quantize_static"]
