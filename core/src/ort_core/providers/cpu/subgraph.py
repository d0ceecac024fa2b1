"""Executor for subgraph bodies (If branches, Loop/Scan/SequenceMap bodies) in the CPU provider:
planned once at kernel-factory time through the CPU registry, then run by walking a flat step list.
Knows nothing of sessions or other providers; custom ops inside bodies are not supported.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ...errors import KernelError, OrtError
from ...ir.graph import Graph, Node, onnx_domain, outer_scope_reads
from ...ir.types import ValueType
from ...limits import check_terminated, current, too_large
from .registry import lookup, outer_scope_names

# Domains other than the default one get their newest kernel: factories only learn the opset of
# their own node's domain, so a body cannot know what the model imports for, say, ai.onnx.ml.
_NEWEST = 1 << 30


class Body:
    """A subgraph planned for repeated runs.

    ``outer_names`` lists the outer-scope values the owning kernel receives (in the order of
    ``outer_scope_names(owner)``); the body picks the ones it reads. Per kernel call, ``bind``
    builds a base frame holding constants and outer values; per iteration, ``run`` copies it,
    sets the body inputs and walks the steps. Frames are per call, so a Body is thread-safe.
    """

    def __init__(self, graph: Graph, owner: Node, opset: int, outer_names: Sequence[str]):
        self.graph = graph
        self.owner = owner
        self.label = f"{owner.label} subgraph '{graph.name}'"
        self.input_names = [v.name for v in graph.inputs]
        self.output_names = [v.name for v in graph.outputs]
        slots: dict[str, int] = {}
        # slot 0 stays None (read for omitted inputs); slot 1 swallows omitted outputs
        template: list[Any] = [None, None]

        def slot(name: str) -> int:
            if name not in slots:
                slots[name] = len(template)
                template.append(None)
            return slots[name]

        self.in_slots = tuple(slot(n) for n in self.input_names)
        for name, value in graph.initializers.items():
            if name not in slots:  # an input of the same name overrides the initializer
                template[slot(name)] = value
        try:
            order = graph.topological_order()
        except ValueError as e:
            raise KernelError(f"{self.label}: {e}") from None
        for node in order:
            for o in node.outputs:
                if o:
                    slot(o)
        outer_index = {n: k for k, n in enumerate(outer_names)}
        self.outer: list[tuple[int, int]] = []  # (slot, index into the owner's outer values)
        # a stand-in node holding just this graph: its outer reads are this body's
        for name in sorted(outer_scope_reads(Node("", [], [], {"body": graph}))):
            if name not in outer_index:
                raise KernelError(f"{self.label}: reads '{name}', which neither the subgraph nor an "
                                  "enclosing graph defines")
            self.outer.append((slot(name), outer_index[name]))
        self.steps = [self._step(node, opset, slots) for node in order]
        self.out_slots = tuple(slots[n] for n in self.output_names)
        self.template = template

    def _step(self, node: Node, opset: int, slots: dict[str, int]):
        domain = onnx_domain(node.domain)
        version = opset if domain == "" else _NEWEST
        kd = lookup(domain, node.op_type, version)
        if kd is None:
            what = "custom ops inside subgraphs are not supported" if domain else f"opset {opset}"
            raise KernelError(f"{self.label}: {node.label} has no CPU kernel ({what})")
        kernel = kd.build(node, version, self.graph)
        ins = tuple(slots[n] if n else 0 for n in node.inputs) + tuple(slots[n] for n in outer_scope_names(node))
        outs = tuple(slots[n] if n else 1 for n in node.outputs)
        return kernel, ins, outs, node.label

    def bind(self, outer_values: Sequence[Any]) -> list[Any]:
        """The base frame for one kernel call: constants plus the outer values this body reads."""
        frame = self.template.copy()
        for s, k in self.outer:
            frame[s] = outer_values[k]
        return frame

    def run(self, base: list[Any], inputs: Sequence[Any]) -> list[Any]:
        """Outputs of one run of the body on ``inputs`` (positional, as the body declares them).

        Polls the run's terminate flag first: Loop/Scan call this once per iteration."""
        check_terminated(self.label)
        max_bytes = current().max_tensor_bytes
        frame = base.copy()
        for s, v in zip(self.in_slots, inputs):
            frame[s] = v
        for kernel, ins, outs, label in self.steps:
            try:
                results = kernel(*[frame[i] for i in ins])
            except OrtError as e:
                raise type(e)(f"{self.label}: {e}" if label in str(e) else f"{self.label}: {label}: {e}") from e
            except Exception as e:  # noqa: BLE001 - a failing body node is reported with its path
                raise KernelError(f"{self.label}: {label} failed: {type(e).__name__}: {e}") from e
            for s, v in zip(outs, results):
                if type(v) is np.ndarray and v.nbytes > max_bytes:  # a body growing a tensor every iteration
                    raise KernelError(too_large(f"{self.label}: {label}", v))
                frame[s] = v
        return [frame[s] for s in self.out_slots]

    def output_type(self, k: int) -> ValueType | None:
        return self.graph.outputs[k].type if k < len(self.graph.outputs) else None

