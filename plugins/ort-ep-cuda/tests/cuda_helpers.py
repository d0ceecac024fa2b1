"""Helpers shared by the CUDA provider's tests: tiny ONNX models, the core's graph view of them, and the
one-subgraph split the partitioner would make when the provider claims every node."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from ort_ep_cuda import runtime

from ort_core.ir.load import load_model
from ort_core.plugins import FusedSubgraph, GraphView

NAME = "CUDAExecutionProvider"


def make_model(nodes, inputs, outputs, initializers=(), opset=17, extra_opsets=()) -> onnx.ModelProto:
    """``inputs``/``outputs``: (name, elem_type, shape) triples; ``initializers``: (name, array) pairs."""
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
        [numpy_helper.from_array(np.asarray(a), name=n) for n, a in initializers])
    opsets = [helper.make_opsetid("", opset), *[helper.make_opsetid(d, v) for d, v in extra_opsets]]
    return helper.make_model(graph, opset_imports=opsets)


def graph_view(model: onnx.ModelProto) -> GraphView:
    m = load_model(model, infer_shapes="in_process")
    return GraphView(m.graph, dict(m.opset_imports), tuple(n.id for n in m.graph.nodes))


def whole_subgraph(model: onnx.ModelProto) -> FusedSubgraph:
    """Every node in one subgraph, constants baked (the provider declares bakes_weights)."""
    m = load_model(model, infer_shapes="in_process")
    g = m.graph
    nodes = list(g.topological_order())
    constants = g.constant_initializers()
    produced, inputs = set(), []
    for n in nodes:
        for name in n.inputs:
            if name and name not in produced and name not in inputs:
                inputs.append(name)
        produced.update(o for o in n.outputs if o)
    used = {i: constants[i] for i in inputs if i in constants}
    inputs = [i for i in inputs if i not in used]
    outputs = [o.name for o in model.graph.output]
    return FusedSubgraph("CUDAExecutionProvider_0", nodes, inputs, outputs, used, dict(m.opset_imports), g)


F32, F16, I64 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.INT64


def cpu_outputs(model: onnx.ModelProto, feeds: dict) -> list:
    """``model``'s outputs from the CPU provider: the reference every kernel is compared with."""
    import ort_core as ort

    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def gpu_reason() -> str:
    """Why GPU tests cannot run here ("" when they can): cudaGetDeviceCount's status, in words."""
    return runtime.unavailable_reason()


needs_gpu = pytest.mark.skipif(bool(gpu_reason()), reason=f"needs a GPU: {gpu_reason()}")
