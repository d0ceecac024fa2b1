"""CustomOp (the class API), the ``custom_op`` decorator, and binding an op to one node as a kernel.

A bound kernel follows the CPU kernels' convention, ``kernel(*inputs) -> tuple``, and checks the
declared types on the way in and out. Where ops are registered and who runs them is decided elsewhere
(registry.py, the providers); C-library ops subclass CustomOp in c_library.py.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from ..errors import InvalidArgument, InvalidGraph, KernelError, OrtError
from ..ir.graph import Graph, Node
from ..ir.types import ValueType, elem_type_name, elem_type_of, np_dtype
from .declaration import (
    ArgSpec,
    AttrSpec,
    CustomOpInput,
    CustomOpOutput,
    convert_attr,
    parse_args,
    parse_attributes,
    parse_constraints,
    parse_elem_type,
)
from .static_types import FirstRunTypes, incomplete


class TensorInfo(NamedTuple):
    """Static type of a tensor handed to (and returned by) a shape-inference function: a numpy
    ``dtype`` (None when unknown) and a ``shape`` tuple of ints, symbolic names (str) or None,
    or None when even the rank is unknown."""

    dtype: np.dtype | None
    shape: tuple | None


class CustomOp:
    """An operator outside the ONNX standard, computed by a Python function on numpy arrays.

    Declare it with the ``custom_op`` decorator, or subclass and set the class attributes below
    and define ``compute`` (and optionally ``infer``); constructor arguments override class
    attributes. Register the op per session (``SessionOptions.register_custom_op``) or for all
    sessions (``ort_core.register_custom_op``).

    ``domain`` (not the ONNX default domain) and ``op_type`` name the op; ``since``/``until``
    bound the opset versions of ``domain`` it implements (inclusive, ``until=None``: open-ended;
    a model that does not import the domain counts as version 1). ``inputs``/``outputs`` list
    ``CustomOpInput``/``CustomOpOutput`` entries or bare types; ``type_constraints`` maps names
    used as types ('T') to the element types they allow; ``attributes`` maps attribute names to
    defaults (or to a type, ``int``/``float``/``str``/``list[int]``/..., for a required one).

    The kernel is called as ``compute(*inputs, **attributes)``: one numpy array per node input
    (None for an omitted optional input, variadic inputs spread out last) and every declared
    attribute as a keyword. It returns an array, or a tuple of arrays for several outputs. It must
    be stateless and thread-safe and must not modify its inputs.

    ``infer(*inputs, **attributes)`` receives a ``TensorInfo`` (or None) per input and returns one
    ``(dtype, shape)`` (or None when unknown) per output; it sets the session's static output
    types. Without it they are taken from the declaration and, once, from the kernel's first run.
    """

    domain: str = ""
    op_type: str = ""
    inputs: Sequence[Any] = ()
    outputs: Sequence[Any] = ()
    type_constraints: dict[str, Any] | None = None
    attributes: dict[str, Any] | None = None
    since: int = 1
    until: int | None = None

    def __init__(self, domain: str | None = None, op_type: str | None = None, *,
                 inputs: Sequence[Any] | None = None, outputs: Sequence[Any] | None = None,
                 type_constraints: dict[str, Any] | None = None, attributes: dict[str, Any] | None = None,
                 since: int | None = None, until: int | None = None,
                 kernel: Callable[..., Any] | None = None, infer: Callable[..., Any] | None = None) -> None:
        cls = type(self)
        self.domain = cls.domain if domain is None else domain
        self.op_type = cls.op_type if op_type is None else op_type
        self.since = cls.since if since is None else since
        self.until = cls.until if until is None else until
        if not isinstance(self.domain, str) or not self.domain or self.domain == "ai.onnx":
            raise InvalidArgument(f"custom op {self.op_type!r} needs its own domain (such as 'com.example'), got "
                                  f"{self.domain!r}: the default ONNX domain belongs to the standard operators")
        if not isinstance(self.op_type, str) or not self.op_type:
            raise InvalidArgument(f"custom op in domain '{self.domain}' needs a non-empty op_type, got "
                                  f"{self.op_type!r}")
        name = self.qualified_name
        if not _is_int(self.since) or self.since < 1 or not (
                self.until is None or (_is_int(self.until) and self.until >= self.since)):
            raise InvalidArgument(f"custom op {name}: since={self.since!r}, until={self.until!r} is not a valid "
                                  "opset range (since >= 1, until None or >= since)")
        constraints = parse_constraints(cls.type_constraints if type_constraints is None else type_constraints,
                                        name)
        self.input_specs: tuple[ArgSpec, ...] = parse_args(
            cls.inputs if inputs is None else inputs, constraints, "input", name, CustomOpInput)
        self.output_specs: tuple[ArgSpec, ...] = parse_args(
            cls.outputs if outputs is None else outputs, constraints, "output", name, CustomOpOutput)
        if not self.output_specs:
            raise InvalidArgument(f"custom op {name} declares no output")
        self.attr_specs: tuple[AttrSpec, ...] = parse_attributes(
            cls.attributes if attributes is None else attributes, name)
        self.type_constraints = constraints
        self._kernel = kernel if kernel is not None else (
            self.compute if cls.compute is not CustomOp.compute else None)
        self._infer = infer if infer is not None else (self.infer if cls.infer is not CustomOp.infer else None)
        if self._infer is not None and not callable(self._infer):
            raise InvalidArgument(f"custom op {name}: infer must be callable, got {self._infer!r}")
        if cls._compute_fn is CustomOp._compute_fn:
            self._check_kernel()

    # ------------------------------------------------------------ user hooks
    def compute(self, *inputs: Any, **attributes: Any) -> Any:
        """The kernel (override in a subclass, or pass ``kernel=`` / use the decorator)."""
        raise NotImplementedError

    def infer(self, *inputs: TensorInfo | None, **attributes: Any) -> Any:
        """Optional static shape/type inference (override in a subclass, or pass ``infer=``)."""
        raise NotImplementedError

    def __call__(self, *inputs: Any, **attributes: Any) -> Any:
        """Call the kernel directly, with declared attribute defaults filled in (for tests)."""
        defaults = {a.name: a.default for a in self.attr_specs if not a.required}
        return self._compute_fn({**defaults, **attributes}, len(self.output_specs))(list(inputs))

    @property
    def qualified_name(self) -> str:
        return f"{self.domain}::{self.op_type}"

    def covers(self, opset: int) -> bool:
        return self.since <= opset and (self.until is None or opset <= self.until)

    def opset_text(self) -> str:
        return f"{self.since}+" if self.until is None else f"{self.since}..{self.until}"

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.qualified_name} opsets {self.opset_text()}>"

    # ------------------------------------------------------------- checking
    def _check_kernel(self) -> None:
        name = self.qualified_name
        if self._kernel is None:
            raise InvalidArgument(f"custom op {name} has no kernel: decorate a function with "
                                  "@ort_core.custom_op(...), pass kernel=..., or define compute() in a subclass")
        if not callable(self._kernel):
            raise InvalidArgument(f"custom op {name}: the kernel must be callable, got {self._kernel!r}")
        try:
            params = inspect.signature(self._kernel).parameters.values()
        except (TypeError, ValueError):  # builtins without a signature: trust them
            return
        kinds = {p.kind for p in params}
        if inspect.Parameter.VAR_KEYWORD not in kinds:
            accepted = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
            missing = [a.name for a in self.attr_specs if a.name not in accepted]
            if missing:
                raise InvalidArgument(f"custom op {name}: the kernel {_fn_name(self._kernel)} does not accept the "
                                      f"declared attribute(s) {missing} as keyword arguments")
        if self.input_specs and self.input_specs[-1].variadic and inspect.Parameter.VAR_POSITIONAL not in kinds:
            raise InvalidArgument(f"custom op {name}: input '{self.input_specs[-1].name}' is variadic but the kernel "
                                  f"{_fn_name(self._kernel)} takes no *args")

    def resolve_attributes(self, node: Node) -> dict[str, Any]:
        """The node's attribute values, defaults filled in and converted to the declared kinds."""
        declared = {a.name: a for a in self.attr_specs}
        unknown = sorted(set(node.attrs) - set(declared))
        if unknown:
            raise InvalidGraph(f"attribute(s) {unknown} are not declared by custom op {self.qualified_name} "
                               f"(declared: {sorted(declared)})")
        out = {}
        for a in self.attr_specs:
            if a.name in node.attrs:
                out[a.name] = convert_attr(a.kind, node.attrs[a.name],
                                           f"attribute '{a.name}' of custom op {self.qualified_name}")
            elif a.required:
                raise InvalidGraph(f"required attribute '{a.name}' of custom op {self.qualified_name} is missing")
            else:
                out[a.name] = a.default
        return out

    def _expanded(self, specs: tuple[ArgSpec, ...], count: int) -> list[ArgSpec]:
        """One spec per position: a variadic last spec repeats to cover ``count`` positions."""
        if specs and specs[-1].variadic:
            return list(specs[:-1]) + [specs[-1]] * max(count - (len(specs) - 1), 0)
        return list(specs)

    def _check_arity(self, node: Node) -> None:
        name = self.qualified_name
        for what, specs, names in (("input", self.input_specs, node.inputs), ("output", self.output_specs,
                                                                              node.outputs)):
            variadic = bool(specs) and specs[-1].variadic
            fixed = specs[:-1] if variadic else specs
            if not variadic and len(names) > len(specs):
                raise InvalidGraph(f"the node has {len(names)} {what}s; custom op {name} declares "
                                   f"{len(specs)}: {[s.name for s in specs]}")
            if what == "input":
                for k, s in enumerate(fixed):
                    if not s.optional and (k >= len(names) or not names[k]):
                        raise InvalidGraph(f"required input {k} ('{s.name}') of custom op {name} is missing")
            if variadic:
                extra = names[len(fixed):]
                if not extra and not specs[-1].optional:
                    raise InvalidGraph(f"variadic {what} '{specs[-1].name}' of custom op {name} needs at least "
                                       "one value")
                if what == "input" and not all(extra):
                    raise InvalidGraph(f"variadic input '{specs[-1].name}' of custom op {name} may not "
                                       "omit values")

    def _check_static_inputs(self, node: Node, graph: Graph, specs: list[ArgSpec]) -> None:
        bound: dict[str, tuple[int, int]] = {}
        for k, (value, spec) in enumerate(zip(node.inputs, specs)):
            t = graph.type_of(value) if value else None
            if t is None or t.kind != "tensor" or not t.elem_type:
                continue
            _check_type(t.elem_type, spec, k, bound, f"input {k} ('{value}')", self.qualified_name, InvalidGraph)

    # -------------------------------------------------------------- binding
    def bind(self, node: Node, opset: int, graph: Graph | None = None) -> Callable[..., tuple]:
        """The kernel for ``node``: ``kernel(*inputs) -> tuple`` with one entry per node output.

        Checks the node against the declaration (arity, attributes, static input types) now and
        the values against it on every call. When ``graph`` is given, output types the graph does
        not know yet are recorded there after the first successful run.
        """
        self._check_arity(node)
        attrs = self.resolve_attributes(node)
        in_specs = self._expanded(self.input_specs, len(node.inputs))
        out_specs = self._expanded(self.output_specs, len(node.outputs))
        if graph is not None:
            self._check_static_inputs(node, graph, in_specs)
        compute = self._compute_fn(attrs, len(out_specs))
        name = self.qualified_name
        n_in, n_node_out = len(in_specs), len(node.outputs)
        omitted = [k for k, o in enumerate(node.outputs) if not o]
        recorder = None
        if graph is not None and any(o and incomplete(graph.type_of(o)) for o in node.outputs):
            recorder = FirstRunTypes(graph, list(node.outputs))

        def kernel(*xs: Any) -> tuple:
            xs = list(xs[:n_in]) + [None] * (n_in - len(xs))
            bound: dict[str, tuple[int, int]] = {}
            for k, (x, spec) in enumerate(zip(xs, in_specs)):
                if x is None:
                    if not spec.optional:
                        raise InvalidArgument(f"input {k} ('{spec.name}') of custom op {name} has no value")
                    continue
                _check_type(_code_of(x, f"input {k} ('{spec.name}')", name), spec, k, bound,
                            f"input {k} ('{spec.name}')", name, InvalidArgument)
            results = _as_outputs(compute(xs), len(out_specs), name)
            for k, (r, spec) in enumerate(zip(results, out_specs)):
                if r is None:
                    if not spec.optional:
                        raise KernelError(f"custom op {name} returned None for output {k} ('{spec.name}'), which "
                                          "is not declared optional")
                    continue
                _check_type(_code_of(r, f"output {k} ('{spec.name}')", name, KernelError), spec, k, bound,
                            f"output {k} ('{spec.name}')", name, KernelError)
            if recorder is not None and not recorder.done:
                recorder.record(results)
            out = list(results[:n_node_out]) + [None] * (n_node_out - len(results))
            for k in omitted:
                out[k] = None
            return tuple(out)

        return kernel

    def _compute_fn(self, attrs: dict[str, Any], n_outputs: int) -> Callable[[list], Any]:
        """compute(list of inputs) -> raw results, with the node's attributes bound."""
        fn = self._kernel

        def call(xs: list) -> Any:
            return fn(*xs, **attrs)

        return call

    # ------------------------------------------------------- static typing
    def static_output_types(self, node: Node, graph: Graph) -> list[ValueType | None]:
        """Output types of ``node`` from ``infer`` if given, else from the declaration and input types."""
        in_specs = self._expanded(self.input_specs, len(node.inputs))
        out_specs = self._expanded(self.output_specs, len(node.outputs))
        infos: list[TensorInfo | None] = []
        for value in node.inputs:
            t = graph.type_of(value) if value else None
            if t is None or t.kind != "tensor":
                infos.append(None)
                continue
            dtype = _np_dtype_or_none(t.elem_type)
            infos.append(TensorInfo(dtype, t.shape))
        infos += [None] * (len(in_specs) - len(infos))
        if self._infer is None:
            return self._declared_types(infos, in_specs, out_specs)
        try:
            attrs = self.resolve_attributes(node)
        except OrtError:
            return []  # reported with the node's name when the op is compiled
        try:
            result = self._infer(*infos, **attrs)
        except Exception as e:  # noqa: BLE001 - user code: report it against the node
            raise InvalidGraph(f"{node.label}: shape inference of custom op {self.qualified_name} raised "
                               f"{type(e).__name__}: {e}") from e
        return self._parse_inferred(result, out_specs, node)

    def _declared_types(self, infos, in_specs, out_specs) -> list[ValueType | None]:
        bound: dict[str, int] = {}
        for info, spec in zip(infos, in_specs):
            if info is not None and info.dtype is not None and spec.var:
                bound.setdefault(spec.var, elem_type_of(info.dtype) or 0)
        out: list[ValueType | None] = []
        for spec in out_specs:
            code = bound.get(spec.var, 0) if spec.var else 0
            if not code and len(spec.allowed) == 1:
                code = next(iter(spec.allowed))
            out.append(ValueType.tensor(code, None) if code else None)
        return out

    def _parse_inferred(self, result, out_specs, node: Node) -> list[ValueType | None]:
        where = f"{node.label}: shape inference of custom op {self.qualified_name}"
        single = len(out_specs) == 1 and not self.output_specs[-1].variadic
        if single and _is_one_info(result):
            result = [result]
        if not isinstance(result, (list, tuple)) or len(result) != len(out_specs):
            raise InvalidGraph(f"{where} must return one (dtype, shape) or None per output ({len(out_specs)}), "
                               f"got {result!r}")
        out: list[ValueType | None] = []
        for k, (r, spec) in enumerate(zip(result, out_specs)):
            if r is None:
                out.append(None)
                continue
            if not _is_one_info(r):
                raise InvalidGraph(f"{where}: entry {k} must be (dtype, shape), TensorInfo or None, got {r!r}")
            dtype, shape = r
            code = 0 if dtype is None else parse_elem_type(dtype, where)
            if code and code not in spec.allowed:
                raise InvalidGraph(f"{where}: output {k} ('{spec.name}') inferred as {elem_type_name(code)}, but "
                                   f"declared {spec.describe()}")
            if shape is not None:
                shape = tuple(None if d is None else (d if isinstance(d, str) else int(d)) for d in shape)
            out.append(ValueType.tensor(code, shape))
        return out


def custom_op(domain: str, op_type: str | None = None, *, inputs: Sequence[Any], outputs: Sequence[Any],
              type_constraints: dict[str, Any] | None = None, attributes: dict[str, Any] | None = None,
              since: int = 1, until: int | None = None,
              infer: Callable[..., Any] | None = None) -> Callable[[Callable[..., Any]], CustomOp]:
    """Decorator turning a numpy function into a CustomOp (``op_type`` defaults to its name).

    Example::

        @ort_core.custom_op("com.example", inputs=["float"], outputs=["float"], attributes={"alpha": 1.0})
        def Scale(x, *, alpha):
            return x * np.float32(alpha)
    """

    def decorate(fn: Callable[..., Any]) -> CustomOp:
        op = CustomOp(domain, op_type or getattr(fn, "__name__", None), inputs=inputs, outputs=outputs,
                      type_constraints=type_constraints or {}, attributes=attributes or {}, since=since,
                      until=until, kernel=fn, infer=infer)
        op.__doc__ = fn.__doc__
        return op

    return decorate


# ------------------------------------------------------------------ helpers
def _check_type(code: int, spec: ArgSpec, k: int, bound: dict[str, tuple[int, int]], what: str, op: str,
                error: type[OrtError]) -> None:
    if code not in spec.allowed:
        raise error(f"{what} of custom op {op} has type tensor({elem_type_name(code)}); "
                    f"'{spec.name}' accepts {spec.describe()}")
    if spec.var:
        prev = bound.setdefault(spec.var, (code, k))
        if prev[0] != code:
            raise error(f"{what} of custom op {op} has type tensor({elem_type_name(code)}), but type constraint "
                        f"'{spec.var}' is already bound to tensor({elem_type_name(prev[0])}) by an earlier value")


def _code_of(x: Any, what: str, op: str, error: type[OrtError] = InvalidArgument) -> int:
    dtype = getattr(x, "dtype", None)
    code = elem_type_of(dtype) if dtype is not None else None
    if code is None:
        raise error(f"{what} of custom op {op} is {type(x).__name__}"
                    f"{f' of {dtype}' if dtype is not None else ''}, not a tensor of an ONNX element type")
    return code


def _as_outputs(results: Any, n: int, op: str) -> list:
    if not isinstance(results, (tuple, list)):
        results = (results,)
    if len(results) != n:
        raise KernelError(f"custom op {op} returned {len(results)} output(s), expected {n}")
    return [r if r is None or isinstance(r, np.ndarray) else np.asarray(r) for r in results]


def _is_one_info(r: Any) -> bool:
    if isinstance(r, TensorInfo):
        return True
    if not isinstance(r, (tuple, list)) or len(r) != 2:
        return False
    dtype, shape = r
    dtype_like = dtype is None or isinstance(dtype, (str, np.dtype, type, int))
    return dtype_like and (shape is None or isinstance(shape, (tuple, list)))


def _np_dtype_or_none(code: int) -> np.dtype | None:
    if not code:
        return None
    try:
        return np_dtype(code)
    except (KeyError, TypeError, ValueError):
        return None


def _is_int(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def _fn_name(fn: Any) -> str:
    return f"'{getattr(fn, '__qualname__', None) or getattr(fn, '__name__', repr(fn))}'"
