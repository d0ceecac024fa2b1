"""Data types exchanged through the provider hooks: ProviderInfo, GraphView, Capability, FusedSubgraph.

Plain values with no behaviour beyond small conveniences; the hooks that use them are documented
in hookspecs.py.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

from ..ir.graph import Graph, Node, ValueInfo, is_onnx_domain, onnx_domain
from ..ir.save import node_to_proto, value_info_to_proto
from ..ir.types import ValueType, elem_type_of
from ..memory.device import HOST, Device
from ..optimizer.cpu_fusion import fuse_nodes

if TYPE_CHECKING:
    from ..customops import CustomOp, CustomOpRegistry


@dataclass(frozen=True)
class ProviderInfo:
    """What a plugin declares about one provider it offers.

    ``name``: the provider's name, unique among installed plugins (``"<Vendor>ExecutionProvider"``), the one
    users list in ``providers=[...]``. ``devices``: every device it can compute on here (an instance picks
    among them, e.g. through a ``device_id`` option). ``available``: whether it can run on this machine;
    when False, ``reason`` says why in words a user can act on ("libvendor.so not found: pip install
    vendor-runtime", "no device visible"), and sessions asking for it warn with that reason and go on
    without it. ``description`` and ``version`` (the plugin's) are shown by ``ort-core providers`` and in
    conformance reports. ``options``: the provider options it accepts, name -> default value as a string;
    the core refuses any other name before the factory runs, naming the valid ones. None (the default)
    leaves option checking to the plugin.
    """

    name: str
    devices: tuple[Device, ...] = (HOST,)
    available: bool = True
    reason: str = ""
    description: str = ""
    version: str = ""
    options: Mapping[str, str] | None = None

    @property
    def device(self) -> Device:
        """The first of ``devices``: where an instance's values live unless it picks another."""
        return self.devices[0]


@dataclass(frozen=True)
class Capability:
    """A provider's answer to get_capability (see ``hookspecs.ort_get_capability`` for the rules).

    ``claimed``: the ids (``Node.id``) of the offered nodes it takes. ``declined``: node id -> a short reason,
    for *every* offered node it does not take (users see them in the placement line and ``explain``).
    ``fuse``: True to have connected claimed nodes grouped into fused subgraphs, each compiled once; False
    to compile node by node (kernel-registry providers such as the CPU one). ``from_reasons`` builds the
    answer from one "why not" function.
    """

    claimed: tuple[int, ...] = ()
    declined: dict[int, str] = field(default_factory=dict)
    fuse: bool = True

    @classmethod
    def from_reasons(cls, nodes: Iterable[Node], reason: Callable[[Node], str | None], fuse: bool = True) -> Capability:
        """Claim each node ``reason(node)`` has no objection to (None), decline the others with its reason."""
        claimed, declined = [], {}
        for node in nodes:
            why = reason(node)
            if why is None:
                claimed.append(node.id)
            else:
                declined[node.id] = why
        return cls(tuple(claimed), declined, fuse)


@dataclass(frozen=True)
class GraphView:
    """What a provider sees when asked for its capability: the graph plus the nodes on offer.

    ``graph``: the model's graph (``ort_core.ir.graph.Graph``), read-only: every node, initializer and
    value type, assigned or not. ``opsets``: the model's opset imports, domain -> version. ``offered``:
    the ids of the nodes still unassigned, the only ones a provider may claim; ``nodes()`` gives them as
    ``Node`` objects (``id``, ``op_type``, ``domain``, ``inputs``, ``outputs``, ``attrs``) in topological
    order. ``custom_ops`` is the custom-op registry in force for the session (its own registrations,
    then the global ones), or None; ``custom_op(node)`` finds a node's op in it.
    """

    graph: Graph
    opsets: dict[str, int]
    offered: tuple[int, ...]
    custom_ops: CustomOpRegistry | None = None

    def nodes(self) -> list[Node]:
        """Offered (still unassigned) nodes, in topological order (computed once per view)."""
        return list(self._offered_nodes)

    @functools.cached_property
    def _offered_nodes(self) -> list[Node]:
        offered = set(self.offered)
        return [n for n in self.graph.topological_order() if n.id in offered]

    @functools.cached_property
    def _constants(self) -> dict[str, np.ndarray]:
        return self.graph.constant_initializers()

    def opset(self, domain: str = "") -> int:
        """The model's opset version for ``domain`` ("" or "ai.onnx": the ONNX domain), 0 when not imported."""
        domain = onnx_domain(domain)
        return self.opsets.get(domain, 0)

    def type_of(self, name: str) -> ValueType | None:
        """The type of value ``name`` (``ort_core.ir.types.ValueType``: ``kind``, ``elem_type`` as an ONNX
        ``TensorProto`` code, ``shape`` with ints for static dimensions), or None where it is unknown."""
        return self.graph.type_of(name)

    def constant(self, name: str) -> np.ndarray | None:
        """The value of a constant initializer (not overridable by a feed), else None."""
        return self._constants.get(name)

    def custom_op(self, node: Node) -> CustomOp | None:
        """The registered custom op (``ort_core.CustomOp``) for a node outside the ONNX domain, else None.

        A provider may claim such a node and compile it its own way, or through ``op.bind(node, opset)``.
        """
        return _custom_op(self.custom_ops, self.opsets, node)


@dataclass
class TransformView:
    """What a provider's ``transform`` may rewrite: the model, and the ids of the nodes it claimed.

    A transform replaces only nodes in ``claimed`` (a replacement may keep one of their ids or take a new
    one; either way it belongs to this provider) and leaves every other node alone. ``fuse()`` runs ort-core's
    fusion passes over the claimed nodes (Conv/Gemm/BatchNormalization + activation, Conv + residual Add,
    MatMul + bias, LayerNorm, GELU, attention, SkipLayerNorm into onnxruntime's contrib ops of domain
    ``com.microsoft`` where it has one, else ``ort_core`` ops: see ``optimizer/cpu_fusion.py``), for any
    provider that runs them.
    """

    model: Any  # an ort_core.ir.Model
    claimed: frozenset[int]

    def fuse(self) -> int:
        """Fuse the claimed nodes' patterns in place; returns how many fusions were made."""
        return fuse_nodes(self.model, set(self.claimed))


def _custom_op(registry: Any, opsets: dict[str, int], node: Node):
    if registry is None or is_onnx_domain(node.domain):
        return None
    return registry.lookup(node.domain, node.op_type, opsets.get(node.domain, 0))


def constant_initializers(graph: Graph) -> dict[str, np.ndarray]:
    """Initializers that a feed cannot override (see ``Graph.constant_initializers``)."""
    return graph.constant_initializers()


def constant_node_value(node: Node) -> np.ndarray | None:
    """The value of a numeric Constant node (``value``, ``value_float(s)``, ``value_int(s)``), else None."""
    if node.op_type != "Constant" or not is_onnx_domain(node.domain) or not node.outputs:
        return None
    a = node.attrs
    if isinstance(a.get("value"), np.ndarray) and a["value"].dtype.kind in "biuf":
        return a["value"]
    if "value_float" in a or "value_floats" in a:
        return np.array(a.get("value_float", a.get("value_floats")), np.float32)
    if "value_int" in a or "value_ints" in a:
        return np.array(a.get("value_int", a.get("value_ints")), np.int64)
    return None


def constant_node_values(graph: Graph) -> dict[str, np.ndarray]:
    """Output name -> value of every numeric Constant node of ``graph`` (as fixed as initializers)."""
    return {n.outputs[0]: v for n in graph.nodes if (v := constant_node_value(n)) is not None}


@dataclass
class FusedSubgraph:
    """A group of nodes handed to one provider's ``compile`` hook.

    ``name``: ``"<provider>_<k>"``, k its place among all the subgraphs of the session's model in execution
    order (the example plugin keys its compiled programs on it). ``nodes``: its nodes in execution order (IR ``Node``s,
    read-only). ``opsets``: the model's opset imports. ``graph``: the model's graph, for value types
    (``graph.type_of(name)``). ``inputs`` lists every value read from outside in first-use order
    (constants included, unless the provider declared ``Preferences.bakes_weights``); ``outputs`` the
    values read after it or returned by the model; ``constants`` the constant initializers it reads, which a
    provider may bake into its kernel.
    ``custom_ops`` is the session's custom-op registry (see GraphView). ``bodies``: the session's body
    planner, ``bodies(graph, owner_node, outer_names)`` -> a planned body (``bind(outer_values)``, then
    ``run(base, inputs)``), for kernels of nodes with graph attributes; the body is placed over the
    session's providers and run by the core's executor.
    """

    name: str
    nodes: list[Node]
    inputs: list[str]
    outputs: list[str]
    constants: dict[str, np.ndarray]
    opsets: dict[str, int]
    graph: Graph
    _proto: onnx.ModelProto | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    custom_ops: CustomOpRegistry | None = field(default=None, repr=False)
    bodies: Any = field(default=None, repr=False)

    def custom_op(self, node: Node) -> CustomOp | None:
        """The registered custom op for ``node``, else None (see GraphView.custom_op)."""
        return _custom_op(self.custom_ops, self.opsets, node)

    def to_model_proto(self) -> onnx.ModelProto:
        """The subgraph as a standalone ONNX model (constants as initializers), built once."""
        with self._lock:
            if self._proto is None:
                self._proto = self._build_proto()
            return self._proto

    def _value_info(self, name: str) -> onnx.ValueInfoProto:
        t = self.graph.type_of(name)
        if t is None and name in self.constants:
            arr = self.constants[name]
            t = ValueType.tensor(elem_type_of(arr.dtype) or 0, arr.shape)
        return value_info_to_proto(ValueInfo(name, t or ValueType("unknown")))

    def _build_proto(self) -> onnx.ModelProto:
        from onnx import helper, numpy_helper

        inits = [numpy_helper.from_array(np.asarray(value), name=n) for n, value in self.constants.items()]
        graph = helper.make_graph(
            [node_to_proto(n) for n in self.nodes], self.name,
            [self._value_info(n) for n in self.inputs if n not in self.constants],
            [self._value_info(n) for n in self.outputs], initializer=inits)
        opsets = [helper.make_opsetid(d, v) for d, v in sorted(self.opsets.items())]
        model = helper.make_model(graph, opset_imports=opsets, producer_name="ort-core")
        model.ir_version = min(onnx.IR_VERSION, 10)
        return model
