"""Lowering of a fused subgraph, for one signature of input shapes, to a program of oneDNN primitives.

Activations stay in the layouts the primitives choose (blocked, e.g. nChw16c) and are reordered only
where an op needs another one; BatchNormalization folds into the preceding convolution, activations
and residual Adds become its post-ops. Which nodes may be lowered is decided in ``capability``;
running a program (buffers, memory objects per concurrent call) is ``kernel``'s job.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import enums as E
from . import primitives as P
from .library import DnnlError, Library


class Unsupported(ValueError):
    """The node, with these shapes, is not something this provider lowers (a decline reason)."""


class _RefOnly(Exception):
    """oneDNN offers only its (slow) reference implementation for a fusion: build it unfused."""


@dataclass(eq=False)
class Buf:
    """A storage area: a feed (``input`` k), a result (``output`` k), a per-call scratch area
    (``internal``) or read-only data shared by every call (``const``, in ``array``)."""

    kind: str
    nbytes: int
    index: int = -1
    array: np.ndarray | None = None
    values: list[str] = field(default_factory=list)


@dataclass(eq=False)
class Mem:
    """A view of a Buf through a memory descriptor (one dnnl_memory_t per concurrent call)."""

    md: P.Md
    buf: Buf


@dataclass(eq=False)
class Step:
    """One primitive execution: its arguments (DNNL_ARG_* -> Mem) and scratchpad layout."""

    prim: Any
    args: list[tuple[int, Mem]]
    scratch: P.Md | None
    label: str
    impl: str = ""


@dataclass(eq=False)
class Val:
    """A value during lowering: its shape and where/how it is stored; ``views`` caches reorders."""

    shape: tuple[int, ...]
    mem: Mem
    views: list[Mem] = field(default_factory=list)


@dataclass
class Spec:
    """What lowering needs of a subgraph: nodes in order, input/output names, constant values, opset."""

    nodes: list[Any]
    inputs: list[str]
    outputs: list[str]
    constants: dict[str, np.ndarray]
    opset: int


@dataclass
class Program:
    """The lowered subgraph for one signature: steps in order and every Buf and Mem they use."""

    steps: list[Step]
    bufs: list[Buf]
    mems: list[Mem]
    output_shapes: list[tuple[int, ...]]
    fused: dict[str, int]


def dims_of(shape: tuple[int, ...]) -> tuple[int, ...]:
    """oneDNN has no 0-d descriptors: a scalar is held as one element."""
    return shape if shape else (1,)


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


def conv_geometry(x_spatial, kernel, strides, dilations, pads, auto_pad: str):
    """(pad_l, pad_r, out_spatial) of an ONNX Conv/Pool along each spatial axis (floor rounding)."""
    n = len(x_spatial)
    if isinstance(auto_pad, bytes):
        auto_pad = auto_pad.decode()
    pl, pr, out = [], [], []
    for i in range(n):
        k_eff = (kernel[i] - 1) * dilations[i] + 1
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            o = -(-x_spatial[i] // strides[i])
            total = max((o - 1) * strides[i] + k_eff - x_spatial[i], 0)
            small = total // 2
            lo, hi = (small, total - small) if auto_pad == "SAME_UPPER" else (total - small, small)
        elif auto_pad == "VALID":
            lo = hi = 0
        else:
            lo, hi = pads[i], pads[i + n]
        o = (x_spatial[i] + lo + hi - k_eff) // strides[i] + 1
        pl.append(lo)
        pr.append(hi)
        out.append(o)
    return pl, pr, out


class Builder:
    """Lowers a Spec for given input shapes. ``probe``: create primitive descriptors only (no
    primitives, no build-time reorders), to learn whether oneDNN implements the nodes."""

    def __init__(self, lib: Library, spec: Spec, shapes: dict[str, tuple[int, ...]], *, fpmath: int = E.FPMATH_STRICT,
                 probe: bool = False) -> None:
        self.lib, self.spec, self.fpmath, self.probe = lib, spec, fpmath, probe
        self.vals: dict[str, Val] = {}
        self.steps: list[Step] = []
        self.bufs: list[Buf] = []
        self.mems: list[Mem] = []
        self.fused: dict[str, int] = {}
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
            buf = self._buf("input", 4 * max(math.prod(shape), 1), index=k)
            self._set(name, Val(shape, self._mem(P.plain_md(lib, dims_of(shape)), buf)))

    # ------------------------------------------------------------------ the walk

    def build(self) -> Program:
        for node in self.spec.nodes:
            if node.id not in self.done:
                self._lower(node)
        shapes = []
        claimed: set[int] = set()
        for k, name in enumerate(self.spec.outputs):
            val = self.get(name)
            shapes.append(val.shape)
            if 0 in val.shape:  # nothing to compute: the kernel returns an empty array
                continue
            dims = dims_of(val.shape)
            plain = P.plain_md(self.lib, dims)
            buf = val.mem.buf
            if (buf.kind == "internal" and id(buf) not in claimed and val.mem.md == plain
                    and buf.nbytes == 4 * math.prod(dims)):
                buf.kind, buf.index = "output", k
                claimed.add(id(buf))
                continue
            out = self._mem(plain, self._buf("output", 4 * math.prod(dims), index=k))
            self._reorder_into(val.mem, out, f"output {name}")
        return Program(self.steps, self.bufs, self.mems, shapes, self.fused)

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
            if arr.dtype != np.float32:
                raise Unsupported(f"constant '{name}' is {arr.dtype}, not float32")
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
        data = P.aligned_bytes(max(arr.nbytes, 4))
        data[:arr.nbytes] = np.ascontiguousarray(arr, np.float32).reshape(-1).view(np.uint8)
        buf = self._buf("const", data.nbytes, array=data)
        return Val(shape, self._mem(P.plain_md(self.lib, dims_of(shape)), buf))

    def _attr(self, post_ops: P.PostOps | None = None, fpmath: bool = False) -> P.Attr:
        return P.Attr(self.lib, post_ops, self.fpmath if fpmath else E.FPMATH_STRICT)

    def _step(self, pd: P.Pd, args: list[tuple[int, Mem]], label: str) -> None:
        prim = None if self.probe else pd.primitive()
        self.steps.append(Step(prim, args, pd.scratchpad_md(), label, impl_name(pd)))

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
        if val.mem.buf.kind == "const":
            dst = self._mem(md, self._buf("const", max(md.size, 4),
                                          array=None if self.probe else P.aligned_bytes(max(md.size, 4))))
        else:
            dst = self._new(md)
        self._reorder_into(val.mem, dst, label)
        val.views.append(dst)
        return dst

    def plain(self, val: Val, label: str = "") -> Mem:
        return self.as_md(val, P.plain_md(self.lib, dims_of(val.shape)), label)

    def alias(self, mem: Mem, shape: tuple[int, ...]) -> Mem:
        """The plain memory ``mem`` seen with another shape of as many elements (no copy)."""
        return self._mem(P.plain_md(self.lib, dims_of(shape)), mem.buf)

    def _run_now(self, pd: P.Pd, args: list[tuple[int, Mem]]) -> None:
        """Execute a primitive at build time on constant buffers (weights reordered once)."""
        lib, ffi = self.lib, self.lib.ffi
        if self._stream is None:
            s = ffi.new("dnnl_stream_t *")
            lib.check(lib.lib.dnnl_stream_create(s, lib.engine, E.STREAM_IN_ORDER), "dnnl_stream_create")
            self._stream = ffi.gc(s[0], lib.lib.dnnl_stream_destroy)
        mems = []
        for _, mem in args:
            m = ffi.new("dnnl_memory_t *")
            ptr = ffi.cast("void *", mem.buf.array.ctypes.data)
            lib.check(lib.lib.dnnl_memory_create(m, mem.md.ptr, lib.engine, ptr), "dnnl_memory_create")
            mems.append(ffi.gc(m[0], lib.lib.dnnl_memory_destroy))
        scratch = pd.scratchpad_md()
        keep = None
        pairs = [(a, m) for (a, _), m in zip(args, mems)]
        if scratch is not None:
            keep = P.aligned_bytes(scratch.size)
            m = ffi.new("dnnl_memory_t *")
            lib.check(lib.lib.dnnl_memory_create(m, scratch.ptr, lib.engine, ffi.cast("void *", keep.ctypes.data)),
                      "dnnl_memory_create")
            mems.append(ffi.gc(m[0], lib.lib.dnnl_memory_destroy))
            pairs.append((E.ARG_SCRATCHPAD, mems[-1]))
        arr = ffi.new("dnnl_exec_arg_t[]", pairs)
        prim = pd.primitive()
        lib.check(lib.lib.dnnl_primitive_execute(prim, self._stream, len(pairs), arr), "dnnl_primitive_execute")
        lib.check(lib.lib.dnnl_stream_wait(self._stream), "dnnl_stream_wait")

    # ------------------------------------------------------------------ fusion helpers

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

    def _op_Conv(self, node: Any) -> None:
        x = self.get(node.inputs[0])
        w_name = node.inputs[1]
        b_name = node.inputs[2] if len(node.inputs) > 2 else ""
        w_arr = self.constant(w_name)
        w_shape = tuple(w_arr.shape) if w_arr is not None else self.get(w_name).shape
        b_arr = self.constant(b_name) if b_name else None
        if len(x.shape) < 3 or len(x.shape) > 5 or len(w_shape) != len(x.shape):
            raise Unsupported(f"Conv on rank {len(x.shape)} input")
        group = int(node.attr("group", 1))
        n_sp = len(x.shape) - 2
        kernel = list(node.attr("kernel_shape", w_shape[2:]))
        strides = list(node.attr("strides", [1] * n_sp))
        dil = list(node.attr("dilations", [1] * n_sp))
        pads = list(node.attr("pads", [0] * (2 * n_sp)))
        if list(kernel) != list(w_shape[2:]):
            raise Unsupported("Conv kernel_shape differs from the weights' shape")
        pl, pr, out_sp = conv_geometry(x.shape[2:], kernel, strides, dil, pads, node.attr("auto_pad", "NOTSET"))
        if min(out_sp) <= 0 or 0 in x.shape:
            raise Unsupported("Conv with an empty input or output")
        M, Cg = w_shape[0], w_shape[1]
        if x.shape[1] != Cg * group or M % group:
            raise Unsupported("Conv channels do not match its weights and groups")
        y_shape = (x.shape[0], M, *out_sp)

        chain = self._conv_chain(node, w_arr is not None and (not b_name or b_arr is not None), y_shape)
        while True:
            try:
                pd, post, args, dst, cur = self._conv_with(node, chain, x, w_arr, w_shape, b_name, b_arr, group,
                                                           kernel, strides, dil, pl, pr, y_shape)
                break
            except (DnnlError, _RefOnly):
                cut = [i for i, (kind, _, _) in enumerate(chain) if kind == "add"]
                if not cut:
                    raise
                chain = chain[:cut[0]]  # without the residual Add (and what follows it)
        for _, nxt, _ in chain:
            self.done.add(nxt.id)
            for name in nxt.inputs:
                if name:
                    self.pending[name] -= 1
            self.fused[nxt.op_type] = self.fused.get(nxt.op_type, 0) + 1
        self._step(pd, args, node.label)
        self._set(cur, Val(y_shape, dst))

    def _conv_chain(self, node: Any, const_params: bool, y_shape) -> list[tuple[str, Any, Any]]:
        """The nodes after a Conv that fold into it: ('bn', node, constants) for an inference
        BatchNormalization (constant weights only), ('act', node, (alg, alpha, beta)) for activations,
        ('add', node, other value name) for one residual Add of the output's shape."""
        chain: list[tuple[str, Any, Any]] = []
        cur = node.outputs[0]
        seen_add = False
        while True:
            nxt = self._sole_consumer(cur)
            if nxt is None:
                break
            if nxt.op_type == "BatchNormalization" and not chain and const_params and nxt.inputs[0] == cur:
                bn = self._bn_constants(nxt)
                if bn is None:
                    break
                chain.append(("bn", nxt, bn))
            elif (act := self._activation(nxt)) is not None and nxt.inputs[0] == cur:
                chain.append(("act", nxt, act))
            elif not seen_add and (other := self._same_shape_other(nxt, cur, y_shape)) is not None:
                chain.append(("add", nxt, other))
                seen_add = True
            else:
                break
            cur = nxt.outputs[0]
        return chain

    def _conv_with(self, node, chain, x, w_arr, w_shape, b_name, b_arr, group, kernel, strides, dil, pl, pr,
                   y_shape):
        """Primitive descriptor and arguments of a Conv with ``chain`` fused into it."""
        lib = self.lib
        M, Cg = w_shape[0], w_shape[1]
        post = P.PostOps()
        res_val, in_place = None, False
        cur = node.outputs[0]
        for kind, nxt, payload in chain:
            if kind == "bn":
                w_arr, b_arr = fold_batch_norm(w_arr, b_arr, *payload, M)
            elif kind == "act":
                post.eltwise(*payload)
            else:
                res_val = self.get(payload)
                in_place = self._can_overwrite(res_val, nxt)
                post.sum()  # onto the residual itself, or onto a copy of it when it is read later
            cur = nxt.outputs[0]
        w_dims = (group, M // group, Cg, *kernel) if group > 1 else tuple(w_shape)
        if w_arr is not None:
            w_val = self._const_val(np.ascontiguousarray(w_arr, np.float32).reshape(w_dims))
        else:
            wv = self.get(node.inputs[1])
            w_val = Val(w_dims, self.alias(self.plain(wv, "Conv weights"), w_dims))
        bias = None
        if b_arr is not None:
            bias = self._const_val(np.ascontiguousarray(b_arr, np.float32).reshape(M))
        elif b_name:
            bias = self.get(b_name)
        dst_md = res_val.mem.md if in_place else P.any_md(lib, y_shape)
        pd = P.convolution(lib, P.any_md(lib, x.shape), P.any_md(lib, w_dims),
                           None if bias is None else P.plain_md(lib, (M,)), dst_md, strides, [d - 1 for d in dil],
                           pl, pr, self._attr(post, fpmath=True))
        if res_val is not None and impl_name(pd).startswith("ref"):
            raise _RefOnly()
        src = self.as_md(x, pd.md(E.QUERY_SRC_MD, 0, x.shape), "Conv input")
        wts = self.as_md(w_val, pd.md(E.QUERY_WEIGHTS_MD, 0, w_dims), "Conv weights")
        dst = res_val.mem if in_place else self._new(pd.md(E.QUERY_DST_MD, 0, y_shape))
        if res_val is not None and not in_place:
            self._reorder_into(res_val.mem, dst, "residual copied into the Conv output")
        args = [(E.ARG_SRC, src), (E.ARG_WEIGHTS, wts), (E.ARG_DST, dst)]
        if bias is not None:
            args.append((E.ARG_BIAS, self.plain(bias, "Conv bias")))
        return pd, post, args, dst, cur

    def _bn_constants(self, node: Any):
        """(scale, shift, mean, var, epsilon) of an inference BatchNormalization with constant
        float32 parameters, else None."""
        if len(node.inputs) != 5 or any(o for o in node.outputs[1:]) or node.attr("training_mode", 0):
            return None
        if node.attr("spatial", 1) != 1:
            return None
        vals = [self.constant(n) for n in node.inputs[1:5]]
        if any(v is None or v.dtype != np.float32 or v.ndim != 1 for v in vals):
            return None
        return (*vals, float(node.attr("epsilon", 1e-5)))

    def _op_BatchNormalization(self, node: Any) -> None:
        x = self.get(node.inputs[0])
        if len(x.shape) < 2 or node.attr("training_mode", 0) or any(o for o in node.outputs[1:]):
            raise Unsupported("BatchNormalization in training mode or on rank < 2")
        if node.attr("spatial", 1) != 1:
            raise Unsupported("BatchNormalization spatial=0")
        params = [self.get(n) for n in node.inputs[1:5]]
        C = x.shape[1]
        if any(p.shape != (C,) for p in params):
            raise Unsupported("BatchNormalization parameters are not of shape (C,)")
        flags = E.USE_GLOBAL_STATS | E.USE_SCALE | E.USE_SHIFT
        pd = P.batch_norm(self.lib, x.mem.md, P.any_md(self.lib, x.shape), float(node.attr("epsilon", 1e-5)), flags,
                          self._attr())
        dst = self._new(pd.md(E.QUERY_DST_MD, 0, x.shape))
        scale, shift, mean, var = (self.plain(p, "BatchNormalization parameter") for p in params)
        self._step(pd, [(E.ARG_SRC, x.mem), (E.ARG_DST, dst), (E.ARG_MEAN, mean), (E.ARG_VARIANCE, var),
                        (E.ARG_SCALE, scale), (E.ARG_SHIFT, shift)], node.label)
        self._set(node.outputs[0], Val(x.shape, dst))

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
        pd = P.eltwise(self.lib, alg, x.mem.md, P.any_md(self.lib, dims), alpha, beta, self._attr())
        dst = self._new(pd.md(E.QUERY_DST_MD, 0, dims))
        self._step(pd, [(E.ARG_SRC, x.mem), (E.ARG_DST, dst)], label)
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
        pd = P.binary(self.lib, alg, src0.md, src1.md, P.any_md(self.lib, dims), self._attr())
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

    def _pool(self, node: Any, alg: int, kernel, strides, dil, pads, auto_pad, ceil: bool) -> None:
        x = self.get(node.inputs[0])
        if len(x.shape) < 3 or len(x.shape) > 5:
            raise Unsupported(f"pooling on rank {len(x.shape)}")
        sp = x.shape[2:]
        pl, pr, out_sp = conv_geometry(sp, kernel, strides, dil, pads, auto_pad)
        if ceil:
            out_sp = []
            for i in range(len(sp)):
                k_eff = (kernel[i] - 1) * dil[i] + 1
                o = -(-(sp[i] + pl[i] + pr[i] - k_eff) // strides[i]) + 1
                if (o - 1) * strides[i] >= sp[i] + pl[i]:
                    o -= 1
                extra = (o - 1) * strides[i] + k_eff - (sp[i] + pl[i] + pr[i])
                if extra > 0:
                    if alg == E.POOLING_AVG_INCLUDE_PADDING:
                        raise Unsupported("ceil_mode with count_include_pad=1 past the padded input")
                    pr[i] += extra
                out_sp.append(o)
        if min(out_sp) <= 0 or 0 in x.shape:
            raise Unsupported("pooling with an empty input or output")
        y_shape = (*x.shape[:2], *out_sp)
        pd = P.pooling(self.lib, alg, x.mem.md, P.any_md(self.lib, y_shape), strides, kernel, [d - 1 for d in dil],
                       pl, pr, self._attr())
        dst = self._new(pd.md(E.QUERY_DST_MD, 0, y_shape))
        self._step(pd, [(E.ARG_SRC, x.mem), (E.ARG_DST, dst)], node.label)
        self._set(node.outputs[0], Val(y_shape, dst))

    def _pool_attrs(self, node: Any, n: int):
        kernel = list(node.attr("kernel_shape"))
        return (kernel, list(node.attr("strides", [1] * n)), list(node.attr("dilations", [1] * n)),
                list(node.attr("pads", [0] * (2 * n))), node.attr("auto_pad", "NOTSET"),
                bool(node.attr("ceil_mode", 0)))

    def _op_MaxPool(self, node: Any) -> None:
        if len(node.outputs) > 1 and node.outputs[1]:
            raise Unsupported("MaxPool with Indices output")
        n = len(self.get(node.inputs[0]).shape) - 2
        self._pool(node, E.POOLING_MAX, *self._pool_attrs(node, n))

    def _op_AveragePool(self, node: Any) -> None:
        n = len(self.get(node.inputs[0]).shape) - 2
        alg = E.POOLING_AVG_INCLUDE_PADDING if node.attr("count_include_pad", 0) else E.POOLING_AVG_EXCLUDE_PADDING
        self._pool(node, alg, *self._pool_attrs(node, n))

    def _global_pool(self, node: Any, alg: int) -> None:
        x = self.get(node.inputs[0])
        n = len(x.shape) - 2
        self._pool(node, alg, list(x.shape[2:]), [1] * n, [1] * n, [0] * (2 * n), "NOTSET", False)

    def _op_GlobalAveragePool(self, node: Any) -> None:
        self._global_pool(node, E.POOLING_AVG_EXCLUDE_PADDING)

    def _op_GlobalMaxPool(self, node: Any) -> None:
        self._global_pool(node, E.POOLING_MAX)

    def _matmul(self, a: Val, b: Val, a_mem: Mem, a_dims, b_mem_or_val, b_dims, out_dims, post: P.PostOps,
                bias: Val | None, bias_dims, label: str, extra_args=()) -> Mem:
        lib = self.lib
        const_b = isinstance(b_mem_or_val, Val)
        w_md = P.any_md(lib, b_dims) if const_b else b_mem_or_val.md
        pd = P.matmul(lib, a_mem.md, w_md, None if bias is None else P.plain_md(lib, bias_dims),
                      P.plain_md(lib, out_dims), self._attr(post, fpmath=True))
        if const_b:
            wts = self.as_md(b_mem_or_val, pd.md(E.QUERY_WEIGHTS_MD, 0, b_dims), "MatMul weights")
        else:
            wts = b_mem_or_val
        dst = self._new(P.plain_md(lib, out_dims))
        args = [(E.ARG_SRC, a_mem), (E.ARG_WEIGHTS, wts), (E.ARG_DST, dst), *extra_args]
        if bias is not None:
            args.append((E.ARG_BIAS, self.alias(self.plain(bias, "bias"), bias_dims)))
        self._step(pd, args, label)
        return dst

    def _matmul_epilogue(self, node: Any, out_shape: tuple[int, ...], allow_bias: bool):
        """Fuse what follows a MatMul/Gemm: an Add of a constant bias over the last axis (as matmul
        bias) then activations. Returns (post-ops, bias Val or None, name of the last fused value)."""
        post = P.PostOps()
        bias = None
        cur = node.outputs[0]
        while True:
            nxt = self._sole_consumer(cur)
            if nxt is None:
                break
            if (allow_bias and bias is None and not len(post) and nxt.op_type == "Add" and len(nxt.inputs) == 2
                    and out_shape):
                other = nxt.inputs[1] if nxt.inputs[0] == cur else nxt.inputs[0]
                arr = self.constant(other)
                if (other == cur or arr is None or arr.dtype != np.float32
                        or not (arr.ndim <= len(out_shape) and arr.size == out_shape[-1]
                                and (arr.ndim == 0 or arr.shape[-1] == out_shape[-1]))):
                    break
                bias = self.get(other)
            elif (act := self._activation(nxt)) is not None and nxt.inputs[0] == cur:
                post.eltwise(*act)
            else:
                break
            self.done.add(nxt.id)
            for name in nxt.inputs:
                if name:
                    self.pending[name] -= 1
            self.fused[nxt.op_type] = self.fused.get(nxt.op_type, 0) + 1
            cur = nxt.outputs[0]
        return post, bias, cur

    def _op_MatMul(self, node: Any) -> None:
        a, b = self.get(node.inputs[0]), self.get(node.inputs[1])
        if 0 in a.shape or 0 in b.shape or not a.shape or not b.shape:
            raise Unsupported("MatMul of empty or 0-d tensors")
        a_shape = (1, *a.shape) if len(a.shape) == 1 else a.shape
        b_shape = (*b.shape, 1) if len(b.shape) == 1 else b.shape
        r = max(len(a_shape), len(b_shape))
        a_dims = (1,) * (r - len(a_shape)) + a_shape
        b_dims = (1,) * (r - len(b_shape)) + b_shape
        if a_dims[-1] != b_dims[-2]:
            raise Unsupported("MatMul inner dimensions differ")
        try:
            batch = tuple(np.broadcast_shapes(a_dims[:-2], b_dims[:-2]))
        except ValueError:
            raise Unsupported("MatMul batch dimensions do not broadcast") from None
        out_dims = (*batch, a_dims[-2], b_dims[-1])
        out_shape = out_dims[len(out_dims) - (max(len(a.shape), len(b.shape))):]
        if len(a.shape) == 1:
            out_shape = out_shape[:-2] + out_shape[-1:]
        if len(b.shape) == 1:
            out_shape = out_shape[:-1]
        out_shape = tuple(out_shape)
        a_mem = self.alias(self.plain(a, "MatMul A"), a_dims)
        const_b = self.constant(node.inputs[1]) is not None and all(d == 1 for d in b_dims[:-2])
        b_arg = Val(b_dims, self.alias(self.plain(b, "MatMul B"), b_dims)) if const_b else \
            self.alias(self.plain(b, "MatMul B"), b_dims)
        post, bias, cur = self._matmul_epilogue(node, out_shape, allow_bias=len(b.shape) >= 2)
        bias_dims = (1,) * (len(out_dims) - 1) + (out_dims[-1],)
        dst = self._matmul(a, b, a_mem, a_dims, b_arg, b_dims, out_dims, post, bias, bias_dims, node.label)
        self._set(cur, Val(out_shape, self.alias(dst, out_shape)))

    def _op_Gemm(self, node: Any) -> None:
        a, b = self.get(node.inputs[0]), self.get(node.inputs[1])
        c_name = node.inputs[2] if len(node.inputs) > 2 else ""
        alpha, beta = float(node.attr("alpha", 1.0)), float(node.attr("beta", 1.0))
        ta, tb = int(node.attr("transA", 0)), int(node.attr("transB", 0))
        if len(a.shape) != 2 or len(b.shape) != 2 or 0 in a.shape or 0 in b.shape:
            raise Unsupported("Gemm needs non-empty 2-D A and B")
        M, K = (a.shape[1], a.shape[0]) if ta else a.shape
        K2, N = (b.shape[1], b.shape[0]) if tb else b.shape
        if K != K2:
            raise Unsupported("Gemm inner dimensions differ")
        lib = self.lib
        a_plain = self.plain(a, "Gemm A")
        a_mem = self._mem(P.strided_md(lib, (M, K), (1, M) if ta else (K, 1)), a_plain.buf)
        b_plain = self.plain(b, "Gemm B")
        b_mem = self._mem(P.strided_md(lib, (K, N), (1, K) if tb else (N, 1)), b_plain.buf)
        b_arg: Any = Val((K, N), b_mem) if self.constant(node.inputs[1]) is not None else b_mem
        post = P.PostOps()
        bias, bias_dims, extra = None, (1, N), []
        c = self.get(c_name) if c_name and beta != 0.0 else None
        if c is not None:
            try:
                np.broadcast_shapes(c.shape, (M, N))
            except ValueError:
                raise Unsupported(f"Gemm C of shape {list(c.shape)} does not broadcast to {[M, N]}") from None
            c_dims = (1,) * (2 - len(c.shape)) + c.shape
            if alpha == 1.0 and beta == 1.0:
                bias, bias_dims = c, c_dims
            else:
                if alpha != 1.0:
                    post.eltwise(E.ELTWISE_LINEAR, alpha, 0.0)
                c_arr = self.constant(c_name)
                if beta != 1.0:
                    if c_arr is not None:
                        c = self._const_val((np.float32(beta) * c_arr).astype(np.float32))
                    else:
                        pd = P.eltwise(lib, E.ELTWISE_LINEAR, self.plain(c).md, self.plain(c).md, beta, 0.0,
                                       self._attr())
                        scaled = self._new(self.plain(c).md)
                        self._step(pd, [(E.ARG_SRC, self.plain(c)), (E.ARG_DST, scaled)], node.label)
                        c = Val(c.shape, scaled)
                c_mem = self.alias(self.plain(c, "Gemm C"), c_dims)
                idx = post.binary(E.BINARY_ADD, c_mem.md)
                extra.append((E.arg_post_op(idx) | E.ARG_SRC_1, c_mem))
        elif alpha != 1.0:
            post.eltwise(E.ELTWISE_LINEAR, alpha, 0.0)
        cur = node.outputs[0]
        if not len(post) and bias is None:
            post, bias_e, cur = self._matmul_epilogue(node, (M, N), allow_bias=True)
            if bias_e is not None:
                bias, bias_dims = bias_e, (1, N)
        dst = self._matmul(a, b, a_mem, (M, K), b_arg, (K, N), (M, N), post, bias, bias_dims, node.label, extra)
        self._set(cur, Val((M, N), dst))

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
        srcs = [v.mem for v in vals]
        pd = P.concat(self.lib, P.any_md(self.lib, shape), axis, [m.md for m in srcs], self._attr())
        dst = self._new(pd.md(E.QUERY_DST_MD, 0, shape))
        args = [(E.ARG_MULTIPLE_SRC + i, m) for i, m in enumerate(srcs)] + [(E.ARG_DST, dst)]
        self._step(pd, args, node.label)
        self._set(node.outputs[0], Val(shape, dst))

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
        src = self.plain(x, node.op_type)
        pd = P.reduction(self.lib, REDUCE_OPS[node.op_type], src.md, P.plain_md(self.lib, kept), self._attr())
        dst = self._new(P.plain_md(self.lib, kept))
        self._step(pd, [(E.ARG_SRC, src), (E.ARG_DST, dst)], node.label)
        shape = kept if node.attr("keepdims", 1) else tuple(d for i, d in enumerate(x.shape) if i not in axes)
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
        x = self.get(node.inputs[0])
        if math.prod(shape) != math.prod(x.shape):
            raise Unsupported(f"cannot view {list(x.shape)} as {list(shape)}")
        self._set(node.outputs[0], Val(shape, self.alias(self.plain(x, node.op_type), shape)))

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
        y_strides = P.dense_strides(y_shape)
        x_strides = [0] * r
        for i, p in enumerate(perm):
            x_strides[p] = y_strides[i]
        dst = self._new(P.plain_md(self.lib, y_shape))
        view = self._mem(P.strided_md(self.lib, x.shape, x_strides), dst.buf)
        self._reorder_into(x.mem, view, node.label)
        self._set(node.outputs[0], Val(y_shape, dst))


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


def fold_batch_norm(w: np.ndarray, b: np.ndarray | None, scale, shift, mean, var, eps: float, M: int):
    """Weights and bias of Conv followed by inference BatchNormalization, as one Conv."""
    factor = (scale.astype(np.float64) / np.sqrt(var.astype(np.float64) + eps))
    w2 = (w.astype(np.float64) * factor.reshape((M,) + (1,) * (w.ndim - 1))).astype(np.float32)
    b0 = np.zeros(M, np.float64) if b is None else b.astype(np.float64)
    b2 = ((b0 - mean) * factor + shift).astype(np.float32)
    return w2, b2


def impl_name(pd: P.Pd) -> str:
    """The implementation oneDNN picked ('brg:avx512_core', 'jit:avx512_core', 'ref:any', ...)."""
    lib = pd.lib
    out = lib.ffi.new("const char **")
    if lib.lib.dnnl_primitive_desc_query(pd.ptr, E.QUERY_IMPL_INFO_STR, 0, out) != E.SUCCESS or out[0] == lib.ffi.NULL:
        return ""
    return lib.ffi.string(out[0]).decode(errors="replace")
