"""Placement and compilation as plain functions, for the main graph and for every graph body alike.

``place`` partitions a graph over a session's provider instances and compiles the subgraphs, retrying
without a subgraph a provider hands back or a provider whose plugin fails. ``BodyPlanner`` gives kernels
with graph attributes (If, Loop, Scan, SequenceMap, FlexAttention) their bodies placed, compiled and
planned the same way, so a provider may run body nodes and one executor (plan.py) runs everything.
The session decides the order of the pipeline; this module holds no session state of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from .errors import KernelError, NotImplementedOp, OrtError, PluginError, warn
from .ir.graph import Graph, Model, Node, outer_scope_reads
from .limits import check_terminated, current
from .memory.device import HOST
from .optimizer.layout import to_channels_last
from .partition import partition, recut
from .planning import Placed, build_plan
from .plugins.manager import CPU
from .plugins.provider import UnsupportedSubgraph
from .plugins.types import TransformView


@dataclass
class Placement:
    """What placing a graph needs from its session.

    ``providers``: names in priority order (CPU last), a list this placement shortens when a plugin
    fails; ``instances``: name -> SessionProvider; ``baking``: the providers that take constants at
    compile time only; ``bodies``: the BodyPlanner handed to compiled kernels; ``session_wide``: a
    failing provider leaves the session for good (its instance closed), not only this graph body.
    """

    providers: list[str]
    instances: dict[str, Any]
    opsets: dict[str, int]
    custom_ops: Any = None
    strict: bool = False
    baking: set[str] = field(default_factory=set)
    check_outputs: bool = False
    source: str = "<model>"
    bodies: Any = None
    session_wide: bool = True
    channels_last: set[str] = field(default_factory=set)  # providers preferring NHWC (Preferences.layout)

    def for_body(self) -> Placement:
        """The same session's placement for a graph body: its own provider list, failures kept to it."""
        return replace(self, providers=list(self.providers), session_wide=False)

    def drop(self, name: str, why: PluginError | None) -> None:
        """A provider whose plugin failed leaves this placement: ``why`` is its compile failure (an error in
        strict mode, a warning otherwise), None for a capability failure the partitioner reported."""
        if why is not None:
            sub = getattr(why.__cause__, "ort_subgraph", None)
            if sub is not None and describe(sub) not in str(why):  # name the nodes it had claimed
                nodes = ", ".join(n.label for n in sub.nodes[:5]) + (", ..." if len(sub.nodes) > 5 else "")
                why = type(why)(f"{why} (compiling {describe(sub)}: {nodes})")
            if self.strict or name == CPU:
                raise why
            where = "" if self.session_wide else " in this graph body"
            warn(f"{why}; falling back without '{name}'{where}")
        self.providers.remove(name)
        if self.session_wide:
            self.instances.pop(name).close()


def place(graph: Graph, where: Placement, model: Any = None) -> tuple[Any, dict[int, Any]]:
    """Partition ``graph`` and compile until every subgraph has a kernel -> (partition, id(subgraph) -> kernel).

    With ``model`` (the main graph's), each provider first rewrites its own nodes (``transform``: the
    CPU provider's fusions), and the placement is cut again without asking anyone twice. A subgraph a
    provider hands back (UnsupportedSubgraph) goes to the next provider for just those nodes; a provider
    whose plugin fails is dropped (``Placement.drop``). Kernels compiled before such a retry are kept
    (keyed by provider and node ids), so nothing is compiled twice.
    """
    excluded: dict[str, set[int]] = {}
    handed_back: dict[str, list[str]] = {}
    compiled: dict[tuple[str, tuple[int, ...]], Any] = {}
    while True:
        part = _partition(graph, where, excluded)
        if model is not None and _transform(model, part, where):
            part = recut(graph, where.opsets, part, where.custom_ops, where.baking)
        part.handed_back = handed_back
        if _compile_all(part, where, compiled, excluded, handed_back):
            kernels = {id(sub): compiled[(p, tuple(n.id for n in sub.nodes))] for p, sub in part.subgraphs}
            return part, kernels


def _transform(model: Any, part, where: Placement) -> int:
    """Let each provider rewrite the nodes it claimed; nodes a transform adds are that provider's."""
    total = 0
    for name in where.providers:
        claimed = frozenset(i for i, p in part.assignment.items() if p == name)
        if not claimed:
            continue
        count = to_channels_last(model, claimed) if name in where.channels_last else 0
        if count:  # the Transposes the layout rewrite added are this provider's too
            claimed |= _new_ids(model, part)
        count += where.instances[name].transform(TransformView(model, claimed))
        part.transformed[name] = part.transformed.get(name, 0) + count
        if count:
            for node in model.graph.nodes:
                part.assignment.setdefault(node.id, name)
        total += count
    return total


def _new_ids(model: Any, part) -> frozenset[int]:
    """Nodes no placement has seen yet: those the layout rewrite just added for the provider being transformed."""
    return frozenset(n.id for n in model.graph.nodes if n.id not in part.assignment)


def _partition(graph: Graph, where: Placement, excluded: dict[str, set[int]]):
    part = partition(graph, where.opsets, [where.instances[p] for p in where.providers], where.custom_ops,
                     strict=where.strict, excluded=excluded, baking=where.baking)
    for name in part.failed:
        where.drop(name, None)
    return part


def _compile_all(part, where: Placement, compiled: dict, excluded: dict[str, set[int]],
                 handed_back: dict[str, list[str]]) -> bool:
    """Compile every provider's subgraphs not compiled yet; False when placement must run again."""
    by_provider: dict[str, list] = {}
    for provider, sub in part.subgraphs:
        if (provider, tuple(n.id for n in sub.nodes)) not in compiled:
            sub.bodies = where.bodies  # kernels of nodes with graph bodies plan them through it
            by_provider.setdefault(provider, []).append(sub)
    complete = True
    for provider, subs in by_provider.items():
        try:
            kernels = where.instances[provider].compile(subs)
        except PluginError as e:
            if provider == CPU:
                raise cpu_compile_error(e) from e
            where.drop(provider, e)
            return False
        for sub, kernel in zip(subs, kernels):
            ids = tuple(n.id for n in sub.nodes)
            if isinstance(kernel, UnsupportedSubgraph):
                if where.strict or provider == CPU:
                    raise NotImplementedOp(f"{describe(sub)}: {provider} cannot compile it: {kernel}")
                excluded.setdefault(provider, set()).update(ids)
                handed_back.setdefault(provider, []).append(f"{describe(sub)}: {kernel}")
                complete = False
                continue
            compiled[(provider, ids)] = kernel
    return complete


def placed_kernels(part, kernels: dict[int, Any], instances: dict[str, Any]) -> list[Placed]:
    """The compiled subgraphs in execution order, as the planner takes them."""
    return [Placed(instances[p], sub, kernels[id(sub)], f"{describe(sub)} on {p}") for p, sub in part.subgraphs]


def describe(sub) -> str:
    if len(sub.nodes) == 1:
        return sub.nodes[0].label
    return f"subgraph '{sub.name}' ({len(sub.nodes)} nodes)"


def cpu_compile_error(e: PluginError) -> OrtError:
    """The CPU provider's own error for a node it could not build, rather than a plugin failure."""
    cause = e.__cause__
    if not isinstance(cause, OrtError):
        return e
    sub = getattr(cause, "ort_subgraph", None)
    if sub is None or describe(sub) in str(cause):
        return type(cause)(str(cause))
    return type(cause)(f"{describe(sub)}: {cause}")


class BodyPlanner:
    """Plans graph bodies for kernels: ``planner(graph, owner, outer_names)`` -> a PlannedBody.

    The body is partitioned over the session's providers (the CPU provider last), compiled and planned as
    the main graph is; its inputs, the outer-scope values it reads and its outputs live on the host."""

    def __init__(self, where: Placement) -> None:
        self.where = where
        self.placements: list[tuple[str, list[tuple[str, tuple[str, ...]]]]] = []  # for explain()

    def __call__(self, graph: Graph, owner: Node, outer_names: Sequence[str]) -> PlannedBody:
        label = f"{owner.label} subgraph '{graph.name}'"
        outer_index = {n: k for k, n in enumerate(outer_names)}
        # a stand-in node holding just this graph: its outer reads are this body's
        reads = sorted(outer_scope_reads(Node("", [], [], {"body": graph})))
        missing = [n for n in reads if n not in outer_index]
        if missing:
            raise KernelError(f"{label}: reads '{missing[0]}', which neither the subgraph nor an enclosing "
                              "graph defines")
        constants = enclosing_constants(graph, reads)
        graph = graph.copy()  # the providers' transforms rewrite it: the model's body stays as it was
        if constants:  # providers see them as constants (a weight to bake in), not as run-time inputs
            graph.initializers.update(constants)
            reads = [n for n in reads if n not in constants]
        # the body as a model for the providers' transforms (the CPU provider's fusions): the session's
        # opset imports, so a fused op's domain imported here is imported for every kernel
        body = Model(graph, self.where.opsets, source=self.where.source)
        try:
            part, kernels = place(graph, self.where.for_body(), body)
            plan, outputs = build_plan(graph, placed_kernels(part, kernels, self.where.instances),
                                       self.where.instances, self.where.check_outputs, self.where.source, reads)
        except OrtError as e:
            raise type(e)(f"{label}: {e}" if label not in str(e) else str(e)) from e
        self.placements.append((label, [(p, tuple(n.name or n.op_type for n in sub.nodes))
                                        for p, sub in part.subgraphs]))
        return PlannedBody(graph, label, plan, reads, outer_index, [outputs[v.name] for v in graph.outputs])


def enclosing_constants(graph: Graph, names: Sequence[str]) -> dict[str, Any]:
    """Of the outer-scope ``names`` a body reads, those that the nearest enclosing scope defining them holds
    as a constant initializer (not overridable by a feed), with their values."""
    found: dict[str, Any] = {}
    for name in names:
        g = graph.parent
        while g is not None:
            if name in g.initializers:
                if name not in {v.name for v in g.inputs}:
                    found[name] = g.initializers[name]
                break
            if name in {v.name for v in g.inputs} or any(name in n.outputs for n in g.nodes):
                break  # a value computed or fed in that scope
            g = g.parent
    return found


class PlannedBody:
    """A graph body as its owner's kernel runs it: ``bind(outer_values)`` once per kernel call (the owner's
    outer-scope values, in the order of ``outer_scope_names(owner)``), then ``run(base, inputs)`` per
    iteration. Frames are per call, so one PlannedBody serves concurrent runs."""

    def __init__(self, graph: Graph, label: str, plan, reads: list[str], outer_index: dict[str, int],
                 out_slots: list[int]) -> None:
        self.graph, self.label, self.plan = graph, label, plan
        self.input_names = [v.name for v in graph.inputs]
        self.output_names = [v.name for v in graph.outputs]
        self.in_slots = [plan.slots[(n, HOST)] for n in self.input_names]
        self.outer = [(plan.slots[(n, HOST)], outer_index[n]) for n in reads]
        self.out_slots = out_slots

    def bind(self, outer_values: Sequence[Any]) -> list[Any]:
        """The base frame of one kernel call: the plan's constants plus the outer values this body reads."""
        frame = self.plan.template.copy()
        for s, k in self.outer:
            frame[s] = outer_values[k]
        return frame

    def run(self, base: list[Any], inputs: Sequence[Any]) -> list[Any]:
        """Outputs of one run of the body on ``inputs`` (positional, as the body declares them).

        Polls the run's terminate flag first: Loop/Scan call this once per iteration."""
        check_terminated(self.label)
        frame = base.copy()
        for s, v in zip(self.in_slots, inputs):
            frame[s] = v
        try:
            return self.plan.walk(frame, self.plan.steps, self.out_slots, None, current().max_tensor_bytes)
        except OrtError as e:
            raise type(e)(f"{self.label}: {e}") from e

    def run_bound(self, outer_values: Sequence[Any]) -> list[Any]:
        """``run(bind(outer_values), ())`` for a body without inputs (If's branches), its frame made once."""
        check_terminated(self.label)
        frame = self.plan.template.copy()
        for s, k in self.outer:
            frame[s] = outer_values[k]
        try:
            return self.plan.walk(frame, self.plan.steps, self.out_slots, None, current().max_tensor_bytes)
        except OrtError as e:
            raise type(e)(f"{self.label}: {e}") from e

    def output_type(self, k: int):
        return self.graph.outputs[k].type if k < len(self.graph.outputs) else None

