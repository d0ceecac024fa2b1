"""Static quantization in QDQ form: QuantizeLinear -> DequantizeLinear pairs on the activations and
weights of the selected nodes, which stay float ops. Follows onnxruntime's QDQQuantizer: the same
tensors get pairs, under the same names, with the same parameters.

Deliberate differences from onnxruntime: CumSum and float8 types are not quantized; a weight whose
bias would overflow int32 keeps its scale (onnxruntime widens it); 4-bit types are written with
opset 21's own QuantizeLinear/DequantizeLinear (onnxruntime writes com.microsoft ones below opset 21)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from onnx import helper

from . import params as qp
from .config import DIRECT_OPS, Config
from .graph import Editor


@dataclass
class Mark:
    kind: str  # "act", "weight"
    axis: int | None = None
    share: str | None = None  # take scale/zero point from this tensor


@dataclass
class Params:
    scale_name: str
    zp_name: str
    scale: np.ndarray
    zp: np.ndarray
    axis: int | None = None


def activation_params(ranges: dict, name: str, cfg: Config) -> tuple[np.ndarray, np.ndarray]:
    if name not in ranges:
        raise ValueError(f"no calibration range for tensor '{name}': quantization parameters for inputs and "
                         "outputs of quantized nodes must come from calibration")
    lo, hi = ranges[name]
    return qp.scale_zero_point(lo, hi, cfg.activation_type, cfg.activation_symmetric, False, cfg.min_real_range)


class QDQWriter:
    def __init__(self, ed: Editor, ranges: dict, cfg: Config) -> None:
        self.ed, self.ranges, self.cfg = ed, ranges, cfg
        self.marks: dict[str, Mark] = {}
        self.biases: dict[str, tuple[str, str, float]] = {}  # bias -> (input, weight, beta)
        self.done: dict[str, Params] = {}

    # ------------------------------------------------------------------ marking
    def _quantizable(self, name: str) -> bool:
        return self.ed.is_float(name)

    def act(self, name: str) -> None:
        if self._quantizable(name) and name not in self.marks:
            self.marks[name] = Mark("act")

    def weight(self, name: str, axis: int | None) -> None:
        if self._quantizable(name) and name not in self.marks:
            self.marks[name] = Mark("weight" if self.ed.is_initializer(name) else "act",
                                    axis if self.cfg.per_channel and self.ed.is_initializer(name) else None)

    def share(self, name: str, source: str) -> None:
        if self._quantizable(name):
            self.marks[name] = Mark("act", share=source)

    def mark(self, node) -> None:
        op, ins, outs = node.op_type, list(node.input), list(node.output)
        ed = self.ed
        if op in ("Conv", "ConvTranspose"):
            self.act(ins[0])
            self.weight(ins[1], 1 if op == "ConvTranspose" else 0)
            if len(ins) > 2 and ins[2] and ed.is_initializer(ins[2]) and ed.is_float(ins[2]):
                self.biases[ins[2]] = (ins[0], ins[1], 1.0)
            self.act(outs[0])
        elif op == "Gemm":
            self.act(ins[0])
            trans_b = _attr(node, "transB", 0)
            self.weight(ins[1], 0 if trans_b else 1)
            if len(ins) > 2 and ins[2] and ed.is_initializer(ins[2]) and ed.is_float(ins[2]):
                self.biases[ins[2]] = (ins[0], ins[1], float(_attr(node, "beta", 1.0)))
            self.act(outs[0])
        elif op == "MatMul":
            for name in ins:
                if ed.is_initializer(name):
                    self.weight(name, 1)
                else:
                    self.act(name)
            self.act(outs[0])
        elif op in ("BatchNormalization", "InstanceNormalization", "LayerNormalization"):
            self.act(ins[0])
            self.weight(ins[1], 1)
            if len(ins) > 2 and ins[2] and ed.is_initializer(ins[2]) and ed.is_float(ins[2]):
                self.biases[ins[2]] = (ins[0], ins[1], 1.0)
            for name in outs:
                if name:
                    self.act(name)
        elif op in ("Relu", "Clip"):
            if ins[0] not in self.marks:  # a float input: the activation stays as it is
                return
            if not (not self.cfg.activation_symmetric and not self.cfg.keep_removable_activations
                    and self._replace_upstream(ins[0], outs[0], node)):
                self.act(ins[0])
            self.act(outs[0])
        elif op in ("Gather", "GatherElements"):
            if ed.is_initializer(ins[0]) and ed.is_float(ins[0]):
                self.act(ins[0])
                self.share(outs[0], ins[0])
            elif ins[0] in self.marks:
                self.share(outs[0], ins[0])
        elif op in DIRECT_OPS:
            if op == "MaxPool" and ed.opset() < 12:
                return
            if ins[0] in self.marks:
                for out in outs:
                    self.share(out, ins[0])
        else:
            for name in (*ins, *outs):
                if name:
                    self.act(name)

    def _replace_upstream(self, upstream: str, output: str, node) -> bool:
        ed = self.ed
        if (output in self.ranges and upstream in self.ranges and len(ed.consumers(upstream)) == 1
                and upstream not in ed.graph_outputs and upstream not in ed.graph_inputs
                and ed.producer(upstream) is not None):
            ed.remove_node(node)
            ed.rename_output(upstream, output)
            self.marks.pop(upstream, None)
            return True
        return False

    # ------------------------------------------------------------------ writing
    def write(self) -> None:
        ed = self.ed
        for node in ed.nodes():
            if self.cfg.wants(node):
                self.mark(node)
        constants = {n for n, m in self.marks.items() if m.share is None and ed.is_initializer(n)}
        for name in constants:
            self._initializer(name, self.marks[name])
        for name, m in list(self.marks.items()):
            if m.share is None and name not in constants:
                scale, zp = activation_params(self.ranges, name, self.cfg)
                p = Params(ed.add_initializer(scale, f"{name}_scale"), ed.add_initializer(zp, f"{name}_zero_point"),
                           scale, zp)
                self._pair(name, p)
        pending = {n: m for n, m in self.marks.items() if m.share is not None}
        while pending:
            ready = [n for n, m in pending.items() if m.share in self.done]
            if not ready:
                break  # the source was never quantized: those tensors stay float
            for name in ready:
                src = self.done[pending.pop(name).share]
                self._pair(name, Params(src.scale_name, src.zp_name, src.scale, src.zp))
        for bias, (x, w, beta) in self.biases.items():
            if x in self.done and w in self.done and bias not in self.marks:
                self._bias(bias, self.done[x], self.done[w], beta)

    def _initializer(self, name: str, m: Mark) -> None:
        ed, cfg = self.ed, self.cfg
        data = ed.array(name)
        is_weight = m.kind == "weight"
        qtype = cfg.weight_type if is_weight else cfg.activation_type
        per_channel = m.axis is not None and data.ndim > m.axis
        symmetric = per_channel or (cfg.weight_is_symmetric(qtype) if is_weight else cfg.activation_symmetric)
        if per_channel:
            q, scale, zp = qp.quantize_per_channel(data, m.axis, qtype, symmetric, cfg.reduce_range, cfg.min_real_range)
        else:
            q, scale, zp = qp.quantize_tensor(data, qtype, symmetric, cfg.reduce_range, cfg.min_real_range)
        scale = scale.astype(data.dtype)
        ed.add_initializer(q, f"{name}_quantized")
        p = Params(ed.add_initializer(scale, f"{name}_scale"), ed.add_initializer(zp, f"{name}_zero_point"),
                   scale, zp, m.axis if per_channel else None)
        out = f"{name}_DequantizeLinear_Output"
        ed.replace_input(name, out)
        attrs = {"axis": p.axis} if p.axis is not None else {}
        ed.add_node("DequantizeLinear", [f"{name}_quantized", p.scale_name, p.zp_name], [out],
                    f"{name}_DequantizeLinear", **attrs)
        ed.remove_initializer(name)
        self.done[name] = p

    def _pair(self, name: str, p: Params) -> None:
        ed = self.ed
        q_in, dq_out = name, f"{name}_DequantizeLinear_Output"
        if name in ed.graph_outputs:
            q_in, dq_out = f"{name}_QuantizeLinear_Input", name
            ed.rename_output(name, q_in)
        else:
            ed.replace_input(name, dq_out)
        ed.add_node("QuantizeLinear", [q_in, p.scale_name, p.zp_name], [f"{name}_QuantizeLinear_Output"],
                    f"{name}_QuantizeLinear")
        ed.add_node("DequantizeLinear", [f"{name}_QuantizeLinear_Output", p.scale_name, p.zp_name], [dq_out],
                    f"{name}_DequantizeLinear")
        self.done[name] = p

    def _bias(self, bias: str, x: Params, w: Params, beta: float) -> None:
        ed = self.ed
        data = ed.array(bias)
        q, scale = qp.quantize_bias(data, x.scale, w.scale, beta)
        per_channel = scale.size > 1
        ed.add_initializer(q.reshape(data.shape), f"{bias}_quantized")
        ed.add_initializer(scale.astype(data.dtype).reshape(-1), f"{bias}_quantized_scale")
        zp = np.zeros(scale.shape, np.int32).reshape(-1) if per_channel else np.array(0, np.int32)
        ed.add_initializer(zp, f"{bias}_quantized_zero_point")
        ed.remove_initializer(bias)
        attrs = {"axis": 0} if per_channel else {}
        ed.add_node("DequantizeLinear",
                    [f"{bias}_quantized", f"{bias}_quantized_scale", f"{bias}_quantized_zero_point"],
                    [bias], f"{bias}_DequantizeLinear", **attrs)


def _attr(node, name: str, default):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def quantize_qdq(ed: Editor, ranges: dict, cfg: Config) -> None:
    QDQWriter(ed, ranges, cfg).write()
