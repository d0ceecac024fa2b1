"""Which nodes QNN takes: the mapping rules, then what the backend really finalizes.

A node must be in the default domain, float32 with static shapes, pass its lowering rule, and its one-node
QNN graph (built by the same rule) must finalize on the backend: ``backendValidateOpConfig`` accepts configs
that later fail to finalize, so the probe finalizes. Verdicts are cached per signature by the provider instance's
``Prober`` and, with a cache folder, on disk per QNN build, SoC model and precision, where later sessions find
them. Running nodes is not done here.
"""

from __future__ import annotations

import hashlib
import threading
from typing import Any

import numpy as np
import onnx

from ort_core.optimizer.layout import NHWC_DOMAIN
from ort_core.plugins import VerdictCache, canonical, constant_node_values, is_onnx_domain

from . import __version__, emitter, lowering, qdq
from .emitter import Emitter, Values
from .graph import GraphBuilder
from .lowering import DATA_INPUTS, FUSED, NHWC_OPS, RULES, SCALAR_CONSTANTS, emit_nodes, quantized_why
from .qdq import QUANT_TYPES, Plan, QdqIndex, is_dequantized_constant
from .runtime import Backend, Context, QnnError, Target

FLOAT = onnx.TensorProto.FLOAT
MAX_RANK = 5
RANK4_ONLY = frozenset({"Sqrt", "Neg", "Erf", "Gelu", "BiasGelu", "ReduceMean", "QuantizeLinear", "DequantizeLinear"})
"""Ops taken up to rank 4 only: on the simulator, Sqrt and Neg of rank 5 finalize and then abort the process
when executed ("rank not 4"); the others were not verified at rank 5."""


def _with_qdq(values: Values, graph: Any) -> Values:
    values.attach(QdqIndex(graph.nodes, [v.name for v in graph.outputs], values))
    return values


def values_of_view(view: Any) -> Values:
    """Values as a GraphView shows them (initializers a feed cannot override, and Constant nodes), and the
    graph's Q/DQ structure."""
    nodes = constant_node_values(view.graph)

    def constant(name: str) -> np.ndarray | None:
        value = view.constant(name)
        return nodes.get(name) if value is None else value

    return _with_qdq(Values(view.type_of, constant, view.opset("")), view.graph)


def values_of_subgraph(sub: Any) -> Values:
    """Values of a subgraph: its constants, and the model's constant initializers (the integers of a
    DequantizeLinear in another subgraph that one of its quantized ops reads)."""
    nodes = constant_node_values(sub.graph)
    graph = sub.graph
    fed = {v.name for v in graph.inputs}

    def constant(name: str) -> np.ndarray | None:
        value = sub.constants.get(name)
        if value is None and name not in fed:
            value = graph.initializers.get(name)
        return nodes.get(name) if value is None else value

    return _with_qdq(Values(sub.graph.type_of, constant, sub.opsets.get("", 0)), graph)


def static_reason(node: Any, values: Values) -> str | None:
    """Why ``node`` is not offered to QNN (domain, op, types, shapes, the op's rule), or None to probe it."""
    if not is_onnx_domain(node.domain) and (node.domain, node.op_type) not in FUSED:
        return f"domain '{node.domain}' is not mapped to QNN"
    rule = RULES.get(node.op_type)
    if rule is None:
        return f"{node.op_type} is not mapped to QNN yet (this slice maps {', '.join(sorted(RULES))})"
    if node.subgraphs():
        return "attributes holding subgraphs are not mapped"
    data = DATA_INPUTS.get(node.op_type)
    names = [(k, n) for k, n in enumerate(node.inputs) if n] + [(-1, n) for n in node.outputs if n]
    integers = {node.inputs[0]} if node.op_type == "DequantizeLinear" else \
        {node.outputs[0]} if node.op_type == "QuantizeLinear" else set()
    for k, name in names:
        if k >= 0 and data is not None and k not in data:
            continue  # a shape or axes input; the rule decides about it
        what = f"input '{name}'" if k >= 0 else f"output '{name}'"
        et = values.elem_type(name)
        if name in integers:
            if et not in QUANT_TYPES:
                kind = onnx.helper.tensor_dtype_to_string(et).removeprefix("TensorProto.").lower() if et else "unknown"
                return f"{what} is {kind}: QNN's fixed-point types are 8/16-bit integers and int32"
        elif et != FLOAT:
            kind = onnx.helper.tensor_dtype_to_string(et).removeprefix("TensorProto.").lower() if et else "unknown"
            return f"{what} is {kind}: only float32 is claimed so far"
        shape = values.shape(name)
        if shape is None:
            return f"the shape of {what} is not static (QNN graphs have fixed shapes)"
        if len(shape) == 0 and not (k >= 0 and node.op_type in SCALAR_CONSTANTS and values.constant(name) is not None):
            return f"{what} is a scalar (rank 0), which is not mapped"
        if len(shape) > MAX_RANK:
            return f"{what} has rank {len(shape)}; the HTP backend takes up to {MAX_RANK}"
        if len(shape) > 4 and node.op_type in RANK4_ONLY:
            return (f"{what} has rank {len(shape)}: {node.op_type} is mapped up to rank 4 (the HTP backend "
                    "finalizes some rank-5 elementwise graphs and then aborts executing them)")
        if 0 in shape:
            return f"{what} is empty, which is not mapped"
    return rule.why_not(node, values)


# --------------------------------------------------------------------------------------------- probes
_PROBING = threading.Lock()  # the backend builds one probe graph at a time, whichever session asks


def _rules_digest() -> str:
    """A digest of the lowering rules' and the emitter's source: a verdict is about the graph a rule builds,
    so changed rules must not reuse old verdicts."""
    h = hashlib.sha1()
    for module in (lowering, emitter, qdq):
        try:
            with open(module.__file__, "rb") as f:
                h.update(f.read())
        except OSError:
            return "unknown"
    return h.hexdigest()[:12]


RULES_DIGEST = _rules_digest()


def probe_tag(backend: Backend, target: Target, precision: int) -> str:
    """What a verdict depends on besides the node: the library build, target and precision, this plugin and
    its lowering rules."""
    arch = f"|arch={target.htp_arch}" if target.htp_arch else ""
    return (f"{backend.build_id}|soc={target.soc_model}{arch}|precision={precision}|ort-ep-qnn={__version__}"
            f"|rules={RULES_DIGEST}")


def signature(node: Any, values: Values, tag: str, extra: Any = None) -> str:
    """The probe's key: op, opset, attributes, and per input and output its static shape, element type and
    whether it is a constant (constant values shape the QNN graph only through their shapes); ``extra``: what
    else the probed graph depends on (a quantized op's encodings' kinds)."""
    ins = tuple((values.shape(n), values.elem_type(n), values.constant(n) is not None) if n else None
                for n in node.inputs)
    outs = tuple((values.shape(n), values.elem_type(n)) if n else None for n in node.outputs)
    attrs = tuple(sorted((k, canonical(v)) for k, v in node.attrs.items()))
    return repr((tag, node.op_type, values.opset, attrs, ins, outs, extra))


class Prober:
    """A provider instance's probes: one-node graphs finalized in a context of its own (replaced every
    ``PER_CONTEXT`` probes, so that probe graphs do not pile up; closed with the session), and the verdicts
    known (this session's, and those the cache folder holds from earlier sessions and processes, keyed by
    ``tag``). Probing is serialized across sessions: the backend builds one probe graph at a time."""

    PER_CONTEXT = 64

    def __init__(self, folder: str = "", tag: str = "") -> None:
        self.verdicts = VerdictCache("ort-ep-qnn", folder, tag)
        self._contexts: dict[tuple[str, Target], Context] = {}
        self._count = 0

    def verdict(self, key: str, node: Any, values: Values, backend: Backend, target: Target, precision: int,
                group: tuple[list[Any], list[Any]] | None = None) -> str:
        """The verdict for signature ``key``: known, or found by finalizing ``node`` (see ``finalize``)."""
        verdict = self.verdicts.get(key)
        if verdict is None:
            verdict = self.finalize(node, values, backend, target, precision, group)
            self.verdicts.put(key, verdict)
        return verdict

    def _context(self, backend: Backend, target: Target) -> Context:
        key = (backend.path, target)
        ctx = self._contexts.get(key)
        if ctx is not None and ctx.graphs >= self.PER_CONTEXT:
            ctx.close()
            ctx = None
        if ctx is None:
            ctx = self._contexts[key] = backend.create_context(target)
        return ctx

    def finalize(self, node: Any, values: Values, backend: Backend, target: Target, precision: int,
                 group: tuple[list[Any], list[Any]] | None = None) -> str:
        """"" when a one-node graph of ``node`` finalizes, else QNN's reason. With ``group`` (its
        DequantizeLinear and QuantizeLinear nodes), the node is built on quantized tensors, as in a model."""
        with _PROBING:
            self._count += 1
            ctx = self._context(backend, target)
            try:
                builder = GraphBuilder(ctx, f"probe{self._count}_{node.op_type}", precision)
                if group is None:
                    em = Emitter(builder, values, [o for o in node.outputs if o])
                    emit_nodes(em, [node], Plan.empty())
                else:
                    dqs, qs = group
                    em = Emitter(builder, values, [q.outputs[0] for q in qs])
                    plan = Plan({node.id}, {q.id for q in qs})
                    emit_nodes(em, [*dqs, node, *qs], plan)
                builder.finalize()
                return ""
            except QnnError as e:
                return str(e)

    def close(self) -> None:
        with _PROBING:
            for ctx in self._contexts.values():
                ctx.close()
            self._contexts.clear()




def unsupported_reason(node: Any, values: Values, backend: Backend, target: Target, precision: int,
                       prober: Prober) -> str | None:
    """The rule shared by capability and compile: None when QNN takes ``node`` (a QDQ group's op on quantized
    tensors when it can, else on float ones). A channels-last node (the core makes them of the Conv, pool and LRN
    nodes this provider claimed, for its NHWC preference) is taken as its standard form was."""
    if node.domain == NHWC_DOMAIN:
        return None if node.op_type in NHWC_OPS else f"{NHWC_DOMAIN}::{node.op_type} is not mapped to QNN"
    if quantized_reason(node, values, backend, target, precision, prober) is None:
        return None
    return float_reason(node, values, backend, target, precision, prober)


def float_reason(node: Any, values: Values, backend: Backend, target: Target, precision: int,
                 prober: Prober) -> str | None:
    """None when QNN takes ``node`` as it stands (float ops, or a lone QuantizeLinear / DequantizeLinear)."""
    why = static_reason(node, values)
    if why is not None:
        return why
    if is_dequantized_constant(node, values):
        return None  # no QNN op: the weight is baked where it is read, or returned as the constant it is
    tag = probe_tag(backend, target, precision)
    key = signature(node, values, tag)
    verdict = prober.verdict(key, node, values, backend, target, precision)
    return f"the QNN HTP backend does not finalize it: {verdict}" if verdict else None


def quantized_reason(node: Any, values: Values, backend: Backend, target: Target, precision: int,
                     prober: Prober) -> str | None:
    """None when ``node`` is a QDQ group's op (DequantizeLinear -> op -> QuantizeLinear) that QNN runs on its
    fixed-point tensors; else why not."""
    index = values.qdq
    group = index.group_of(node, DATA_INPUTS.get(node.op_type)) if index is not None else None
    if group is None:
        return "not a DequantizeLinear -> op -> QuantizeLinear group"
    why = static_reason(node, values) or quantized_why(node, values)
    if why is not None:
        return why
    dqs, qs = group
    kinds = (tuple((index.dq[n].quant.qnn_type, index.dq[n].quant.axis is not None, n in index.constant_sources)
                   for n in node.inputs if n in index.dq),
             tuple(index.q[o][1].qnn_type for o in node.outputs if o))
    key = signature(node, values, probe_tag(backend, target, precision), ("quantized", kinds))
    live = [d for d in dqs if d.outputs[0] not in index.constant_sources]
    verdict = prober.verdict(key, node, values, backend, target, precision, (live, qs))
    return f"on quantized tensors, the QNN HTP backend does not finalize it: {verdict}" if verdict else None
