"""Compiled artifacts of providers: onnxruntime's EPContext nodes (a compiled subgraph saved inside a model)
and an on-disk cache of compiled blobs keyed by subgraph, options and device.

Helpers for plugins and the core; neither compiles anything. The session writes EPContext models
(``ort_core.epcontext``); a provider reads its own EPContext nodes back through ``context_blob``.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from typing import Any

from ..errors import InvalidGraph
from ..ir.graph import Node
from .types import FusedSubgraph
from .verdicts import write_atomically

CONTEXT_DOMAIN = "com.microsoft"
"""The domain of EPContext nodes (onnxruntime's)."""
CONTEXT_OP = "EPContext"
"""The op type of a node holding a provider's compiled subgraph."""
MAX_CONTEXT_BYTES = 4 << 30  # a compiled context larger than this is refused, as an oversized tensor is

ENABLE_KEY = "ep.context_enable"
FILE_PATH_KEY = "ep.context_file_path"
EMBED_MODE_KEY = "ep.context_embed_mode"
"""Session config entries (onnxruntime's names): "1" writes a model whose compiled subgraphs are EPContext
nodes, to ``ep.context_file_path`` (default: '<model>_ctx.onnx' beside the model), with each compiled context
embedded in its node (``ep.context_embed_mode`` "1") or in a file beside the model ("0", the default)."""


def is_context_node(node: Node, provider: str | None = None) -> bool:
    """Whether ``node`` is an EPContext node (of ``provider``, when given: its ``source`` attribute)."""
    if node.op_type != CONTEXT_OP or node.domain != CONTEXT_DOMAIN:
        return False
    return provider is None or str(node.attrs.get("source", "")) == provider


def context_blob(node: Node, model_path: str | None) -> bytes:
    """The compiled context an EPContext node holds: the bytes of ``ep_cache_context`` (``embed_mode`` 1), or
    the file it names (``embed_mode`` 0), which must lie inside the model's folder. Raises InvalidGraph
    naming the node and the problem."""
    value = node.attrs.get("ep_cache_context")
    if value is None:
        raise InvalidGraph(f"{node.label}: EPContext node without an 'ep_cache_context' attribute")
    raw = getattr(value, "raw", None) or (value if isinstance(value, bytes) else str(value).encode("utf-8"))
    if int(node.attrs.get("embed_mode", 1)) == 1:
        return raw
    if model_path is None:
        raise InvalidGraph(f"{node.label}: its context is in a file beside the model, but the model was given "
                           "as bytes; load it from its path")
    folder = os.path.dirname(os.path.abspath(model_path))
    name = raw.decode("utf-8", "replace")
    path = os.path.realpath(os.path.join(folder, name))
    if os.path.isabs(name) or os.path.commonpath([path, os.path.realpath(folder)]) != os.path.realpath(folder):
        raise InvalidGraph(f"{node.label}: context file '{name}' is outside the model's folder")
    try:
        size = os.path.getsize(path)
        if size > MAX_CONTEXT_BYTES:
            raise InvalidGraph(f"{node.label}: context file '{name}' has {size} bytes, more than {MAX_CONTEXT_BYTES}")
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise InvalidGraph(f"{node.label}: cannot read its context file '{name}': {e.strerror or e}") from None


class ArtifactCache:
    """Compiled blobs on disk in ``folder``, keyed by what determines them: the provider and its version,
    its options, the device and the subgraph (as a standalone ONNX model). Writes are atomic; a blob that
    cannot be written or read only costs a compile."""

    def __init__(self, folder: str) -> None:
        self.folder = folder

    def key(self, provider: str, version: str, options: Mapping[str, Any], device: Any, subgraph: FusedSubgraph) -> str:
        """The cache key of ``subgraph`` compiled by ``provider`` at ``version`` with ``options`` for ``device``."""
        h = hashlib.sha256()
        h.update(json.dumps([provider, version, sorted((str(k), str(v)) for k, v in options.items()), str(device)])
                 .encode())
        h.update(subgraph.to_model_proto().SerializeToString(deterministic=True))
        return h.hexdigest()[:32]

    def _path(self, key: str) -> str:
        return os.path.join(self.folder, f"{key}.blob")

    def get(self, key: str) -> bytes | None:
        """The blob saved under ``key``, or None (never saved, or unreadable)."""
        try:
            with open(self._path(key), "rb") as f:
                return f.read()
        except OSError:
            return None

    def put(self, key: str, blob: bytes) -> None:
        """Save ``blob`` under ``key`` (atomically; a write that fails is ignored)."""
        write_atomically(self._path(key), blob)
