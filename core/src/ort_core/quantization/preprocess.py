"""quant_pre_process: the float model made ready for quantization: ort-core's basic graph optimizations
(constant folding, Identity/Dropout removal, Conv+BatchNorm/Mul/Add folding, dead code) then onnx's
shape inference; the result is standard ONNX that onnxruntime loads too.

Deliberate difference from onnxruntime: its symbolic shape inference is not run (onnx's shape
inference with data propagation stands in for it); skip_symbolic_shape, auto_merge, int_max and
guess_output_rank are accepted and ignored."""

from __future__ import annotations

import os
import tempfile
import warnings

import onnx

from . import graph

PRE_PROCESS_KEY = "onnx.quant.pre_process"  # the metadata onnxruntime's quantizers look for


def quant_pre_process(input_model=None, output_model_path=None, skip_optimization: bool = False,
                      skip_onnx_shape: bool = False, skip_symbolic_shape: bool = False, auto_merge: bool = False,
                      int_max: int = 2**31 - 1, guess_output_rank: bool = False, verbose: int = 0,
                      save_as_external_data: bool = False, all_tensors_to_one_file: bool = False,
                      external_data_location: str | None = None, external_data_size_threshold: int = 1024,
                      **deprecated_kwargs) -> None:
    """Optimize (level basic) and shape-infer ``input_model`` (a path or ModelProto); save to
    ``output_model_path``."""
    if "input_model_path" in deprecated_kwargs:
        input_model = deprecated_kwargs.pop("input_model_path")
    if input_model is None or output_model_path is None:
        raise ValueError("quant_pre_process needs input_model and output_model_path")
    model = graph.load(input_model)
    if not skip_optimization:
        model = optimize_basic(model)
    if not skip_onnx_shape:
        del model.graph.value_info[:]
        model = onnx.shape_inference.infer_shapes(model, data_prop=True)
    meta = {p.key: p for p in model.metadata_props}
    if PRE_PROCESS_KEY in meta:
        meta[PRE_PROCESS_KEY].value = "onnxruntime.quant"
    else:
        model.metadata_props.add(key=PRE_PROCESS_KEY, value="onnxruntime.quant")
    if save_as_external_data:
        onnx.save_model(model, str(output_model_path), save_as_external_data=True,
                        all_tensors_to_one_file=all_tensors_to_one_file, location=external_data_location,
                        size_threshold=external_data_size_threshold)
    else:
        onnx.save_model(model, str(output_model_path))


def optimize_basic(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` after ort-core's provider-independent passes at level basic (no contrib ops)."""
    import ort_core  # the session stands above this package; imported when it is used

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "optimized.onnx")
        so = ort_core.SessionOptions()
        so.graph_optimization_level = ort_core.GraphOptimizationLevel.ORT_ENABLE_BASIC
        so.optimized_model_filepath = out
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ort_core.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        return onnx.load(out)
