"""EPContext nodes of QNN (onnxruntime's format): which nodes are QNN's, and their context binaries loaded back.

A node is QNN's when its ``source`` is ``QNNExecutionProvider`` (this provider) or ``QNN`` (onnxruntime-qnn's
plugin), case aside, as onnxruntime reads it. A node with ``main_context=1`` holds a serialized QNN context
(embedded, or in a file beside the model); onnxruntime puts every graph of a model in one context, in the first
node, and the other nodes (``main_context=0``) name their graph by their node name (this provider writes the same
layout, through the core, when a session's subgraphs share one context). The core's ``saved_context`` gives each
node the binary of its main node; ``libQnnSystem`` reads the context's graphs and their tensors; the context is
deserialized once (``contextCreateFromBinary``), nothing is compiled. Writing the nodes is the core's
(``ort_core.epcontext``), from ``QNNProvider.export_context``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ort_core.plugins.context import CONTEXT_DOMAIN, CONTEXT_OP
from ort_core.plugins.provider import SavedContext

from .runtime import Backend, Context, GraphInfo, Target

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
    """The contexts of one compile call's EPContext nodes: each main node's binary deserialized once, which graphs
    each node runs, and the binaries that belong to one node alone (saved again as they are)."""

    contexts: list[Context] = field(default_factory=list)
    by_node: dict[int, tuple[Context, list[GraphInfo]]] = field(default_factory=dict)  # id(node) ->
    whole: dict[int, bytes] = field(default_factory=dict)  # id(node) -> the binary holding its graphs only

    def graphs_of(self, node: Any) -> tuple[Context, list[GraphInfo]]:
        """The context and graphs ``node`` runs (KeyError naming the node for a node not loaded here)."""
        try:
            return self.by_node[id(node)]
        except KeyError:
            raise KeyError(f"{node.label}: its QNN context was not loaded") from None

    def close(self) -> None:
        for ctx in self.contexts:
            ctx.close()
        self.contexts.clear()


def load_contexts(nodes: Sequence[Any], backend: Backend, target: Target,
                  saved_context: Callable[[Any], SavedContext]) -> LoadedContexts:
    """Deserialize the binary of every main EPContext node ``nodes`` read (``saved_context(node)``: the core's reader,
    which finds the main node of a ``main_context=0`` node), once each, and find each node's graphs in it (QnnError,
    InvalidGraph or KeyError on a binary that cannot be read or a graph it does not hold)."""
    out = LoadedContexts()
    system = backend.system()
    mains: dict[int, tuple[Context, list[GraphInfo]]] = {}
    try:
        for node in nodes:
            saved = saved_context(node)
            if id(saved.main) not in mains:
                blob = saved.blob
                graphs = system.graphs(blob)
                ctx = backend.context_from_binary(target, blob)
                out.contexts.append(ctx)
                mains[id(saved.main)] = (ctx, graphs)
            ctx, graphs = mains[id(saved.main)]
            named = {g.name: g for g in graphs}
            # onnxruntime finds a node's graph by the node's name; partition_name names it too
            graph = named.get(node.name) or named.get(saved.graph)
            if saved.main is node and (len(graphs) == 1 or graph is None):
                # one graph: the node's, whatever its name (onnxruntime reads it so too); several graphs none of which
                # has the node's name: stages of this node's subgraph, as this provider saves them
                out.by_node[id(node)] = (ctx, graphs)
                out.whole[id(node)] = saved.blob
            elif graph is not None:
                out.by_node[id(node)] = (ctx, [graph])
            else:
                raise KeyError(f"{node.label}: no QNN graph named '{saved.graph}' in the context of "
                               f"{saved.main.label} (graphs: {sorted(named)})")
    except BaseException:
        out.close()
        raise
    return out
