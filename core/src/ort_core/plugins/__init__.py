"""Provider plugin API: the hook marker, the types exchanged through hooks, and discovery.

Plugin authors need only ``hookimpl``, the types and the helpers re-exported here (loading a native
library once, the ONNX-domain spelling, Constant-node values); the contract itself is documented in
``hookspecs``.
"""

from ..ir.graph import is_onnx_domain, onnx_domain
from ..ir.shape_values import slice_window
from .context import ArtifactCache, context_blob, is_context_node
from .hookspecs import hookimpl
from .kernel import ContextKernel, KernelContext
from .loading import LoadOnce, missing_symbols
from .provider import (
    ExecutionProvider,
    Preferences,
    SavedContext,
    SessionContext,
    SharedContext,
    UnsupportedSubgraph,
    provider_hooks,
)
from .types import (
    Capability,
    FusedSubgraph,
    GraphView,
    ProviderInfo,
    TransformView,
    constant_node_value,
    constant_node_values,
)
from .verdicts import VerdictCache, canonical, user_cache_dir

__all__ = ["ArtifactCache", "Capability", "ContextKernel", "ExecutionProvider", "FusedSubgraph", "GraphView",
           "KernelContext", "LoadOnce", "Preferences", "ProviderInfo", "SavedContext", "SessionContext",
           "SharedContext", "TransformView",
           "UnsupportedSubgraph", "VerdictCache", "canonical", "constant_node_value", "constant_node_values",
           "context_blob", "hookimpl", "is_context_node", "is_onnx_domain", "missing_symbols", "onnx_domain",
           "provider_hooks", "slice_window", "user_cache_dir"]
