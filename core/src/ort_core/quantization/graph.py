"""A small editor over an onnx ModelProto for the quantizers: initializers by name, producers and consumers,
static element types, new nodes and initializers, renames, topological order. It knows nothing of
quantization."""

from __future__ import annotations

import os

import onnx
from onnx import TensorProto, helper, numpy_helper

FLOATS = (TensorProto.FLOAT, TensorProto.FLOAT16)


def load(model: str | onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` (a path or a ModelProto), external data included."""
    if isinstance(model, onnx.ModelProto):
        copy = onnx.ModelProto()
        copy.CopyFrom(model)
        return copy
    return onnx.load(str(model))


def save(model: onnx.ModelProto, path, use_external_data_format: bool = False) -> None:
    if use_external_data_format:
        onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                        location=f"{os.path.basename(str(path))}.data")
    else:
        onnx.save_model(model, str(path))


def remove_initializers(graph: onnx.GraphProto, names) -> None:
    """Drop the initializers ``names`` and their entries among the graph inputs (old IR versions list
    initializers as inputs: left there, a dropped weight would be a required input without a value)."""
    names = set(names)
    kept = [t for t in graph.initializer if t.name not in names]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    for i in [i for i in graph.input if i.name in names]:
        graph.input.remove(i)


def ensure_domain(model: onnx.ModelProto, domain: str, version: int = 1) -> None:
    """Import ``domain`` (at ``version``) unless the model does already."""
    if not any(o.domain == domain for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid(domain, version))


class Editor:
    """The graph of ``model`` being rewritten in place; call ``finish()`` when done."""

    def __init__(self, model: onnx.ModelProto) -> None:
        self.model = model
        self.graph = model.graph
        self.initializers = {t.name: t for t in self.graph.initializer}
        self.types: dict[str, int] = {}
        try:
            inferred = onnx.shape_inference.infer_shapes(model)
        except Exception:  # noqa: BLE001 - types then come from what the model declares
            inferred = model
        for vi in (*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output):
            if vi.type.HasField("tensor_type"):
                self.types[vi.name] = vi.type.tensor_type.elem_type
        for t in self.graph.initializer:
            self.types[t.name] = t.data_type
        self.graph_inputs = {i.name for i in self.graph.input} - set(self.initializers)
        self.graph_outputs = {o.name for o in self.graph.output}
        self.new_nodes: list[onnx.NodeProto] = []
        self._names = {n.name for n in self.graph.node} | set(self.types)

    # ------------------------------------------------------------------ queries
    def nodes(self) -> list[onnx.NodeProto]:
        return list(self.graph.node)

    def consumers(self, name: str) -> list[onnx.NodeProto]:
        return [n for n in (*self.nodes(), *self.new_nodes) if name in n.input]

    def producer(self, name: str) -> onnx.NodeProto | None:
        for n in self.nodes():
            if name in n.output:
                return n
        return None

    def is_float(self, name: str) -> bool:
        return bool(name) and self.types.get(name) in FLOATS

    def is_initializer(self, name: str) -> bool:
        return name in self.initializers

    def array(self, name: str):
        return numpy_helper.to_array(self.initializers[name])

    def opset(self, domain: str = "") -> int:
        for o in self.model.opset_import:
            if o.domain in ((domain,) if domain else ("", "ai.onnx")):
                return o.version
        return 0

    # ------------------------------------------------------------------ edits
    def add_initializer(self, array, name: str) -> str:
        if name in self.initializers:
            self.graph.initializer.remove(self.initializers[name])
        t = numpy_helper.from_array(array, name)
        self.graph.initializer.append(t)
        self.initializers[name] = t
        self.types[name] = t.data_type
        return name

    def remove_initializer(self, name: str) -> None:
        if self.initializers.pop(name, None) is not None:
            remove_initializers(self.graph, (name,))

    def add_node(self, op_type: str, inputs, outputs, name: str = "", domain: str = "", **attrs) -> onnx.NodeProto:
        node = helper.make_node(op_type, list(inputs), list(outputs), name=name or None, domain=domain or None,
                                **attrs)
        self.new_nodes.append(node)
        return node

    def remove_node(self, node: onnx.NodeProto) -> None:
        if node in self.new_nodes:
            self.new_nodes.remove(node)
        else:
            self.graph.node.remove(node)

    def replace_input(self, old: str, new: str, skip: onnx.NodeProto | None = None) -> None:
        """Every node reading ``old`` (but ``skip``) reads ``new`` instead."""
        for n in (*self.nodes(), *self.new_nodes):
            if n is skip:
                continue
            for k, name in enumerate(n.input):
                if name == old:
                    n.input[k] = new

    def rename_output(self, old: str, new: str) -> None:
        for n in self.nodes():
            for k, name in enumerate(n.output):
                if name == old:
                    n.output[k] = new

    def ensure_domain(self, domain: str, version: int = 1) -> None:
        ensure_domain(self.model, domain, version)

    def finish(self) -> onnx.ModelProto:
        """Nodes in a topological order, unused initializers dropped, stale value_info cleared."""
        nodes = self.nodes() + self.new_nodes
        produced = {o for n in nodes for o in n.output if o}
        ready = set(self.initializers) | self.graph_inputs | {""}
        ordered, pending = [], list(nodes)
        while pending:
            rest = []
            for n in pending:
                if all(i in ready or i not in produced for i in n.input):
                    ordered.append(n)
                    ready.update(n.output)
                else:
                    rest.append(n)
            if len(rest) == len(pending):
                raise ValueError("the quantized graph has a cycle: " + ", ".join(n.name or n.op_type for n in rest))
            pending = rest
        copies = []
        for n in ordered:
            c = onnx.NodeProto()
            c.CopyFrom(n)
            copies.append(c)
        del self.graph.node[:]
        self.graph.node.extend(copies)
        used = {i for n in copies for i in n.input} | self.graph_outputs
        for name in list(self.initializers):
            if name not in used:
                self.remove_initializer(name)
        del self.graph.value_info[:]
        return self.model


def upgrade_opset(model: onnx.ModelProto, version: int) -> onnx.ModelProto:
    """``model`` at default-domain opset ``version`` at least (16-bit and 4-bit Q/DQ need opset 21)."""
    current = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    if current >= version:
        return model
    try:
        return onnx.version_converter.convert_version(model, version)
    except Exception:  # noqa: BLE001 - the converter lacks some adapters; the ops used keep their meaning
        for o in model.opset_import:
            if o.domain in ("", "ai.onnx"):
                o.version = version
        return model
