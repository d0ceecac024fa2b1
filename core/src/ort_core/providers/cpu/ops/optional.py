"""CPU kernels for optional values: Optional, OptionalHasElement and OptionalGetElement.
An optional is its element (tensor or sequence) or None when empty: these kernels only test and
pass values through, never copy data.
"""

from __future__ import annotations

import numpy as np

from ....errors import KernelError
from ....ir.graph import Node
from ..registry import register


def _given(node: Node) -> bool:
    return bool(node.inputs) and bool(node.inputs[0])


@register("Optional", since=15)
def _optional(node: Node, opset: int):
    if not _given(node) and node.attr("type") is None:
        raise KernelError(f"{node.label}: an empty Optional needs the 'type' attribute")

    def kernel(value=None):
        return (value,)
    return kernel


@register("OptionalHasElement", since=15)
def _optional_has_element(node: Node, opset: int):
    # opset 15 requires the input; 18 made it optional (absent means empty) and accepts plain values
    if opset < 18 and not _given(node):
        raise KernelError(f"{node.label}: input 'input' is required before opset 18")

    def kernel(value=None):
        return (np.array(value is not None),)
    return kernel


@register("OptionalGetElement", since=15)
def _optional_get_element(node: Node, opset: int):
    def kernel(value=None):
        if value is None:
            raise KernelError(f"{node.label}: the optional input is empty")
        return (value,)
    return kernel
