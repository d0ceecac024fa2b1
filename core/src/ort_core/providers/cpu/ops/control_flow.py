"""CPU kernels for control flow: If, Loop and Scan (opset 8's batched form, 9+'s axes form); bodies are
placed and planned by the session (the ``bodies`` planner) and run by the core's executor, with a Python
loop over iterations only (each runs a whole subgraph, so no array formulation exists). SequenceMap lives
with the sequence ops.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from ....errors import KernelError
from ....ir.graph import Graph, Node
from ....ir.types import np_dtype
from ....limits import MAX_TENSOR_BYTES_KEY, current
from ..registry import outer_scope_names, register
from .shape_ops import normalize_axis


def _graph_attr(node: Node, name: str) -> Graph:
    g = node.attr(name)
    if not isinstance(g, Graph):
        raise KernelError(f"{node.label}: graph attribute '{name}' is required")
    return g


def _scalar(node: Node, value, what: str):
    """The single element of a one-element tensor input (condition, trip count)."""
    if isinstance(value, np.generic):
        return value.item()
    if not isinstance(value, np.ndarray) or value.size != 1:
        got = f"shape {list(value.shape)}" if isinstance(value, np.ndarray) else type(value).__name__
        raise KernelError(f"{node.label}: {what} must be a tensor with a single element, got {got}")
    return value.reshape(-1)[0].item()


def _empty_scan_output(node: Node, body, out_index: int, body_index: int, axis: int = 0) -> np.ndarray:
    """A scan output of zero iterations: dtype and element shape from the static types.

    The Loop/Scan output's declared type wins for the dtype (the session checks against it);
    the element shape from the body's output type (symbolic dims as 0), or (0,) when its rank is unknown.
    """
    outer_t = body.graph.parent.type_of(node.outputs[out_index]) if body.graph.parent else None
    inner_t = body.output_type(body_index)
    elem = next((t.elem_type for t in (outer_t, inner_t) if t is not None and t.kind == "tensor" and t.elem_type),
                None)
    try:
        dtype = np_dtype(elem) if elem else np.dtype(np.float32)
    except (KeyError, TypeError, ValueError):
        dtype = np.dtype(np.float32)
    shape = inner_t.shape if inner_t is not None and inner_t.kind == "tensor" else None
    if shape is None:
        return np.empty((0,), dtype=dtype)
    shape = [d if isinstance(d, int) else 0 for d in shape]  # as onnxruntime: unknown dims hold nothing
    shape.insert(axis if axis >= 0 else len(shape) + 1 + axis, 0)
    return np.empty(shape, dtype=dtype)


def _stack(node: Node, items: list, k: int, axis: int = 0) -> np.ndarray:
    """Concatenate per-iteration scan-output values along a new axis."""
    if not all(isinstance(v, np.ndarray) for v in items):
        raise KernelError(f"{node.label}: scan output {k} must be a tensor in every iteration")
    try:
        return np.stack(items, axis=axis)
    except ValueError as e:
        shapes = sorted({tuple(v.shape) for v in items})
        raise KernelError(f"{node.label}: scan output {k} changes shape across iterations "
                          f"({[list(s) for s in shapes]}): {e}") from None


# ------------------------------------------------------------------------------------------- If

@register("If", since=1)
def _if(node: Node, opset: int, bodies):
    outer = outer_scope_names(node)
    branches = []
    for name in ("then_branch", "else_branch"):
        body = bodies(_graph_attr(node, name), node, outer)
        if body.input_names:
            raise KernelError(f"{node.label}: {name} must take no inputs, it declares {body.input_names}")
        if len(body.output_names) != len(node.outputs):
            raise KernelError(f"{node.label}: {name} yields {len(body.output_names)} output(s), the node "
                              f"has {len(node.outputs)}")
        branches.append(body)
    then_b, else_b = branches

    def kernel(cond, *outer_values):
        # a one-element array (the usual condition) straight to its value; anything else through _scalar
        flag = cond.item() if type(cond) is np.ndarray and cond.size == 1 else _scalar(node, cond, "condition 'cond'")
        body = then_b if flag else else_b
        return body.run_bound(outer_values)
    return kernel


# ----------------------------------------------------------------------------------------- Loop

@register("Loop", since=1)
def _loop(node: Node, opset: int, bodies):
    if len(node.inputs) < 2:
        raise KernelError(f"{node.label}: needs the inputs M and cond (either may be '')")
    n_carried = len(node.inputs) - 2
    body = bodies(_graph_attr(node, "body"), node, outer_scope_names(node))
    if len(body.input_names) != 2 + n_carried:
        raise KernelError(f"{node.label}: body takes {len(body.input_names)} input(s), expected "
                          f"{2 + n_carried} (iteration number, condition, {n_carried} loop-carried)")
    n_scan = len(body.output_names) - 1 - n_carried
    if n_scan < 0:
        raise KernelError(f"{node.label}: body yields {len(body.output_names)} output(s), expected at least "
                          f"{1 + n_carried} (condition and {n_carried} loop-carried)")
    n_out = len(node.outputs)
    if n_out > n_carried + n_scan:
        raise KernelError(f"{node.label}: has {n_out} outputs, the body yields only {n_carried + n_scan}")
    # zero-iteration scan outputs are fixed per node: build them once (read-only, shared by runs)
    empties = []
    for k in range(n_scan):
        e = _empty_scan_output(node, body, n_carried + k, 1 + n_carried + k) if n_carried + k < n_out else None
        if e is not None:
            e.setflags(write=False)
        empties.append(e)
    true = np.array(True)
    true.setflags(write=False)  # the default condition, shared by every run

    def kernel(m, cond, *rest):
        carried = list(rest[:n_carried])
        limit = sys.maxsize if m is None else int(_scalar(node, m, "trip count 'M'"))
        cond_in = true if cond is None else cond
        going = True if cond is None else bool(_scalar(node, cond, "condition 'cond'"))
        base = body.bind(rest[n_carried:])
        scans: list[list] = [[] for _ in range(n_scan)]
        scanned = [0] * n_scan  # bytes gathered per scan output: the stacked result must fit the limit
        max_bytes = current().max_tensor_bytes
        i = 0
        while going and i < limit:
            outs = body.run(base, [np.array(i, dtype=np.int64), cond_in, *carried])
            cond_in = outs[0]
            going = bool(_scalar(node, cond_in, "the body's condition output"))
            carried = outs[1:1 + n_carried]
            for k in range(n_scan):
                item = outs[1 + n_carried + k]
                scans[k].append(item)
                scanned[k] += getattr(item, "nbytes", 0)
                if scanned[k] > max_bytes:
                    raise KernelError(f"{node.label}: scan output {k} grows past the limit of {max_bytes} bytes per "
                                      f"tensor after {i + 1} iterations (session config entry "
                                      f"'{MAX_TENSOR_BYTES_KEY}')")
            i += 1
        results = carried + [_stack(node, s, k) if s else empties[k] for k, s in enumerate(scans)]
        return tuple(results[:n_out])
    return kernel


# ----------------------------------------------------------------------------------------- Scan

def _scan_body(node: Node, bodies, n_inputs: int) -> tuple[Any, int, int, int]:
    """Body plus (scan inputs M, state variables N, scan outputs K) checked against the node."""
    m = int(node.attr("num_scan_inputs", 0))
    n_state = n_inputs - m
    if m <= 0 or n_state < 0:
        raise KernelError(f"{node.label}: num_scan_inputs must be in [1, {n_inputs}], got {m}")
    body = bodies(_graph_attr(node, "body"), node, outer_scope_names(node))
    if len(body.input_names) != n_state + m:
        raise KernelError(f"{node.label}: body takes {len(body.input_names)} input(s), expected {n_state + m} "
                          f"({n_state} state variables, {m} scan inputs)")
    n_scan_out = len(body.output_names) - n_state
    if n_scan_out < 0:
        raise KernelError(f"{node.label}: body yields {len(body.output_names)} output(s), expected at least "
                          f"{n_state} state variables")
    if len(node.outputs) != n_state + n_scan_out:
        raise KernelError(f"{node.label}: has {len(node.outputs)} outputs, the body yields {n_state + n_scan_out}")
    return body, m, n_state, n_scan_out


def _per_input(node: Node, name: str, count: int, allowed=None) -> list[int]:
    values = node.attr(name)
    if values is None:
        return [0] * count
    values = [int(v) for v in values]
    if len(values) != count:
        raise KernelError(f"{node.label}: '{name}' has {len(values)} entries, expected {count}")
    if allowed is not None and any(v not in allowed for v in values):
        raise KernelError(f"{node.label}: '{name}' entries must be 0 (forward) or 1 (reverse), got {values}")
    return values


@register("Scan", since=9)
def _scan(node: Node, opset: int, bodies):
    body, m, n_state, n_out = _scan_body(node, bodies, len(node.inputs))
    in_axes = _per_input(node, "scan_input_axes", m)
    in_dirs = _per_input(node, "scan_input_directions", m, (0, 1))
    out_axes = _per_input(node, "scan_output_axes", n_out)
    out_dirs = _per_input(node, "scan_output_directions", n_out, (0, 1))

    def kernel(*args):
        states = list(args[:n_state])
        seqs = []
        for j, (x, axis, rev) in enumerate(zip(args[n_state:n_state + m], in_axes, in_dirs)):
            if not isinstance(x, np.ndarray) or x.ndim == 0:
                raise KernelError(f"{node.label}: scan input {j} must be a tensor of rank >= 1")
            # iterate over axis 0 of a view: moving the scan axis costs no copy
            v = np.moveaxis(x, normalize_axis(node, axis, x.ndim, f"scan_input_axes[{j}]"), 0)
            seqs.append(v[::-1] if rev else v)
        steps = seqs[0].shape[0]
        if any(s.shape[0] != steps for s in seqs):
            raise KernelError(f"{node.label}: scan inputs differ in sequence length "
                              f"{[s.shape[0] for s in seqs]}")
        base = body.bind(args[n_state + m:])
        acc: list[list] = [[] for _ in range(n_out)]
        for t in range(steps):
            outs = body.run(base, [*states, *(s[t] for s in seqs)])
            states = outs[:n_state]
            for k in range(n_out):
                acc[k].append(outs[n_state + k])
        results = list(states)
        for k, items in enumerate(acc):
            if not items:
                results.append(_empty_scan_output(node, body, n_state + k, n_state + k, out_axes[k]))
                continue
            if out_dirs[k]:
                items.reverse()
            rank = getattr(items[0], "ndim", 0) + 1
            results.append(_stack(node, items, k, normalize_axis(node, out_axes[k], rank, f"scan_output_axes[{k}]")))
        return tuple(results)
    return kernel


@register("Scan", since=8, until=8)
def _scan8(node: Node, opset: int, bodies):
    """Opset 8: axis 0 is a batch axis, axis 1 the sequence axis, with optional per-batch lengths;
    scan outputs are padded with zeros past each batch entry's length."""
    body, m, n_state, n_out = _scan_body(node, bodies, len(node.inputs) - 1)
    dirs = _per_input(node, "directions", m, (0, 1))

    def kernel(seq_lens, *args):
        inits, xs = args[:n_state], args[n_state:n_state + m]
        if any(not isinstance(x, np.ndarray) or x.ndim < 2 for x in xs):
            raise KernelError(f"{node.label}: scan inputs must be tensors of rank >= 2 ([batch, sequence, ...])")
        batch, steps = xs[0].shape[:2]
        if any(x.shape[:2] != (batch, steps) for x in xs):
            raise KernelError(f"{node.label}: scan inputs differ in batch or sequence size "
                              f"{[list(x.shape[:2]) for x in xs]}")
        if any(s.ndim == 0 or s.shape[0] != batch for s in inits):
            raise KernelError(f"{node.label}: initial states must have the batch size {batch} as first dimension")
        lens = [steps] * batch
        if seq_lens is not None:
            lens = [int(v) for v in np.asarray(seq_lens).reshape(-1).tolist()]
            if len(lens) != batch or any(not 0 <= v <= steps for v in lens):
                raise KernelError(f"{node.label}: sequence_lens {lens} must hold {batch} values in [0, {steps}]")
        base = body.bind(args[n_state + m:])
        finals: list[list] = [[] for _ in range(n_state)]
        per_batch: list[list] = [[] for _ in range(n_out)]
        for b in range(batch):
            states = [s[b] for s in inits]
            n = lens[b]
            elems = [x[b, n - 1::-1] if rev and n else x[b, :n] for x, rev in zip(xs, dirs)]
            acc: list[list] = [[] for _ in range(n_out)]
            for t in range(n):
                outs = body.run(base, [*states, *(e[t] for e in elems)])
                states = outs[:n_state]
                for k in range(n_out):
                    acc[k].append(outs[n_state + k])
            for i, s in enumerate(states):
                finals[i].append(s)
            for k in range(n_out):
                per_batch[k].append(_stack(node, acc[k], k) if acc[k] else None)
        results = [_stack(node, f, i) for i, f in enumerate(finals)]
        for k, parts in enumerate(per_batch):
            results.append(_pad_batches(node, body, k, n_state, parts, batch, steps))
        return tuple(results)
    return kernel


def _pad_batches(node: Node, body, k: int, n_state: int, parts: list, batch: int, steps: int) -> np.ndarray:
    """[batch, steps, ...] scan output from per-batch results of varying length (zeros after)."""
    sample = next((p for p in parts if p is not None), None)
    if sample is None:
        empty = _empty_scan_output(node, body, n_state + k, n_state + k)
        return np.zeros((batch, steps, *empty.shape[1:]), dtype=empty.dtype)
    if all(p is not None and p.shape[0] == steps for p in parts):
        return _stack(node, parts, k)
    out = np.zeros((batch, steps, *sample.shape[1:]), dtype=sample.dtype)
    for b, p in enumerate(parts):
        if p is not None:
            out[b, :p.shape[0]] = p
    return out
