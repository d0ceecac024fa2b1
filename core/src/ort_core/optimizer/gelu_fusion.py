"""GELU fusions (CPU extended level): the erf form ``0.5 x (1 + erf(x / sqrt 2))`` becomes onnxruntime's
``com.microsoft::Gelu`` and the tanh form ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`` its
``com.microsoft::FastGelu``, in the operand orders PyTorch exports; a constant 1-D bias added just before
joins them (``BiasGelu``, FastGelu's bias input). Constants must match to float32 precision; anything
else stays.
"""

from __future__ import annotations

import math

from ..ir.graph import Node
from .rewrite import CONTRIB, Matcher


def fuse_gelus(m: Matcher) -> int:
    count = 0
    for node in list(m.graph.nodes):
        if not m.eligible(node, "Erf", "Tanh"):
            continue
        found = _erf_form(m, node) if node.op_type == "Erf" else _tanh_form(m, node)
        if found is not None:
            nodes, x, out = found
            inputs = [x]
            erf = node.op_type == "Erf"
            add = m.producer(x, "Add") if m.makes("BiasGelu" if erf else "FastGelu", CONTRIB) else None
            biased = m.biased(add)
            if biased is not None and m.closed([add, *nodes], {out}, list(biased)):
                nodes, inputs = [add, *nodes], list(biased)  # the bias joins the op, as onnxruntime fuses it
            op = ("BiasGelu" if len(inputs) == 2 else "Gelu") if erf else "FastGelu"
            count += m.replace(nodes, op, inputs, [out], {}, domain=CONTRIB) is not None
    return count


def _near(value: float | None, target: float) -> bool:
    return value is not None and abs(value - target) <= 1e-6 * abs(target)


def scaled(m: Matcher, node: Node | None) -> tuple[str, float] | None:
    """(the other operand, the factor) of a Mul by a one-element constant, else None."""
    if node is None or node.op_type != "Mul" or len(node.inputs) != 2:
        return None
    for i in (1, 0):
        c = m.scalar(node.inputs[i])
        if c is not None and m.const(node.inputs[1 - i]) is None:
            return node.inputs[1 - i], c
    return None


def _erf_form(m: Matcher, erf: Node):
    pre = m.producer(erf.inputs[0], "Div", "Mul")
    if pre is None:
        return None
    if pre.op_type == "Div":
        x, ok = pre.inputs[0], _near(m.scalar(pre.inputs[1]), math.sqrt(2.0))
    else:
        x, c = scaled(m, pre) or ("", None)
        ok = _near(c, 1.0 / math.sqrt(2.0))
    return _with_tail(m, [pre, erf], x) if ok else None


def _tanh_form(m: Matcher, tanh: Node):
    outer = m.producer(tanh.inputs[0], "Mul")
    inner, c = scaled(m, outer) or ("", None)
    add = m.producer(inner, "Add") if _near(c, math.sqrt(2.0 / math.pi)) else None
    if add is None:
        return None
    for i in (0, 1):
        x, cubic = add.inputs[i], m.producer(add.inputs[1 - i], "Mul")
        cube, k = scaled(m, cubic) or ("", None)
        power = m.producer(cube, "Pow") if _near(k, 0.044715) else None
        if power is not None and power.inputs[0] == x and m.scalar(power.inputs[1]) == 3.0:
            return _with_tail(m, [power, cubic, add, outer, tanh], x)
    return None


def _with_tail(m: Matcher, nodes: list[Node], x: str):
    """Complete the match with ``* x * 0.5`` after ``1 + core`` (any of the exported orders)."""
    core = nodes[-1].outputs[0]
    one = m.sole_reader(core, "Add")
    if one is None or m.scalar(m.other(one, core)) != 1.0:
        return None
    first = m.sole_reader(one.outputs[0], "Mul")
    if first is None:
        return None
    operand = m.other(first, one.outputs[0])
    second = m.sole_reader(first.outputs[0], "Mul")
    last = m.other(second, first.outputs[0]) if second is not None else ""
    if operand == x and m.scalar(last) == 0.5:  # ((1 + core) * x) * 0.5
        tail = [one, first, second]
    elif m.scalar(operand) == 0.5 and last == x:  # ((1 + core) * 0.5) * x
        tail = [one, first, second]
    elif scaled(m, m.producer(operand, "Mul")) == (x, 0.5):  # (x * 0.5) * (1 + core)
        tail = [one, m.producer(operand, "Mul"), first]
    else:
        return None
    dtype = m.graph.type_of(x)
    if dtype is None or dtype.elem_type not in (1, 11):  # float32, float64
        return None
    out = tail[-1].outputs[0]
    return (nodes + tail, x, out) if m.closed(nodes + tail, {out}, [x]) else None
