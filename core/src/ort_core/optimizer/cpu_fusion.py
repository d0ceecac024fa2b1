"""Provider fusions (level extended): Conv / Gemm + activation, MatMul + bias Add, and first the
transformer fusions (LayerNorm, GELU, attention, SkipLayerNorm: one module each, beside this one), last the
classic-ML pipeline fusions (ml_fusion).

Run after partitioning, as a provider's transform (``TransformView.fuse``), only on the nodes that
provider took, so other providers still see the standard ops; the CPU provider uses them. The fused
ops are onnxruntime's contrib ops (domain ``com.microsoft``, its semantics: FusedConv, FusedGemm, ...)
wherever onnxruntime has one, and ort-core's own domain ``ort_core`` only where it has none
(FusedBatchNormalization, MatMulBias: providers/cpu/ops/fused.py); this module only rewrites the graph.
"""

from __future__ import annotations

import numpy as np

from ..ir.graph import Model, Node
from .attention_fusion import fuse_attention
from .gelu_fusion import fuse_gelus
from .layernorm_fusion import fuse_layer_norms
from .ml_fusion import fuse_ml
from .qdq_fusion import fuse_qdq
from .rewrite import CONTRIB, DOMAIN, Matcher
from .skip_layernorm_fusion import fuse_skip_layer_norms

ACTIVATIONS = {"Relu", "LeakyRelu", "Clip", "Sigmoid", "Tanh", "HardSigmoid"}
GEMM_ACTIVATIONS = ACTIVATIONS - {"Clip"}  # onnxruntime's FusedGemm has no Clip
_PARAMS = {"LeakyRelu": (("alpha", 0.01),), "HardSigmoid": (("alpha", 0.2), ("beta", 0.5))}


def fuse_nodes(model: Model, node_ids: set[int], allowed: frozenset[str] | None = None) -> int:
    """Rewrite in place the patterns whose nodes are all in ``node_ids`` (one provider's); returns count.
    ``allowed``: make only these fused ops ("domain::op_type"; before partitioning, the ones the session's
    providers declare they run), None: all of them."""
    m = Matcher(model, node_ids, allowed)
    fused = fuse_qdq(m)  # first: the integer groups hold the Conv/MatMul the float fusions would take
    fused += _fuse_transformers(m)
    fused += _Chains(m).fuse()  # the indexes the transformer fusions left up to date
    fused += fuse_ml(m)  # classic-ML pipelines: affine steps into the linear model, L1 after softmax
    if fused:
        domains = {n.domain for n in model.graph.nodes}
        for domain in (CONTRIB, DOMAIN):
            if domain in domains:
                model.opset_imports.setdefault(domain, 1)
    return fused


class _Chains:
    """Producer + follower fusions, in one topological pass over the ``Matcher``'s indexes:
    Conv + residual Add (+ activation), Conv / Gemm / inference BatchNormalization + activation,
    MatMul + bias Add. Nodes are merged in place and the followers dropped at the end, so the
    readers index is kept up to date here rather than rebuilt after each fusion."""

    def __init__(self, m: Matcher) -> None:
        self.m = m
        self.graph = m.graph
        self.constants = m.constants
        self.readers = m.consumers
        self.removed: set[int] = set()

    def fuse(self) -> int:
        count = 0
        for node in self.graph.topological_order():
            if id(node) in self.removed or not self.m.eligible(node):
                continue
            nxt = self.sole_reader(node)
            if nxt is None:
                continue
            if node.op_type == "Conv" and nxt.op_type in ("Add", "Sum") and (residual := self.residual_of(node, nxt)):
                if not self.merge(node, nxt, "FusedConv", CONTRIB, {}, [residual]):
                    continue
                count += 1
                act = self.sole_reader(node)
                if act is not None and self.fusable_activation(node, act):
                    count += self.merge(node, act, "FusedConv", CONTRIB, self.activation_params(act), [])
            elif node.op_type == "Conv" and self.fusable_activation(node, nxt):
                count += self.merge(node, nxt, "FusedConv", CONTRIB, self.activation_params(nxt), [])
            elif node.op_type == "Gemm" and nxt.op_type in GEMM_ACTIVATIONS and self.fusable_activation(node, nxt):
                count += self.merge(node, nxt, "FusedGemm", CONTRIB, _gemm_activation(nxt), [])
            elif node.op_type == "BatchNormalization" and _inference_bn(node) and self.fusable_activation(node, nxt):
                count += self.merge(node, nxt, "FusedBatchNormalization", DOMAIN, self.activation_params(nxt), [])
            elif node.op_type == "MatMul" and nxt.op_type == "Add" and (bias := self.bias_of(node, nxt)):
                count += self.merge(node, nxt, "MatMulBias", DOMAIN, {}, [bias])
        if self.removed:
            self.graph.nodes = [n for n in self.graph.nodes if id(n) not in self.removed]
        return count

    def sole_reader(self, node: Node) -> Node | None:
        """The one CPU node of the default domain reading ``node``'s single output (not a graph output)."""
        if len(node.outputs) != 1 or not node.outputs[0]:
            return None
        return self.m.sole_reader(node.outputs[0])

    def fusable_activation(self, producer: Node, act: Node) -> bool:
        """An activation reading the producer's output as its first input; Clip's min/max one-element
        constants."""
        if act.op_type not in ACTIVATIONS or not act.inputs or act.inputs[0] != producer.outputs[0]:
            return False
        if act.op_type != "Clip":
            return True
        return all((not i) or i in self.constants and self.constants[i].size == 1 for i in act.inputs[1:])

    def activation_params(self, act: Node) -> dict:
        """``activation`` and ``activation_params`` as com.microsoft FusedConv takes them (Clip's min and
        max from its constant inputs, or from its attributes below opset 11)."""
        if act.op_type == "Clip":
            bounds = [act.attr("min", -np.inf), act.attr("max", np.inf)]
            for k, name in enumerate(act.inputs[1:3]):
                if name:
                    bounds[k] = self.constants[name].reshape(-1)[0]
            return {"activation": "Clip", "activation_params": [float(b) for b in bounds]}
        params = [float(act.attr(name, default)) for name, default in _PARAMS.get(act.op_type, ())]
        return {"activation": act.op_type, **({"activation_params": params} if params else {})}

    def residual_of(self, conv: Node, add: Node) -> str | None:
        """The other operand of a two-input Add/Sum after a Conv, when it has the Conv output's shape."""
        if len(add.inputs) != 2 or add.inputs[0] == add.inputs[1] or not all(add.inputs):
            return None
        out = conv.outputs[0]
        other = self.m.other(add, out)
        t_out, t_other = self.graph.type_of(out), self.graph.type_of(other)
        if t_out is None or t_other is None or t_out.shape is None or t_out.shape != t_other.shape:
            return None
        if t_out.elem_type != t_other.elem_type or any(not isinstance(d, int) for d in t_out.shape):
            return None
        return other

    def bias_of(self, matmul: Node, add: Node) -> str | None:
        """The Add's other operand when it is a constant 1-D bias over the MatMul's last axis."""
        other = self.m.other(add, matmul.outputs[0])
        bias = self.constants.get(other)
        w = self.graph.initializers.get(matmul.inputs[1])
        if bias is None or w is None or bias.ndim != 1 or w.ndim < 2:
            return None
        if bias.shape[0] != w.shape[-1] or bias.dtype != w.dtype:
            return None
        return other

    def merge(self, first: Node, second: Node, op_type: str, domain: str, extra_attrs: dict, extra_inputs) -> bool:
        """Make ``first`` the fused node and drop ``second``; False, and nothing changed, when this run
        may not make ``op_type``."""
        if not self.m.makes(op_type, domain):
            return False
        first.op_type = op_type
        first.domain = domain
        first.attrs = {**first.attrs, **extra_attrs}
        first.attr_types = {}
        inputs = list(first.inputs)
        if extra_inputs and op_type == "FusedConv":
            while len(inputs) < 3:  # the optional bias kept at position 2: the sum Z is input 3
                inputs.append("")
        first.inputs = inputs + list(extra_inputs)
        first.outputs = [second.outputs[0]]
        self.removed.add(id(second))
        for name in set(second.inputs):  # the fused node now reads what the follower read
            users = [u for u in self.readers.get(name, []) if u is not second and u is not first]
            self.readers[name] = users + [first]
        return True



def _gemm_activation(act: Node) -> dict:
    """``activation`` and its ``activation_alpha`` / ``activation_beta`` as com.microsoft FusedGemm takes them."""
    return {"activation": act.op_type,
            **{f"activation_{name}": float(act.attr(name, default)) for name, default in _PARAMS.get(act.op_type, ())}}


def _inference_bn(node: Node) -> bool:
    """A BatchNormalization computing Y only (training mode and its extra outputs are left alone)."""
    if node.attr("training_mode", 0) or node.attr("spatial", 1) != 1:
        return False
    return len([o for o in node.outputs if o]) == 1 and len(node.inputs) == 5


def _fuse_transformers(m: Matcher) -> int:
    """LayerNorm and GELU chains first (attention and SkipLayerNorm match across them)."""
    return sum(fuse(m) for fuse in (fuse_layer_norms, fuse_gelus, fuse_attention, fuse_skip_layer_norms))
