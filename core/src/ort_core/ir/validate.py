"""Structural checks of a loaded model at session creation: each value defined exactly once, no cycles,
known domains and opsets, operators fitting their schema's counts and attribute types, bounded nesting.
Errors name the graph and node; operator support and tensor types are the partitioner's and kernels' job.
"""

from __future__ import annotations

import functools
from collections.abc import Collection

from ..errors import InvalidGraph
from .external import MAX_SUBGRAPH_DEPTH
from .graph import Graph, Model, Node, onnx_domain
from .types import elem_type_name

_ONNX_DOMAINS = ("", "ai.onnx.ml", "ai.onnx.preview.training", "ai.onnx.preview")


def validate_model(model: Model, custom_domains: Collection[str] = ()) -> None:
    """Raise InvalidGraph for the first structural problem of ``model``.

    ``custom_domains``: domains of the custom ops registered for the session; a node may use such a
    domain without the model importing it (as custom-op lookup allows).
    """
    _check_opsets(model, custom_domains)
    for v in model.graph.inputs:
        if v.type.kind == "tensor" and v.type.elem_type and elem_type_name(v.type.elem_type).startswith("unknown"):
            raise InvalidGraph(f"{model.source}: graph input '{v.name}' declares unknown element type "
                               f"{v.type.elem_type}")
    known = set(model.opset_imports) | set(custom_domains) | {"", "ai.onnx"}
    _check_graph(model.graph, frozenset(), known, model, model.source, 0)


@functools.cache
def _newest_opsets() -> dict[str, int]:
    """Newest opset version per domain that the installed onnx defines operators for."""
    from onnx import defs

    newest: dict[str, int] = {}
    for schema in defs.get_all_schemas_with_history():
        newest[schema.domain] = max(newest.get(schema.domain, 0), schema.since_version)
    newest[""] = max(newest.get("", 0), defs.onnx_opset_version())
    return newest


def _check_opsets(model: Model, custom_domains: Collection[str]) -> None:
    newest = _newest_opsets()
    for domain, version in model.opset_imports.items():
        shown = domain or "ai.onnx (default)"
        if version < 0:
            raise InvalidGraph(f"{model.source}: model imports opset {version} of domain '{shown}'; versions "
                               "are not negative")
        limit = newest.get(domain)
        if limit is not None and version > limit and domain not in custom_domains:
            raise InvalidGraph(f"{model.source}: model imports opset {version} of domain '{shown}'; the newest "
                               f"this onnx knows is {limit} (unsupported opset version)")


def _check_graph(graph: Graph, outer: frozenset[str], known_domains: set[str], model: Model, where: str,
                 depth: int) -> None:
    if depth > MAX_SUBGRAPH_DEPTH:
        # the loader refuses this first; an IR built in memory meets it here
        raise InvalidGraph(f"{where}: subgraphs are nested more than {MAX_SUBGRAPH_DEPTH} levels deep")
    inputs: set[str] = set()
    for v in graph.inputs:
        if not v.name:
            raise InvalidGraph(f"{where}: graph '{graph.name}' has an input without a name")
        if v.name in inputs:
            raise InvalidGraph(f"{where}: graph '{graph.name}' lists input '{v.name}' twice")
        inputs.add(v.name)
    for v in graph.outputs:
        if not v.name:
            raise InvalidGraph(f"{where}: graph '{graph.name}' has an output without a name")
    producer: dict[str, Node] = {}
    for node in graph.nodes:
        domain = onnx_domain(node.domain)
        if domain not in known_domains:
            raise InvalidGraph(f"{where}: {node.label} uses domain '{node.domain}', which the model does not import "
                               "(opset_import) and no registered custom op declares (unknown domain)")
        _check_arity(node, domain, model, where)
        for o in node.outputs:
            if not o:
                continue
            if o in producer:
                other = producer[o]
                who = "twice" if other is node else f"by {other.label} and by {node.label}"
                raise InvalidGraph(f"{where}: value '{o}' is produced {who} (a value is produced once)")
            if o in inputs or o in graph.initializers:
                kind = "a graph input" if o in inputs else "an initializer"
                raise InvalidGraph(f"{where}: {node.label} produces '{o}', which is also {kind} "
                                   "(a value is produced once)")
            producer[o] = node
    defined = inputs | set(graph.initializers) | set(producer)
    visible = outer | defined
    for node in graph.nodes:
        looped = set(node.inputs) & {o for o in node.outputs if o}
        if looped:
            raise InvalidGraph(f"{where}: graph '{graph.name}' has a cycle through {node.label}: it reads its own "
                               f"output '{sorted(looped)[0]}'")
        for i in node.inputs:
            if i and i not in visible:
                raise InvalidGraph(f"{where}: {node.label} reads '{i}', which no node, graph input or initializer "
                                   "defines")
    for v in graph.outputs:
        if v.name not in visible:
            raise InvalidGraph(f"{where}: graph output '{v.name}' is produced by no node, input or initializer")
    try:
        graph.topological_order()
    except ValueError as e:
        raise InvalidGraph(f"{where}: {e}") from None
    for node in graph.nodes:
        for sub in node.subgraphs():
            _check_graph(sub, visible, known_domains, model, f"{where}: {node.label} subgraph '{sub.name}'",
                         depth + 1)


@functools.lru_cache(maxsize=1024)
def _arity(op_type: str, domain: str, version: int):
    """(min inputs, max inputs, min outputs, max outputs, since version, attribute types, required inputs as
    (index, name)) of an onnx operator, or None."""
    from onnx import defs

    try:
        s = defs.get_schema(op_type, version, domain)
    except Exception:  # noqa: BLE001 - no such operator at this version: the partitioner reports it
        return None
    attrs = {name: int(a.type.value) for name, a in s.attributes.items()}
    single = defs.OpSchema.FormalParameterOption.Single
    required = tuple((k, p.name) for k, p in enumerate(s.inputs) if p.option == single)
    return s.min_input, s.max_input, s.min_output, s.max_output, s.since_version, attrs, required


def _check_arity(node: Node, domain: str, model: Model, where: str) -> None:
    """Inputs and outputs of an onnx operator within its schema's counts, required inputs given, attributes
    of the declared types (optimizer passes and kernel factories rely on all three)."""
    if domain not in _ONNX_DOMAINS:
        return
    found = _arity(node.op_type, domain, model.opset(domain) or 1)
    if found is None:
        return
    lo_in, hi_in, lo_out, hi_out, since, attr_types, required = found
    op = f"{node.op_type}-{since}"
    for k, name in required:
        if k < len(node.inputs) and not node.inputs[k]:
            raise InvalidGraph(f"{where}: {node.label} leaves its required input {k} ('{name}' of {op}) empty")
    for name, code in node.attr_types.items():
        want = attr_types.get(name)
        if want is not None and code != want:
            raise InvalidGraph(f"{where}: {node.label} has attribute '{name}' of type {_attr_type(code)}; {op} "
                               f"declares {_attr_type(want)}")
    if not lo_in <= len(node.inputs) <= hi_in:
        raise InvalidGraph(f"{where}: {node.label} has {len(node.inputs)} input(s); {op} takes "
                           f"{_range(lo_in, hi_in)}")
    if not lo_out <= len(node.outputs) <= hi_out:
        raise InvalidGraph(f"{where}: {node.label} has {len(node.outputs)} output(s); {op} gives "
                           f"{_range(lo_out, hi_out)}")


def _range(lo: int, hi: int) -> str:
    if lo == hi:
        return str(lo)
    return f"at least {lo}" if hi > 1 << 20 else f"{lo} to {hi}"


def _attr_type(code: int) -> str:
    from onnx import AttributeProto

    try:
        return AttributeProto.AttributeType.Name(code)
    except ValueError:
        return f"unknown ({code})"
