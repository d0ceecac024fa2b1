"""quantize_static: calibrate the float model on ort-core, then write it in QDQ or QOperator form.
The argument list is onnxruntime.quantization.quantize_static's; see qdq.py and qoperator.py for what
each form writes and where it deliberately differs from onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx

from . import graph
from .calibrate import compute_ranges
from .config import QDQ_OPS, QOPERATOR_OPS, Config
from .qdq import quantize_qdq
from .types import CalibrationMethod, QuantFormat, QuantType

WIDE_TYPES = {onnx.TensorProto.INT16, onnx.TensorProto.UINT16, onnx.TensorProto.INT4, onnx.TensorProto.UINT4}


def quantize_static(model_input, model_output, calibration_data_reader, quant_format=QuantFormat.QDQ,
                    op_types_to_quantize=None, per_channel=False, reduce_range=False,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8, nodes_to_quantize=None,
                    nodes_to_exclude=None, use_external_data_format=False,
                    calibrate_method=CalibrationMethod.MinMax, calibration_providers=None, extra_options=None):
    """Quantize ``model_input`` (a path or ModelProto) with activation ranges from
    ``calibration_data_reader`` and save it to ``model_output``. ``calibration_providers`` is accepted
    for compatibility; calibration runs on ort-core's CPU provider."""
    fmt = quant_format if isinstance(quant_format, QuantFormat) else QuantFormat(quant_format)
    cfg = Config.make(op_types_to_quantize, QDQ_OPS if fmt == QuantFormat.QDQ else QOPERATOR_OPS, per_channel,
                      reduce_range, activation_type, weight_type, nodes_to_quantize, nodes_to_exclude, extra_options)
    model = graph.load(model_input)
    if {cfg.activation_type, cfg.weight_type} & WIDE_TYPES:
        if fmt != QuantFormat.QDQ:
            raise ValueError("16-bit and 4-bit types are written in the QDQ format only")
        model = graph.upgrade_opset(model, 21)
    # QuantizeLinear/DequantizeLinear take a per-channel axis from opset 13; below 11, onnxruntime's quantizer
    # moves models to 11 too
    model = graph.upgrade_opset(model, 13 if per_channel else 11)
    ed = graph.Editor(model)
    tensors = tensors_to_calibrate(ed, cfg)
    ranges = compute_ranges(model, tensors, calibration_data_reader, CalibrationMethod(calibrate_method),
                            cfg.extra) if tensors else {}
    adjust_ranges(ed, ranges, cfg)
    if fmt == QuantFormat.QDQ:
        quantize_qdq(ed, ranges, cfg)
    else:
        from .qoperator import quantize_qoperator

        quantize_qoperator(ed, ranges, cfg)
    out = ed.finish()
    graph.save(out, model_output, use_external_data_format)
    return out


def tensors_to_calibrate(ed: graph.Editor, cfg: Config) -> list[str]:
    """Float, non-constant inputs and outputs of the nodes the configuration quantizes."""
    names: dict[str, None] = {}
    for node in ed.nodes():
        if cfg.wants(node):
            for name in (*node.input, *node.output):
                if name and ed.is_float(name) and not ed.is_initializer(name):
                    names[name] = None
    return list(names)


def adjust_ranges(ed: graph.Editor, ranges: dict, cfg: Config) -> None:
    """Relu/Clip inputs take their output's range (so the activation can be folded); Softmax outputs
    are [0, 1] (onnxruntime's adjust_tensor_ranges)."""
    for node in ed.nodes():
        if not cfg.wants(node):
            continue
        if node.op_type in ("Relu", "Clip"):
            src, dst = node.input[0], node.output[0]
            if len(ed.consumers(src)) == 1 and src in ranges and dst in ranges:
                ranges[src] = ranges[dst]
        elif node.op_type == "Softmax" and node.output[0] in ranges:
            ranges[node.output[0]] = (np.float32(0.0), np.float32(1.0))
