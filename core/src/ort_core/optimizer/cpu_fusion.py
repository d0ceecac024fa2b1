"""CPU-provider fusions (level extended): Conv / Gemm + activation, MatMul + bias Add, and first the
transformer fusions (LayerNorm, GELU, attention, SkipLayerNorm: one module each, beside this one).

Run after partitioning and only on nodes the CPU provider took, so other providers still see the
standard ops. The fused ops live in ort-core's own domain ``ort_core`` (documented in
providers/cpu/ops/fused.py and fused_transformer.py, which run them); this module only rewrites the graph.
"""

from __future__ import annotations

from ..ir.graph import Graph, Model, Node
from .attention_fusion import fuse_attention
from .gelu_fusion import fuse_gelus
from .layernorm_fusion import fuse_layer_norms
from .rewrite import Matcher, consumers_of, protected_names
from .skip_layernorm_fusion import fuse_skip_layer_norms

DOMAIN = "ort_core"
ACTIVATIONS = {"Relu", "LeakyRelu", "Clip", "Sigmoid", "Tanh", "HardSigmoid"}


def fuse_cpu_nodes(model: Model, on_cpu: set[int]) -> int:
    """Rewrite in place the patterns whose nodes are all in ``on_cpu`` (node ids); returns count."""
    graph = model.graph
    fused = fuse_transformer_nodes(model, on_cpu)
    protected = protected_names(graph)
    for node in list(graph.nodes):
        if node.id not in on_cpu or node.domain not in ("", "ai.onnx") or node not in graph.nodes:
            continue
        nxt = _only_consumer(graph, node, protected, on_cpu)
        if nxt is None:
            continue
        if node.op_type in ("Conv", "Gemm") and nxt.op_type in ACTIVATIONS and _simple_activation(graph, nxt):
            _merge(graph, node, nxt, f"Fused{node.op_type}", {"activation": nxt.op_type,
                   **{f"activation_{k}": v for k, v in nxt.attrs.items()}}, extra_inputs=nxt.inputs[1:])
            fused += 1
        elif node.op_type == "MatMul" and nxt.op_type == "Add" and (bias := _bias_of(graph, node, nxt)) is not None:
            _merge(graph, node, nxt, "FusedMatMul", {}, extra_inputs=[bias])
            fused += 1
    if fused:
        model.opset_imports.setdefault(DOMAIN, 1)
    return fused


def fuse_transformer_nodes(model: Model, on_cpu: set[int]) -> int:
    """LayerNorm and GELU chains first (attention and SkipLayerNorm match across them), MatMul + bias last."""
    m = Matcher(model, on_cpu)
    return sum(fuse(m) for fuse in (fuse_layer_norms, fuse_gelus, fuse_attention, fuse_skip_layer_norms))


def _only_consumer(graph: Graph, node: Node, protected: set[str], on_cpu: set[int]) -> Node | None:
    if len([o for o in node.outputs if o]) != 1 or node.outputs[0] in protected:
        return None
    users = consumers_of(graph, node.outputs[0])
    if len(users) != 1 or users[0].id not in on_cpu or users[0].domain not in ("", "ai.onnx"):
        return None
    user = users[0]
    if user.inputs[0] != node.outputs[0] and user.op_type != "Add":
        return None
    return user


def _simple_activation(graph: Graph, act: Node) -> bool:
    """Clip's min/max must be constants (they become inputs of the fused node as they are)."""
    if act.op_type != "Clip":
        return True
    constants = graph.constant_initializers()
    return all((not i) or i in constants for i in act.inputs[1:])


def _bias_of(graph: Graph, matmul: Node, add: Node) -> str | None:
    """The Add's other operand when it is a constant 1-D bias over the MatMul's last axis."""
    other = add.inputs[1] if add.inputs[0] == matmul.outputs[0] else add.inputs[0]
    constants = graph.constant_initializers()
    bias = constants.get(other)
    w = graph.initializers.get(matmul.inputs[1])
    if bias is None or w is None or bias.ndim != 1 or w.ndim < 2:
        return None
    if bias.shape[0] != w.shape[-1] or bias.dtype != w.dtype:
        return None
    return other


def _merge(graph: Graph, first: Node, second: Node, op_type: str, extra_attrs: dict, extra_inputs) -> None:
    first.op_type = op_type
    first.domain = DOMAIN
    first.attrs = {**first.attrs, **extra_attrs}
    first.attr_types = {}
    inputs = list(first.inputs)
    if op_type in ("FusedConv", "FusedGemm"):
        while len(inputs) < 3:  # keep activation inputs (Clip min/max) at fixed positions 3 and 4
            inputs.append("")
    first.inputs = inputs + list(extra_inputs)
    first.outputs = [second.outputs[0]]
    graph.nodes = [n for n in graph.nodes if n is not second]
