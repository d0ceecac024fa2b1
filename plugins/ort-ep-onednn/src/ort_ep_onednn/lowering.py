"""Lowering of a fused subgraph, for one signature of input shapes, to a program of oneDNN primitives.

Activations stay in the layouts the primitives choose (blocked, e.g. nChw16c) and are reordered only
where an op needs another one; BatchNormalization folds into the preceding convolution, activations
and residual Adds become its post-ops. Which nodes may be lowered is decided in ``capability``;
running a program (buffers, memory objects per concurrent call) is ``kernel``'s job.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from . import enums as E
from . import primitives as P
from . import views as V
from .library import DnnlError, Library
from .lowering_conv import ConvOps
from .lowering_matmul import MatmulOps
from .lowering_quant import QuantOps
from .program import DT_OF, NP_OF, Buf, Mem, Program, Spec, Step, Unsupported, Val, dims_of

ELTWISE_OPS = ("Relu", "LeakyRelu", "Elu", "Sigmoid", "Tanh", "HardSigmoid", "Gelu", "Abs", "Sqrt", "Exp", "Clip",
               "Neg", "HardSwish", "Pow")
# activations oneDNN has but computes less accurately than the conformance tolerances (rtol 1e-3,
# atol 1e-7) allow, measured over [-20, 20] against float64
INACCURATE = {
    "Softplus": "oneDNN's soft_relu is off by ~2e-6 absolute where the result is ~1e-9 (x < -15)",
    "Mish": "oneDNN's mish is off by up to 100% relative for x < -15",
    "Log": "oneDNN's log loses relative accuracy near 1 (abs error ~1.4e-6 at x = 1.0006)",
    "ReduceMax": "oneDNN's max reduction drops NaNs, which ONNX propagates",
    "ReduceMin": "oneDNN's min reduction drops NaNs, which ONNX propagates",
}
REDUCE_OPS = {"ReduceMean": E.REDUCTION_MEAN, "ReduceSum": E.REDUCTION_SUM}
BINARY_OPS = {"Add": E.BINARY_ADD, "Sub": E.BINARY_SUB, "Mul": E.BINARY_MUL, "Div": E.BINARY_DIV,
              "Max": E.BINARY_MAX, "Min": E.BINARY_MIN, "Sum": E.BINARY_ADD}
COMMUTATIVE = {E.BINARY_ADD, E.BINARY_MUL, E.BINARY_MAX, E.BINARY_MIN}


def eltwise_of(node: Any, constant) -> tuple[int, float, float]:
    """(alg, alpha, beta) of oneDNN's eltwise for an activation node; Unsupported when it has none."""
    op, a = node.op_type, node.attr
    if op == "Relu":
        return E.ELTWISE_RELU, 0.0, 0.0
    if op == "LeakyRelu":
        return E.ELTWISE_RELU, a("alpha", 0.01), 0.0
    if op == "Elu":
        return E.ELTWISE_ELU, a("alpha", 1.0), 0.0
    if op == "Sigmoid":
        return E.ELTWISE_LOGISTIC, 0.0, 0.0
    if op == "Tanh":
        return E.ELTWISE_TANH, 0.0, 0.0
    if op == "HardSigmoid":
        return E.ELTWISE_HARDSIGMOID, a("alpha", 0.2), a("beta", 0.5)
    if op == "Gelu":
        approx = a("approximate", "none")
        if isinstance(approx, bytes):
            approx = approx.decode()
        if approx not in ("none", "tanh"):
            raise Unsupported(f"Gelu approximate={approx!r}")
        return (E.ELTWISE_GELU_TANH if approx == "tanh" else E.ELTWISE_GELU_ERF), 0.0, 0.0
    if op == "Abs":
        return E.ELTWISE_ABS, 0.0, 0.0
    if op == "Sqrt":
        return E.ELTWISE_SQRT, 0.0, 0.0
    if op == "Exp":
        return E.ELTWISE_EXP, 0.0, 0.0
    if op == "Neg":
        return E.ELTWISE_LINEAR, -1.0, 0.0
    if op == "HardSwish":
        return E.ELTWISE_HARDSWISH, 1.0 / 6.0, 0.5
    if op == "Clip":
        lo, hi = clip_bounds(node, constant)
        return E.ELTWISE_CLIP, lo, hi
    if op == "Pow":
        e = constant(node.inputs[1]) if len(node.inputs) > 1 else None
        if e is None or e.size != 1 or e.dtype != np.float32:
            raise Unsupported("Pow exponent is not a float32 constant scalar")
        beta = float(e.reshape(()))
        return (E.ELTWISE_SQUARE, 0.0, 0.0) if beta == 2.0 else (E.ELTWISE_POW, 1.0, beta)
    raise Unsupported(f"{op} is not an activation oneDNN's eltwise computes")


def clip_bounds(node: Any, constant) -> tuple[float, float]:
    if len(node.inputs) == 1 and ("min" in node.attrs or "max" in node.attrs or node.op_type == "Clip"):
        lo, hi = node.attr("min", -math.inf), node.attr("max", math.inf)
    else:
        lo, hi = -math.inf, math.inf
    for k, name in enumerate(node.inputs[1:3], start=1):
        if not name:
            continue
        v = constant(name)
        if v is None:
            raise Unsupported(f"Clip {'min' if k == 1 else 'max'} is not a constant")
        if v.size != 1 or v.dtype != np.float32:
            raise Unsupported("Clip bounds must be float32 scalars")
        if k == 1:
            lo = float(v.reshape(()))
        else:
            hi = float(v.reshape(()))
    return float(lo), float(hi)



class Builder(QuantOps, ConvOps, MatmulOps):
    """Lowers a Spec for given input shapes. ``probe``: create primitive descriptors only (no
    primitives, no build-time reorders), to learn whether oneDNN implements the nodes."""

    def __init__(self, lib: Library, spec: Spec, shapes: dict[str, tuple[int, ...]], *, bf16: bool = False,
                 probe: bool = False) -> None:
        self.lib, self.spec, self.bf16, self.probe = lib, spec, bf16, probe
        self.vals: dict[str, Val] = {}
        self.steps: list[Step] = []
        self.bufs: list[Buf] = []
        self.mems: list[Mem] = []
        self.fused: dict[str, int] = {}
        self.bf16_copies: list[tuple[Mem, Mem]] = []  # float32 view -> its bf16 copy (matmul operands)
        self.producer = {o: n for n in spec.nodes for o in n.outputs if o}
        self.done: set[int] = set()
        self.pending: dict[str, int] = {}
        self.consumers: dict[str, list[Any]] = {}
        for n in spec.nodes:
            for name in n.inputs:
                if name:
                    self.pending[name] = self.pending.get(name, 0) + 1
                    self.consumers.setdefault(name, []).append(n)
        self.outputs = set(spec.outputs)
        self._stream = None
        feeds = [n for n in spec.inputs if n not in spec.constants]
        for k, name in enumerate(feeds):  # Buf index: position among the non-constant inputs
            shape = tuple(int(d) for d in shapes[name])
            dtype = np.dtype(spec.dtypes.get(name, np.float32))
            buf = self._buf("input", dtype.itemsize * max(math.prod(shape), 1), index=k)
            self._set(name, Val(shape, self._mem(P.plain_md(lib, dims_of(shape), DT_OF[dtype]), buf)))

    # ------------------------------------------------------------------ the walk

    def build(self) -> Program:
        for node in self.spec.nodes:
            # a DequantizeLinear is lowered when a reader needs its float result: a quantized Conv/MatMul
            # reads its integer input directly, and then nothing dequantizes
            if node.id not in self.done and not self._deferred(node):
                self._lower(node)
        shapes, dtypes = [], []
        claimed: set[int] = set()
        for k, name in enumerate(self.spec.outputs):
            val = self.get(name)
            shapes.append(val.shape)
            dt = val.mem.md.data_type()
            if dt not in NP_OF:  # bf16 inside (precision=bf16): results are float32
                dt = E.DT_F32
            dtypes.append(NP_OF[dt])
            if 0 in val.shape:  # nothing to compute: the kernel returns an empty array
                continue
            dims = dims_of(val.shape)
            plain = P.plain_md(self.lib, dims, dt)
            nbytes = NP_OF[dt].itemsize * math.prod(dims)
            buf = val.mem.buf
            if (buf.kind == "internal" and id(buf) not in claimed and val.mem.md == plain
                    and buf.nbytes == nbytes):
                buf.kind, buf.index = "output", k
                claimed.add(id(buf))
                continue
            out = self._mem(plain, self._buf("output", nbytes, index=k))
            self._reorder_into(val.mem, out, f"output {name}")
        steps, bufs, mems = live(self.steps)
        return Program(steps, bufs, mems, shapes, self.fused, dtypes)

    def _deferred(self, node: Any) -> bool:
        return node.op_type == "DequantizeLinear" and not any(o in self.outputs for o in node.outputs)

    def _lower(self, node: Any) -> None:
        self.done.add(node.id)
        handler = getattr(self, "_op_" + node.op_type, None)
        if handler is None:
            if node.op_type in ELTWISE_OPS:
                handler = self._op_eltwise
            else:
                raise Unsupported(f"{node.op_type} is not lowered to oneDNN")
        handler(node)
        for name in node.inputs:
            if name:
                self.pending[name] -= 1

    def get(self, name: str) -> Val:
        """The value ``name``: lowered already, a constant, or produced by a node lowered now."""
        val = self.vals.get(name)
        if val is not None:
            return val
        if name in self.spec.constants:
            arr = np.asarray(self.spec.constants[name])
            if arr.dtype not in DT_OF:
                raise Unsupported(f"constant '{name}' is {arr.dtype}, not float32 or a quantized type")
            val = self._const_val(arr)
            self._set(name, val)
            return val
        node = self.producer.get(name)
        if node is None or node.id in self.done:
            raise Unsupported(f"value '{name}' is not available")
        self._lower(node)
        return self.vals[name]

    def constant(self, name: str) -> np.ndarray | None:
        if not name:
            return None
        v = self.spec.constants.get(name)
        return None if v is None else np.asarray(v)

    # ------------------------------------------------------------------ storage helpers

    def _buf(self, kind: str, nbytes: int, index: int = -1, array: np.ndarray | None = None) -> Buf:
        buf = Buf(kind, int(nbytes), index, array)
        self.bufs.append(buf)
        return buf

    def _mem(self, md: P.Md, buf: Buf) -> Mem:
        mem = Mem(md, buf)
        self.mems.append(mem)
        return mem

    def _set(self, name: str, val: Val) -> None:
        self.vals[name] = val
        val.mem.buf.values.append(name)

    def _new(self, md: P.Md) -> Mem:
        return self._mem(md, self._buf("internal", max(md.size, 4)))

    def _const_val(self, arr: np.ndarray) -> Val:
        shape = tuple(arr.shape)
        dtype = arr.dtype if arr.dtype in DT_OF else np.dtype(np.float32)
        nbytes = max(dtype.itemsize * arr.size, 4)
        data = None
        if not self.probe:  # a probe only asks oneDNN for descriptors: no weight is copied
            data = P.aligned_bytes(nbytes)
            data[:dtype.itemsize * arr.size] = np.ascontiguousarray(arr, dtype).reshape(-1).view(np.uint8)
        buf = self._buf("const", nbytes, array=data)
        return Val(shape, self._mem(P.plain_md(self.lib, dims_of(shape), DT_OF[dtype]), buf))

    def _attr(self, post_ops: P.PostOps | None = None, zero_points=()) -> P.Attr:
        return P.Attr(self.lib, post_ops, zero_points)

    def _step(self, pd: P.Pd, args: list[tuple[int, Mem]], label: str) -> None:
        prim = None if self.probe else pd.primitive()
        self.steps.append(Step(prim, args, pd.scratchpad_md(), label, pd.impl))

    def _reorder_into(self, src: Mem, dst: Mem, label: str) -> None:
        pd = P.reorder(self.lib, src.md, dst.md, self._attr())
        if src.buf.kind == "const" and dst.buf.kind == "const":
            if not self.probe:
                self._run_now(pd, [(E.ARG_FROM, src), (E.ARG_TO, dst)])
            return
        self._step(pd, [(E.ARG_FROM, src), (E.ARG_TO, dst)], f"reorder ({label})")

    def as_md(self, val: Val, md: P.Md, label: str = "") -> Mem:
        """``val`` in layout ``md``: its own memory when the layouts agree, else a reorder (done now,
        once, for constants)."""
        if val.mem.md == md:
            return val.mem
        for view in val.views:
            if view.md == md:
                return view
        dst = self._new_like(val.mem.buf, md)
        self._reorder_into(val.mem, dst, label)
        val.views.append(dst)
        return dst

    def _new_like(self, src: Buf, md: P.Md) -> Mem:
        """Storage in layout ``md`` for a copy of ``src``: constant (filled once, at build time) when
        ``src`` is, else per call."""
        if src.kind != "const":
            return self._new(md)
        return self._mem(md, self._buf("const", max(md.size, 4),
                                       array=None if self.probe else P.aligned_bytes(max(md.size, 4))))

    def _native(self, x: Val, make, label: str) -> tuple[P.Pd, Mem]:
        """``make(src, dt)``'s primitive descriptor for ``x`` as it is stored (destination of the same data
        type), and the source it reads. A bf16 value (precision=bf16) that oneDNN would handle only with
        its reference kernel is read as plain float32 instead."""
        dt = x.mem.md.data_type()
        if dt != E.DT_F32:
            try:
                pd = make(x.mem, dt)
                if not pd.is_ref:
                    return pd, x.mem
            except DnnlError:
                pass
            src = self.plain(x, label)
            return make(src, E.DT_F32), src
        pd = make(x.mem, dt)
        if pd.is_ref and not self._is_plain(x):
            src = self.plain(x, label)  # a view in an unusual dimension order: a plain copy gets a jit kernel
            return make(src, dt), src
        return pd, x.mem

    def _is_plain(self, val: Val) -> bool:
        return val.mem.md == P.plain_md(self.lib, dims_of(val.shape), val.mem.md.data_type())

    def _f32(self, val: Val, label: str) -> Val:
        """``val`` itself when it is float32, else its plain float32 copy (made once)."""
        if val.mem.md.data_type() == E.DT_F32:
            return val
        return Val(val.shape, self.plain(val, label))

    def plain(self, val: Val, label: str = "") -> Mem:
        """``val`` in the dense row-major layout: float32 (a bf16 value is converted), or its own integer type."""
        dt = val.mem.md.data_type()
        dt = dt if dt in (E.DT_U8, E.DT_S8, E.DT_S32) else E.DT_F32
        return self.as_md(val, P.plain_md(self.lib, dims_of(val.shape), dt), label)

    def alias(self, mem: Mem, shape: tuple[int, ...]) -> Mem:
        """The plain memory ``mem`` seen with another shape of as many elements (no copy)."""
        return self._mem(P.plain_md(self.lib, dims_of(shape), mem.md.data_type()), mem.buf)

    def _run_now(self, pd: P.Pd, args: list[tuple[int, Mem]]) -> None:
        """Execute a primitive at build time on constant buffers (weights reordered once)."""
        lib, ffi = self.lib, self.lib.ffi
        if self._stream is None:
            self._stream = P.stream(lib)
        pairs = [(a, P.memory(lib, mem.md, mem.buf.array)) for a, mem in args]
        scratch = pd.scratchpad_md()
        if scratch is not None:
            keep = P.aligned_bytes(scratch.size)
            pairs.append((E.ARG_SCRATCHPAD, P.memory(lib, scratch, keep)))
        arr = ffi.new("dnnl_exec_arg_t[]", pairs)
        prim = pd.primitive()
        lib.check(lib.lib.dnnl_primitive_execute(prim, self._stream, len(pairs), arr), "dnnl_primitive_execute")
        lib.check(lib.lib.dnnl_stream_wait(self._stream), "dnnl_stream_wait")

    # ------------------------------------------------------------------ fusion helpers

    def _absorb(self, node: Any, count_as: str | None = None) -> None:
        """``node`` is computed by the step being built (a post-op, a folded or fused op): it is done, its
        inputs are read, and it is counted as fused (under ``count_as``, else its own op type)."""
        self.done.add(node.id)
        for name in node.inputs:
            if name:
                self.pending[name] -= 1
        op = count_as or node.op_type
        self.fused[op] = self.fused.get(op, 0) + 1

    def _sole_consumer(self, name: str) -> Any | None:
        """The one node reading ``name`` (once), when nothing else needs it; else None."""
        if name in self.outputs:
            return None
        users = self.consumers.get(name, [])
        if len(users) != 1 or users[0].id in self.done:
            return None
        node = users[0]
        if sum(1 for i in node.inputs if i == name) != 1:
            return None
        return node

    def _can_overwrite(self, val: Val, reader: Any) -> bool:
        """Whether ``val``'s storage may be written by ``reader``: an internal buffer whose values are
        read by nobody after ``reader`` and returned by nobody."""
        buf = val.mem.buf
        if buf.kind != "internal":
            return False
        for name in buf.values:
            if name in self.outputs:
                return False
            left = self.pending.get(name, 0)
            readers = [n for n in self.consumers.get(name, []) if n.id not in self.done or n is reader]
            if left > 1 or (left == 1 and (len(readers) != 1 or readers[0] is not reader)):
                return False
        return True

    def _same_shape_other(self, add: Any, mine: str, shape: tuple[int, ...]) -> str | None:
        if add.op_type not in ("Add", "Sum") or len(add.inputs) != 2:
            return None
        other = add.inputs[1] if add.inputs[0] == mine else add.inputs[0]
        if other == mine or not other:
            return None
        try:
            val = self.get(other)
        except Unsupported:
            return None
        return other if val.shape == shape else None

    def _activation(self, node: Any) -> tuple[int, float, float] | None:
        if node.op_type not in ELTWISE_OPS or len(node.inputs) < 1:
            return None
        try:
            act = eltwise_of(node, self.constant)
        except Unsupported:
            return None
        return None if act[0] == E.ELTWISE_POW else act  # Pow(x, 3) and Pow(x, 0.5) are lowered otherwise

    # ------------------------------------------------------------------ ops

    def _op_eltwise(self, node: Any) -> None:
        alg, alpha, beta = eltwise_of(node, self.constant)
        x = self.get(node.inputs[0])
        if node.op_type == "Pow" and self.constant(node.inputs[1]).ndim > len(x.shape):
            raise Unsupported("Pow exponent of higher rank than the base")
        if alg == E.ELTWISE_POW and beta == 3.0:
            # oneDNN's generic pow goes through exp/log (~10 ns per element); x*x*x is faster and as exact
            sq = self._eltwise_step(x, E.ELTWISE_SQUARE, 0.0, 0.0, node.label)
            self._set(node.outputs[0], self._binary(E.BINARY_MUL, sq, x, node.label))
            return
        if alg == E.ELTWISE_POW and beta == 0.5:
            alg, alpha, beta = E.ELTWISE_SQRT, 0.0, 0.0
        self._set(node.outputs[0], self._eltwise_step(x, alg, alpha, beta, node.label))

    def _eltwise_step(self, x: Val, alg: int, alpha: float, beta: float, label: str) -> Val:
        dims = dims_of(x.shape)
        pd, src = self._native(x, lambda s, dt: P.eltwise(self.lib, alg, s.md, P.any_md(self.lib, dims, dt), alpha,
                                                          beta, self._attr()), label)
        dst = self._new(pd.md(E.QUERY_DST_MD, 0, dims))
        self._step(pd, [(E.ARG_SRC, src), (E.ARG_DST, dst)], label)
        return Val(x.shape, dst)

    def _broadcast_view(self, val: Val, shape: tuple[int, ...], label: str) -> Mem:
        """``val`` (numpy-broadcastable to ``shape``) seen with ``shape``'s rank, 1 on broadcast axes."""
        if val.shape == shape:
            return val.mem
        r = len(shape)
        dims = (1,) * (r - len(val.shape)) + val.shape
        if len(val.shape) == r:
            return val.mem
        return self.alias(self.plain(val, label), dims_of(dims))

    def _expand(self, val: Val, shape: tuple[int, ...], label: str) -> Mem:
        """``val`` materialised at the full ``shape`` (a reorder reading broadcast axes with stride 0)."""
        r = len(shape)
        src_shape = (1,) * (r - len(val.shape)) + val.shape
        src = self.plain(val, label)
        strides = [0 if s == 1 and d != 1 else st for s, d, st in zip(src_shape, shape, P.dense_strides(src_shape))]
        view = self._mem(P.strided_md(self.lib, dims_of(shape), strides if shape else [1]), src.buf)
        dst = self._new(P.plain_md(self.lib, dims_of(shape)))
        self._reorder_into(view, dst, label)
        return dst

    def _binary(self, alg: int, a: Val, b: Val, label: str) -> Val:
        try:
            shape = tuple(np.broadcast_shapes(a.shape, b.shape))
        except ValueError:
            raise Unsupported(f"shapes {list(a.shape)} and {list(b.shape)} do not broadcast") from None
        if 0 in shape:
            raise Unsupported("empty tensors")
        full = (1,) * (len(shape) - len(a.shape)) + a.shape == shape
        if not full and alg in COMMUTATIVE and (1,) * (len(shape) - len(b.shape)) + b.shape == shape:
            a, b = b, a
            full = True
        src0 = self._broadcast_view(a, shape, label) if full else self._expand(a, shape, label)
        src1 = self._broadcast_view(b, shape, label)
        dims = dims_of(shape)
        dt0, dt1 = src0.md.data_type(), src1.md.data_type()
        if dt0 != E.DT_F32 or dt1 != E.DT_F32:
            # bf16 operands (precision=bf16): natively only for a bf16 src0 with src1 in the very same layout
            # or broadcast from a plain bf16 copy (oneDNN 3.2's jit binary misreads a src1 of another data
            # type and layout); everything else is computed in plain float32
            pd = None
            if dt0 == E.DT_BF16 and (src1.md == src0.md or src1.md.dims != src0.md.dims):
                if src1.md != src0.md:
                    src1 = self._bf16_copy(src1, src1.md.dims, label)
                try:
                    pd = P.binary(self.lib, alg, src0.md, src1.md, P.any_md(self.lib, dims, dt0), self._attr())
                except DnnlError:
                    pd = None
            if pd is None or pd.is_ref:
                return self._binary(alg, self._f32(a, label), self._f32(b, label), label)
        else:
            pd = P.binary(self.lib, alg, src0.md, src1.md, P.any_md(self.lib, dims), self._attr())
            if pd.is_ref and tuple(b.shape) == shape and src1.md != src0.md:
                # two sources in different layouts (a conv's blocked output and a transposed view) send
                # oneDNN to its reference kernel, ~100x slower: one reorder into the first's layout avoids it
                src1 = self.as_md(b, src0.md, label)
                pd = P.binary(self.lib, alg, src0.md, src1.md, P.any_md(self.lib, dims), self._attr())
            if pd.is_ref and not (self._is_plain(a) and self._is_plain(b)):
                # views in unusual dimension orders (Transpose, Reshape): plain copies get a jit kernel
                return self._binary(alg, Val(a.shape, self.plain(a, label)), Val(b.shape, self.plain(b, label)),
                                    label)
        dst = self._new(pd.md(E.QUERY_DST_MD, 0, dims))
        self._step(pd, [(E.ARG_SRC, src0), (E.ARG_SRC_1, src1), (E.ARG_DST, dst)], label)
        return Val(shape, dst)

    def _op_binary(self, node: Any) -> None:
        alg = BINARY_OPS[node.op_type]
        names = [n for n in node.inputs if n]
        acc = self.get(names[0])
        if len(names) == 1:
            dst = self._new(P.plain_md(self.lib, dims_of(acc.shape)))
            self._reorder_into(acc.mem, dst, node.label)
            self._set(node.outputs[0], Val(acc.shape, dst))
            return
        for name in names[1:]:
            acc = self._binary(alg, acc, self.get(name), node.label)
        self._set(node.outputs[0], acc)

    _op_Add = _op_Sub = _op_Mul = _op_Div = _op_Max = _op_Min = _op_Sum = _op_binary

    def _softmax(self, node: Any, alg: int) -> None:
        x = self.get(node.inputs[0])
        r = len(x.shape)
        if r == 0 or 0 in x.shape:
            raise Unsupported("Softmax of a 0-d or empty tensor")
        if self.spec.opset < 13:
            axis = node.attr("axis", 1)
            axis = axis + r if axis < 0 else axis
            dims = (math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))
            axis = 1
        else:
            axis = node.attr("axis", -1)
            axis = axis + r if axis < 0 else axis
            dims = x.shape
        if not 0 <= axis < len(dims):
            raise Unsupported("Softmax axis out of range")
        src = self.alias(self.plain(x, "Softmax input"), dims)
        pd = P.softmax(self.lib, alg, src.md, P.plain_md(self.lib, dims), axis, self._attr())
        dst = self._new(P.plain_md(self.lib, dims))
        self._step(pd, [(E.ARG_SRC, src), (E.ARG_DST, dst)], node.label)
        self._set(node.outputs[0], Val(x.shape, self.alias(dst, x.shape)))

    def _op_Softmax(self, node: Any) -> None:
        self._softmax(node, E.SOFTMAX_ACCURATE)

    def _op_LogSoftmax(self, node: Any) -> None:
        self._softmax(node, E.SOFTMAX_LOG)

    def _op_LayerNormalization(self, node: Any) -> None:
        if any(o for o in node.outputs[1:]):
            raise Unsupported("LayerNormalization Mean/InvStdDev outputs")
        x = self.get(node.inputs[0])
        r = len(x.shape)
        axis = node.attr("axis", -1)
        axis = axis + r if axis < 0 else axis
        if not 0 <= axis < r or 0 in x.shape:
            raise Unsupported("LayerNormalization axis out of range or empty input")
        inner = math.prod(x.shape[axis:])
        outer = math.prod(x.shape[:axis])
        dims = (outer, inner)
        scale = self.get(node.inputs[1])
        shift = self.get(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else None
        for p in (scale, shift):
            if p is not None and p.shape != x.shape[axis:]:
                raise Unsupported("LayerNormalization Scale/B not of the normalized shape")
        flags = E.USE_SCALE | (E.USE_SHIFT if shift is not None else 0)
        lib = self.lib
        src = self.alias(self.plain(x, "LayerNormalization input"), dims)
        pd = P.layer_norm(lib, src.md, P.plain_md(lib, dims), P.plain_md(lib, (outer,)),
                          float(node.attr("epsilon", 1e-5)), flags, self._attr())
        dst = self._new(P.plain_md(lib, dims))
        args = [(E.ARG_SRC, src), (E.ARG_DST, dst), (E.ARG_SCALE, self.alias(self.plain(scale), (inner,)))]
        if shift is not None:
            args.append((E.ARG_SHIFT, self.alias(self.plain(shift), (inner,))))
        self._step(pd, args, node.label)
        self._set(node.outputs[0], Val(x.shape, self.alias(dst, x.shape)))

    def _op_Concat(self, node: Any) -> None:
        vals = [self.get(n) for n in node.inputs if n]
        r = len(vals[0].shape)
        if r and all(len(v.shape) == r for v in vals):
            full = [v for v in vals if 0 not in v.shape]  # empty inputs add nothing along the axis
            if len(full) < len(vals):
                if not full:
                    raise Unsupported("Concat of empty tensors only")
                vals = full
        axis = node.attr("axis", 1 if self.spec.opset < 4 else None)  # Concat-1 defaults to axis 1
        if axis is None or r == 0:
            raise Unsupported("Concat without axis or of 0-d tensors")
        axis = axis + r if axis < 0 else axis
        if any(len(v.shape) != r or 0 in v.shape for v in vals):
            raise Unsupported("Concat of empty tensors or of different ranks")
        for v in vals:
            if v.shape[:axis] != vals[0].shape[:axis] or v.shape[axis + 1:] != vals[0].shape[axis + 1:]:
                raise Unsupported("Concat inputs differ off the axis")
        shape = list(vals[0].shape)
        shape[axis] = sum(v.shape[axis] for v in vals)
        shape = tuple(shape)
        if len({v.mem.md.data_type() for v in vals}) > 1:  # bf16 and float32 inputs (precision=bf16)
            vals = [self._f32(v, node.label) for v in vals]
        srcs = [v.mem for v in vals]
        dt = srcs[0].md.data_type()  # the result keeps the inputs' type (bf16 with precision=bf16)
        pd = P.concat(self.lib, P.any_md(self.lib, shape, dt), axis, [m.md for m in srcs], self._attr())
        if pd.is_ref and r == 4:
            pd, srcs = self._concat_in_one_layout(vals, shape, axis, pd, srcs, node.label)
        if pd.is_ref and not all(self._is_plain(v) for v in vals):
            srcs = [self.plain(v, node.label) for v in vals]
            pd = P.concat(self.lib, P.any_md(self.lib, shape), axis, [m.md for m in srcs], self._attr())
        dst = self._new(pd.md(E.QUERY_DST_MD, 0, shape))
        args = [(E.ARG_MULTIPLE_SRC + i, m) for i, m in enumerate(srcs)] + [(E.ARG_DST, dst)]
        self._step(pd, args, node.label)
        self._set(node.outputs[0], Val(shape, dst))

    def _concat_in_one_layout(self, vals: list[Val], shape: tuple[int, ...], axis: int, pd: P.Pd, srcs: list[Mem],
                              label: str) -> tuple[P.Pd, list[Mem]]:
        """oneDNN offers only its reference concat for inputs in mixed layouts (DenseNet's first block:
        a blocked MaxPool output among channels-last conv outputs), ~10x slower: the inputs are
        reordered into one plain layout, channels-last first, where that gets a jit kernel."""
        for order in ((0, 2, 3, 1), (0, 1, 2, 3)):  # channels last (acdb), then plain NCHW
            mds = []
            for v in vals:
                strides, step = [0] * 4, 1
                for d in reversed(order):
                    strides[d] = step
                    step *= v.shape[d]
                mds.append(P.strided_md(self.lib, v.shape, strides, v.mem.md.data_type()))
            candidate = P.concat(self.lib, P.any_md(self.lib, shape, mds[0].data_type()), axis, mds, self._attr())
            if not candidate.is_ref:
                return candidate, [self.as_md(v, md, label) for v, md in zip(vals, mds)]
        return pd, srcs

    def _op_reduce(self, node: Any) -> None:
        x = self.get(node.inputs[0])
        r = len(x.shape)
        axes = self._axes(node)
        if not axes:
            if node.attr("noop_with_empty_axes", 0):
                raise Unsupported(f"{node.op_type} with noop_with_empty_axes")
            axes = list(range(r))
        axes = sorted({a + r if a < 0 else a for a in axes})
        if r == 0 or 0 in x.shape or any(not 0 <= a < r for a in axes):
            raise Unsupported(f"{node.op_type} of a 0-d or empty tensor, or axes out of range")
        kept = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
        shape = kept if node.attr("keepdims", 1) else tuple(d for i, d in enumerate(x.shape) if i not in axes)
        if kept == tuple(x.shape):  # every reduced axis has length 1: the mean or sum is x itself, and
            self._reinterpret(node, shape)  # oneDNN refuses a reduction whose source and destination agree
            return
        src = self.plain(x, node.op_type)
        pd = P.reduction(self.lib, REDUCE_OPS[node.op_type], src.md, P.plain_md(self.lib, kept), self._attr())
        dst = self._new(P.plain_md(self.lib, kept))
        self._step(pd, [(E.ARG_SRC, src), (E.ARG_DST, dst)], node.label)
        self._set(node.outputs[0], Val(shape, self.alias(dst, shape)))

    _op_ReduceMean = _op_ReduceSum = _op_reduce

    def _op_Split(self, node: Any) -> None:
        x = self.get(node.inputs[0])
        r = len(x.shape)
        axis = node.attr("axis", 0)
        axis = axis + r if axis < 0 else axis
        if not 0 <= axis < r or 0 in x.shape:
            raise Unsupported("Split axis out of range or empty input")
        n = len(node.outputs)
        if len(node.inputs) > 1 and node.inputs[1]:
            arr = self.constant(node.inputs[1])
            if arr is None:
                raise Unsupported("Split sizes are not a constant")
            sizes = [int(v) for v in arr.reshape(-1)]
        elif node.attr("split") is not None:
            sizes = list(node.attr("split"))
        else:
            d = x.shape[axis]
            n = int(node.attr("num_outputs", n))
            step = -(-d // n)
            sizes = [min(step, d - i * step) for i in range(n)]
        if len(sizes) != len(node.outputs) or sum(sizes) != x.shape[axis] or min(sizes) <= 0:
            raise Unsupported("Split sizes do not match the outputs and the axis")
        src = self.plain(x, "Split input")
        offset = 0
        for name, size in zip(node.outputs, sizes):
            shape = list(x.shape)
            shape[axis] = size
            offsets = [0] * r
            offsets[axis] = offset
            offset += size
            view = self._mem(src.md.sub(shape, offsets), src.buf)
            dst = self._new(P.plain_md(self.lib, shape))
            self._reorder_into(view, dst, node.label)
            if name:
                self._set(name, Val(tuple(shape), dst))

    def _reinterpret(self, node: Any, shape: tuple[int, ...]) -> None:
        """The shape-only ops: a view of ``x`` when its layout is strided and the merged dimensions are
        contiguous; else one reorder into a destination that keeps ``x``'s dimension order (a channel
        shuffle over channels-last data stays channels-last); blocked layouts go through plain."""
        x = self.get(node.inputs[0])
        if math.prod(shape) != math.prod(x.shape):
            raise Unsupported(f"cannot view {list(x.shape)} as {list(shape)}")
        strides = x.mem.md.strides() if x.shape and shape and 0 not in x.shape else None
        if strides is None:
            self._set(node.outputs[0], Val(shape, self.alias(self.plain(x, node.op_type), shape)))
            return
        dt = x.mem.md.data_type()
        view = V.reshaped(x.shape, strides, shape)
        if view is not None:
            self._set(node.outputs[0], Val(shape, self._mem(P.strided_md(self.lib, shape, view, dt), x.mem.buf)))
            return
        if self._flatten_into_fc(node, x, shape):
            return
        out_strides, in_strides = V.copy_layout(x.shape, strides, shape)
        dst = self._new(P.strided_md(self.lib, shape, out_strides, dt))
        self._reorder_into(x.mem, self._mem(P.strided_md(self.lib, x.shape, in_strides, dt), dst.buf),
                           node.label)
        self._set(node.outputs[0], Val(shape, dst))

    def _op_Reshape(self, node: Any) -> None:
        x = self.get(node.inputs[0])
        if len(node.inputs) < 2:
            target = list(node.attr("shape", []))
        else:
            arr = self.constant(node.inputs[1])
            if arr is None:
                raise Unsupported("Reshape with a shape that is not a constant")
            target = [int(v) for v in arr.reshape(-1)]
        self._reinterpret(node, reshape_target(x.shape, target, bool(node.attr("allowzero", 0))))

    def _op_Flatten(self, node: Any) -> None:
        x = self.get(node.inputs[0])
        axis = node.attr("axis", 1)
        axis = axis + len(x.shape) if axis < 0 else axis
        if not 0 <= axis <= len(x.shape):
            raise Unsupported("Flatten axis out of range")
        self._reinterpret(node, (math.prod(x.shape[:axis]), math.prod(x.shape[axis:])))

    def _axes(self, node: Any) -> list[int] | None:
        if len(node.inputs) > 1 and node.inputs[1]:
            arr = self.constant(node.inputs[1])
            if arr is None:
                raise Unsupported(f"{node.op_type} axes are not a constant")
            return [int(v) for v in arr.reshape(-1)]
        axes = node.attr("axes")
        return None if axes is None else list(axes)

    def _op_Squeeze(self, node: Any) -> None:
        x = self.get(node.inputs[0])
        axes = self._axes(node)
        r = len(x.shape)
        if axes is None:
            axes = [i for i, d in enumerate(x.shape) if d == 1]
        axes = {a + r if a < 0 else a for a in axes}
        if any(not 0 <= a < r or x.shape[a] != 1 for a in axes):
            raise Unsupported("Squeeze of an axis that is not 1")
        self._reinterpret(node, tuple(d for i, d in enumerate(x.shape) if i not in axes))

    def _op_Unsqueeze(self, node: Any) -> None:
        x = self.get(node.inputs[0])
        axes = self._axes(node)
        if axes is None:
            raise Unsupported("Unsqueeze without axes")
        r = len(x.shape) + len(axes)
        axes = sorted(a + r if a < 0 else a for a in axes)
        if len(set(axes)) != len(axes) or any(not 0 <= a < r for a in axes):
            raise Unsupported("Unsqueeze axes out of range")
        shape, it = [], iter(x.shape)
        for i in range(r):
            shape.append(1 if i in axes else next(it))
        self._reinterpret(node, tuple(shape))

    def _op_Transpose(self, node: Any) -> None:
        x = self.get(node.inputs[0])
        r = len(x.shape)
        perm = list(node.attr("perm", list(range(r))[::-1]))
        if sorted(perm) != list(range(r)) or r == 0 or 0 in x.shape:
            raise Unsupported("Transpose perm is not a permutation, or empty input")
        y_shape = tuple(x.shape[p] for p in perm)
        strides = x.mem.md.strides()
        if strides is not None:  # a view: the strides permuted
            md = P.strided_md(self.lib, y_shape, V.normalized(y_shape, V.transposed(strides, perm)),
                              x.mem.md.data_type())
            self._set(node.outputs[0], Val(y_shape, self._mem(md, x.mem.buf)))
            return
        y_strides = P.dense_strides(y_shape)
        x_strides = [0] * r
        for i, p in enumerate(perm):
            x_strides[p] = y_strides[i]
        dst = self._new(P.plain_md(self.lib, y_shape))
        view = self._mem(P.strided_md(self.lib, x.shape, x_strides), dst.buf)
        self._reorder_into(x.mem, view, node.label)
        self._set(node.outputs[0], Val(y_shape, dst))


def live(steps: list[Step]) -> tuple[list[Step], list[Buf], list[Mem]]:
    """The steps the outputs depend on, and the storage and views they use. Lowering may leave behind
    a copy nothing reads (a layout tried and abandoned) and the plain source of every weight reordered
    at build time: neither should run or stay in memory."""
    needed = {id(m.buf) for s in steps for _, m in s.args if m.buf.kind == "output"}
    kept: list[Step] = []
    for step in reversed(steps):
        writes = [m.buf for arg, m in step.args if arg == E.ARG_DST]
        if not any(id(b) in needed for b in writes):
            continue
        kept.append(step)
        needed.update(id(m.buf) for _, m in step.args)  # a destination may be read too (sum post-op)
    kept.reverse()
    mems = list({id(m): m for s in kept for _, m in s.args}.values())
    bufs = list({id(m.buf): m.buf for m in mems}.values())
    return kept, bufs, mems


def reshape_target(shape: tuple[int, ...], target: list[int], allowzero: bool) -> tuple[int, ...]:
    out = []
    for i, t in enumerate(target):
        if t == 0 and not allowzero:
            if i >= len(shape):
                raise Unsupported("Reshape copies a dimension the input lacks")
            out.append(shape[i])
        else:
            out.append(t)
    if out.count(-1) > 1:
        raise Unsupported("Reshape with more than one -1")
    if -1 in out:
        known = math.prod(d for d in out if d != -1)
        if known == 0 or math.prod(shape) % known:
            raise Unsupported("Reshape cannot infer its -1 dimension")
        out[out.index(-1)] = math.prod(shape) // known
    if any(d < 0 for d in out):
        raise Unsupported("Reshape to a negative dimension")
    return tuple(out)
