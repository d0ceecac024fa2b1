"""ort_core.quantization: onnxruntime.quantization's API (quantize_dynamic, quantize_static, calibration,
quant_pre_process) written with numpy and onnx only, calibrating on ort-core. Scripts change only the
import; where the output deliberately differs from onnxruntime's, the writing module says so."""

from __future__ import annotations

from .calibrate import CalibrationDataReader
from .dynamic import quantize_dynamic
from .preprocess import quant_pre_process
from .quant_config import DynamicQuantConfig, QuantConfig, StaticQuantConfig, quantize
from .static import quantize_static
from .types import CalibrationMethod, QuantFormat, QuantType

__all__ = ["CalibrationDataReader", "CalibrationMethod", "DynamicQuantConfig", "QuantConfig", "QuantFormat",
           "QuantType", "StaticQuantConfig", "quant_pre_process", "quantize", "quantize_dynamic", "quantize_static"]
