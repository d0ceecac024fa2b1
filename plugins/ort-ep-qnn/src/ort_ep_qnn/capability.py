"""Which nodes QNN takes: the mapping rules, then what the backend really finalizes.

A node must be in the default domain, float32 with static shapes, pass its lowering rule, and its one-node
QNN graph (built by the same rule) must finalize on the backend: ``backendValidateOpConfig`` accepts configs
that later fail to finalize, so the probe finalizes. Verdicts are cached per signature in memory and, with a
cache folder, on disk per QNN build, SoC model and precision. Running nodes is not done here.
"""

from __future__ import annotations

import hashlib
import threading
from typing import Any

import numpy as np
import onnx

from ort_core.plugins import VerdictCache, canonical, constant_node_values, is_onnx_domain

from . import __version__, emitter, lowering
from .emitter import Emitter, Values
from .graph import GraphBuilder
from .lowering import DATA_INPUTS, RULES
from .runtime import Backend, Context, QnnError

FLOAT = onnx.TensorProto.FLOAT
MAX_RANK = 5


def values_of_view(view: Any) -> Values:
    """Values as a GraphView shows them (initializers a feed cannot override, and Constant nodes)."""
    nodes = constant_node_values(view.graph)

    def constant(name: str) -> np.ndarray | None:
        value = view.constant(name)
        return nodes.get(name) if value is None else value

    return Values(view.type_of, constant, view.opset(""))


def values_of_subgraph(sub: Any) -> Values:
    nodes = constant_node_values(sub.graph)

    def constant(name: str) -> np.ndarray | None:
        value = sub.constants.get(name)
        return nodes.get(name) if value is None else value

    return Values(sub.graph.type_of, constant, sub.opsets.get("", 0))


def static_reason(node: Any, values: Values) -> str | None:
    """Why ``node`` is not offered to QNN (domain, op, types, shapes, the op's rule), or None to probe it."""
    if not is_onnx_domain(node.domain):
        return f"domain '{node.domain}' is not mapped to QNN"
    rule = RULES.get(node.op_type)
    if rule is None:
        return f"{node.op_type} is not mapped to QNN yet (this slice maps {', '.join(sorted(RULES))})"
    if node.subgraphs():
        return "attributes holding subgraphs are not mapped"
    data = DATA_INPUTS.get(node.op_type)
    names = [(k, n) for k, n in enumerate(node.inputs) if n] + [(-1, n) for n in node.outputs if n]
    for k, name in names:
        if k >= 0 and data is not None and k not in data:
            continue  # a shape or axes input; the rule decides about it
        what = f"input '{name}'" if k >= 0 else f"output '{name}'"
        et = values.elem_type(name)
        if et != FLOAT:
            kind = onnx.helper.tensor_dtype_to_string(et).removeprefix("TensorProto.").lower() if et else "unknown"
            return f"{what} is {kind}: only float32 is claimed so far"
        shape = values.shape(name)
        if shape is None:
            return f"the shape of {what} is not static (QNN graphs have fixed shapes)"
        if len(shape) == 0:
            return f"{what} is a scalar (rank 0), which is not mapped"
        if len(shape) > MAX_RANK:
            return f"{what} has rank {len(shape)}; the HTP backend takes up to {MAX_RANK}"
        if 0 in shape:
            return f"{what} is empty, which is not mapped"
    return rule.why_not(node, values)


# --------------------------------------------------------------------------------------------- probes
PROBES = VerdictCache("ort-ep-qnn")  # probe verdicts, per QNN build, SoC model, precision and plugin version


def _rules_digest() -> str:
    """A digest of the lowering rules' and the emitter's source: a verdict is about the graph a rule builds,
    so changed rules must not reuse old verdicts."""
    h = hashlib.sha1()
    for module in (lowering, emitter):
        try:
            with open(module.__file__, "rb") as f:
                h.update(f.read())
        except OSError:
            return "unknown"
    return h.hexdigest()[:12]


RULES_DIGEST = _rules_digest()


def probe_tag(backend: Backend, soc_model: int, precision: int) -> str:
    """What a verdict depends on besides the node: the library build, target and precision, this plugin and
    its lowering rules."""
    return f"{backend.build_id}|soc={soc_model}|precision={precision}|ort-ep-qnn={__version__}|rules={RULES_DIGEST}"


def signature(node: Any, values: Values, tag: str) -> str:
    """The probe's key: op, opset, attributes, and per input and output its static shape and whether it is a
    constant (constant values shape the QNN graph only through their shapes)."""
    ins = tuple((values.shape(n), values.constant(n) is not None) if n else None for n in node.inputs)
    outs = tuple(values.shape(n) if n else None for n in node.outputs)
    attrs = tuple(sorted((k, canonical(v)) for k, v in node.attrs.items()))
    return repr((tag, node.op_type, values.opset, attrs, ins, outs))


class Prober:
    """One-node graphs in a context of their own (replaced every ``PER_CONTEXT`` probes, so that probe graphs
    do not pile up), serialized: probing is process-wide state of the backend."""

    PER_CONTEXT = 64

    def __init__(self) -> None:
        self._contexts: dict[tuple[str, int], Context] = {}
        self._lock = threading.Lock()
        self._count = 0

    def _context(self, backend: Backend, soc_model: int) -> Context:
        key = (backend.path, soc_model)
        ctx = self._contexts.get(key)
        if ctx is not None and ctx.graphs >= self.PER_CONTEXT:
            ctx.close()
            ctx = None
        if ctx is None:
            ctx = self._contexts[key] = backend.create_context(soc_model)
        return ctx

    def finalize(self, node: Any, values: Values, backend: Backend, soc_model: int, precision: int) -> str:
        """"" when a one-node graph of ``node`` finalizes, else QNN's reason."""
        with self._lock:
            self._count += 1
            ctx = self._context(backend, soc_model)
            try:
                builder = GraphBuilder(ctx, f"probe{self._count}_{node.op_type}", precision)
                em = Emitter(builder, values, [o for o in node.outputs if o])
                RULES[node.op_type].emit(node, em)
                builder.finalize()
                return ""
            except QnnError as e:
                return str(e)

    def close(self) -> None:
        with self._lock:
            for ctx in self._contexts.values():
                ctx.close()
            self._contexts.clear()


PROBER = Prober()


def unsupported_reason(node: Any, values: Values, backend: Backend, soc_model: int, precision: int) -> str | None:
    """The rule shared by capability and compile: None when QNN takes ``node``."""
    why = static_reason(node, values)
    if why is not None:
        return why
    tag = probe_tag(backend, soc_model, precision)
    key = signature(node, values, tag)
    verdict = PROBES.get(key)
    if verdict is None:
        verdict = PROBER.finalize(node, values, backend, soc_model, precision)
        PROBES.put(key, verdict)
    return f"the QNN HTP backend does not finalize it: {verdict}" if verdict else None
