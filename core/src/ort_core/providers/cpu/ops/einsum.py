"""CPU kernel for Einsum: numpy's einsum (with contraction-order optimization) over the
equation as written, including '...' broadcasting. No other tensor-contraction ops here.
"""

from __future__ import annotations

import numpy as np

from ....errors import KernelError
from ....ir.graph import Node
from ..registry import register


@register("Einsum", since=12)
def _einsum(node: Node, opset: int):
    equation = node.attr("equation")
    if equation is None:
        raise KernelError(f"{node.label}: attribute 'equation' is required")
    if isinstance(equation, bytes):
        equation = equation.decode()
    equation = equation.replace(" ", "")
    n_terms = len(equation.split("->")[0].split(","))

    def kernel(*inputs):
        if len(inputs) != n_terms:
            raise KernelError(f"{node.label}: equation {equation!r} has {n_terms} operand terms but "
                              f"the node got {len(inputs)} inputs")
        dtype = inputs[0].dtype
        if any(x.dtype != dtype for x in inputs):
            raise KernelError(f"{node.label}: inputs must share one type, got "
                              f"{[str(x.dtype) for x in inputs]}")
        # half floats (float16, bfloat16) are multiplied and summed in float32
        half = dtype == np.float16 or dtype.kind == "V"
        ops = [x.astype(np.float32) for x in inputs] if half else inputs
        try:
            # optimize picks a pairwise contraction order that runs through BLAS; one operand
            # gains nothing from it
            out = np.einsum(equation, *ops, optimize=len(ops) > 1)
        except ValueError as e:
            raise KernelError(f"{node.label}: equation {equation!r} does not fit input shapes "
                              f"{[x.shape for x in inputs]}: {e}") from e
        return (np.asarray(out).astype(dtype, copy=False),)
    return kernel
