"""CPU kernel for Dropout in inference: the output is the input and the mask is all true.

Training-mode dropout (random masks) is not supported and raises KernelError at run time.
"""

from __future__ import annotations

import numpy as np

from ....errors import KernelError
from ....ir.graph import Node
from ..registry import register


def _factory(mask_like_data: bool):
    """Opsets 1-9 type the mask like the data (ones); opset 10+ makes it bool (True)."""
    def factory(node: Node, opset: int):
        want_mask = len(node.outputs) > 1 and bool(node.outputs[1])

        def kernel(x, ratio=None, training_mode=None):
            if training_mode is not None and bool(np.asarray(training_mode).reshape(-1)[0]):
                if ratio is None or float(np.asarray(ratio).reshape(-1)[0]) != 0.0:
                    raise KernelError(f"{node.label}: training_mode=True is not supported "
                                      "(inference-only Dropout)")
            if not want_mask:
                return (x, None)[:len(node.outputs)]
            return (x, np.ones(x.shape, dtype=x.dtype if mask_like_data else np.bool_))
        return kernel
    return factory


register("Dropout", since=1, until=9)(_factory(True))
register("Dropout", since=10)(_factory(False))
