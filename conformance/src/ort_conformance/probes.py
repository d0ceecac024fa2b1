"""Probe models of the behaviour checks (contract_checks.py): small float32 graphs of compute ops, fixed
shapes, weights as initializers, several outputs, and feeds drawn from a seed.

Only compute ops: no Reshape, Identity or Squeeze, whose outputs may legitimately be views of their
inputs. A provider is probed with the models it claims nodes in; nothing here runs a session.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


@dataclass(frozen=True)
class Probe:
    name: str
    model: onnx.ModelProto
    shapes: dict[str, tuple[int, ...]]  # graph input -> shape

    def feeds(self, seed: int) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(1000 + seed)
        return {n: rng.standard_normal(s).astype(np.float32) for n, s in self.shapes.items()}

    @property
    def weight_bytes(self) -> int:
        return sum(numpy_helper.to_array(t).nbytes for t in self.model.graph.initializer)


def _weight(name: str, shape, seed: int, fill: float | None = None) -> onnx.TensorProto:
    if fill is None:
        value = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    else:
        value = np.full(shape, fill, np.float32)
    return numpy_helper.from_array(value, name)


def _probe(name: str, nodes, inputs: dict[str, tuple[int, ...]], outputs: list[str], weights) -> Probe:
    graph = helper.make_graph(nodes, name,
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s)) for n, s in inputs.items()],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model = onnx.shape_inference.infer_shapes(model)
    return Probe(name, model, dict(inputs))


def _node(op: str, ins: list[str], out: str, **attrs) -> onnx.NodeProto:
    return helper.make_node(op, ins, [out], name=out, **attrs)


def _probes() -> list[Probe]:
    return [
        # three outputs from two feeds and a weight; 'p' is an output and an intermediate
        _probe("elementwise", [_node("Add", ["x", "w"], "s"), _node("Mul", ["x", "y"], "p"),
                               _node("Relu", ["s"], "r"), _node("Sub", ["p", "w"], "d")],
               {"x": (2, 3, 4), "y": (2, 3, 4)}, ["r", "d", "p"], [_weight("w", (2, 3, 4), 1)]),
        # a chain of unary ops (its Relu reads non-negative values) and a branch
        _probe("unary", [_node("Abs", ["x"], "a"), _node("Relu", ["a"], "r"), _node("Neg", ["r"], "n"),
                         _node("Exp", ["n"], "e"), _node("Tanh", ["x"], "t")],
               {"x": (3, 5)}, ["r", "e", "t"], []),
        # operands that leave the other unchanged: a provider must still return new memory
        _probe("identities", [_node("Add", ["w", "zero"], "a"), _node("Mul", ["x", "one"], "m"),
                              _node("Add", ["m", "zero"], "q")],
               {"x": (2, 3, 4)}, ["a", "m", "q"],
               [_weight("w", (2, 3, 4), 2), _weight("zero", (2, 3, 4), 0, 0.0), _weight("one", (2, 3, 4), 0, 1.0)]),
        _probe("matmul", [_node("MatMul", ["x", "W"], "m"), _node("Add", ["m", "b"], "a"), _node("Relu", ["a"], "y")],
               {"x": (4, 8)}, ["y", "m"], [_weight("W", (8, 6), 3), _weight("b", (6,), 4)]),
        _probe("gemm", [_node("Gemm", ["x", "W", "b"], "g", transB=1), _node("Sigmoid", ["g"], "y")],
               {"x": (4, 8)}, ["y"], [_weight("W", (6, 8), 5), _weight("b", (6,), 6)]),
        _probe("conv", [_node("Conv", ["x", "W", "B"], "c", pads=[1, 1, 1, 1]), _node("Relu", ["c"], "y")],
               {"x": (1, 3, 8, 8)}, ["y"], [_weight("W", (4, 3, 3, 3), 7), _weight("B", (4,), 8)]),
        # for providers that bake weights: 8 MiB of weights, large beside what a session otherwise keeps
        _probe("big_weight_matmul", [_node("MatMul", ["x", "W"], "m"), _node("Relu", ["m"], "y")],
               {"x": (2, 1024)}, ["y"], [_weight("W", (1024, 2048), 9)]),
        _probe("big_weight_add", [_node("Add", ["x", "W"], "s"), _node("Relu", ["s"], "y")],
               {"x": (1024, 2048)}, ["y"], [_weight("W", (1024, 2048), 10)]),
    ]


PROBES: list[Probe] = _probes()
PROBED = [p for p in PROBES if not p.name.startswith("big_weight")]  # what the run-time checks use

BUSY_OPS = ("Relu", "Abs", "Neg", "Tanh", "Sigmoid", "Exp", "Add", "Mul")
BUSY_SHAPE = (1024, 2048)  # 8 MiB of float32: keeps a stream busy for a while


def claimed_nodes(provider: str, model: onnx.ModelProto) -> dict[int, str]:
    """Node id -> label of the nodes ``provider`` claims in ``model`` (its answer on the whole graph)."""
    from ort_core.ir import load_model
    from ort_core.plugins.manager import get_registry
    from ort_core.plugins.types import GraphView

    loaded = load_model(model)
    nodes = {n.id: n for n in loaded.graph.nodes}
    view = GraphView(loaded.graph, loaded.opset_imports, tuple(n.id for n in loaded.graph.topological_order()))
    try:
        cap = get_registry().get_capability(provider, view, {})
    except Exception:  # noqa: BLE001 - the capability check reports a broken answer
        return {}
    return {i: nodes[i].label for i in cap.claimed}


def busy_variant(provider: str, probe: Probe, _cache: dict = {}) -> Probe:  # noqa: B006 - a memo
    """``probe`` with a node on 8 MiB put first, of an op ``provider`` claims: its stream is busy with it while
    the probe's own nodes are enqueued. The probe itself when the provider claims none of BUSY_OPS."""
    key = (provider, probe.name)
    if key not in _cache:
        _cache[key] = probe
        for op in BUSY_OPS:
            ins = ["busy_in"] * (2 if op in ("Add", "Mul") else 1)
            model = onnx.ModelProto()
            model.CopyFrom(probe.model)
            graph = model.graph
            graph.node.insert(0, _node(op, ins, "busy_out"))
            graph.input.append(helper.make_tensor_value_info("busy_in", TensorProto.FLOAT, list(BUSY_SHAPE)))
            graph.output.append(helper.make_tensor_value_info("busy_out", TensorProto.FLOAT, list(BUSY_SHAPE)))
            if any(label.startswith("node 'busy_out'") for label in claimed_nodes(provider, model).values()):
                _cache[key] = Probe(f"{probe.name}+busy {op}", model, {**probe.shapes, "busy_in": BUSY_SHAPE})
                break
    return _cache[key]

