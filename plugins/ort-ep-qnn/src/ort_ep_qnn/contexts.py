"""EPContext nodes of QNN (onnxruntime's format): which nodes are QNN's, and their context binaries loaded back.

A node is QNN's when its ``source`` is ``QNNExecutionProvider`` (this provider) or ``QNN`` (onnxruntime-qnn's
plugin), case aside, as onnxruntime reads it. A node with ``main_context=1`` holds a serialized QNN context
(embedded, or in a file beside the model); onnxruntime puts every graph of a model in one context, in the first
node, and the other nodes (``main_context=0``) name their graph by their node name. ``libQnnSystem`` reads the
context's graphs and their tensors; the context is deserialized once (``contextCreateFromBinary``), nothing is
compiled. Writing the nodes is the core's (``ort_core.epcontext``), from ``QNNProvider.export_context``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ort_core.plugins import context_blob
from ort_core.plugins.context import CONTEXT_DOMAIN, CONTEXT_OP

from .runtime import Backend, Context, GraphInfo

SOURCES = ("qnnexecutionprovider", "qnn")


def is_qnn_context_node(node: Any) -> bool:
    """Whether ``node`` is an EPContext node QNN saved (this provider or onnxruntime's)."""
    return (node.op_type == CONTEXT_OP and node.domain == CONTEXT_DOMAIN
            and str(node.attrs.get("source", "")).strip().lower() in SOURCES)


def context_reason(node: Any) -> str | None:
    """Why this provider cannot load a QNN EPContext node, or None."""
    if int(node.attrs.get("main_context", 1)) not in (0, 1):
        return f"main_context={node.attrs.get('main_context')} is neither 0 nor 1"
    if int(node.attrs.get("is_multi_soc_ep_context", 0)):
        return "a context for several SoCs (is_multi_soc_ep_context=1) is not read"
    if int(node.attrs.get("main_context", 1)) == 1 and node.attrs.get("ep_cache_context") is None:
        return "its main context has no 'ep_cache_context'"
    return None


@dataclass
class LoadedContexts:
    """The contexts of one compile call's EPContext nodes: each main node's binary deserialized once, and
    which graphs each node runs."""

    contexts: list[Context] = field(default_factory=list)
    blobs: dict[str, bytes] = field(default_factory=dict)  # main node name -> its binary
    by_node: dict[str, tuple[Context, list[GraphInfo]]] = field(default_factory=dict)
    by_graph: dict[str, tuple[Context, GraphInfo]] = field(default_factory=dict)

    def graphs_of(self, node: Any) -> tuple[Context, list[GraphInfo]]:
        """The context and graphs ``node`` runs; KeyError naming the node when no loaded context has them."""
        if node.name in self.by_node:
            return self.by_node[node.name]
        for key in (node.name, str(node.attrs.get("partition_name", ""))):
            if key in self.by_graph:
                ctx, info = self.by_graph[key]
                return ctx, [info]
        raise KeyError(f"{node.label}: no QNN graph named '{node.name}' in the model's main contexts "
                       f"(graphs: {sorted(self.by_graph)})")

    def close(self) -> None:
        for ctx in self.contexts:
            ctx.close()
        self.contexts.clear()


def load_contexts(nodes: Sequence[Any], backend: Backend, soc_model: int, model_path: str | None) -> LoadedContexts:
    """Deserialize the context of every main EPContext node in ``nodes`` (QnnError, InvalidGraph or KeyError on
    a binary that cannot be read)."""
    out = LoadedContexts()
    system = backend.system()
    try:
        for node in nodes:
            if int(node.attrs.get("main_context", 1)) != 1:
                continue
            blob = context_blob(node, model_path)
            graphs = system.graphs(blob)
            ctx = backend.context_from_binary(soc_model, blob)
            out.contexts.append(ctx)
            out.blobs[node.name] = blob
            names = {g.name for g in graphs}
            if len(graphs) == 1 or node.name not in names:
                # one graph: the node's, whatever its name (onnxruntime reads it so too); several graphs none of
                # which has the node's name: stages of this node's subgraph, as this provider saves them
                out.by_node[node.name] = (ctx, graphs)
            for g in graphs:
                out.by_graph.setdefault(g.name, (ctx, g))
    except BaseException:
        out.close()
        raise
    return out
