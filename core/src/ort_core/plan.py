"""Execution plan: compiled kernels as a flat list of steps over integer value slots.

Built once per session: slots resolved, copies inserted where a value crosses devices, and
each intermediate released right after its last reader. ``run`` only walks the list; it is
re-entrant (every call gets its own frame) so many threads may run one plan at once. A Route
re-targets the plan for inputs already on a device and outputs wanted on one (IOBinding).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

import numpy as np

from . import limits
from .errors import InvalidArgument, InvalidGraph, KernelError, OrtError, RunTerminated
from .limits import RunContext
from .memory.device import HOST, Device
from .memory.layouts import shape_signature
from .memory.tensor import DeviceTensor


class Step(NamedTuple):
    """One kernel call over frame slots (a tuple: the walk unpacks it without attribute lookups)."""

    kernel: Callable[..., Any]
    ins: tuple[int, ...]
    outs: tuple[int, ...]
    release: tuple[int, ...]
    label: str  # for errors: "node 'conv1' (Conv) on CPUExecutionProvider"
    copy: bool = False  # a device copy (one in, one out): may be skipped when its result is unneeded


# IEEE special values are results, not errors (as in onnxruntime): numpy warns of none during a run. numpy 2
# keeps its error state in a context variable that np.errstate sets and resets; setting it directly to the
# state errstate(all="ignore") makes saves a run 0.7 us of errstate's set-up (a tenth of a small model's run).
# Where that variable is not there (another numpy), np.errstate does it.
try:
    from numpy._core._ufunc_config import _extobj_contextvar as _NUMPY_ERRORS

    with np.errstate(all="ignore"):
        _IGNORE_ALL = _NUMPY_ERRORS.get()
except (ImportError, AttributeError):  # pragma: no cover - numpy 1.x
    _NUMPY_ERRORS = None


def _quiet_numpy() -> Any:
    if _NUMPY_ERRORS is not None:
        return _NUMPY_ERRORS.set(_IGNORE_ALL)
    state = np.errstate(all="ignore")
    state.__enter__()
    return state


def _loud_numpy(token: Any) -> None:
    if _NUMPY_ERRORS is not None:
        _NUMPY_ERRORS.reset(token)
    else:
        token.__exit__(None, None, None)


@dataclass(frozen=True)
class Route:
    """The plan's steps for one placement of inputs and outputs on devices (ExecutionPlan.route).

    ``inputs``: placed input name -> the slot to feed with its device value; ``want``: one slot
    per requested output, holding it on the requested device; ``size``: the frame length.
    """

    steps: tuple[Step, ...]
    size: int
    inputs: dict[str, int]
    want: tuple[int, ...]


Copier = Callable[[Device, Device], "Callable[[Any], Any] | None"]
"""copier(src, dst) -> a function copying one value from ``src`` to ``dst`` with a single data
transfer, or None when no single transfer connects them (a Route then goes through the host)."""

_MAX_ROUTES = 64


class ExecutionPlan:
    def __init__(self) -> None:
        self.slots: dict[tuple[str, Device], int] = {}
        self.template: list[Any] = []
        self.steps: list[Step] = []
        self.location: dict[str, Device] = {}  # where each value is produced (set by PlanBuilder)
        self.keep: frozenset[int] = frozenset()  # slots never released (graph outputs)
        self._routes: dict[Any, Route] = {}
        self._routes_lock = threading.Lock()
        self.context = RunContext()  # the session's limits; the session sets its own
        self.stream_slots: tuple[int, ...] = ()  # slots of the run's streams (synchronized after a failure)
        self.arenas: tuple[tuple[int, Any], ...] = ()  # (slot, ArenaMemory) of the run's planned memory
        # (slot, input slots): where a run's input-shape signature goes, for memory laid out per signature
        self.signature: tuple[int, tuple[int, ...]] | None = None
        self.exclusive: threading.Lock | None = None  # set when a kernel needs stable addresses

    def slot(self, name: str, device: Device = HOST) -> int:
        key = (name, device)
        if key not in self.slots:
            self.slots[key] = len(self.template)
            self.template.append(None)
        return self.slots[key]

    def run(self, feeds: dict[int, Any], want: Sequence[int], run_options=None,
            route: Route | None = None) -> list[Any]:
        """Values of the ``want`` slots after walking the steps (``route``'s when given).

        For the run's duration its RunContext (size limit, RunOptions) is published to the kernels
        (ort_core.limits): long loops inside kernels poll the terminate flag through it.
        """
        ctx = self.context if run_options is None else replace(self.context, run_options=run_options)
        token, quiet = limits.enter(ctx), _quiet_numpy()
        try:
            results = self._run(feeds, want, run_options, route, ctx.max_tensor_bytes)
        finally:
            _loud_numpy(quiet)
            limits.leave(token)
        return self._unshared(results, feeds)

    def _unshared(self, results: list[Any], feeds: dict[int, Any]) -> list[Any]:
        """The results, each host array copied when it is not the caller's to keep: read-only, or memory
        of a feed or of the session's constants (a Reshape or Identity of an input, a weight or folded
        constant returned as is). Fresh kernel results are handed over without a copy."""
        protected = self._constant_roots
        for k, r in enumerate(results):
            if type(r) is not np.ndarray:
                continue
            root = r if r.base is None else _root(r)
            if not r.flags.writeable or id(root) in protected or _fed(root, feeds):
                results[k] = r.copy()
        return results

    @functools.cached_property
    def _constant_roots(self) -> frozenset[int]:
        return frozenset(id(_root(v)) for v in self.template if type(v) is np.ndarray)

    def _run(self, feeds: dict[int, Any], want: Sequence[int], run_options, route: Route | None,
             max_bytes: int) -> list[Any]:
        frame = self.template.copy()
        steps = self.steps
        if route is not None:
            frame.extend([None] * (route.size - len(frame)))
            steps = route.steps
        for s, v in feeds.items():
            frame[s] = v
        if self.signature is not None:  # what was fed, wherever (a Route feeds some inputs on devices)
            frame[self.signature[0]] = shape_signature(feeds[s] for s in sorted(feeds))
        return self.walk(frame, steps, want, run_options, max_bytes)

    def walk(self, frame: list[Any], steps: Sequence[Step], want: Sequence[int], run_options,
             max_bytes: int) -> list[Any]:
        """Run ``steps`` over a filled ``frame`` (the one loop every run and graph body goes through).

        One call at a time when a kernel needs stable addresses. After a failure the run's streams are
        synchronized (their errors dropped: the first failure is the one reported) before its planned
        memory goes back to the pool, so no work of a failed run touches memory a later run uses."""
        if self.signature is not None and frame[self.signature[0]] is None:  # a graph body's run
            frame[self.signature[0]] = shape_signature(frame[s] for s in self.signature[1])
        if self.exclusive is None:
            return self._walk(frame, steps, want, run_options, max_bytes)
        with self.exclusive:
            return self._walk(frame, steps, want, run_options, max_bytes)

    def _walk(self, frame: list[Any], steps: Sequence[Step], want: Sequence[int], run_options,
              max_bytes: int) -> list[Any]:
        try:
            return self._steps(frame, steps, want, run_options, max_bytes)
        except BaseException:
            self._abandon(frame)
            raise

    def _abandon(self, frame: list[Any]) -> None:
        for s in self.stream_slots:
            stream, frame[s] = frame[s], None
            if stream is not None:
                _quietly(stream.synchronize)
                _quietly(getattr(stream, "close", None))
        for s, memory in self.arenas:
            run, frame[s] = frame[s], None
            memory.give(run, complete=False)  # None (never taken, or given back already) is ignored

    @staticmethod
    def _steps(frame: list[Any], steps: Sequence[Step], want: Sequence[int], run_options,
               max_bytes: int) -> list[Any]:
        get = frame.__getitem__
        for kernel, ins, outs, release, label, _ in steps:
            if run_options is not None and run_options.terminate:
                raise RunTerminated("run() was terminated through RunOptions.terminate")
            try:  # one and two inputs without the map and star-args (about 0.1 us a node)
                n_in = len(ins)
                if n_in == 1:
                    results = kernel(frame[ins[0]])
                elif n_in == 2:
                    results = kernel(frame[ins[0]], frame[ins[1]])
                else:
                    results = kernel(*map(get, ins))
            except Exception as e:  # noqa: BLE001 - any kernel failure is reported against its node
                raise _failure(label, e) from e
            if len(outs) == 1:  # the usual case, without the zip
                v = results[0]
                if (type(v) is np.ndarray or type(v) is DeviceTensor) and v.nbytes > max_bytes:
                    # kernels check sizes they derive from data before allocating; this bounds the rest
                    # (a chain of Concat(x, x) doubling a tensor at every node, say)
                    raise KernelError(limits.too_large(label, v))
                frame[outs[0]] = v
            else:
                for s, v in zip(outs, results):
                    if (type(v) is np.ndarray or type(v) is DeviceTensor) and v.nbytes > max_bytes:
                        raise KernelError(limits.too_large(label, v))
                    frame[s] = v
            for s in release:
                frame[s] = None
        return [frame[s] for s in want]

    # ------------------------------------------------------------------ routes
    def route(self, placed: Mapping[str, Device], outputs: Sequence[tuple[str, Device]],
              copier: Copier) -> Route:
        """The steps for inputs fed on devices and outputs wanted on devices; cached per layout.

        ``placed``: graph input name -> the (non-host) device its value is fed on. Every slot
        the plan has for that input is filled from the fed value by a copy at the start, and
        the plan's own copies of it are dropped: a consumer on the fed device reads it as is.
        ``outputs``: (name, device) pairs; a value already held on that device (its producer's,
        or a copy the plan makes anyway) is taken from there, otherwise one copy from the
        producer's device is appended (two, through the host copy, between devices that no
        single transfer connects). Copies nothing needs (such as the final copies to the
        host of outputs wanted on their producer's device) are left out; every kernel still runs.
        """
        key = (tuple(sorted(placed.items(), key=lambda kv: kv[0])), tuple(outputs))
        found = self._routes.get(key)
        if found is None:
            found = self._make_route(placed, outputs, copier)
            with self._routes_lock:
                if len(self._routes) >= _MAX_ROUTES:
                    self._routes.clear()
                self._routes[key] = found
        return found

    def _make_route(self, placed: Mapping[str, Device], outputs: Sequence[tuple[str, Device]],
                    copier: Copier) -> Route:
        slots = dict(self.slots)
        size = len(self.template)
        location = dict(self.location)
        by_name: dict[str, list[tuple[Device, int]]] = {}
        for (name, device), s in self.slots.items():
            by_name.setdefault(name, []).append((device, s))

        def slot(name: str, device: Device) -> int:
            nonlocal size
            if (name, device) not in slots:
                slots[(name, device)] = size
                size += 1
            return slots[(name, device)]

        def copy(name: str, src: Device, dst: Device, steps: list[Step]) -> None:
            """Append the copies filling (name, dst) from (name, src): one, or two via the host."""
            direct = copier(src, dst)
            if direct is not None:
                steps.append(_copy_step(direct, slots[(name, src)], slot(name, dst),
                                        f"copy of '{name}' {src} -> {dst}"))
                return
            if src.is_host or dst.is_host:
                raise InvalidArgument(f"no data transfer of an installed provider copies '{name}' from {src} to {dst}")
            if (name, HOST) not in slots:
                copy(name, src, HOST, steps)
            copy(name, HOST, dst, steps)

        head: list[Step] = []
        filled: set[int] = set()  # slots of placed inputs, all written by ``head``
        inputs: dict[str, int] = {}
        for name, device in placed.items():
            if name not in location:
                raise InvalidGraph(f"'{name}' is not a value of this plan")
            fed = inputs[name] = slot(name, device)
            filled.add(fed)
            # the host copy first: copies between devices without a direct transfer start from it
            for other, s in sorted(by_name.get(name, ()), key=lambda ds: not ds[0].is_host):
                filled.add(s)
                if s != fed:
                    copy(name, device, other, head)
            location[name] = device
        body = [st for st in self.steps if not (st.copy and st.outs[0] in filled)]

        tail: list[Step] = []
        want: list[int] = []
        for name, device in outputs:
            if (name, device) not in slots:
                copy(name, location[name], device, tail)
            want.append(slots[(name, device)])

        needed = set(want)
        kept: list[Step] = []
        for st in reversed(head + body + tail):
            if st.copy and not needed.intersection(st.outs):
                continue
            kept.append(st)
            needed.update(st.ins)
        kept.reverse()
        steps = _with_releases(kept, self.keep | set(want))
        return Route(tuple(steps), size, inputs, tuple(want))


def _fed(root: Any, feeds: dict[int, Any]) -> bool:
    """Whether ``root`` owns the memory of one of the fed arrays."""
    for f in feeds.values():
        if type(f) is np.ndarray and (f is root or (f.base is not None and _root(f) is root)):
            return True
    return False


def _root(a: np.ndarray) -> Any:
    """The object owning an array's memory: the end of its chain of bases."""
    while isinstance(a, np.ndarray) and a.base is not None:
        a = a.base
    return a


def _quietly(call: Callable[[], Any] | None) -> None:
    """Call ``call`` (if any), dropping its error: after a failure, the run's first error is the one reported."""
    if call is None:
        return
    try:
        call()
    except Exception:  # noqa: BLE001
        pass


def _failure(label: str, e: Exception) -> OrtError:
    """A kernel's failure as an OrtError naming its node and provider (once)."""
    if isinstance(e, OrtError):
        node, _, provider = label.rpartition(" on ")
        if label in str(e):
            return e
        if node and node in str(e):  # the kernel named its node already: add the provider
            return type(e)(f"{e} (on {provider})")
        return type(e)(f"{label}: {e}")
    return KernelError(f"{label} failed: {type(e).__name__}: {e}")


def _copy_step(copy: Callable[[Any], Any], src: int, dst: int, label: str) -> Step:
    return Step(lambda v, _c=copy: (_c(v),), (src,), (dst,), (), label, copy=True)


def _with_releases(steps: Sequence[Step], keep: set[int] | frozenset[int]) -> list[Step]:
    """The steps with each slot not in ``keep`` released after its last reader or writer."""
    last_use: dict[int, int] = {}
    for k, step in enumerate(steps):
        for s in (*step.ins, *step.outs):
            last_use[s] = k
    releases: dict[int, list[int]] = {}
    for s, k in last_use.items():
        if s not in keep:
            releases.setdefault(k, []).append(s)
    return [st._replace(release=tuple(releases.get(k, ()))) for k, st in enumerate(steps)]


UNORDERED = object()
"""PlanBuilder.add's ``stream`` for steps that touch no value (stream creation, waits, synchronization)."""


class PlanBuilder:
    """Accumulates steps in execution order, then computes release points."""

    def __init__(self) -> None:
        self.plan = ExecutionPlan()
        self.location: dict[str, Device] = {}  # where each value is first produced
        self.copies: dict[tuple[str, Device], int] = {}
        self.constants: set[str] = set()  # initializers no feed can override
        self.keep: set[int] = set()
        self.stream_of: dict[int, Any] = {}  # step index -> the stream slot its work is on (None: synchronous)

    def define(self, name: str, device: Device = HOST, value: Any = None) -> int:
        self.location[name] = device
        s = self.plan.slot(name, device)
        if value is not None:
            self.plan.template[s] = value
        return s

    def read(self, name: str, device: Device, transfer=None, label: str = "", stream: Any = UNORDERED) -> int:
        """Slot holding ``name`` on ``device``, inserting a copy step if it lives elsewhere."""
        if name not in self.location:
            raise InvalidGraph(f"{label}: reads '{name}', which no node, graph input or initializer defines")
        src = self.location[name]
        if src == device:
            return self.plan.slots[(name, src)]
        key = (name, device)
        if key not in self.copies:
            if transfer is None:
                raise InvalidGraph(f"{label}: no data transfer to move '{name}' from {src} to {device}")
            src_slot = self.plan.slots[(name, src)]
            dst_slot = self.plan.slot(name, device)
            if name in self.constants:
                # a constant crosses once, at build time: the device copy lives in the template
                self.plan.template[dst_slot] = transfer.copy(self.plan.template[src_slot], src, device)
                self.copies[key] = dst_slot
                return dst_slot
            self.add(lambda v, _t=transfer, _s=src, _d=device: (_t.copy(v, _s, _d),), (src_slot,), (dst_slot,),
                     f"copy of '{name}' {src} -> {device}", copy=True, stream=stream)
            self.copies[key] = dst_slot
        return self.copies[key]

    def add(self, kernel, ins, outs, label: str, copy: bool = False, stream: Any = UNORDERED) -> None:
        """Append a step; ``copy=True`` marks a device copy (one input, one output) that a Route
        may leave out when nothing needs its result. ``stream``: the stream slot its work is ordered on (None:
        it completes on return), for the memory planner; left out for steps that touch no value."""
        if stream is not UNORDERED:
            self.stream_of[len(self.plan.steps)] = stream
        self.plan.steps.append(Step(kernel, tuple(ins), tuple(outs), (), label, copy))

    def finish(self) -> ExecutionPlan:
        self.plan.steps = _with_releases(self.plan.steps, self.keep)
        self.plan.location = dict(self.location)
        self.plan.keep = frozenset(self.keep)
        return self.plan


def checked_kernel(kernel, outputs: list[str], graph, label: str):
    """Wrap a kernel so each call checks its outputs against the graph's static types."""
    from .ir.types import np_dtype

    expected = []
    for name in outputs:
        t = graph.type_of(name)
        if t is None or t.kind != "tensor" or not t.elem_type:
            expected.append((name, None, None, None))
            continue
        try:
            dtype = np_dtype(t.elem_type)
        except (KeyError, TypeError, ValueError):
            dtype = None
        expected.append((name, dtype, t.shape, t.text))

    def run(*xs):
        results = kernel(*xs)
        if len(results) < len(outputs):
            raise KernelError(f"{label}: returned {len(results)} output(s), expected {len(outputs)} {outputs}")
        for (name, dtype, shape, text), value in zip(expected, results):
            got_dtype = getattr(value, "dtype", None)
            if dtype is not None and got_dtype is not None and np.dtype(got_dtype) != dtype:
                if not (dtype.kind == "O" and np.dtype(got_dtype).kind in "OUS"):
                    raise KernelError(f"{label}: output '{name}' has dtype {got_dtype}, declared {text}")
            got_shape = getattr(value, "shape", None)
            if shape is not None and got_shape is not None:
                got_shape = tuple(got_shape)
                if len(got_shape) != len(shape) or any(
                        isinstance(d, int) and d != g for d, g in zip(shape, got_shape)):
                    raise KernelError(f"{label}: output '{name}' has shape {list(got_shape)}, "
                                      f"declared {list(shape)}")
        return results

    return run
