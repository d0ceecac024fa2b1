"""onnxruntime.quantization's configuration objects (StaticQuantConfig, DynamicQuantConfig) and
``quantize(model_input, model_output, quant_config)``, which hands them to quantize_static or
quantize_dynamic. Weight-only (MatMulNBits) quantization has its own class, as in onnxruntime:
``matmul_nbits_quantizer.MatMulNBitsQuantizer``."""

from __future__ import annotations

from .dynamic import quantize_dynamic
from .static import quantize_static
from .types import CalibrationMethod, QuantFormat, QuantType


class QuantConfig:
    def __init__(self, activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8, op_types_to_quantize=None,
                 nodes_to_quantize=None, nodes_to_exclude=None, per_channel=False, reduce_range=False,
                 use_external_data_format=False) -> None:
        self.op_types_to_quantize = op_types_to_quantize or []
        self.per_channel, self.reduce_range = per_channel, reduce_range
        self.weight_type, self.activation_type = weight_type, activation_type
        self.nodes_to_quantize, self.nodes_to_exclude = nodes_to_quantize or [], nodes_to_exclude or []
        self.use_external_data_format = use_external_data_format


class StaticQuantConfig(QuantConfig):
    def __init__(self, calibration_data_reader, calibrate_method=CalibrationMethod.MinMax,
                 quant_format=QuantFormat.QDQ, activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                 op_types_to_quantize=None, nodes_to_quantize=None, nodes_to_exclude=None, per_channel=False,
                 reduce_range=False, use_external_data_format=False, calibration_providers=None,
                 extra_options=None) -> None:
        super().__init__(activation_type, weight_type, op_types_to_quantize, nodes_to_quantize, nodes_to_exclude,
                         per_channel, reduce_range, use_external_data_format)
        self.calibration_data_reader = calibration_data_reader
        self.calibrate_method, self.quant_format = calibrate_method, quant_format
        self.calibration_providers = calibration_providers
        self.extra_options = extra_options or {}


class DynamicQuantConfig(QuantConfig):
    def __init__(self, weight_type=QuantType.QInt8, op_types_to_quantize=None, nodes_to_quantize=None,
                 nodes_to_exclude=None, per_channel=False, reduce_range=False, use_external_data_format=False,
                 extra_options=None) -> None:
        super().__init__(QuantType.QUInt8, weight_type, op_types_to_quantize, nodes_to_quantize, nodes_to_exclude,
                         per_channel, reduce_range, use_external_data_format)
        self.extra_options = extra_options or {}


def quantize(model_input, model_output, quant_config: QuantConfig):
    """Quantize ``model_input`` as ``quant_config`` (static or dynamic) says."""
    if not isinstance(quant_config, (StaticQuantConfig, DynamicQuantConfig)):
        raise TypeError(f"{type(quant_config).__name__} is not a StaticQuantConfig or DynamicQuantConfig "
                        "(for weight-only MatMulNBits quantization use "
                        "ort_core.quantization.matmul_nbits_quantizer.MatMulNBitsQuantizer)")
    common = dict(weight_type=quant_config.weight_type, op_types_to_quantize=quant_config.op_types_to_quantize,
                  nodes_to_quantize=quant_config.nodes_to_quantize, nodes_to_exclude=quant_config.nodes_to_exclude,
                  per_channel=quant_config.per_channel, reduce_range=quant_config.reduce_range,
                  use_external_data_format=quant_config.use_external_data_format,
                  extra_options=quant_config.extra_options)
    if isinstance(quant_config, StaticQuantConfig):
        return quantize_static(model_input, model_output, quant_config.calibration_data_reader,
                               calibrate_method=quant_config.calibrate_method, quant_format=quant_config.quant_format,
                               activation_type=quant_config.activation_type,
                               calibration_providers=quant_config.calibration_providers, **common)
    return quantize_dynamic(model_input, model_output, **common)
