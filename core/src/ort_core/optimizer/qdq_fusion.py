"""QDQ fusion (CPU extended level): DequantizeLinear -> op -> QuantizeLinear groups become integer ops.

Conv -> QLinearConv, MatMul -> QLinearMatMul, Gemm -> com.microsoft QGemm (requantized, or float when no
QuantizeLinear follows), MatMul with float readers -> MatMulIntegerToFloat, Add/Sum of two/Mul -> QLinearAdd/QLinearMul,
GlobalAveragePool/AveragePool/Sigmoid/LeakyRelu/Softmax/Concat -> their com.microsoft QLinear* forms (what
onnxruntime fuses them into; QLinearSoftmax is its fixed-shift scheme, within one step of the float one), a Relu before
the QuantizeLinear folded when the output's zero point is its type's lowest value, and MaxPool, Flatten,
Reshape, Transpose, Squeeze, Unsqueeze run on the 8-bit codes when scale and zero point are unchanged.
onnxruntime's dynamic chains (DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul by the scales
[-> Add bias]) become MatMulIntegerToFloat, or DynamicQuantizeMatMul when the DynamicQuantizeLinear feeds one.

Weights: the DequantizeLinear of a constant, or (when constant folding already turned it into a float
weight) a float constant that is exactly ``q * scale`` for int8 ``q`` and one scale per channel: the
integers are recovered and checked to give back every float bit, so the fused op sees the same numbers.
A float bias is rounded to the int32 grid ``x_scale * w_scale`` only where that moves the output by less
than half a step. Runs only over the nodes the provider claimed (``Matcher``), so other providers still see
the standard ops; leftover DequantizeLinear nodes of constants are folded into float constants here. This
module only rewrites the graph; the kernels are the CPU provider's (providers/cpu/ops/).
"""

from __future__ import annotations

import numpy as np

from ..ir.graph import Node
from .rewrite import CONTRIB, Matcher

_RANGES = {np.dtype(np.uint8): (0, 255), np.dtype(np.int8): (-128, 127)}
LAYOUT = {"MaxPool", "Flatten", "Reshape", "Transpose", "Squeeze", "Unsqueeze"}
_UNARY = {"Sigmoid": "QLinearSigmoid", "LeakyRelu": "QLinearLeakyRelu", "Softmax": "QLinearSoftmax",
          "GlobalAveragePool": "QLinearGlobalAveragePool", "AveragePool": "QLinearAveragePool"}
_POOL_ATTRS = ("auto_pad", "ceil_mode", "count_include_pad", "kernel_shape", "pads", "strides")


def fuse_qdq(m: Matcher) -> int:
    """Fuse the QDQ groups and dynamic-quantization chains among the matcher's nodes; returns the count."""
    return _QDQ(m).run()


class _QDQ:
    def __init__(self, m: Matcher) -> None:
        self.m = m
        self.graph = m.graph

    def run(self) -> int:
        count = 0
        for node in list(self.graph.topological_order()):
            if not self.m.eligible(node):
                continue
            op = node.op_type
            try_ = {"Conv": self.conv, "MatMul": self.matmul, "Gemm": self.gemm, "Add": self.binary, "Mul": self.binary,
                    "Sum": self.binary, "Concat": self.concat, "MatMulInteger": self.dynamic}.get(op)
            if try_ is None and (op in _UNARY or op in LAYOUT):
                try_ = self.unary
            if try_ is not None and try_(node):
                count += 1
        count += self.single_dynamic()
        if self.m.allowed is None:  # a provider's own transform, not the fusions made for others before partitioning
            count += self.fold_dequantized_constants()  # counted: the placement must be cut again
        return count

    # ------------------------------------------------------------------ matching helpers
    def act_dq(self, name: str):
        """(dq node, codes, scale, zero point) of a per-tensor DequantizeLinear of an 8-bit non-constant."""
        dq = self.m.producer(name, "DequantizeLinear")
        if dq is None or len(dq.inputs) < 3 or not dq.inputs[2] or self.m.const(dq.inputs[0]) is not None:
            return None
        s, z = self.m.const(dq.inputs[1]), self.m.const(dq.inputs[2])
        if s is None or z is None or s.size != 1 or z.size != 1 or s.dtype != np.float32 or z.dtype not in _RANGES:
            return None
        return dq, dq.inputs[0], dq.inputs[1], dq.inputs[2]

    def out_q(self, name: str):
        """The sole reader of ``name`` when it is a per-tensor 8-bit QuantizeLinear with constant parameters."""
        q = self.m.sole_reader(name, "QuantizeLinear")
        if q is None or len(q.inputs) < 3 or not q.inputs[2] or q.inputs[0] != name:
            return None
        s, z = self.m.const(q.inputs[1]), self.m.const(q.inputs[2])
        if s is None or z is None or s.size != 1 or z.size != 1 or s.dtype != np.float32 or z.dtype not in _RANGES:
            return None
        if q.attr("output_dtype", 0) or not q.attr("saturate", 1) or float(s.reshape(-1)[0]) <= 0:
            return None
        return q

    def out_q_relu(self, name: str):
        """(nodes after the op, the QuantizeLinear): Q directly, or Relu -> Q where the output's zero point is
        its type's lowest code (saturation then does the Relu's work, exactly)."""
        q = self.out_q(name)
        if q is not None:
            return [q], q
        relu = self.m.sole_reader(name, "Relu")
        q = self.out_q(relu.outputs[0]) if relu is not None else None
        if q is None:
            return None
        z = self.m.const(q.inputs[2])
        return ([relu, q], q) if int(z.reshape(-1)[0]) == _RANGES[z.dtype][0] else None

    def weight(self, name: str, axis: int, channels: int):
        """(nodes to drop, int8 codes, scales (channels,) float32) of a constant weight quantized per channel
        along ``axis`` (or per tensor, scales then broadcast), symmetric int8."""
        dq = self.m.producer(name, "DequantizeLinear")
        if dq is not None:
            w, s = self.m.const(dq.inputs[0]), self.m.const(dq.inputs[1])
            z = self.m.const(dq.inputs[2]) if len(dq.inputs) > 2 and dq.inputs[2] else None
            if w is None or s is None or w.dtype != np.int8 or s.dtype != np.float32 or dq.attr("block_size", 0):
                return None
            if z is not None and np.any(z):
                return None
            if s.size == 1:
                return [dq], w, np.full(channels, s.reshape(-1)[0], np.float32)
            if s.ndim != 1 or s.shape[0] != channels or dq.attr("axis", 1) % w.ndim != axis % w.ndim:
                return None
            return [dq], w, s
        w = self.m.const(name)
        if w is None or w.dtype != np.float32 or w.ndim < 1:
            return None
        found = recover_int8(w, axis)
        return None if found is None else ([], *found)

    @staticmethod
    def add(base: str, value) -> _New:
        return _New(base, np.asarray(value))

    def bias_int32(self, name: str, scale: np.ndarray, y_scale: float | None) -> np.ndarray | None:
        """A bias on the accumulator's grid ``scale``: from DequantizeLinear(int32) when its scale is that grid,
        else a float constant rounded to it when rounding moves the output by less than half a step."""
        dq = self.m.producer(name, "DequantizeLinear")
        if dq is not None:
            b, s = self.m.const(dq.inputs[0]), self.m.const(dq.inputs[1])
            z = self.m.const(dq.inputs[2]) if len(dq.inputs) > 2 and dq.inputs[2] else None
            if b is not None and b.dtype == np.int32 and s is not None and (z is None or not np.any(z)):
                if b.size != scale.size or s.size not in (1, scale.size) or s.dtype != np.float32:
                    return None
                if np.array_equal(np.broadcast_to(s.reshape(-1), scale.shape), scale):
                    return b.reshape(-1)
                values = (b.astype(np.float32) * s.astype(np.float32)).reshape(-1)
            else:
                return None
        else:
            values = self.m.const(name)
            if values is None or values.dtype != np.float32:
                return None
            values = values.reshape(-1)
        if values.size != scale.size:
            return None
        q = np.rint(values.astype(np.float64) / scale.astype(np.float64))
        if np.any(np.abs(q) >= 2 ** 31 - 2 ** 24):
            return None
        if y_scale is not None and np.any(0.5 * scale.astype(np.float64) >= 0.5 * y_scale):
            return None  # the rounding would be worth a whole output step
        return q.astype(np.int32)

    def bias_nodes(self, name: str) -> list[Node]:
        dq = self.m.producer(name, "DequantizeLinear")
        return [dq] if dq is not None and self.m.const(dq.inputs[0]) is not None else []

    def fuse(self, nodes: list[Node], op: str, inputs: list, out: str, attrs: dict, domain: str = "") -> bool:
        """Replace ``nodes`` by one ``op`` node when they form a closed group; new constants (``_New``) are
        added only then."""
        known = [i for i in inputs if isinstance(i, str)]
        if not self.m.closed(nodes, {out}, known) or not self.m.makes(op, domain):
            return False
        names = [self.m.add_constant(i.base, i.value) if isinstance(i, _New) else i for i in inputs]
        return self.m.replace(nodes, op, names, [out], attrs, domain=domain) is not None

    # ------------------------------------------------------------------ Conv, MatMul, Gemm
    def conv(self, node: Node) -> bool:
        if len(node.inputs) < 2 or (x := self.act_dq(node.inputs[0])) is None:
            return False
        tail = self.out_q_relu(node.outputs[0])
        w_shape = self.m.shape(node.inputs[1]) or getattr(self.m.const(node.inputs[1]), "shape", None)
        if tail is None or not w_shape:
            return False
        found = self.weight(node.inputs[1], 0, w_shape[0])
        if found is None:
            return False
        w_nodes, w, w_scale = found
        x_scale = float(self.m.const(x[2]).reshape(-1)[0])
        q = tail[1]
        inputs = [x[1], x[2], x[3], self.add("w_quantized", w), self.add("w_scale", w_scale),
                  self.add("w_zero_point", np.zeros(w.shape[0], np.int8)), q.inputs[1], q.inputs[2]]
        extra: list[Node] = []
        if len(node.inputs) > 2 and node.inputs[2]:
            grid = (np.float32(x_scale) * w_scale).astype(np.float32)
            b = self.bias_int32(node.inputs[2], grid, float(self.m.const(q.inputs[1]).reshape(-1)[0]))
            if b is None:
                return False
            inputs.append(self.add("bias_quantized", b))
            extra = self.bias_nodes(node.inputs[2])
        attrs = {k: v for k, v in node.attrs.items() if k in ("auto_pad", "dilations", "group", "kernel_shape",
                                                               "pads", "strides")}
        return self.fuse([*w_nodes, *extra, node, *tail[0]], "QLinearConv", inputs, q.outputs[0], attrs)

    def matmul(self, node: Node) -> bool:
        a = self.act_dq(node.inputs[0])
        b_shape = self.m.shape(node.inputs[1]) or getattr(self.m.const(node.inputs[1]), "shape", None)
        if a is None or not b_shape or len(b_shape) != 2:
            return False
        found = self.weight(node.inputs[1], 1, b_shape[1])
        if found is None:
            return False
        w_nodes, w, w_scale = found
        q = self.out_q(node.outputs[0])
        if q is None:  # float readers: the accumulator scaled back to float
            inputs = [a[1], self.add("w_quantized", w), a[2], self.add("w_scale", w_scale), a[3],
                      self.add("w_zero_point", np.zeros(w.shape[1], np.int8))]
            return self.fuse([*w_nodes, node], "MatMulIntegerToFloat", inputs, node.outputs[0], {}, CONTRIB)
        inputs = [a[1], a[2], a[3], self.add("w_quantized", w), self.add("w_scale", w_scale),
                  self.add("w_zero_point", np.zeros(w.shape[1], np.int8)), q.inputs[1], q.inputs[2]]
        return self.fuse([*w_nodes, node, q], "QLinearMatMul", inputs, q.outputs[0], {})

    def gemm(self, node: Node) -> bool:
        a = self.act_dq(node.inputs[0])
        b_shape = self.m.shape(node.inputs[1]) or getattr(self.m.const(node.inputs[1]), "shape", None)
        trans_b = int(node.attr("transB", 0))
        if a is None or not b_shape or len(b_shape) != 2 or float(node.attr("beta", 1.0)) != 1.0:
            return False
        n = b_shape[0] if trans_b else b_shape[1]
        found = self.weight(node.inputs[1], 0 if trans_b else 1, n)
        if found is None:
            return False
        w_nodes, w, w_scale = found
        q = self.out_q(node.outputs[0])
        a_scale = np.float32(self.m.const(a[2]).reshape(-1)[0])
        y_scale = None if q is None else float(self.m.const(q.inputs[1]).reshape(-1)[0])
        inputs = [a[1], a[2], a[3], self.add("w_quantized", w), self.add("w_scale", w_scale),
                  self.add("w_zero_point", np.zeros(n, np.int8))]
        extra: list[Node] = []
        if len(node.inputs) > 2 and node.inputs[2]:
            c = self.m.const(node.inputs[2]) if not self.bias_nodes(node.inputs[2]) else None
            if c is not None and c.size != n:
                return False
            grid = (np.float32(float(node.attr("alpha", 1.0))) * a_scale * w_scale).astype(np.float32)
            b = self.bias_int32(node.inputs[2], grid, y_scale if y_scale is not None else None)
            if b is None:
                return False
            inputs.append(self.add("bias_quantized", b))
            extra = self.bias_nodes(node.inputs[2])
        else:
            inputs.append("")
        attrs = {"alpha": float(node.attr("alpha", 1.0)), "transA": int(node.attr("transA", 0)), "transB": trans_b}
        if q is None:
            return self.fuse([*w_nodes, *extra, node], "QGemm", inputs, node.outputs[0], attrs, CONTRIB)
        return self.fuse([*w_nodes, *extra, node, q], "QGemm", inputs + [q.inputs[1], q.inputs[2]], q.outputs[0],
                         attrs, CONTRIB)

    # ------------------------------------------------------------------ elementwise, pools, layout
    def binary(self, node: Node) -> bool:
        """Add, Mul, and a two-input Sum (an Add): QLinearAdd / QLinearMul, a Relu after an addition folded."""
        if len(node.inputs) != 2:
            return False
        a, b = self.act_dq(node.inputs[0]), self.act_dq(node.inputs[1])
        add = node.op_type in ("Add", "Sum")
        tail = self.out_q_relu(node.outputs[0]) if add else None
        if tail is None and (q := self.out_q(node.outputs[0])) is not None:
            tail = ([q], q)
        if a is None or b is None or tail is None:
            return False
        out_type = self.m.const(tail[1].inputs[2]).dtype
        if self.m.const(a[3]).dtype != out_type or self.m.const(b[3]).dtype != out_type:
            return False
        q = tail[1]
        inputs = [a[1], a[2], a[3], b[1], b[2], b[3], q.inputs[1], q.inputs[2]]
        return self.fuse([node, *tail[0]], "QLinearAdd" if add else "QLinearMul", inputs, q.outputs[0], {}, CONTRIB)

    def unary(self, node: Node) -> bool:
        x = self.act_dq(node.inputs[0]) if node.inputs else None
        q = self.out_q(node.outputs[0]) if x is not None and len(node.outputs) == 1 else None
        if q is None or self.m.const(x[3]).dtype != self.m.const(q.inputs[2]).dtype:
            return False
        if node.op_type in LAYOUT:
            same = (self.m.const(x[2]).reshape(-1)[0] == self.m.const(q.inputs[1]).reshape(-1)[0]
                    and self.m.const(x[3]).reshape(-1)[0] == self.m.const(q.inputs[2]).reshape(-1)[0])
            if not same or (node.op_type == "MaxPool" and (len(node.outputs) > 1 or node.attr("storage_order", 0))):
                return False
            inputs = [x[1], *node.inputs[1:]]
            return self.fuse([node, q], node.op_type, inputs, q.outputs[0], dict(node.attrs))
        attrs: dict = {}
        if node.op_type == "LeakyRelu":
            attrs = {"alpha": float(node.attr("alpha", 0.01))}
        elif node.op_type == "AveragePool":
            if node.attr("dilations") and any(d != 1 for d in node.attr("dilations")):
                return False
            attrs = {k: v for k, v in node.attrs.items() if k in _POOL_ATTRS}
        elif node.op_type == "GlobalAveragePool":
            attrs = {"channels_last": 0}
        elif node.op_type == "Softmax":  # onnxruntime's fixed-shift softmax: its output grid, within a step
            opset = int(self.m.model.opset_imports.get("", self.m.model.opset_imports.get("ai.onnx", 13)))
            attrs = {"opset": opset, "axis": int(node.attr("axis", -1 if opset >= 13 else 1))}
        inputs = [x[1], x[2], x[3], q.inputs[1], q.inputs[2]]
        return self.fuse([node, q], _UNARY[node.op_type], inputs, q.outputs[0], attrs, CONTRIB)

    def concat(self, node: Node) -> bool:
        parts = [self.act_dq(i) for i in node.inputs]
        q = self.out_q(node.outputs[0])
        if q is None or not parts or any(p is None for p in parts):
            return False
        dtype = self.m.const(q.inputs[2]).dtype
        if any(self.m.const(p[3]).dtype != dtype for p in parts):
            return False
        inputs = [q.inputs[1], q.inputs[2]] + [v for p in parts for v in p[1:]]
        return self.fuse([node, q], "QLinearConcat", inputs, q.outputs[0], {"axis": int(node.attr("axis"))}, CONTRIB)

    # ------------------------------------------------------------------ dynamic quantization chains
    def dynamic(self, mmi: Node) -> bool:
        """DynamicQuantizeLinear -> MatMulInteger(x, W) -> Cast -> Mul(scale) [-> Add bias] with
        scale = Mul(x_scale, W's scale): MatMulIntegerToFloat, onnxruntime's fusion of the chain."""
        m = self.m
        dql = m.producer(mmi.inputs[0], "DynamicQuantizeLinear")
        if dql is None or len(mmi.inputs) < 3 or mmi.inputs[2] != dql.outputs[2]:
            return False
        w = m.const(mmi.inputs[1])
        wz = m.const(mmi.inputs[3]) if len(mmi.inputs) > 3 and mmi.inputs[3] else None
        if w is None or w.ndim != 2 or w.dtype not in _RANGES or (mmi.inputs[3:4] and mmi.inputs[3] and wz is None):
            return False
        cast = m.sole_reader(mmi.outputs[0], "Cast")
        if cast is None or cast.attr("to") != 1:
            return False
        mul = m.sole_reader(cast.outputs[0], "Mul")
        if mul is None:
            return False
        scale_name = m.other(mul, cast.outputs[0])
        smul = m.producer(scale_name, "Mul")
        if smul is None or dql.outputs[1] not in smul.inputs:
            return False
        w_scale_name = m.other(smul, dql.outputs[1])
        w_scale = m.const(w_scale_name)
        if w_scale is None or w_scale.dtype != np.float32 or not (w_scale.size == 1 or w_scale.shape == (w.shape[1],)):
            return False
        nodes = [mmi, cast, mul]
        if len(m.readers(scale_name)) == 1 and scale_name not in m.protected:
            nodes.append(smul)
        out, bias = mul.outputs[0], ""
        add = m.sole_reader(out, "Add")
        if add is not None:
            c = m.const(m.other(add, out))
            if c is not None and c.dtype == np.float32 and c.shape == (w.shape[1],):
                nodes.append(add)
                out, bias = add.outputs[0], m.other(add, out)
        inputs = [mmi.inputs[0], mmi.inputs[1], dql.outputs[1], w_scale_name, dql.outputs[2],
                  mmi.inputs[3] if len(mmi.inputs) > 3 else "", bias]
        return self.fuse(nodes, "MatMulIntegerToFloat", inputs, out, {}, CONTRIB)

    def single_dynamic(self) -> int:
        """A DynamicQuantizeLinear whose three outputs feed one MatMulIntegerToFloat joins it:
        DynamicQuantizeMatMul (which quantizes its input the same way)."""
        count = 0
        for dql in [n for n in self.graph.nodes if self.m.eligible(n, "DynamicQuantizeLinear")]:
            readers = {id(r): r for o in dql.outputs if o for r in self.m.readers(o)}
            if len(readers) != 1:
                continue
            (node,) = readers.values()
            if node.op_type != "MatMulIntegerToFloat" or node.domain != CONTRIB or node.id not in self.m.on_cpu:
                continue
            if node.inputs[0] != dql.outputs[0] or node.inputs[2] != dql.outputs[1] or node.inputs[4] != dql.outputs[2]:
                continue
            if any(o in self.m.protected for o in dql.outputs if o):
                continue
            inputs = [dql.inputs[0], node.inputs[1], node.inputs[3], node.inputs[5], node.inputs[6]]
            if self.m.makes("DynamicQuantizeMatMul", CONTRIB):
                count += self.m.replace([dql, node], "DynamicQuantizeMatMul", inputs, node.outputs, {},
                                        domain=CONTRIB) is not None
        return count

    # ------------------------------------------------------------------ leftovers
    def fold_dequantized_constants(self) -> int:
        """DequantizeLinear nodes nobody reads go; those of a constant become float constants (computed as
        the CPU kernel computes them: (q - zero point) * scale in float32), as constant folding would.
        Returns how many nodes went."""
        m, drop = self.m, []
        for dq in [n for n in self.graph.nodes if m.eligible(n, "DequantizeLinear")]:
            out = dq.outputs[0]
            if not m.readers(out) and out not in m.protected:
                drop.append(dq)
                continue
            value = _dequantize_constant(m, dq)
            if value is not None and out not in m.protected:
                self.graph.initializers[out] = m.constants[out] = value
                drop.append(dq)
        if drop:
            ids = {n.id for n in drop}
            self.graph.nodes = [n for n in self.graph.nodes if n.id not in ids]
            m.refresh()
            for name in {i for n in drop for i in n.inputs if i}:
                if name in m.constants and not m.readers(name) and name not in m.protected:
                    del self.graph.initializers[name]
                    del m.constants[name]
        return len(drop)


class _New:
    """A constant the fused node will read, added to the graph only when the fusion happens."""

    def __init__(self, base: str, value: np.ndarray) -> None:
        self.base, self.value = base, value


def _dequantize_constant(m: Matcher, dq: Node) -> np.ndarray | None:
    """The float value of a per-tensor or per-axis DequantizeLinear of 8/32-bit integer constants."""
    consts = [m.const(i) for i in dq.inputs]
    if len(consts) < 2 or any(c is None for c in consts) or dq.attr("block_size", 0):
        return None
    q, s = consts[0], consts[1]
    z = consts[2] if len(consts) > 2 else None
    if q.dtype not in (np.dtype(np.int8), np.dtype(np.uint8), np.dtype(np.int32)) or s.dtype != np.float32:
        return None
    if s.size != 1:
        if s.ndim != 1 or q.ndim == 0:
            return None
        shape = [1] * q.ndim
        shape[dq.attr("axis", 1) % q.ndim] = -1
        s = s.reshape(shape)
        z = None if z is None else z.reshape(shape)
    else:
        s, z = s.reshape(()), None if z is None else z.reshape(())
    x = q.astype(np.float32)
    if z is not None:
        x = x - z.astype(np.float32)
    return (x * s).astype(np.float32)


def recover_int8(w: np.ndarray, axis: int):
    """(int8 codes, float32 scales along ``axis``) with ``codes * scale`` giving back every element of
    float32 ``w`` exactly, symmetric int8 (each channel's largest magnitude on code 127); None when the
    weight is not of that form (it was not quantized so, or constant folding changed it)."""
    axis %= w.ndim
    moved = np.moveaxis(w, axis, 0).reshape(w.shape[axis], -1)
    peak = np.abs(moved).max(axis=1) if moved.size else np.zeros(moved.shape[0], np.float32)
    scale = np.where(peak > 0, peak / np.float32(127), np.float32(1)).astype(np.float32)
    codes = np.rint(moved / scale[:, None])
    good = np.all(codes * scale[:, None] == moved, axis=1)
    for step in (1, -1, 2, -2):  # the scale 127 * s rounded back may sit a few ulps away
        if good.all():
            break
        bad = ~good
        trial = scale[bad]
        for _ in range(abs(step)):
            trial = np.nextafter(trial, np.float32(np.inf if step > 0 else 0)).astype(np.float32)
        c = np.rint(moved[bad] / trial[:, None])
        ok = np.all(c * trial[:, None] == moved[bad], axis=1) & np.all(np.abs(c) <= 127, axis=1)
        idx = np.flatnonzero(bad)[ok]
        scale[idx], codes[idx], good[idx] = trial[ok], c[ok], True
    if not good.all() or np.any(np.abs(codes) > 127):
        return None
    out = np.moveaxis(codes.reshape(np.moveaxis(w, axis, 0).shape), 0, axis).astype(np.int8)
    return out, scale
