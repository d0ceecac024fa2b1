"""Weight-only quantization of MatMul weights to com.microsoft::MatMulNBits, with onnxruntime.quantization's
``matmul_nbits_quantizer`` API (``DefaultWeightOnlyQuantConfig``, ``MatMulNBitsQuantizer(...).process()``,
``.model.save_model_to_file``), so scripts change only the import.

Every MatMul whose right-hand side is a constant 2-D float weight W (K x N) becomes one MatMulNBits node: W is
cut along K into blocks of ``block_size`` values per output column and each block is rounded to ``bits``-bit
integers (round to nearest, ties to even) with its own scale:

- asymmetric (the default): the block's range, widened to include 0, maps onto [0, 2**bits - 1]; the zero
  point is the integer 0 rounds to, stored packed as MatMulNBits reads it;
- symmetric: the block's value of largest magnitude maps onto -2**(bits - 1) and the zero point is the
  kernel's default 2**(bits - 1), so none is stored.

Only the QOperator format and the default (round-to-nearest) algorithm are offered; QDQ, Gather, channel-wise
and the calibrated algorithms (GPTQ, HQQ, AWQ) are refused with a message saying so. The quantized model is
standard onnxruntime contrib-op ONNX: onnxruntime runs it too.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .graph import ensure_domain, remove_initializers, save
from .types import QuantFormat

MS_DOMAIN = "com.microsoft"
_FLOAT_WEIGHTS = {TensorProto.FLOAT: np.float32, TensorProto.FLOAT16: np.float16}


class DefaultWeightOnlyQuantConfig:
    """Round-to-nearest block quantization of MatMul weights (onnxruntime's "DEFAULT" algorithm's settings)."""

    algorithm = "DEFAULT"

    def __init__(self, block_size: int = 128, is_symmetric: bool = False, accuracy_level: int | None = None,
                 quant_format=QuantFormat.QOperator, op_types_to_quantize: tuple[str, ...] | None = None,
                 quant_axes: tuple[tuple[str, int], ...] | None = None, bits: int = 4,
                 channel_wised_quantize: bool = False) -> None:
        if bits not in (2, 4, 8):
            raise ValueError(f"bits={bits}: MatMulNBits takes 2, 4 or 8 bits")
        if block_size < 16 or block_size & (block_size - 1):
            raise ValueError(f"block_size={block_size}: must be a power of 2, at least 16 (MatMulNBits' rule)")
        if accuracy_level is not None and accuracy_level not in (0, 1, 2, 3, 4):
            raise ValueError(f"accuracy_level={accuracy_level}: must be 0 to 4 (or None)")
        if quant_format != QuantFormat.QOperator:
            raise NotImplementedError(f"quant_format={quant_format}: only QuantFormat.QOperator (MatMulNBits nodes) "
                                      "is offered by ort_core.quantization")
        ops = tuple(op_types_to_quantize or ("MatMul",))
        if set(ops) - {"MatMul"}:
            raise NotImplementedError(f"op_types_to_quantize={ops}: only MatMul is quantized (Gather to "
                                      "GatherBlockQuantized is not offered)")
        axes = dict(quant_axes or (("MatMul", 0),))
        if axes.get("MatMul", 0) != 0:
            raise NotImplementedError(f"quant_axes={quant_axes}: MatMul weights are quantized along K (axis 0) only")
        if channel_wised_quantize:
            raise NotImplementedError("channel_wised_quantize=True is not offered (blocks of block_size only)")
        self.block_size, self.is_symmetric, self.accuracy_level, self.bits = block_size, is_symmetric, \
            accuracy_level, bits
        self.quant_format, self.op_types_to_quantize, self.quant_axes = quant_format, ops, axes


class QuantizedModel:
    """What ``MatMulNBitsQuantizer.model`` is: the ModelProto (``model``) and a way to save it."""

    def __init__(self, model: onnx.ModelProto) -> None:
        self.model = model

    def save_model_to_file(self, path: str | os.PathLike, use_external_data_format: bool = False) -> None:
        save(self.model, os.fspath(path), use_external_data_format)


class MatMulNBitsQuantizer:
    """Quantizes the MatMul weights of ``model`` (a ModelProto or a path) when ``process()`` is called; the result
    is ``self.model.model``. ``nodes_to_exclude`` / ``nodes_to_include``: node names."""

    def __init__(self, model: onnx.ModelProto | str | os.PathLike, bits: int = 4, block_size: int = 128,
                 is_symmetric: bool = False, accuracy_level: int | None = None, nodes_to_exclude=None,
                 nodes_to_include: list[str] | None = None, quant_format=QuantFormat.QOperator,
                 op_types_to_quantize: tuple[str, ...] | None = None,
                 quant_axes: tuple[tuple[str, int], ...] | None = None, channel_wised_quantize: bool = False,
                 algo_config: Any = None) -> None:
        proto = model if isinstance(model, onnx.ModelProto) else onnx.load(os.fspath(model))
        self.model = QuantizedModel(proto)
        if algo_config is None:
            algo_config = DefaultWeightOnlyQuantConfig(block_size, is_symmetric, accuracy_level, quant_format,
                                                       op_types_to_quantize, quant_axes, bits, channel_wised_quantize)
        elif getattr(algo_config, "algorithm", None) != "DEFAULT":
            raise NotImplementedError(f"algorithm {getattr(algo_config, 'algorithm', type(algo_config).__name__)!r}: "
                                      "only the DEFAULT (round-to-nearest) algorithm is offered")
        self.algo_config = algo_config
        self.nodes_to_exclude = set(nodes_to_exclude or ())
        self.nodes_to_include = set(nodes_to_include) if nodes_to_include else None
        self.quantized: list[str] = []  # names of the MatMul nodes replaced, in graph order

    def process(self) -> None:
        """Replace every eligible MatMul (main graph) by MatMulNBits; unused float weights are dropped."""
        graph = self.model.model.graph
        inits = {t.name: t for t in graph.initializer}
        cfg = self.algo_config
        nodes = []
        made: dict[str, list[str]] = {}  # weight name -> its quantized initializers (a shared weight once)
        for node in graph.node:
            weight = self._weight(node, inits)
            if weight is None:
                nodes.append(node)
                continue
            base = node.input[1]
            if base not in made:
                q, scales, zeros = quantize_blocks(weight, cfg.bits, cfg.block_size, cfg.is_symmetric)
                names = [f"{base}_Q{cfg.bits}", f"{base}_scales"] + ([f"{base}_zero_points"] if zeros is not None
                                                                       else [])
                graph.initializer.extend([numpy_helper.from_array(q, names[0]), numpy_helper.from_array(
                    scales.astype(_FLOAT_WEIGHTS[inits[base].data_type]), names[1])])
                if zeros is not None:
                    graph.initializer.append(numpy_helper.from_array(zeros, names[2]))
                made[base] = names
            names = made[base]
            attrs = dict(K=weight.shape[0], N=weight.shape[1], bits=cfg.bits, block_size=cfg.block_size)
            if cfg.accuracy_level is not None:
                attrs["accuracy_level"] = cfg.accuracy_level
            nodes.append(helper.make_node("MatMulNBits", [node.input[0], *names], list(node.output),
                                          name=f"{node.name or node.output[0]}_Q{cfg.bits}", domain=MS_DOMAIN,
                                          **attrs))
            self.quantized.append(node.name)
        del graph.node[:]
        graph.node.extend(nodes)
        used = {name for n in graph.node for name in n.input} | {o.name for o in graph.output}
        remove_initializers(graph, {t.name for t in graph.initializer} - used)
        if self.quantized:
            ensure_domain(self.model.model, MS_DOMAIN)

    def _weight(self, node: onnx.NodeProto, inits: dict) -> np.ndarray | None:
        """The float weight (K, N) to quantize for ``node``, or None when it is not quantized."""
        if node.op_type != "MatMul" or node.domain not in ("", "ai.onnx") or len(node.input) != 2:
            return None
        if node.name in self.nodes_to_exclude or (self.nodes_to_include is not None and
                                                  node.name not in self.nodes_to_include):
            return None
        t = inits.get(node.input[1])
        if t is None or t.data_type not in _FLOAT_WEIGHTS or len(t.dims) != 2:
            return None
        return numpy_helper.to_array(t).astype(np.float32)


def quantize_blocks(weight: np.ndarray, bits: int, block_size: int,
                    symmetric: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """W (K, N) float -> (B uint8 (N, k_blocks, block_size * bits / 8), scales float32 (N, k_blocks), packed
    zero points uint8 (N, ceil(k_blocks * bits / 8)) or None when symmetric), in MatMulNBits' layout: the first
    value in the lowest bits of a byte."""
    k, n = weight.shape
    k_blocks = -(-k // block_size)
    w = np.zeros((n, k_blocks * block_size), np.float32)
    w[:, :k] = weight.T
    w = w.reshape(n, k_blocks, block_size)
    qmax = (1 << bits) - 1
    if symmetric:
        idx = np.argmax(np.abs(w), axis=-1)[..., None]
        peak = np.take_along_axis(w, idx, axis=-1)[..., 0]  # the signed value of largest magnitude
        scales = peak / -float(1 << (bits - 1))
        zero = np.full(scales.shape, 1 << (bits - 1), np.float32)
    else:
        low, high = np.minimum(w.min(axis=-1), 0), np.maximum(w.max(axis=-1), 0)
        scales = (high - low) / qmax
        zero = np.clip(np.rint(-low / np.where(scales == 0, 1, scales)), 0, qmax)
    scales = scales.astype(np.float32)  # 0 for an all-zero block, whose values all dequantize to 0
    divisor = np.where(scales == 0, np.float32(1), scales)
    q = np.clip(np.rint(w / divisor[..., None]) + zero[..., None], 0, qmax).astype(np.uint8).reshape(n, -1)
    q[:, k:] = 0  # past K: never read; written as 0, as onnxruntime's quantizer writes it
    packed = pack_bits(q, bits).reshape(n, k_blocks, block_size * bits // 8)
    zeros = None
    if not symmetric:
        per_byte = 8 // bits
        padded = np.full((n, -(-k_blocks // per_byte) * per_byte), 1 << (bits - 1), np.uint8)
        padded[:, :k_blocks] = zero.astype(np.uint8)
        zeros = pack_bits(padded, bits)
    return packed, scales, zeros


def pack_bits(values: np.ndarray, bits: int) -> np.ndarray:
    """uint8 values (..., m) below 2**bits -> bytes (..., m * bits / 8), the first value in the lowest bits."""
    if bits == 8:
        return values.astype(np.uint8)
    per_byte = 8 // bits
    v = values.astype(np.uint8).reshape(*values.shape[:-1], -1, per_byte)
    out = np.zeros(v.shape[:-1], np.uint8)
    for j in range(per_byte):
        out |= v[..., j] << np.uint8(j * bits)
    return out
