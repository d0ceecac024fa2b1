"""One QNN graph: tensors (client buffers), nodes with their parameters, finalize, execute.

``GraphBuilder`` keeps every cffi object a QNN struct points at alive for the graph's life; ``QnnGraph`` is
the finalized graph, executed with host buffers (the HTP simulator on x86 reads and writes host memory).
Which QNN ops stand for which ONNX nodes is ``lowering``'s business.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import qnn_api as q
from .runtime import LOG, Context, GraphInfo, QnnError, TensorInfo, ffi

_DTYPES = {np.dtype(np.float32): q.FLOAT_32, np.dtype(np.float16): q.FLOAT_16, np.dtype(np.uint32): q.UINT_32,
           np.dtype(np.int32): q.INT_32, np.dtype(np.bool_): q.BOOL_8}
NUMPY_OF = {q.FLOAT_32: np.dtype(np.float32), q.FLOAT_16: np.dtype(np.float16), q.UINT_32: np.dtype(np.uint32),
            q.INT_32: np.dtype(np.int32), q.BOOL_8: np.dtype(np.bool_), q.UFIXED_POINT_8: np.dtype(np.uint8),
            q.UFIXED_POINT_16: np.dtype(np.uint16), q.SFIXED_POINT_8: np.dtype(np.int8),
            q.SFIXED_POINT_16: np.dtype(np.int16), q.SFIXED_POINT_32: np.dtype(np.int32),
            q.UINT_8: np.dtype(np.uint8), q.INT_8: np.dtype(np.int8)}
"""numpy's type for a QNN data type (a fixed-point tensor's buffer holds its integers)."""


@dataclass
class Tensor:
    """A tensor registered in a graph: its QNN struct (``cdata``, the id filled in by QNN), shape, dtype."""

    name: str
    cdata: Any  # Qnn_Tensor_t*
    shape: tuple[int, ...]
    dtype: np.dtype
    kind: int
    quant: Any = None  # a qdq.Quant for a fixed-point tensor

    @property
    def id(self) -> int:
        return int(self.cdata.v1.id)


@dataclass(frozen=True)
class Scalar:
    """A scalar node parameter."""

    name: str
    value: float | int | bool
    dtype: str = "uint32"  # 'uint32', 'int32', 'float32' or 'bool'


@dataclass(frozen=True)
class TensorParam:
    """A tensor node parameter (stride, pads, perm...): a static tensor made for the node."""

    name: str
    value: np.ndarray


class GraphBuilder:
    """Builds one graph in ``context``; ``precision`` (q.PRECISION_*) or None leaves the backend's default."""

    def __init__(self, context: Context, name: str, precision: int | None = None) -> None:
        self.context, self.backend = context, context.backend
        self.name = f"{_safe(name)}_g{context.graphs}"  # unique in its context, whatever the caller's names
        self._keep: list[Any] = []
        self._count = 0
        self._names: set[str] = set()
        handle = ffi.new("Qnn_GraphHandle_t*")
        configs = ffi.NULL
        if precision is not None:
            custom = ffi.new("QnnHtpGraph_CustomConfig_t*")
            custom.option, custom.precision = q.HTP_GRAPH_CONFIG_PRECISION, precision
            config = ffi.new("QnnGraph_Config_t*")
            config.option, config.customConfig = q.GRAPH_CONFIG_CUSTOM, custom
            configs = ffi.new("const QnnGraph_Config_t*[2]", [config, ffi.NULL])
            self._keep += [custom, config, configs]
        b = self.backend
        with b.lock:
            mark = LOG.mark()
            b.check(b.api.graphCreate(context.handle, self.name.encode(), configs, handle),
                    f"QnnGraph_create({self.name})", mark)
        context.graphs += 1
        self.handle = handle[0]
        self.inputs: list[Tensor] = []
        self.outputs: list[Tensor] = []

    def _unique(self, hint: str) -> str:
        while True:
            self._count += 1
            name = f"{_safe(hint)[:48]}_{self._count}"
            if name not in self._names:
                self._names.add(name)
                return name

    def _exact(self, name: str) -> str:
        """``name`` itself when no tensor of the graph has it yet (graph inputs and outputs keep their ONNX
        names, so that a serialized context maps them back by name, as onnxruntime does), else a unique one."""
        if name and name not in self._names:
            self._names.add(name)
            return name
        return self._unique(name)

    def _fill(self, t: Any, name: bytes, kind: int, shape: Sequence[int], dtype: np.dtype,
              data: np.ndarray | None, quant: Any = None) -> None:
        t.version = q.TENSOR_VERSION_1
        v1 = t.v1
        cname = ffi.new("char[]", name)
        dims = ffi.new("uint32_t[]", [int(d) for d in shape] or [1])
        self._keep += [cname, dims]
        data_type = _DTYPES[dtype] if quant is None else quant.qnn_type
        v1.name, v1.type, v1.dataFormat, v1.dataType = cname, kind, q.DATA_FORMAT_DENSE, data_type
        qp = v1.quantizeParams
        if quant is None:
            qp.encodingDefinition, qp.quantizationEncoding = q.UNDEFINED, q.UNDEFINED
        elif quant.axis is None:
            qp.encodingDefinition, qp.quantizationEncoding = q.DEFINITION_DEFINED, q.ENCODING_SCALE_OFFSET
            qp.scaleOffsetEncoding.scale, qp.scaleOffsetEncoding.offset = quant.scale[0], -quant.zero_point[0]
        else:
            pairs = ffi.new("Qnn_ScaleOffset_t[]", [(s, -z) for s, z in zip(quant.scale, quant.zero_point)])
            self._keep.append(pairs)
            qp.encodingDefinition, qp.quantizationEncoding = q.DEFINITION_DEFINED, q.ENCODING_AXIS_SCALE_OFFSET
            enc = qp.axisScaleOffsetEncoding
            enc.axis, enc.numScaleOffsets, enc.scaleOffset = quant.axis, len(quant.scale), pairs
        v1.rank, v1.dimensions = len(shape), dims if len(shape) else ffi.NULL
        v1.memType = q.MEMTYPE_RAW
        if data is not None:
            data = np.ascontiguousarray(data, dtype=dtype)
            self._keep.append(data)
            v1.clientBuf.data, v1.clientBuf.dataSize = ffi.from_buffer(data), data.nbytes

    def tensor(self, hint: str, kind: int, shape: Sequence[int], dtype: Any = np.float32,
               data: np.ndarray | None = None, quant: Any = None) -> Tensor:
        """Register a tensor: kind q.TENSOR_APP_WRITE (graph input), APP_READ (output), NATIVE (intermediate)
        or STATIC (``data`` baked into the graph). Inputs and outputs are named ``hint`` exactly. ``quant`` (a
        qdq.Quant) makes it a fixed-point tensor (``dtype`` is then its buffer's integer type)."""
        dtype = np.dtype(dtype) if quant is None else quant.dtype
        name = self._exact(hint) if kind in (q.TENSOR_APP_WRITE, q.TENSOR_APP_READ) else self._unique(hint)
        t = ffi.new("Qnn_Tensor_t*")
        self._fill(t, name.encode(), kind, shape, dtype, data, quant)
        b = self.backend
        with b.lock:
            mark = LOG.mark()
            b.check(b.api.tensorCreateGraphTensor(self.handle, t), f"QnnTensor_createGraphTensor({name})", mark)
        tensor = Tensor(name, t, tuple(int(d) for d in shape), dtype, kind, quant)
        if kind == q.TENSOR_APP_WRITE:
            self.inputs.append(tensor)
        elif kind == q.TENSOR_APP_READ:
            self.outputs.append(tensor)
        return tensor

    def node(self, op_type: str, inputs: Sequence[Tensor], outputs: Sequence[Tensor],
             params: Sequence[Scalar | TensorParam] = (), hint: str = "") -> None:
        """Add one QNN operation of the built-in package."""
        b = self.backend
        cparams = ffi.new("Qnn_Param_t[]", max(len(params), 1))
        self._keep.append(cparams)
        for k, p in enumerate(params):
            cp = cparams[k]
            pname = ffi.new("char[]", p.name.encode())
            self._keep.append(pname)
            cp.name = pname
            if isinstance(p, Scalar):
                cp.paramType = q.PARAM_SCALAR
                _set_scalar(cp.scalarParam, p)
            else:
                cp.paramType = q.PARAM_TENSOR
                value = np.asarray(p.value)
                self._fill(ffi.addressof(cp, "tensorParam"), self._unique(f"{hint}_{p.name}").encode(),
                           q.TENSOR_STATIC, value.shape, value.dtype, value)
                with b.lock:
                    mark = LOG.mark()
                    b.check(b.api.tensorCreateGraphTensor(self.handle, ffi.addressof(cp, "tensorParam")),
                            f"QnnTensor_createGraphTensor({p.name} of {op_type})", mark)
        cin = ffi.new("Qnn_Tensor_t[]", [t.cdata[0] for t in inputs] or 1)
        cout = ffi.new("Qnn_Tensor_t[]", [t.cdata[0] for t in outputs] or 1)
        name = ffi.new("char[]", self._unique(hint or op_type).encode())
        package, type_name = ffi.new("char[]", q.OP_PACKAGE.encode()), ffi.new("char[]", op_type.encode())
        self._keep += [cin, cout, name, package, type_name]
        op = ffi.new("Qnn_OpConfig_t*")
        op.version = q.OPCONFIG_VERSION_1
        op.v1.name, op.v1.packageName, op.v1.typeName = name, package, type_name
        op.v1.numOfParams, op.v1.params = len(params), cparams
        op.v1.numOfInputs, op.v1.inputTensors = len(inputs), cin
        op.v1.numOfOutputs, op.v1.outputTensors = len(outputs), cout
        with b.lock:
            mark = LOG.mark()
            b.check(b.api.graphAddNode(self.handle, op[0]), f"QnnGraph_addNode({op_type})", mark)

    def finalize(self, profile_level: int = 0) -> QnnGraph:
        b = self.backend
        with b.lock:
            mark = LOG.mark()
            b.check(b.api.graphFinalize(self.handle, ffi.NULL, ffi.NULL), f"QnnGraph_finalize({self.name})", mark)
        return QnnGraph(self.backend, self.handle, self.name, self.inputs, self.outputs, profile_level, keep=self)


def _set_scalar(s: Any, p: Scalar) -> None:
    if p.dtype == "float32":
        s.dataType, s.floatValue = q.FLOAT_32, float(p.value)
    elif p.dtype == "int32":
        s.dataType, s.int32Value = q.INT_32, int(p.value)
    elif p.dtype == "bool":
        s.dataType, s.bool8Value = q.BOOL_8, 1 if p.value else 0
    else:
        s.dataType, s.uint32Value = q.UINT_32, int(p.value)


def _described(info: TensorInfo, keep: list[Any]) -> Tensor:
    """A graph input or output as a deserialized context describes it, for binding buffers to."""
    dtype = NUMPY_OF.get(info.data_type)
    if dtype is None:
        raise QnnError(f"tensor '{info.name}' of a context binary has QNN data type {info.data_type:#06x}, which "
                       "this provider does not bind")
    t = ffi.new("Qnn_Tensor_t*")
    cname = ffi.new("char[]", info.name.encode())
    dims = ffi.new("uint32_t[]", list(info.shape) or [1])
    keep += [t, cname, dims]
    t.version = q.TENSOR_VERSION_1
    v1 = t.v1
    v1.id, v1.name, v1.type, v1.dataFormat, v1.dataType = info.id, cname, info.kind, q.DATA_FORMAT_DENSE, info.data_type
    definition, encoding, scale, offset = info.encoding
    if encoding not in (q.ENCODING_SCALE_OFFSET, q.UNDEFINED):
        raise QnnError(f"tensor '{info.name}' of a context binary has quantization encoding {encoding}; only "
                       "per-tensor scale/offset is bound for a graph's inputs and outputs")
    v1.quantizeParams.encodingDefinition, v1.quantizeParams.quantizationEncoding = definition, encoding
    if encoding == q.ENCODING_SCALE_OFFSET:
        v1.quantizeParams.scaleOffsetEncoding.scale = scale
        v1.quantizeParams.scaleOffsetEncoding.offset = offset
    v1.rank, v1.dimensions = len(info.shape), dims if info.shape else ffi.NULL
    v1.memType = q.MEMTYPE_RAW
    return Tensor(info.name, t, info.shape, dtype, info.kind)


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", name) or "t"


class QnnGraph:
    """A finalized graph: ``execute(inputs, outputs)`` with numpy arrays in the order of its APP_WRITE and
    APP_READ tensors. One execution at a time per graph (a lock), so a kernel may be called from several
    threads. Built by ``GraphBuilder.finalize`` or retrieved from a deserialized context (``retrieved``)."""

    def __init__(self, backend: Any, handle: Any, name: str, inputs: Sequence[Tensor], outputs: Sequence[Tensor],
                 profile_level: int = 0, keep: Any = None) -> None:
        self.keep = keep  # keeps every struct the graph's tensors point at alive
        self.backend, self.handle, self.name = backend, handle, name
        self.input_names = [t.name for t in inputs]
        self.output_names = [t.name for t in outputs]
        self.input_shapes = [t.shape for t in inputs]
        self.output_shapes = [t.shape for t in outputs]
        self.input_dtypes = [t.dtype for t in inputs]
        self.output_dtypes = [t.dtype for t in outputs]
        n_in, n_out = len(inputs), len(outputs)
        self._in = ffi.new("Qnn_Tensor_t[]", [t.cdata[0] for t in inputs] or 1)
        self._out = ffi.new("Qnn_Tensor_t[]", [t.cdata[0] for t in outputs] or 1)
        self._n_in, self._n_out = n_in, n_out
        self._lock = threading.Lock()
        self.profile = None
        self.last_profile: list[tuple[str, int, str]] = []
        if profile_level:
            handle = ffi.new("Qnn_ProfileHandle_t*")
            b = self.backend
            with b.lock:
                mark = LOG.mark()
                b.check(b.api.profileCreate(b.handle, profile_level, handle), "QnnProfile_create", mark)
            self.profile = handle[0]

    @classmethod
    def retrieved(cls, context: Context, info: GraphInfo, profile_level: int = 0) -> QnnGraph:
        """The finalized graph ``info.name`` of a deserialized context, its tensors as the context describes
        them."""
        keep: list[Any] = []
        tensors = ([_described(t, keep) for t in info.inputs], [_described(t, keep) for t in info.outputs])
        handle = context.retrieve(info.name)
        return cls(context.backend, handle, info.name, tensors[0], tensors[1], profile_level, keep=keep)

    def execute(self, inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray]) -> None:
        """Run once: ``inputs``/``outputs`` C-contiguous arrays of the declared shapes and dtypes (outputs are
        written in place)."""
        b = self.backend
        with self._lock:
            for k, x in enumerate(inputs):
                buf = self._in[k].v1.clientBuf
                buf.data, buf.dataSize = ffi.from_buffer(x), x.nbytes
            for k, y in enumerate(outputs):
                buf = self._out[k].v1.clientBuf
                buf.data, buf.dataSize = ffi.from_buffer(y, require_writable=True), y.nbytes
            mark = LOG.mark()
            status = b.api.graphExecute(self.handle, self._in, self._n_in, self._out, self._n_out,
                                        self.profile or ffi.NULL, ffi.NULL)
            if status != q.SUCCESS:
                b.check(status, f"QnnGraph_execute({self.name})", mark)
            if self.profile is not None:
                self.last_profile = self._events()

    def _events(self) -> list[tuple[str, int, str]]:
        """(identifier, value, unit) of the profile's events (and sub-events) since the last read."""
        api, out = self.backend.api, []
        ids, count = ffi.new("const uint64_t**"), ffi.new("uint32_t*")
        if api.profileGetEvents(self.profile, ids, count) != q.SUCCESS:
            return out
        data = ffi.new("QnnProfile_EventData_t*")
        pending = [ids[0][k] for k in range(count[0])]
        while pending:
            event = pending.pop(0)
            if api.profileGetEventData(event, data) == q.SUCCESS:
                ident = ffi.string(data.identifier).decode("utf-8", "replace") if data.identifier else ""
                out.append((ident, int(data.value), q.EVENT_UNITS.get(int(data.unit), str(data.unit))))
            sub, n = ffi.new("const uint64_t**"), ffi.new("uint32_t*")
            if api.profileGetSubEvents(event, sub, n) == q.SUCCESS:
                pending.extend(sub[0][k] for k in range(n[0]))
        return out


__all__ = ["GraphBuilder", "QnnError", "QnnGraph", "Scalar", "Tensor", "TensorParam"]
