"""quantize_dynamic: weights quantized once, activations quantized at run time. Written as onnxruntime
1.32 writes it: MatMul -> DynamicQuantizeLinear + MatMulInteger + Cast + Mul (per-column weight scales
when per_channel), Conv -> the same with ConvInteger (per-tensor weights) and the bias added in float,
Gemm -> MatMul + Add first, Gather -> a uint8 table gathered as is.

Deliberate differences from onnxruntime: Attention, LSTM and EmbedLayerNormalization are left float."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from . import graph
from . import params as qp
from .config import DYNAMIC_OPS, Config
from .types import QuantType


def quantize_dynamic(model_input, model_output, op_types_to_quantize=None, per_channel=False, reduce_range=False,
                     weight_type=QuantType.QInt8, nodes_to_quantize=None, nodes_to_exclude=None,
                     use_external_data_format=False, extra_options=None):
    """Quantize the weights of ``model_input`` (a path or ModelProto) and save to ``model_output``."""
    extra = dict(extra_options or {})
    extra.setdefault("MatMulConstBOnly", True)
    cfg = Config.make(op_types_to_quantize, DYNAMIC_OPS, per_channel, reduce_range, QuantType.QUInt8, weight_type,
                      nodes_to_quantize, nodes_to_exclude, extra)
    model = graph.upgrade_opset(graph.load(model_input), 11)  # DynamicQuantizeLinear is opset 11's, as in onnxruntime
    ed = graph.Editor(model)
    _gemm_to_matmul(ed)
    DynamicWriter(ed, cfg).write()
    out = ed.finish()
    graph.save(out, model_output, use_external_data_format)
    return out


def _gemm_to_matmul(ed: graph.Editor) -> None:
    """Gemm(alpha=1, beta=1, transA=0) -> MatMul (+ Add), B transposed once when transB (onnxruntime's
    replace_gemm_with_matmul)."""
    for node in ed.nodes():
        if node.op_type != "Gemm" or node.domain not in ("", "ai.onnx"):
            continue
        a = {x.name: helper.get_attribute_value(x) for x in node.attribute}
        if a.get("alpha", 1.0) != 1.0 or a.get("beta", 1.0) != 1.0 or a.get("transA", 0):
            continue
        b = node.input[1]
        if a.get("transB", 0):
            if not ed.is_initializer(b):
                continue
            name = f"{b}_Transposed"
            if name not in ed.initializers:
                ed.add_initializer(np.ascontiguousarray(ed.array(b).T), name)
            b = name
        y = node.output[0]
        has_c = len(node.input) > 2 and node.input[2]
        mm_out = f"{y}_MatMul" if has_c else y
        ed.add_node("MatMul", [node.input[0], b], [mm_out], f"{node.name}_MatMul" if node.name else "")
        ed.types[mm_out] = ed.types.get(y, TensorProto.FLOAT)
        if has_c:
            ed.add_node("Add", [mm_out, node.input[2]], [y], f"{node.name}_Add" if node.name else "")
        ed.remove_node(node)


class DynamicWriter:
    def __init__(self, ed: graph.Editor, cfg: Config) -> None:
        self.ed, self.cfg = ed, cfg
        self.quantized: dict[str, tuple[str, str, str]] = {}  # float name -> (quantized, scale, zero point)
        self.float_needed: set[str] = set()  # names whose float value only a quantized node produces now

    def write(self) -> None:
        ed = self.ed
        for node in [*ed.nodes(), *ed.new_nodes]:
            if not self.cfg.wants(node):
                continue
            if node.op_type == "MatMul":
                self._matmul(node)
            elif node.op_type == "Conv":
                self._conv(node)
            elif node.op_type == "Gather":
                self._gather(node)
        for name in self.float_needed:
            if ed.consumers(name) or name in ed.graph_outputs:
                q, s, z = self.quantized[name]
                ed.add_node("DequantizeLinear", [q, s, z], [name], f"{name}_DequantizeLinear")

    # ------------------------------------------------------------------ inputs
    def _activation(self, name: str) -> tuple[str, str, str]:
        if name not in self.quantized:
            q, s, z = f"{name}_quantized", f"{name}_scale", f"{name}_zero_point"
            self.ed.add_node("DynamicQuantizeLinear", [name], [q, s, z], f"{name}_QuantizeLinear")
            self.quantized[name] = (q, s, z)
        return self.quantized[name]

    def _weight(self, name: str, axis: int | None, qtype: int | None = None, symmetric: bool | None = None,
                reduce_range: bool | None = None) -> tuple[str, str, str]:
        if name in self.quantized:
            return self.quantized[name]
        ed, cfg = self.ed, self.cfg
        data = ed.array(name)
        qtype = cfg.weight_type if qtype is None else qtype
        symmetric = cfg.weight_is_symmetric(qtype) if symmetric is None else symmetric
        rr = cfg.reduce_range if reduce_range is None else reduce_range
        if axis is not None and data.ndim > 0:
            q, scale, zp = qp.quantize_per_channel(data, axis, qtype, symmetric, rr, cfg.min_real_range)
        else:
            q, scale, zp = qp.quantize_tensor(data, qtype, symmetric, rr, cfg.min_real_range)
        names = (ed.add_initializer(q, f"{name}_quantized"),
                 ed.add_initializer(scale.astype(data.dtype), f"{name}_scale"),
                 ed.add_initializer(zp, f"{name}_zero_point"))
        self.quantized[name] = names
        return names

    def _operand(self, name: str, weight_axis: int | None):
        ed = self.ed
        if name in self.quantized:
            return self.quantized[name]
        if ed.is_initializer(name):
            return self._weight(name, weight_axis)
        return self._activation(name)

    # ------------------------------------------------------------------ ops
    def _matmul(self, node) -> None:
        ed = self.ed
        a, b = node.input[0], node.input[1]
        if not (ed.is_float(a) or a in self.quantized) or not (ed.is_float(b) or b in self.quantized):
            return
        if self.cfg.extra.get("MatMulConstBOnly") and not ed.is_initializer(b) and b not in self.quantized:
            return
        qa = self._operand(a, None)
        per_axis = -1 if self.cfg.per_channel and ed.is_initializer(b) else None
        qb = self._operand(b, per_axis % ed.array(b).ndim if per_axis is not None else None)
        self._integer_op(node, "MatMulInteger", qa, qb, {})

    def _conv(self, node) -> None:
        ed = self.ed
        x, w = node.input[0], node.input[1]
        if not ed.is_initializer(w) or not (ed.is_float(x) or x in self.quantized):
            return
        qx = self._operand(x, None)
        qw = self._weight(w, None)
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        bias = node.input[2] if len(node.input) > 2 and node.input[2] else None
        y = node.output[0]
        if bias is not None:
            shape = ed.add_initializer(np.array([1, -1] + [1] * (len(ed.array(w).shape) - 2), np.int64),
                                       f"{y}_bias_reshape_shape")
            ed.add_node("Reshape", [bias, shape], [f"{y}_bias_reshape_output"])
        self._integer_op(node, "ConvInteger", qx, qw, attrs, f"{y}quant_scaled_output" if bias else y)
        if bias is not None:
            ed.add_node("Add", [f"{y}quant_scaled_output", f"{y}_bias_reshape_output"], [y], f"{y}_bias_add")

    def _integer_op(self, node, op: str, qa, qb, attrs: dict, out: str | None = None) -> None:
        ed = self.ed
        y = node.output[0]
        base = f"{node.name}_quant" if node.name else ""
        integer_out = f"{y}_output_quantized"
        ed.add_node(op, [qa[0], qb[0], qa[2], qb[2]], [integer_out], base, **attrs)
        ed.add_node("Cast", [integer_out], [f"{integer_out}_cast_output"], f"{integer_out}_cast",
                    to=ed.types.get(y, TensorProto.FLOAT) or TensorProto.FLOAT)
        scales = f"{base}_scales_mul:0" if base else f"{qa[1]}_{qb[1]}_mul:0"
        ed.add_node("Mul", [qa[1], qb[1]], [scales], scales[:-2])
        ed.add_node("Mul", [f"{integer_out}_cast_output", scales], [out or y],
                    f"{base}_output_scale_mul" if base else "")
        ed.remove_node(node)

    def _gather(self, node) -> None:
        ed = self.ed
        data = node.input[0]
        if not (ed.is_initializer(data) and ed.is_float(data)):
            return
        cfg = self.cfg
        q, s, z = self._weight(data, None, cfg.activation_type, cfg.initializer_symmetric(cfg.activation_type), False)
        y = node.output[0]
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        ed.add_node("Gather", [q, *node.input[1:]], [f"{y}_quantized"], node.name, **attrs)
        ed.remove_node(node)
        self.quantized[y] = (f"{y}_quantized", s, z)
        self.float_needed.add(y)
