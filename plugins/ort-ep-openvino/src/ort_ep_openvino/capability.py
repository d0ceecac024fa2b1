"""Which nodes OpenVINO can take: its ONNX frontend's op table, element-type rules, probes.

A node must be in the table, pass the rules (what OpenVINO computes differently from ONNX) and
compile as a one-node model (a probe, cached per signature by the provider instance's ``Prober``);
running nodes is not done here.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto

from ort_core.plugins import (
    FusedSubgraph,
    VerdictCache,
    canonical,
    constant_node_value,
    constant_node_values,
    is_onnx_domain,
    onnx_domain,
)

from . import __version__
from . import runtime as rt

# Default-domain ops that OpenVINO 2026.4's ONNX frontend converts: found by reading every ONNX
# backend node case (onnx 1.23) through ov_core_read_model_from_memory_buffer. A listed op is
# still probed per signature (attributes, opset, dtypes, ranks); an unlisted one is not tried.
FRONTEND_OPS = frozenset("""
Abs Acos Acosh Add AffineGrid And ArgMax ArgMin Asin Asinh Atan Atanh Attention AveragePool
BatchNormalization BitShift BitwiseAnd BitwiseNot BitwiseOr BitwiseXor BlackmanWindow Cast CastLike Ceil
Celu CenterCropPad Clip Col2Im Compress Concat Constant ConstantOfShape Conv ConvInteger ConvTranspose Cos
Cosh CumSum DFT DepthToSpace DequantizeLinear Div Dropout DynamicQuantizeLinear Einsum Elu Equal Erf Exp
Expand EyeLike Flatten Floor GRU Gather GatherElements GatherND Gelu Gemm GlobalAveragePool GlobalMaxPool
Greater GreaterOrEqual GridSample GroupNormalization HammingWindow HannWindow HardSigmoid HardSwish Hardmax
Identity InstanceNormalization IsInf IsNaN LRN LSTM LayerNormalization LeakyRelu Less LessOrEqual Log
LogSoftmax LpNormalization LpPool MatMul MatMulInteger Max MaxPool Mean MeanVarianceNormalization Min Mish
Mod Mul Neg NegativeLogLikelihoodLoss NonMaxSuppression NonZero Not OneHot Or PRelu Pad Pow QLinearConv
QLinearMatMul QuantizeLinear RMSNormalization RNN Range Reciprocal ReduceL1 ReduceL2 ReduceLogSum
ReduceLogSumExp ReduceMax ReduceMean ReduceMin ReduceProd ReduceSum ReduceSumSquare Relu Reshape Resize
ReverseSequence RoiAlign RotaryEmbedding Round Scatter ScatterElements ScatterND Selu Shape Shrink Sigmoid
Sign Sin Sinh Size Slice Softmax SoftmaxCrossEntropyLoss Softplus Softsign SpaceToDepth Split Sqrt Squeeze
Sub Sum Swish Tan Tanh ThresholdedRelu Tile TopK Transpose Trilu Unique Unsqueeze Upsample Where Xor
""".split())

# Ops the frontend reads but that this provider leaves to others, and why.
NOT_CLAIMED = {
    "If": "control flow with subgraphs is not offered to OpenVINO (outer-scope values, sequence types)",
    "Loop": "control flow with subgraphs is not offered to OpenVINO (outer-scope values, sequence types)",
    "Scan": "control flow with subgraphs is not offered to OpenVINO (outer-scope values, sequence types)",
    "Bernoulli": "random draws: OpenVINO's generator differs from every other provider's",
    "RandomUniformLike": "random draws: OpenVINO's generator differs from every other provider's",
    "RandomNormalLike": "random draws: OpenVINO's generator differs from every other provider's",
    "RandomUniform": "random draws: OpenVINO's generator differs from every other provider's",
    "RandomNormal": "random draws: OpenVINO's generator differs from every other provider's",
    "Multinomial": "random draws: OpenVINO's generator differs from every other provider's",
}

# Element types OpenVINO's CPU plugin holds and computes as they are. float64 is computed in
# float32, int64/uint64 in int32 and uint32 as int32 (see the rules below); strings, complex,
# float8 and int4 types do not cross the border.
F32, F16, BF16, F64 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.DOUBLE
I8, U8, I16, U16, I32, U32 = (TensorProto.INT8, TensorProto.UINT8, TensorProto.INT16, TensorProto.UINT16,
                              TensorProto.INT32, TensorProto.UINT32)
I64, U64, BOOL = TensorProto.INT64, TensorProto.UINT64, TensorProto.BOOL
NATIVE = {F32, F16, BF16, I8, U8, I16, U16, I32, BOOL}
WIDE = {I64, U64}  # OpenVINO's CPU plugin narrows these to int32
INT32_RANGE = (-(2 ** 31), 2 ** 31 - 1)

# Inputs whose values are indices, axes, sizes or shapes: int64 there holds numbers far below
# 2**31 in any tensor that fits in memory, so OpenVINO's narrowing to int32 loses nothing.
INDEX_INPUTS: dict[str, set[int]] = {
    "Gather": {1}, "GatherElements": {1}, "GatherND": {1}, "Scatter": {1}, "ScatterElements": {1},
    "ScatterND": {1}, "Reshape": {1}, "Expand": {1}, "Tile": {1}, "Slice": {1, 2, 3, 4}, "TopK": {1},
    "OneHot": {0, 1}, "ConstantOfShape": {0}, "Squeeze": {1}, "Unsqueeze": {1}, "Pad": {1, 3},
    "Resize": {3}, "Upsample": set(), "Split": {1}, "Trilu": {1}, "CumSum": {1}, "ReduceSum": {1},
    "ReduceMean": {1}, "ReduceMax": {1}, "ReduceMin": {1}, "ReduceProd": {1}, "ReduceL1": {1},
    "ReduceL2": {1}, "ReduceLogSum": {1}, "ReduceLogSumExp": {1}, "ReduceSumSquare": {1},
    "ReverseSequence": {1}, "NonMaxSuppression": {2}, "CenterCropPad": {1, 2}, "Col2Im": {1, 2},
    "EyeLike": set(), "Compress": set(), "DFT": {1, 2}, "NegativeLogLikelihoodLoss": {1},
    "SoftmaxCrossEntropyLoss": {1}, "AffineGrid": {1}, "HannWindow": {0}, "HammingWindow": {0},
    "BlackmanWindow": {0}, "RoiAlign": {2}, "RotaryEmbedding": {3}, "Attention": set(),
}
# Outputs that are indices or sizes (int64 by the spec): their values fit in int32.
INDEX_OUTPUTS: dict[str, set[int]] = {
    "ArgMax": {0}, "ArgMin": {0}, "Shape": {0}, "Size": {0}, "NonZero": {0}, "TopK": {1},
    "Unique": {1, 2, 3}, "NonMaxSuppression": {0},
}
# Ops that only move, select or copy values: bit-exact for every native type, and for uint32
# (computed as int32 with the same bits). Wide integers still must be constants in int32 range.
MOVEMENT_OPS = frozenset("""
Identity Reshape Flatten Squeeze Unsqueeze Transpose Concat Split Slice Gather GatherElements GatherND
Expand Tile DepthToSpace SpaceToDepth ScatterElements ScatterND Scatter Compress ReverseSequence Where
Constant ConstantOfShape
""".split())
# Integer arithmetic that wraps around in ONNX (and numpy); OpenVINO saturates int8/uint8 instead.
WRAPPING_OPS = frozenset("""
Add Sub Mul Neg Abs Sum Mean Pow CumSum ReduceSum ReduceProd ReduceSumSquare ReduceL1 MatMul Gemm
MatMulInteger ConvInteger Einsum Div Mod
""".split())

NEWEST_OP_VERSION = 26
"""Newest operator version (the ``since_version`` of the op's schema at the model's opset)
checked against OpenVINO 2026.4; onnx 1.23 defines versions up to 28. A newer version may add
meaning an older converter would ignore, so such nodes are declined rather than guessed at."""


@functools.lru_cache(maxsize=4096)
def op_version(op_type: str, opset: int, domain: str = "") -> int:
    """The version of ``op_type`` a model importing ``opset`` uses (0 when onnx has no schema)."""
    try:
        return onnx.defs.get_schema(op_type, opset, domain).since_version
    except onnx.defs.SchemaError:
        return 0


class Context:
    """What judging a node needs from its surroundings: opsets, static types, constant values.

    ``constant(name)`` knows initializers a feed cannot override and the values of Constant
    nodes anywhere in the graph (the kernel bakes both into the compiled model).
    """

    def __init__(self, opsets: dict[str, int], graph: Any,
                 initializer: Callable[[str], np.ndarray | None], qdq: bool = False) -> None:
        self.opsets, self.graph, self._initializer = opsets, graph, initializer
        self.qdq = qdq  # enable_qdq_optimizer: QuantizeLinear's rounding deviation is accepted
        self._constant_nodes: dict[str, np.ndarray] | None = None

    @staticmethod
    def of_view(view: Any, qdq: bool = False) -> Context:
        return Context(dict(view.opsets), view.graph, view.constant, qdq)

    @staticmethod
    def of_subgraph(sub: FusedSubgraph, qdq: bool = False) -> Context:
        return Context(dict(sub.opsets), sub.graph, sub.constants.get, qdq)

    def type_of(self, name: str) -> Any:
        return self.graph.type_of(name)

    def constant(self, name: str) -> np.ndarray | None:
        value = self._initializer(name)
        if value is None:
            if self._constant_nodes is None:
                self._constant_nodes = constant_node_values(self.graph)
            value = self._constant_nodes.get(name)
        return value


def static_reason(node: Any, ctx: Context) -> str | None:
    """Why OpenVINO is not asked to take ``node`` (op table and dtype rules), or None to probe it."""
    if not is_onnx_domain(node.domain):
        return f"domain '{node.domain}' is not supported by OpenVINO's ONNX frontend here"
    op = node.op_type
    if op in NOT_CLAIMED:
        return NOT_CLAIMED[op]
    if op not in FRONTEND_OPS:
        return f"{op} is not among the ops OpenVINO's ONNX frontend converts"
    since = op_version(op, ctx.opsets.get("", 0))
    if since > NEWEST_OP_VERSION:
        return (f"{op}-{since} is newer than the operator versions checked against OpenVINO "
                f"(up to {NEWEST_OP_VERSION})")
    if node.subgraphs():
        return "attributes holding subgraphs are not offered to OpenVINO"
    why = _dtype_reason(node, ctx)
    if why is None and op in DEVIATIONS and not (ctx.qdq and op in QDQ_ACCEPTED):
        why = DEVIATIONS[op](node, ctx)
    return why


def _dtype_reason(node: Any, ctx: Context) -> str | None:
    op = node.op_type
    index_in = INDEX_INPUTS.get(op, set())
    wide_ok = True  # every wide input is an index or a constant in int32 range
    for k, name in enumerate(node.inputs):
        if not name:
            continue
        t = ctx.type_of(name)
        const = ctx.constant(name)
        if t is None and const is None:
            return f"the type of input '{name}' is unknown"
        if t is not None and t.kind != "tensor":
            return f"input '{name}' is a {t.kind}, not a tensor"
        et = t.elem_type if t is not None else _elem_type(const)
        why = _elem_reason(op, et, f"input '{name}'")
        if why is not None:
            return why
        if et in WIDE and k not in index_in:
            if const is None:
                return (f"input '{name}' is runtime {_name(et)} data: OpenVINO's CPU plugin computes it in int32 "
                        "(values beyond ±2**31 would wrap)")
            if const.size and (const.min() < INT32_RANGE[0] or const.max() > INT32_RANGE[1]):
                return f"constant '{name}' holds {_name(et)} values beyond int32, which OpenVINO narrows to int32"
        elif et in WIDE and const is not None and const.size and (
                const.min() < INT32_RANGE[0] or const.max() > INT32_RANGE[1]):
            wide_ok = False
        if et == U32 and op not in MOVEMENT_OPS:
            return (f"input '{name}' is uint32: OpenVINO's CPU plugin computes it as int32, wrong for values "
                    ">= 2**31 outside pure data movement")
        if et in (I8, U8) and op in WRAPPING_OPS:
            return f"{_name(et)} {op} saturates in OpenVINO where ONNX wraps around"
    if not wide_ok:
        return "a wide-integer index holds values beyond int32, which OpenVINO narrows"
    index_out = INDEX_OUTPUTS.get(op, set())
    for k, name in enumerate(node.outputs):
        if not name:
            continue
        t = ctx.type_of(name)
        if t is None:
            return f"the type of output '{name}' is unknown"
        if t.kind != "tensor":
            return f"output '{name}' is a {t.kind}, not a tensor"
        why = _elem_reason(op, t.elem_type, f"output '{name}'")
        if why is not None:
            return why
        if t.elem_type in WIDE and k not in index_out and not _wide_inputs_are_constants(node, ctx):
            return (f"output '{name}' is {_name(t.elem_type)} computed from runtime values: OpenVINO's CPU plugin "
                    "computes it in int32")
        if t.elem_type == U32 and op not in MOVEMENT_OPS:
            return f"output '{name}' is uint32: OpenVINO's CPU plugin computes it as int32"
        if t.elem_type in (I8, U8) and op in WRAPPING_OPS:
            return f"{_name(t.elem_type)} {op} saturates in OpenVINO where ONNX wraps around"
    return None


def _wide_inputs_are_constants(node: Any, ctx: Context) -> bool:
    """A wide output is exact when it only moves constant wide values (checked in range above)."""
    if node.op_type in ("Constant", "ConstantOfShape"):
        value = constant_node_value(node) if node.op_type == "Constant" else node.attr("value")
        value = np.zeros(1, np.int64) if value is None else np.asarray(value)
        return value.dtype.kind not in "iu" or value.size == 0 or (
            int(value.min()) >= INT32_RANGE[0] and int(value.max()) <= INT32_RANGE[1])
    if node.op_type not in MOVEMENT_OPS:
        return False
    data = [n for k, n in enumerate(node.inputs) if n and k not in INDEX_INPUTS.get(node.op_type, set())]
    return bool(data) and all(ctx.constant(n) is not None for n in data if _is_wide(ctx, n))


def _is_wide(ctx: Context, name: str) -> bool:
    t = ctx.type_of(name)
    return t is not None and t.elem_type in WIDE


def _elem_reason(op: str, et: int, what: str) -> str | None:
    if et == F64:
        return f"{what} is double: OpenVINO's CPU plugin computes float64 in float32"
    if et in NATIVE or et in WIDE or et == U32:
        return None
    return f"{what} is {_name(et)}, an element type OpenVINO does not take here"


def _name(et: int) -> str:
    return onnx.helper.tensor_dtype_to_string(et).removeprefix("TensorProto.").lower() if et else "undefined"


def _elem_type(arr: np.ndarray) -> int:
    try:
        return onnx.helper.np_dtype_to_tensor_dtype(arr.dtype)
    except (KeyError, TypeError, ValueError):
        return 0


# ---------------------------------------------------------------------- known deviations
# Signatures that OpenVINO 2026.4 reads and compiles but computes differently from the ONNX spec,
# found with the conformance suite; each rule says how they differ.

def _attr_str(node: Any, name: str, default: str) -> str:
    v = node.attr(name, default)
    return v.decode() if isinstance(v, bytes) else str(v)


def _static_shape(ctx: Context, name: str) -> tuple[int, ...] | None:
    t = ctx.type_of(name) if name else None
    if t is None or t.shape is None or not all(isinstance(d, int) for d in t.shape):
        return None
    return tuple(t.shape)


def _rnn(node: Any, ctx: Context) -> str | None:
    if node.attr("layout", 0) == 1:
        return "batch-first layout (layout=1): OpenVINO returns Y_h/Y_c with the wrong shape"
    if node.op_type == "LSTM" and len(node.inputs) > 7 and node.inputs[7]:
        return "peephole weights (input P): OpenVINO's LSTM results differ from ONNX's"
    return None


def _maxpool(node: Any, ctx: Context) -> str | None:
    if not node.attr("ceil_mode", 0):
        return None
    shape = _static_shape(ctx, node.inputs[0])
    if shape is None:
        return "ceil_mode=1 with a dynamic input shape: OpenVINO keeps a last window that starts in the padding"
    kernel = list(node.attr("kernel_shape", []))
    n = len(kernel)
    strides = list(node.attr("strides", [1] * n))
    dilations = list(node.attr("dilations", [1] * n))
    pads = list(node.attr("pads", [0] * (2 * n)))
    if _attr_str(node, "auto_pad", "NOTSET") != "NOTSET":
        return None
    for i in range(n):
        size = shape[2 + i]
        span = (kernel[i] - 1) * dilations[i] + 1
        out = -(-(size + pads[i] + pads[i + n] - span) // strides[i]) + 1
        if (out - 1) * strides[i] >= size + pads[i]:
            return "ceil_mode=1 where the last window would start in the padding: OpenVINO keeps it, ONNX drops it"
    return None


def _resize(node: Any, ctx: Context) -> str | None:
    if node.attr("antialias", 0):
        return "antialias=1: OpenVINO's antialiasing filter differs from ONNX's"
    if _attr_str(node, "keep_aspect_ratio_policy", "stretch") != "stretch":
        return "keep_aspect_ratio_policy other than stretch: OpenVINO computes other output sizes"
    if node.attr("exclude_outside", 0):
        return "exclude_outside=1: OpenVINO's weights differ from ONNX's"
    mode = _attr_str(node, "mode", "nearest")
    if mode != "nearest" and _attr_str(node, "coordinate_transformation_mode", "half_pixel") == "align_corners":
        scales = ctx.constant(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else None
        if scales is None or scales.size == 0 or float(np.min(scales)) < 1:
            return f"{mode} align_corners downsampling: OpenVINO's sampling positions differ from ONNX's"
    return None


def _reduce(node: Any, ctx: Context) -> str | None:
    if node.op_type in ("ReduceMax", "ReduceMin"):
        t = ctx.type_of(node.inputs[0])
        if t is not None and t.elem_type in (F32, F16, BF16):
            # masked attention reduces rows of -inf: OpenVINO answers -3.4e38 and the NaN guard
            # built on "max == -inf" never fires
            return (f"{node.op_type} starts from the lowest finite float in OpenVINO: a row of -inf gives "
                    "-3.4e38, not -inf")
    shape = _static_shape(ctx, node.inputs[0])
    if shape is not None and 0 in shape:
        return "reducing an empty tensor: OpenVINO does not return the reduction's identity value"
    return None


def _tile(node: Any, ctx: Context) -> str | None:
    if ctx.constant(node.inputs[1]) is None:
        return "repeats computed at run time: OpenVINO's Tile returns wrong values"
    return None


def _roialign(node: Any, ctx: Context) -> str | None:
    if _attr_str(node, "mode", "avg") == "max":
        return "mode=max: OpenVINO takes the max over samples where ONNX takes it over bilinear weights"
    return None


def _attention(node: Any, ctx: Context) -> str | None:
    if node.attr("left_window_size", -1) >= 0 or node.attr("right_window_size", -1) >= 0:
        return "sliding-window attention (left/right_window_size): OpenVINO ignores the window"
    if node.attr("is_causal", 0) and len(node.inputs) > 4 and node.inputs[4]:
        return "is_causal with past_key: OpenVINO aligns the causal mask differently"
    return None


def _qlinearconv(node: Any, ctx: Context) -> str | None:
    # OpenVINO's frontend broadcasts a 1-D w_scale / w_zero_point along the weight's axis 1 (input
    # channels) instead of axis 0 (output channels): when the two counts are equal it compiles and
    # computes wrong values, otherwise it fails to compile. Only single-element ones are exact.
    for k, what in ((4, "w_scale"), (5, "w_zero_point")):
        name = node.inputs[k] if len(node.inputs) > k else ""
        if not name:
            continue
        const = ctx.constant(name)
        shape = tuple(const.shape) if const is not None else _static_shape(ctx, name)
        if shape is None:
            return f"{what} of unknown shape: OpenVINO applies a per-channel {what} to input channels"
        if int(np.prod(shape)) != 1:
            return (f"per-channel {what}: OpenVINO applies it along the weight's input channels, not its "
                    "output channels")
    return None


def _always(reason: str) -> Callable[[Any, Context], str]:
    return lambda node, ctx: reason


QDQ_ACCEPTED = {"QuantizeLinear"}
"""Deviations ``enable_qdq_optimizer=true`` accepts: with QuantizeLinear claimed, a QDQ model reaches OpenVINO
whole and runs in int8; a value within rounding distance of .5 may land one quantization step away."""

DEVIATIONS: dict[str, Callable[[Any, Context], str | None]] = {
    "RNN": _rnn, "GRU": _rnn, "LSTM": _rnn,
    "MaxPool": _maxpool,
    "Resize": _resize,
    "Tile": _tile,
    "RoiAlign": _roialign,
    "Attention": _attention,
    "QLinearConv": _qlinearconv,
    "NonMaxSuppression": _always("OpenVINO suppresses boxes whose IoU equals iou_threshold; ONNX keeps them"),
    "DFT": _always("OpenVINO's DFT differs from ONNX's in output layout (onesided/inverse) and precision"),
    "DynamicQuantizeLinear": _always("OpenVINO rounds the zero point and values differently (off by one)"),
    "QuantizeLinear": _always("OpenVINO multiplies by the scale's reciprocal: values near .5 round the other way"),
    **{op: _reduce for op in ("ReduceMax", "ReduceMin", "ReduceSum", "ReduceMean", "ReduceProd", "ReduceL1",
                              "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare")},
}


# ------------------------------------------------------------------------------------ probes

SMALL_CONSTANT = 64
"""Integer and bool constants up to this many elements (shapes, axes, pads, indices) and float
constants up to SMALL_FLOAT_CONSTANT elements (scales, clip bounds) are baked into a probe, and
its key, with their values: they change what OpenVINO can convert. Other constants (weights,
biases) are probed as inputs of the same element type and static shape."""
SMALL_FLOAT_CONSTANT = 8


def _baked(const: np.ndarray | None) -> bool:
    if const is None:
        return False
    limit = SMALL_FLOAT_CONSTANT if const.dtype.kind in "fc" else SMALL_CONSTANT
    return const.size <= limit


def probe_tag() -> str:
    """What the probe verdicts depend on: the OpenVINO build and this plugin's version (the probes'
    construction), so verdicts never outlive the OpenVINO that produced them."""
    return f"{rt.runtime().build} {__version__}"


class Prober:
    """A provider instance's probes: the OpenVINO core they compile on, the device, and the verdicts already
    known (this session's, and those its cache folder holds from earlier sessions and processes)."""

    def __init__(self, core: rt.Core, device: str, folder: str) -> None:
        self.core, self.device = core, device
        self.verdicts = VerdictCache("ort-ep-openvino", folder, probe_tag())

    def reason(self, node: Any, ctx: Context) -> str | None:
        """None when a one-node model of ``node`` reads and compiles on the device, else why not.

        First tried with every input dimension dynamic (one probe serves every shape of that rank);
        when that fails, with the node's static shapes.
        """
        why = self._probe(node, ctx, dynamic=True)
        if why is None:
            return None
        if _has_static_shapes(node, ctx):
            static_why = self._probe(node, ctx, dynamic=False)
            if static_why is None:
                return None
            why = static_why
        return f"OpenVINO cannot convert or compile it: {why}"

    def _probe(self, node: Any, ctx: Context, dynamic: bool) -> str | None:
        key = signature(node, ctx, self.device, dynamic)
        cached = self.verdicts.get(key)
        if cached is None:
            try:
                model = probe_model(node, ctx, dynamic)
                rt.compile_bytes(self.core, model.SerializeToString(), self.device,
                                 {"INFERENCE_PRECISION_HINT": "f32"} if self.device == "CPU" else {})
                cached = ""
            except rt.OpenVINOError as e:
                cached = str(e)
            except Exception as e:  # noqa: BLE001 - a probe that cannot even be built declines the node
                cached = f"{type(e).__name__}: {e}"
            self.verdicts.put(key, cached)
        return cached or None


def _has_static_shapes(node: Any, ctx: Context) -> bool:
    for name in node.inputs:
        t = ctx.type_of(name) if name else None
        if t is not None and t.shape is not None and any(isinstance(d, int) for d in t.shape):
            return True
    return False


def signature(node: Any, ctx: Context, device: str, dynamic: bool) -> str:
    """The probe's cache key: op, opset, attributes, and per input its element type, rank (or
    static shape) and, for small constants, a digest of the values."""
    inputs = []
    for name in node.inputs:
        if not name:
            inputs.append(None)
            continue
        t = ctx.type_of(name)
        const = ctx.constant(name)
        et = t.elem_type if t is not None else _elem_type(const)
        if const is not None:  # a constant's shape never changes: always static
            shape = tuple(const.shape)
        else:
            shape = t.shape if t is not None else None
            if shape is not None:
                shape = len(shape) if dynamic else tuple(d if isinstance(d, int) else None for d in shape)
        digest = None
        if _baked(const):
            digest = hashlib.sha1(np.ascontiguousarray(const).tobytes()).hexdigest()[:16]
        inputs.append((et, shape, digest))
    outputs = tuple(bool(o) for o in node.outputs)
    attrs = tuple(sorted((k, canonical(v)) for k, v in node.attrs.items()))
    return repr((device, node.domain, node.op_type, ctx.opsets.get(onnx_domain(node.domain), 0), attrs, tuple(inputs),
                 outputs, dynamic))


def probe_model(node: Any, ctx: Context, dynamic: bool) -> onnx.ModelProto:
    """A one-node ONNX model of ``node``: small constants baked in, everything else an input."""
    ins = [n for n in dict.fromkeys(node.inputs) if n]
    consts = {n: ctx.constant(n) for n in ins if _baked(ctx.constant(n))}
    sub = FusedSubgraph("probe", [node], ins, [o for o in node.outputs if o], consts,
                        dict(ctx.opsets), ctx.graph)
    model = onnx.ModelProto()
    model.CopyFrom(sub.to_model_proto())
    for k, vi in enumerate(model.graph.input):
        tt = vi.type.tensor_type
        if dynamic and tt.HasField("shape") and ctx.constant(vi.name) is None:
            for j, d in enumerate(tt.shape.dim):
                d.Clear()
                d.dim_param = f"d{k}_{j}"
    for vi in model.graph.output:
        vi.type.tensor_type.ClearField("shape")
    return model


def unsupported_reason(node: Any, ctx: Context, prober: Prober) -> str | None:
    """The single rule shared by capability and compile: None when OpenVINO takes ``node``."""
    why = static_reason(node, ctx)
    if why is not None:
        return why
    return prober.reason(node, ctx)
