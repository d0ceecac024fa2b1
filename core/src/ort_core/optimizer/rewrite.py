"""Small graph-editing helpers shared by the optimizer passes: renaming uses, unique names, and the
``Matcher`` indexes the CPU provider's fusions walk.

They edit the IR in place and know nothing about what a pass is trying to achieve.
"""

from __future__ import annotations

import numpy as np

from ..ir.graph import Graph, Model, Node, is_onnx_domain, outer_scope_reads

DOMAIN = "ort_core"  # ort-core's own fused ops, where onnxruntime has none (providers/cpu/ops/fused.py)
CONTRIB = "com.microsoft"  # onnxruntime's contrib ops, which the fusions emit wherever one exists


def protected_names(graph: Graph) -> set[str]:
    """Values a rewrite must not rename away: graph outputs and reads from nested subgraphs."""
    names = {v.name for v in graph.outputs}
    for node in graph.nodes:
        if node.subgraphs():
            names |= outer_scope_reads(node)
    return names


def rename_uses(graph: Graph, old: str, new: str) -> None:
    """Make every node input reading ``old`` read ``new`` instead."""
    for node in graph.nodes:
        if old in node.inputs:
            node.inputs = [new if i == old else i for i in node.inputs]


def taken_names(graph: Graph) -> set[str]:
    """Every value name the graph defines: initializers, inputs and node outputs."""
    return set(graph.initializers) | {v.name for v in graph.inputs} | {o for n in graph.nodes for o in n.outputs}


def fresh_name(graph: Graph, base: str, taken: set[str] | None = None) -> str:
    """A value name not used anywhere in the graph yet. A caller naming many values passes ``taken``
    (from ``taken_names``, gathered once); the new name is added to it."""
    taken = taken_names(graph) if taken is None else taken
    name, k = base, 0
    while name in taken:
        k += 1
        name = f"{base}_{k}"
    taken.add(name)
    return name


class Matcher:
    """Indexes over a model's graph for the fusions of the CPU provider.

    Walks only nodes the CPU provider took (``on_cpu``) in the default domain; ``closed`` checks that
    a pattern's intermediate values are read by nobody outside it; ``replace`` swaps a pattern for one
    node and updates the indexes for just those nodes (cpu_fusion's producer + follower chains instead
    edit nodes in place and keep ``consumers`` up to date themselves).
    """

    def __init__(self, model: Model, on_cpu: set[int], allowed: frozenset[str] | None = None):
        self.model, self.graph, self.on_cpu = model, model.graph, on_cpu
        self.allowed = allowed  # "domain::op_type" of the fused ops it may make; None: all of them
        self.refresh()

    def makes(self, op_type: str, domain: str = "") -> bool:
        """Whether this run of the fusions may make ``domain::op_type``."""
        return self.allowed is None or f"{domain}::{op_type}" in self.allowed

    def refresh(self) -> None:
        g = self.graph
        self.producers = g.producers()
        self.consumers = g.consumers()
        self.constants = g.constant_initializers()
        self.protected = protected_names(g)
        self.by_id = g.nodes_by_id()

    def eligible(self, node: Node | None, *ops: str) -> bool:
        return (node is not None and node.id in self.on_cpu and self.alive(node)
                and is_onnx_domain(node.domain) and (not ops or node.op_type in ops))

    def alive(self, node: Node) -> bool:
        """Still in the graph (a replaced node's id lives on in its replacement)."""
        return self.by_id.get(node.id) is node

    def producer(self, name: str, *ops: str) -> Node | None:
        node = self.producers.get(name) if name else None
        return node if self.eligible(node, *ops) else None

    def readers(self, name: str) -> list[Node]:
        return self.consumers.get(name, [])

    def sole_reader(self, name: str, *ops: str) -> Node | None:
        """The one node reading ``name`` when it is eligible, of one of ``ops`` and ``name`` is no graph output."""
        users = self.readers(name)
        if len(users) != 1 or name in self.protected or not self.eligible(users[0], *ops):
            return None
        return users[0]

    def const(self, name: str) -> np.ndarray | None:
        return self.constants.get(name) if name else None

    def scalar(self, name: str) -> float | None:
        """The value of a one-element numeric constant, else None."""
        c = self.const(name)
        if c is None or c.size != 1 or c.dtype.kind not in "fiu":
            return None
        return float(c.reshape(-1)[0])

    @staticmethod
    def other(node: Node, name: str) -> str:
        """The operand of binary ``node`` that is not ``name``."""
        return node.inputs[1] if node.inputs[0] == name else node.inputs[0]

    def biased(self, add: Node | None) -> tuple[str, str] | None:
        """(x, bias) for Add(x, bias) with a constant 1-D bias over non-constant x's last axis, else None."""
        if add is None or add.op_type != "Add" or len(add.inputs) != 2:
            return None
        for j in (1, 0):
            c, x = self.const(add.inputs[j]), add.inputs[1 - j]
            shape = self.shape(x)
            if c is not None and c.ndim == 1 and shape and shape[-1] == c.shape[0] and self.const(x) is None:
                return x, add.inputs[j]
        return None

    def shape(self, name: str) -> tuple | None:
        t = self.graph.type_of(name)
        return t.shape if t is not None and t.kind == "tensor" else None

    def closed(self, nodes: list[Node], exposed: set[str], inputs: list[str]) -> bool:
        """Every output of ``nodes`` not in ``exposed`` is read only inside the pattern and is no graph output,
        and none of the fused node's ``inputs`` is made inside the pattern."""
        ids = {n.id for n in nodes}
        if len(ids) != len(nodes) or not all(n.id in self.on_cpu and self.alive(n) for n in nodes):
            return False
        made = {o for n in nodes for o in n.outputs if o}
        if any(i and i in made for i in inputs):
            return False
        for n in nodes:
            for o in n.outputs:
                if o and o not in exposed and (o in self.protected or any(r.id not in ids for r in self.readers(o))):
                    return False
        return True

    def add_constant(self, base: str, value: np.ndarray) -> str:
        name = fresh_name(self.graph, base)
        self.graph.initializers[name] = self.constants[name] = value
        return name

    def replace(self, nodes: list[Node], op_type: str, inputs: list[str], outputs: list[str], attrs: dict,
                domain: str = "") -> Node | None:
        """Put one new node where the last of ``nodes`` (in list order) stood; it takes that node's id.
        None, and nothing changed, when this run may not make that op (see ``allowed``)."""
        if not self.makes(op_type, domain):
            return None
        drop = {n.id for n in nodes}
        at = max(i for i, n in enumerate(self.graph.nodes) if n.id in drop)
        last = self.graph.nodes[at]
        new = Node(op_type, list(inputs), list(outputs), dict(attrs), domain=domain, name=last.name, id=last.id)
        kept = [n for n in self.graph.nodes[:at] if n.id not in drop]
        self.graph.nodes = kept + [new] + [n for n in self.graph.nodes[at + 1:] if n.id not in drop]
        # the indexes change only around these nodes (patterns hold no subgraphs and never drop a
        # protected value, so ``protected`` stands); rebuilding them per fusion made creation quadratic
        for n in nodes:
            del self.by_id[n.id]
            for o in n.outputs:
                if o and self.producers.get(o) is n:
                    del self.producers[o]
            for i in set(n.inputs):
                if i:
                    self.consumers[i] = [u for u in self.consumers.get(i, []) if u is not n]
        self.by_id[new.id] = new
        for o in new.outputs:
            if o:
                self.producers[o] = new
        for i in dict.fromkeys(new.inputs):
            if i:
                self.consumers.setdefault(i, []).append(new)
        self._drop_unused_constants({i for n in nodes for i in n.inputs if i})
        return new

    def drop_unread(self, names: set[str]) -> int:
        """Remove the nodes making ``names`` that nothing reads any more (the shape computations that fed
        replaced nodes: Shape, Gather, Concat...), and then their producers while they too go unread;
        returns how many went."""
        gone: set[int] = set()
        pending = [n for n in names if n]
        while pending:
            node = self.producers.get(pending.pop())
            if node is None or node.id in gone or not self.eligible(node) or node.subgraphs():
                continue
            if any(o and (self.consumers.get(o) or o in self.protected) for o in node.outputs):
                continue
            gone.add(node.id)
            del self.by_id[node.id]
            for o in node.outputs:
                self.producers.pop(o, None)
            for i in set(node.inputs):
                if i:
                    self.consumers[i] = [u for u in self.consumers.get(i, []) if u is not node]
                    pending.append(i)
        if gone:
            self.graph.nodes = [n for n in self.graph.nodes if n.id not in gone]
        return len(gone)

    def _drop_unused_constants(self, names: set[str]) -> None:
        """Weights only the replaced nodes read (repacked into new constants) need not stay in memory."""
        for name in names:
            if name in self.constants and not self.consumers.get(name) and name not in self.protected:
                del self.graph.initializers[name]
                del self.constants[name]
