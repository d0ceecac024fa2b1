"""Kernel registry of the CPU provider: (domain, op type, opset range) -> kernel factory.

A kernel factory runs once per node at session creation and returns the kernel: a plain
function ``kernel(*inputs) -> tuple of outputs`` with attributes already resolved.
The registry only stores and looks up; it runs nothing.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...errors import KernelError, OrtError
from ...ir.graph import Node, onnx_domain, outer_scope_reads

Kernel = Callable[..., tuple]
"""kernel(*inputs) -> tuple with one entry per node output (None for an omitted output).
Omitted optional inputs arrive as None. A node with subgraph attributes (If, Loop, Scan, ...)
receives after its own inputs the outer-scope values its subgraphs read, in the order of
``outer_scope_names(node)``. Kernels are stateless and thread-safe.

Hostile inputs: a kernel whose output size comes from data (a shape input, repeats, pads, scales,
a depth, a length) calls ``ort_core.limits.check_tensor_size(node.label, shape, dtype)`` before it
allocates; a kernel looping over many iterations (Loop, Scan: a planned body's ``run`` does it) calls
``ort_core.limits.check_terminated(label)`` between them. Both read the run's context (the session's
``session.max_tensor_bytes`` and the run's RunOptions) from a contextvar that the execution plan sets
for the duration of each run, and the session while it builds (factories and constant folding obey
the limit too): a lookup per call, no state in the kernel. The plan also refuses any produced tensor
past the limit, after the fact, so unchecked kernels cannot grow tensors step after step."""

Factory = Callable[[Node, int], Kernel]
"""factory(node, opset) -> Kernel; may raise errors.KernelError for unsupported attributes.
A factory that also declares a ``graph`` parameter receives the IR graph holding the node
(Gradient needs the forward graph; DictVectorizer reads declared map types); one that declares
``bodies`` receives the session's body planner (``bodies(graph, node, outer_names)``, see
``FusedSubgraph.bodies``), through which If/Loop/Scan/SequenceMap/FlexAttention run their bodies."""


@dataclass(frozen=True)
class KernelDef:
    domain: str
    op_type: str
    since: int
    until: int | None  # inclusive; None = open-ended
    factory: Factory
    wants_graph: bool = False  # the factory takes graph=...
    wants_bodies: bool = False  # the factory takes bodies=... (the session's body planner)

    def build(self, node: Node, opset: int, graph=None, bodies=None) -> Kernel:
        """The factory's kernel for ``node``, handing it the graph and the body planner when it asks for
        them. A factory that fails on attribute values it did not foresee raises KernelError naming the
        node (the model's fault), for nodes of the main graph and of If/Loop/Scan bodies alike."""
        kwargs = {}
        if self.wants_graph:
            kwargs["graph"] = graph
        if self.wants_bodies:
            kwargs["bodies"] = bodies or no_bodies
        try:
            return self.factory(node, opset, **kwargs)
        except OrtError:  # KernelError, or a body's own placement error (NotImplementedOp, ...)
            raise
        except Exception as e:  # noqa: BLE001
            raise KernelError(f"{node.label}: invalid attributes for {node.op_type}-{opset}: "
                              f"{type(e).__name__}: {e}") from e


def no_bodies(graph, owner: Node, outer_names) -> Any:
    """The body planner outside a session: a node whose kernel needs a graph body cannot be built."""
    raise KernelError(f"{owner.label}: its graph bodies are planned by a session; build it through one")


_REGISTRY: dict[tuple[str, str], list[KernelDef]] = {}


def _norm_domain(domain: str) -> str:
    return onnx_domain(domain)


def register(op_type: str | tuple[str, ...], since: int = 1, until: int | None = None,
             domain: str = "") -> Callable[[Factory], Factory]:
    """Decorator registering a kernel factory for one or several op types.

    ``since``/``until`` bound the opset versions (inclusive) the factory implements.
    """
    names = (op_type,) if isinstance(op_type, str) else tuple(op_type)

    def deco(factory: Factory) -> Factory:
        for name in names:
            key = (_norm_domain(domain), name)
            params = inspect.signature(factory).parameters
            _REGISTRY.setdefault(key, []).append(KernelDef(key[0], name, since, until, factory, "graph" in params,
                                                           "bodies" in params))
        return factory

    return deco


def lookup(domain: str, op_type: str, opset: int) -> KernelDef | None:
    """The kernel definition covering ``opset`` for an op, or None."""
    for kd in _REGISTRY.get((_norm_domain(domain), op_type), ()):
        if kd.since <= opset and (kd.until is None or opset <= kd.until):
            return kd
    return None


def supported_ops() -> dict[tuple[str, str], list[tuple[int, Any]]]:
    """(domain, op_type) -> [(since, until), ...] for documentation and capability reasons."""
    return {k: [(kd.since, kd.until) for kd in v] for k, v in sorted(_REGISTRY.items())}


def outer_scope_names(node: Node) -> list[str]:
    """Names of outer-scope values a node's subgraphs read, in the order kernels receive them."""
    return sorted(outer_scope_reads(node))
