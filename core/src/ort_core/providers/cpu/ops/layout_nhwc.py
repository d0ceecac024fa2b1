"""CPU kernels of the channels-last ops (domain ``com.ms.internal.nhwc``, made by ``optimizer/layout.py`` for a
provider that prefers NHWC): the standard op of the same name between two transposes. They run only where such a
node ends up on the CPU provider (its provider handed the subgraph holding it back), so that any placement the
layout rewrite leaves still runs. The domain's opset is the model's ONNX opset (the rewrite imports it so)."""

from __future__ import annotations

import numpy as np

from ....errors import KernelError
from ....ir.graph import Node
from ....optimizer.layout import CHANNELS_FIRST_OPS, NHWC_DOMAIN, TO_NCHW, TO_NHWC
from .. import registry


def _channels_last(node: Node, opset: int, graph=None):
    base = Node(node.op_type, list(node.inputs), list(node.outputs), dict(node.attrs), name=node.name, id=node.id)
    found = registry.lookup("", node.op_type, opset)
    if found is None:
        raise KernelError(f"{node.label}: no CPU kernel for {node.op_type} at opset {opset}")
    inner = found.build(base, opset, graph)

    def kernel(x, *rest):
        y = inner(np.ascontiguousarray(x.transpose(TO_NCHW)), *rest)
        return (np.ascontiguousarray(y[0].transpose(TO_NHWC)), *y[1:])
    return kernel


for _op in sorted(CHANNELS_FIRST_OPS):
    registry.register(_op, since=1, domain=NHWC_DOMAIN)(_channels_last)
