"""A fused subgraph built as QNN graphs, finalized once, and the kernel that executes them.

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

from ort_core.plugins import FusedSubgraph

from .capability import values_of_subgraph
from .emitter import Emitter, Values
from .graph import GraphBuilder, QnnGraph
from .lowering import RULES
from .options import Options
from .runtime import Context, QnnError

log = logging.getLogger("ort_ep_qnn")
profile_log = logging.getLogger("ort_ep_qnn.profile")


@dataclass
class Stage:
    """One finalized QNN graph of a subgraph: the ONNX values it reads and writes, in its tensors' order."""

    graph: QnnGraph
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]


def _build(nodes: Sequence[Any], outputs: Sequence[str], context: Context, name: str, values: Values,
           options: Options) -> Stage:
    builder = GraphBuilder(context, name, options.precision if options.fp16 else None)
    em = Emitter(builder, values, outputs)
    for node in nodes:
        RULES[node.op_type].emit(node, em)
    graph = builder.finalize(options.profile_level)
    return Stage(graph, tuple(em.input_names), tuple(em.output_names))


def build_stages(subgraph: FusedSubgraph, context: Context, options: Options) -> list[Stage]:
    """The subgraph as one finalized graph, else as consecutive parts (halves, recursively)."""
    values = values_of_subgraph(subgraph)
    nodes = list(subgraph.nodes)
    wanted = set(subgraph.outputs)

    def needed(part: Sequence[Any], rest: Sequence[Any]) -> list[str]:
        later = {n for node in rest for n in node.inputs if n} | wanted
        return [o for node in part for o in node.outputs if o and o in later]

    def split(lo: int, hi: int) -> list[Stage]:
        part = nodes[lo:hi]
        try:
            return [_build(part, needed(part, nodes[hi:]), context, f"{subgraph.name}_{lo}", values, options)]
        except QnnError as e:
            if hi - lo == 1:
                raise
            log.debug("%s: nodes %d..%d do not finalize as one QNN graph (%s); splitting", subgraph.name, lo,
                      hi - 1, e)
            mid = (lo + hi) // 2
            return split(lo, mid) + split(mid, hi)

    return split(0, len(nodes))


class CompiledSubgraph:
    """The kernel: ``kernel(*inputs)`` -> one float32 array per subgraph output."""

    def __init__(self, subgraph: FusedSubgraph, context: Context, options: Options) -> None:
        self.name = subgraph.name
        self.stages = build_stages(subgraph, context, options)
        produced = {n for s in self.stages for n in s.output_names}
        missing = [o for o in subgraph.outputs if o not in produced]
        if missing:
            raise ValueError(f"{self.name}: outputs {missing} are not produced by its nodes")
        self.positions = {name: k for k, name in enumerate(subgraph.inputs)}
        self.outputs = tuple(subgraph.outputs)
        self.n_inputs = len(subgraph.inputs)
        self.input_names = tuple(subgraph.inputs)

    def _feed(self, xs: Sequence[Any], name: str, shape: tuple[int, ...]) -> np.ndarray:
        x = xs[self.positions[name]]
        if not isinstance(x, np.ndarray) or x.dtype != np.float32 or not x.flags.c_contiguous:
            x = np.ascontiguousarray(x, dtype=np.float32)
        if x.shape != shape:
            raise ValueError(f"{self.name}: input '{name}' has shape {x.shape}, the QNN graph was built for {shape}")
        return x

    def __call__(self, *xs: Any) -> list[np.ndarray]:
        if len(xs) != self.n_inputs:
            raise ValueError(f"{self.name}: expected {self.n_inputs} inputs {list(self.input_names)}, got {len(xs)}")
        env: dict[str, np.ndarray] = {}
        for stage in self.stages:
            graph = stage.graph
            ins = [env[n] if n in env else self._feed(xs, n, graph.input_shapes[k])
                   for k, n in enumerate(stage.input_names)]
            outs = [np.empty(shape, np.float32) for shape in graph.output_shapes]
            graph.execute(ins, outs)
            env.update(zip(stage.output_names, outs))
            if graph.profile is not None and profile_log.isEnabledFor(logging.INFO):
                for ident, value, unit in graph.last_profile:
                    profile_log.info("%s: %s = %d %s", graph.name, ident, value, unit)
        return [env[name] for name in self.outputs]
