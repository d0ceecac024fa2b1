"""A fused subgraph built as QNN graphs, finalized once (or retrieved from a deserialized context), and the
kernel that executes them.

The subgraph becomes one QNN graph when the backend finalizes it; when it does not (the HTP's tightly coupled
memory cannot hold a large float32 activation the way the whole graph is tiled), it is split in halves, in
topological order, down to single nodes, which the capability probes have finalized already. Constants
(initializers and Constant-node values) become static tensors; each call binds the caller's host arrays as
client buffers and returns new output arrays. Which nodes may be built is decided in ``capability``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .emitter import Emitter, Values
from .graph import GraphBuilder, QnnGraph
from .lowering import emit_nodes
from .options import Options
from .qdq import Plan, atoms, reads, writes
from .runtime import Context, GraphInfo, QnnError

log = logging.getLogger("ort_ep_qnn")
profile_log = logging.getLogger("ort_ep_qnn.profile")


@dataclass
class Stage:
    """One finalized QNN graph of a subgraph: the ONNX values it reads and writes, in its tensors' order."""

    graph: QnnGraph
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]


def _build(nodes: Sequence[Any], outputs: Sequence[str], context: Context, name: str, values: Values,
           options: Options, plan: Plan | None = None) -> Stage:
    builder = GraphBuilder(context, name, options.precision if options.fp16 else None)
    em = Emitter(builder, values, outputs)
    emit_nodes(em, nodes, plan or Plan.empty())
    graph = builder.finalize(options.profile_level)
    return Stage(graph, tuple(em.input_names), tuple(em.output_names))


def build_stages(nodes: Sequence[Any], wanted: set[str], name: str, context: Context, options: Options,
                 values: Values, plan: Plan | None = None, failed: set[tuple[int, int]] | None = None) -> list[Stage]:
    """``nodes`` (computing the values in ``wanted`` among others) as one finalized graph, else as consecutive
    parts (halves, recursively; a quantized op stays with the QuantizeLinear nodes it writes). The ranges of
    parts that did not finalize are added to ``failed``, and ranges already in it are split without trying
    (a graph that failed stays in its context, which then cannot be serialized: a caller saving the context
    builds again in a fresh one, skipping them)."""
    plan = plan or Plan.empty()
    failed = set() if failed is None else failed
    units = atoms(list(nodes), plan, values.qdq)

    def needed(part: Sequence[Any], rest: Sequence[Any]) -> list[str]:
        later = {n for unit in rest for node in unit for n in reads(node, plan, values.qdq, values)} | wanted
        return [o for unit in part for node in unit for o in writes(node, plan, values.qdq) if o in later]

    def split(lo: int, hi: int) -> list[Stage]:
        part = units[lo:hi]
        try:
            if (lo, hi) in failed and hi - lo > 1:
                raise QnnError("did not finalize before")
            return [_build([n for unit in part for n in unit], needed(part, units[hi:]), context, f"{name}_{lo}",
                           values, options, plan)]
        except QnnError as e:
            failed.add((lo, hi))
            if hi - lo == 1:
                raise
            log.debug("%s: nodes %d..%d do not finalize as one QNN graph (%s); splitting", name, lo, hi - 1, e)
            mid = (lo + hi) // 2
            return split(lo, mid) + split(mid, hi)

    return split(0, len(units))


def loaded_stages(graphs: Sequence[GraphInfo], context: Context, node_inputs: Sequence[str],
                  node_outputs: Sequence[str], label: str, options: Options) -> list[Stage]:
    """The graphs of a deserialized context as stages, in an order where each reads only the EPContext node's
    inputs or values of earlier stages (its inputs and outputs carry their ONNX values' names). A single graph
    whose tensor names are not the node's (onnxruntime-qnn names a quantized graph's input after the float
    value its QuantizeLinear reads) is wired by position, as long as the counts and sizes agree."""
    available = [n for n in node_inputs if n]
    if len(graphs) == 1 and not {t.name for t in graphs[0].inputs} <= set(available):
        g = graphs[0]
        outputs = [n for n in node_outputs if n]
        if len(g.inputs) != len(available) or len(g.outputs) != len(outputs):
            raise ContextMismatch(f"{label}: its context's graph has {len(g.inputs)} inputs and {len(g.outputs)} "
                                  f"outputs, the node {len(available)} and {len(outputs)}")
        graph = QnnGraph.retrieved(context, g, options.profile_level)
        return [Stage(graph, tuple(available), tuple(outputs))]
    pending, stages, known = list(graphs), [], set(available)
    while pending:
        ready = next((g for g in pending if all(t.name in known for t in g.inputs)), None)
        if ready is None:
            missing = sorted({t.name for g in pending for t in g.inputs} - known)
            raise ContextMismatch(f"{label}: the context's graphs read {missing}, which are neither inputs of the "
                                  "EPContext node nor outputs of its other graphs")
        pending.remove(ready)
        graph = QnnGraph.retrieved(context, ready, options.profile_level)
        stages.append(Stage(graph, tuple(t.name for t in ready.inputs), tuple(t.name for t in ready.outputs)))
        known.update(t.name for t in ready.outputs)
    return stages


class ContextMismatch(ValueError):
    """An EPContext node and the context binary it names do not fit together."""


class CompiledSubgraph:
    """The kernel: ``kernel(*inputs)`` -> one array per subgraph output, computed by ``stages`` in order."""

    def __init__(self, name: str, stages: Sequence[Stage], inputs: Sequence[str], outputs: Sequence[str],
                 constants: dict[str, np.ndarray] | None = None) -> None:
        self.name = name
        self.stages = list(stages)
        self.constants = dict(constants or {})  # outputs that are constants (dequantized weights read elsewhere)
        produced = {n for s in self.stages for n in s.output_names} | set(self.constants)
        missing = [o for o in outputs if o not in produced]
        if missing:
            raise ContextMismatch(f"{self.name}: outputs {missing} are not produced by its QNN graphs")
        self.positions = {n: k for k, n in enumerate(inputs)}
        unknown = sorted({n for s in self.stages for n in s.input_names} - produced - set(self.positions))
        if unknown:
            raise ContextMismatch(f"{self.name}: its QNN graphs read {unknown}, which are not its inputs")
        self.outputs = tuple(outputs)
        self.n_inputs = len(inputs)
        self.input_names = tuple(inputs)

    def _feed(self, xs: Sequence[Any], name: str, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        x = xs[self.positions[name]]
        if not isinstance(x, np.ndarray) or x.dtype != dtype or not x.flags.c_contiguous:
            x = np.ascontiguousarray(x, dtype=dtype)
        if x.shape != shape:
            raise ValueError(f"{self.name}: input '{name}' has shape {x.shape}, the QNN graph was built for {shape}")
        return x

    def __call__(self, *xs: Any) -> list[np.ndarray]:
        if len(xs) != self.n_inputs:
            raise ValueError(f"{self.name}: expected {self.n_inputs} inputs {list(self.input_names)}, got {len(xs)}")
        env: dict[str, np.ndarray] = {}
        for stage in self.stages:
            graph = stage.graph
            ins = [env[n] if n in env else self._feed(xs, n, graph.input_shapes[k], graph.input_dtypes[k])
                   for k, n in enumerate(stage.input_names)]
            outs = [np.empty(shape, dtype) for shape, dtype in zip(graph.output_shapes, graph.output_dtypes)]
            graph.execute(ins, outs)
            env.update(zip(stage.output_names, outs))
            if graph.profile is not None and profile_log.isEnabledFor(logging.INFO):
                for ident, value, unit in graph.last_profile:
                    profile_log.info("%s: %s = %d %s", graph.name, ident, value, unit)
        return [env[name] if name in env else self.constants[name].copy() for name in self.outputs]
