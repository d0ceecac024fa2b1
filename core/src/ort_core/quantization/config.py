"""The options every quantizer reads: types, symmetry, per-channel, which nodes, and onnxruntime's
extra_options keys, gathered once from quantize_static / quantize_dynamic's arguments."""

from __future__ import annotations

from dataclasses import dataclass, field

import onnx

from .types import SIGNED, QuantType, tensor_type_of

# op types each format quantizes by default (onnxruntime's registries, less those not written here)
QDQ_OPS = ("Conv", "ConvTranspose", "Gemm", "MatMul", "Add", "Mul", "Relu", "Clip", "Gather", "GatherElements",
           "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "MaxPool", "AveragePool", "Slice",
           "Concat", "Softmax", "Sigmoid", "LeakyRelu", "GlobalAveragePool", "Resize", "Split", "Pad", "Where",
           "ArgMax", "TopK", "BatchNormalization", "InstanceNormalization", "LayerNormalization")
QOPERATOR_OPS = ("Conv", "Gemm", "MatMul", "Add", "Mul", "Relu", "Clip", "Gather", "Reshape", "Transpose",
                 "Squeeze", "Unsqueeze", "Flatten", "MaxPool", "GlobalAveragePool", "Softmax")
DYNAMIC_OPS = ("Conv", "MatMul", "Gather", "Gemm")
DIRECT_OPS = ("Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "MaxPool", "AveragePool", "Slice", "TopK",
              "Resize", "Split", "Pad")


@dataclass
class Config:
    activation_type: int = onnx.TensorProto.INT8
    weight_type: int = onnx.TensorProto.INT8
    per_channel: bool = False
    reduce_range: bool = False
    op_types: tuple[str, ...] = QDQ_OPS
    nodes_to_quantize: set[str] = field(default_factory=set)
    nodes_to_exclude: set[str] = field(default_factory=set)
    activation_symmetric: bool = False
    weight_symmetric: bool | None = None
    min_real_range: float | None = None
    keep_removable_activations: bool = False
    extra: dict = field(default_factory=dict)

    @staticmethod
    def make(op_types_to_quantize, default_ops, per_channel, reduce_range, activation_type, weight_type,
             nodes_to_quantize, nodes_to_exclude, extra_options) -> Config:
        extra = dict(extra_options or {})
        return Config(
            activation_type=tensor_type_of(activation_type if isinstance(activation_type, QuantType)
                                           else QuantType(activation_type)),
            weight_type=tensor_type_of(weight_type if isinstance(weight_type, QuantType) else QuantType(weight_type)),
            per_channel=bool(per_channel), reduce_range=bool(reduce_range),
            op_types=tuple(op_types_to_quantize) if op_types_to_quantize else tuple(default_ops),
            nodes_to_quantize=set(nodes_to_quantize or ()), nodes_to_exclude=set(nodes_to_exclude or ()),
            activation_symmetric=bool(extra.get("ActivationSymmetric", False)),
            weight_symmetric=extra.get("WeightSymmetric"),
            min_real_range=extra.get("MinimumRealRange"),
            keep_removable_activations=bool(extra.get("QDQKeepRemovableActivations", False)),
            extra=extra)

    def weight_is_symmetric(self, qtype: int) -> bool:
        """Signed weight types are symmetric unless WeightSymmetric says otherwise."""
        if self.weight_symmetric is not None:
            return bool(self.weight_symmetric)
        return qtype in SIGNED

    def initializer_symmetric(self, qtype: int) -> bool:
        """Symmetry of a constant quantized in an activation's role (QOperator's rule: the weight
        rule when the activation type is the weight type)."""
        return self.weight_is_symmetric(qtype) if qtype == self.weight_type else self.activation_symmetric

    def wants(self, node: onnx.NodeProto) -> bool:
        if self.nodes_to_quantize and node.name not in self.nodes_to_quantize:
            return False
        if node.op_type not in self.op_types or node.domain not in ("", "ai.onnx"):
            return False
        return node.name not in self.nodes_to_exclude
