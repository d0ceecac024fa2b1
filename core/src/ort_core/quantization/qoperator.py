"""Static quantization in QOperator form: the selected nodes become quantized operators (QLinearConv,
QLinearMatMul, com.microsoft QGemm, QLinearAdd, QLinearMul, QLinearGlobalAveragePool, QLinearSoftmax)
that pass int8/uint8 tensors between them, with QuantizeLinear where float enters and DequantizeLinear
where it leaves, as onnxruntime's ONNXQuantizer writes them (same names, same parameters).

Deliberate difference from onnxruntime: its other QLinear ops (QLinearConcat, QLinearSigmoid,
QLinearLeakyRelu, QLinearAveragePool, QLinearWhere, and the quantized ArgMax, Split, Pad, Resize) are
not written: those nodes stay float, with DequantizeLinear before them."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from . import params as qp
from .config import Config
from .graph import Editor
from .qdq import activation_params
from .types import NP_TYPES

DIRECT = ("Reshape", "Squeeze", "Unsqueeze", "Flatten", "Transpose", "MaxPool")
MS = "com.microsoft"


class QOperatorWriter:
    def __init__(self, ed: Editor, ranges: dict, cfg: Config) -> None:
        self.ed, self.ranges, self.cfg = ed, ranges, cfg
        self.quantized: dict[str, tuple[str, str, str]] = {}  # float name -> (quantized, scale, zero point)
        self.values: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # scale name -> (scale, zero point)
        self.replaced: set[str] = set()  # float tensors whose producer became a quantized op

    def write(self) -> None:
        ed = self.ed
        for node in ed.nodes():
            if not self.cfg.wants(node):
                continue
            handler = getattr(self, f"_{node.op_type.lower()}", None)
            if node.op_type in DIRECT:
                handler = self._direct
            if handler is not None:
                handler(node)
        for name in sorted(self.replaced):
            if ed.consumers(name) or name in ed.graph_outputs:
                q, s, z = self.quantized[name]
                ed.add_node("DequantizeLinear", [q, s, z], [name], f"{name}_DequantizeLinear")

    # ------------------------------------------------------------------ operands
    def _has_params(self, name: str) -> bool:
        return name in self.quantized or name in self.ranges or (
            self.ed.is_initializer(name) and self.ed.is_float(name))

    def _activation(self, name: str) -> tuple[str, str, str]:
        ed, cfg = self.ed, self.cfg
        if name in self.quantized:
            return self.quantized[name]
        if ed.is_initializer(name):
            return self._initializer(name, cfg.activation_type, cfg.initializer_symmetric(cfg.activation_type), None)
        s, z = self._params(name)
        q = f"{name}_quantized"
        ed.add_node("QuantizeLinear", [name, s, z], [q], f"{name}_QuantizeLinear")
        self.quantized[name] = (q, s, z)
        return self.quantized[name]

    def _weight(self, name: str, axis: int | None, reduce_range: bool = False) -> tuple[str, str, str]:
        cfg = self.cfg
        if name in self.quantized or not self.ed.is_initializer(name):
            return self._activation(name)
        return self._initializer(name, cfg.weight_type, cfg.weight_is_symmetric(cfg.weight_type),
                                 axis if cfg.per_channel else None, reduce_range and cfg.reduce_range)

    def _initializer(self, name, qtype, symmetric, axis, reduce_range=False) -> tuple[str, str, str]:
        ed, cfg = self.ed, self.cfg
        data = ed.array(name)
        if axis is not None and data.ndim > 0:
            q, scale, zp = qp.quantize_per_channel(data, axis % data.ndim, qtype, True, reduce_range,
                                                   cfg.min_real_range)
        else:
            q, scale, zp = qp.quantize_tensor(data, qtype, symmetric, reduce_range, cfg.min_real_range)
        names = (ed.add_initializer(q, f"{name}_quantized"),
                 ed.add_initializer(scale.astype(data.dtype), f"{name}_scale"),
                 ed.add_initializer(zp, f"{name}_zero_point"))
        self.values[names[1]] = (scale, zp)
        self.quantized[name] = names
        return names

    def _params(self, name: str) -> tuple[str, str]:
        s, z = f"{name}_scale", f"{name}_zero_point"
        if s not in self.values:
            scale, zp = activation_params(self.ranges, name, self.cfg)
            self.ed.add_initializer(scale, s)
            self.ed.add_initializer(zp, z)
            self.values[s] = (scale, zp)
        return s, z

    def _output(self, name: str, share: tuple[str, str, str] | None = None) -> tuple[str, str, str]:
        s, z = (share[1], share[2]) if share else self._params(name)
        self.quantized[name] = (f"{name}_quantized", s, z)
        self.replaced.add(name)
        return self.quantized[name]

    def _bias(self, name: str, x_scale: str, w_scale: str, beta: float = 1.0) -> str:
        data = self.ed.array(name)
        q, _ = qp.quantize_bias(data, self.values[x_scale][0], self.values[w_scale][0], beta)
        return self.ed.add_initializer(q.reshape(data.shape), f"{name}_quantized")

    def _float_inputs_ok(self, names) -> bool:
        return all(self.ed.is_float(n) or n in self.quantized for n in names)

    # ------------------------------------------------------------------ ops
    def _conv(self, node) -> None:
        x, w, y = node.input[0], node.input[1], node.output[0]
        if not (self.ed.is_initializer(w) and self._has_params(x) and y in self.ranges):
            return
        qx = self._activation(x)
        qw = self._weight(w, 0, reduce_range=True)
        qy = self._output(y)
        ins = [*qx, *qw, qy[1], qy[2]]
        if len(node.input) > 2 and node.input[2]:
            ins.append(self._bias(node.input[2], qx[1], qw[1]))
        self._replace(node, "QLinearConv", ins, qy[0])

    def _gemm(self, node) -> None:
        a = {x.name: helper.get_attribute_value(x) for x in node.attribute}
        x, w, y = node.input[0], node.input[1], node.output[0]
        if not (self.ed.is_initializer(w) and self._has_params(x) and y in self.ranges):
            return
        qx = self._activation(x)
        qw = self._weight(w, 0 if a.get("transB", 0) else 1, reduce_range=True)
        qy = self._output(y)
        bias = ""
        if len(node.input) > 2 and node.input[2] and self.ed.is_initializer(node.input[2]):
            bias = self._bias(node.input[2], qx[1], qw[1], float(a.get("beta", 1.0)))
        attrs = {k: v for k, v in a.items() if k != "beta"}
        self.ed.ensure_domain(MS)
        self._replace(node, "QGemm", [*qx, *qw, bias, qy[1], qy[2]], qy[0], MS, attrs)

    def _matmul(self, node) -> None:
        a, b, y = node.input[0], node.input[1], node.output[0]
        if not (self._float_inputs_ok([a, b]) and self._has_params(a) and self._has_params(b) and y in self.ranges):
            return
        qa = self._activation(a)
        qb = self._weight(b, -1, reduce_range=True)
        qy = self._output(y)
        self._replace(node, "QLinearMatMul", [*qa, *qb, qy[1], qy[2]], qy[0])

    def _binary(self, node, op: str) -> None:
        a, b, y = node.input[0], node.input[1], node.output[0]
        if not (self._float_inputs_ok([a, b]) and self._has_params(a) and self._has_params(b) and y in self.ranges):
            return
        qa, qb = self._activation(a), self._activation(b)
        qy = self._output(y)
        self.ed.ensure_domain(MS)
        self._replace(node, op, [*qa, *qb, qy[1], qy[2]], qy[0], MS)

    def _add(self, node) -> None:
        self._binary(node, "QLinearAdd")

    def _mul(self, node) -> None:
        self._binary(node, "QLinearMul")

    def _relu(self, node) -> None:
        x, y = node.input[0], node.output[0]
        if x not in self.quantized or self.cfg.activation_symmetric:  # a symmetric range cannot clamp at 0
            return
        self.quantized[y] = self.quantized[x]
        self.replaced.add(y)
        self.ed.remove_node(node)

    _clip = _relu

    def _globalaveragepool(self, node) -> None:
        x, y = node.input[0], node.output[0]
        if x not in self.quantized:
            return
        qx = self.quantized[x]
        qy = self._output(y, None if y in self.ranges else qx)
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        attrs["channels_last"] = 0
        self.ed.ensure_domain(MS)
        self._replace(node, "QLinearGlobalAveragePool", [*qx, qy[1], qy[2]], qy[0], MS, attrs)

    def _softmax(self, node) -> None:
        """QLinearSoftmax with onnxruntime's fixed output parameters: [0, 1] in steps of 1/256."""
        x, y = node.input[0], node.output[0]
        if not (self._has_params(x) and self._float_inputs_ok([x]) and y in self.ranges):
            return
        qx = self._activation(x)
        s, z = f"{y}_scale", f"{y}_zero_point"
        qtype = self.cfg.activation_type
        zp = np.array(0 if qtype == onnx.TensorProto.UINT8 else -128).astype(NP_TYPES[qtype])
        scale = np.array(1 / 256.0, np.float32)
        self.ed.add_initializer(scale, s)
        self.ed.add_initializer(zp, z)
        self.values[s] = (scale, zp)
        qy = self._output(y, (f"{y}_quantized", s, z))
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        attrs["opset"] = self.ed.opset()
        self.ed.ensure_domain(MS)
        self._replace(node, "QLinearSoftmax", [*qx, qy[1], qy[2]], qy[0], MS, attrs)

    def _gather(self, node) -> None:
        ed = self.ed
        data = node.input[0]
        if not (data in self.quantized or (ed.is_initializer(data) and ed.is_float(data))):
            return
        qd = self._activation(data)
        qy = self._output(node.output[0], qd)
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        ed.add_node("Gather", [qd[0], *node.input[1:]], [qy[0]], node.name, **attrs)
        ed.remove_node(node)

    def _direct(self, node) -> None:
        if node.input[0] not in self.quantized or (node.op_type == "MaxPool" and self.ed.opset() < 12):
            return
        if len([o for o in node.output if o]) != 1:
            return
        qx = self.quantized[node.input[0]]
        qy = self._output(node.output[0], qx)
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        self.ed.add_node(node.op_type, [qx[0], *node.input[1:]], [qy[0]], node.name, **attrs)
        self.ed.remove_node(node)

    def _replace(self, node, op: str, inputs, output: str, domain: str = "", attrs: dict | None = None) -> None:
        if attrs is None:
            attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        self.ed.add_node(op, inputs, [output], f"{node.name}_quant" if node.name else "", domain, **attrs)
        self.ed.remove_node(node)


def quantize_qoperator(ed: Editor, ranges: dict, cfg: Config) -> None:
    QOperatorWriter(ed, ranges, cfg).write()
