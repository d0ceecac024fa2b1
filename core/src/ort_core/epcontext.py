"""Writing a model whose compiled subgraphs are onnxruntime's EPContext nodes (session config
``ep.context_enable``), so that the next load skips compiling them.

Asks each provider instance for the compiled artifact of each of its subgraphs; subgraphs with one are
replaced by an EPContext node (domain com.microsoft) holding it, embedded or in a file beside the model, a blob
shared by several subgraphs written once (onnxruntime's ``main_context`` layout); the rest of the graph is
written as placed. Reading the nodes back is the providers' job (``ExecutionProvider.saved_context``).
"""

from __future__ import annotations

import os
from dataclasses import replace

from .errors import InvalidArgument, warn
from .ir import save_model
from .ir.graph import Model, Node, outer_scope_reads
from .plugins.context import CONTEXT_DOMAIN, CONTEXT_OP, EMBED_MODE_KEY, ENABLE_KEY, FILE_PATH_KEY
from .plugins.provider import SharedContext


def write_context_model(model: Model, part, instances: dict, config: dict[str, str], model_path: str | None) -> str:
    """Write the context model; returns its path ('' when no provider exported a context)."""
    embed = config.get(EMBED_MODE_KEY, "0")
    if embed not in ("0", "1"):
        raise InvalidArgument(f"session config entry '{EMBED_MODE_KEY}' must be '0' or '1', got {embed!r}")
    path = config.get(FILE_PATH_KEY) or (os.path.splitext(model_path)[0] + "_ctx.onnx" if model_path else "")
    if not path:
        raise InvalidArgument(f"the model was given as bytes: set the session config entry '{FILE_PATH_KEY}' to "
                              "where the context model goes")
    stem = os.path.splitext(os.path.basename(path))[0]
    folder = os.path.dirname(os.path.abspath(path))

    def payload(blob: bytes, sub_name: str) -> bytes:
        if embed == "1":
            return blob
        name = f"{stem}_{sub_name}.bin"
        with open(os.path.join(folder, name), "wb") as f:
            f.write(blob)
        return name.encode()

    nodes: list[Node] = []  # in execution order, so the file is topologically sorted
    shared: dict[tuple[str, bytes], set[str]] = {}  # (provider, shared blob) -> the graph names written for it
    exported = 0
    for provider, sub in part.subgraphs:
        ep = instances[provider]
        answer = ep.ep.export_context(sub)
        if answer is None:
            nodes += sub.nodes
            continue
        version = ep.ep.sdk_version
        if not isinstance(version, str):
            raise InvalidArgument(f"{ep.reg.label}: sdk_version is {type(version).__name__}, expected str")
        attrs = {"embed_mode": int(embed), "source": provider, "ep_sdk_version": version}
        if isinstance(answer, SharedContext):
            blob, name = answer.blob, answer.graph
            if not isinstance(blob, (bytes, bytearray)) or not isinstance(name, str) or not name:
                raise InvalidArgument(f"{ep.reg.label}: export_context returned SharedContext(blob: "
                                      f"{type(blob).__name__}, graph: {name!r}), expected bytes and a graph name")
            graphs = shared.setdefault((provider, bytes(blob)), set())
            if name in graphs:
                raise InvalidArgument(f"{ep.reg.label}: export_context named graph '{name}' for two subgraphs of "
                                      "one shared context")
            # the first subgraph of a blob holds it; the others name their graph in it
            attrs.update({"main_context": 1, "ep_cache_context": payload(bytes(blob), sub.name)} if not graphs
                         else {"main_context": 0}, partition_name=name)
            graphs.add(name)
        elif isinstance(answer, (bytes, bytearray)):
            name = f"{sub.name}_context"
            attrs.update(main_context=1, ep_cache_context=payload(bytes(answer), sub.name), partition_name=sub.name)
        else:
            raise InvalidArgument(f"{ep.reg.label}: export_context returned {type(answer).__name__}, expected "
                                  "bytes, a SharedContext or None")
        nodes.append(Node(CONTEXT_OP, list(sub.inputs), list(sub.outputs), attrs, domain=CONTEXT_DOMAIN, name=name,
                          id=-1))
        exported += 1
    if not exported:
        warn(f"{ENABLE_KEY}=1, but no provider of this session exports compiled contexts; '{path}' was not "
             "written")
        return ""
    read = {v.name for v in model.graph.outputs} | {i for n in nodes for i in (*n.inputs, *outer_scope_reads(n))}
    graph = replace(model.graph, nodes=nodes,  # initializers only a baked context read go
                    initializers={k: v for k, v in model.graph.initializers.items() if k in read})
    save_model(replace(model, graph=graph, opset_imports={CONTEXT_DOMAIN: 1, **model.opset_imports}), path)
    return path
