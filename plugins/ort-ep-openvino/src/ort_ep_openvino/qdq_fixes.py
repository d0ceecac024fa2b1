"""Rewrites of a subgraph's ONNX model before OpenVINO reads it, for quantized patterns that OpenVINO computes
wrongly when the QDQ graph reaches it whole (``enable_qdq_optimizer``).

- A ConvTranspose whose weights are ``DequantizeLinear`` of a constant with a non-zero zero point (uint8
  weights, as onnxruntime's quantizer makes them for weights that are Constant nodes rather than
  initializers): OpenVINO 2026.4's int8 ConvolutionBackpropData drops the weight zero point when the input's
  zero point is 0 (a 24-channel 2x2 stride-2 layer was off by 60 where its outputs reach 7). The weights are
  dequantized here, as ONNX defines it in float32, so that layer runs in float and everything else stays.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper


def dequantize_transposed_weights(proto: onnx.ModelProto) -> int:
    """Replace such ConvTranspose weights with float32 constants (in place); the number replaced."""
    graph = proto.graph
    inits = {t.name: t for t in graph.initializer}
    made = {o: n for n in graph.node for o in n.output}
    readers: dict[str, int] = {}
    for n in graph.node:
        for i in n.input:
            readers[i] = readers.get(i, 0) + 1
    outputs = {o.name for o in graph.output}
    count, drop = 0, []
    for node in graph.node:
        if node.op_type != "ConvTranspose" or node.domain not in ("", "ai.onnx") or len(node.input) < 2:
            continue
        dq = made.get(node.input[1])
        if dq is None or dq.op_type != "DequantizeLinear" or len(dq.input) < 3 \
                or any(i not in inits for i in dq.input if i):
            continue
        q, scale, zp = (numpy_helper.to_array(inits[i]) for i in dq.input[:3])
        if not np.any(zp) or scale.ndim > 1:
            continue
        axis = next((a.i for a in dq.attribute if a.name == "axis"), 1)
        shape = [1] * q.ndim
        if scale.size > 1:
            shape[axis % q.ndim] = scale.size
        w = ((q.astype(np.int32) - zp.astype(np.int32).reshape(shape)).astype(np.float32)
             * scale.astype(np.float32).reshape(shape))
        name = f"{node.input[1]}__dequantized"
        graph.initializer.append(numpy_helper.from_array(w, name))
        if readers.get(node.input[1], 0) == 1 and node.input[1] not in outputs:
            drop.append(dq)
        node.input[1] = name
        count += 1
    for dq in drop:
        graph.node.remove(dq)
    return count
