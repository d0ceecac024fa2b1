"""Writing a model whose compiled subgraphs are onnxruntime's EPContext nodes (session config
``ep.context_enable``), so that the next load skips compiling them.

Asks each provider instance for the compiled artifact of each of its subgraphs; subgraphs with one are
replaced by an EPContext node (domain com.microsoft) holding it, embedded or in a file beside the model;
the rest of the graph is written as placed. Reading the nodes back is the providers' job.
"""

from __future__ import annotations

import os
from dataclasses import replace

from .errors import InvalidArgument, warn
from .ir import save_model
from .ir.graph import Model, Node, outer_scope_reads
from .plugins.context import CONTEXT_DOMAIN, CONTEXT_OP, EMBED_MODE_KEY, ENABLE_KEY, FILE_PATH_KEY


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
    nodes: list[Node] = []  # in execution order, so the file is topologically sorted
    exported = 0
    for provider, sub in part.subgraphs:
        ep = instances[provider]
        blob = ep.ep.export_context(sub)
        if blob is None:
            nodes += sub.nodes
            continue
        if not isinstance(blob, (bytes, bytearray)):
            raise InvalidArgument(f"{ep.reg.label}: export_context returned {type(blob).__name__}, expected bytes")
        if embed == "1":
            payload = bytes(blob)
        else:
            payload = f"{stem}_{sub.name}.bin".encode()
            with open(os.path.join(os.path.dirname(os.path.abspath(path)), payload.decode()), "wb") as f:
                f.write(blob)
        nodes.append(Node(CONTEXT_OP, list(sub.inputs), list(sub.outputs), {
            "main_context": 1, "ep_cache_context": payload, "embed_mode": int(embed), "source": provider,
            "partition_name": sub.name, "ep_sdk_version": ep.ep.info.version or ""},
            domain=CONTEXT_DOMAIN, name=f"{sub.name}_context", id=-1))
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
