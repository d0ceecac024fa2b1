"""Provider plugin API: the hook marker, the types exchanged through hooks, and discovery.

Plugin authors need only ``hookimpl`` and the types re-exported here; the contract itself is
documented in ``hookspecs``.
"""

import pluggy

from .types import Capability, FusedSubgraph, GraphView, ProviderInfo, constant_node_value, constant_node_values

hookimpl = pluggy.HookimplMarker("ort_core")

__all__ = ["Capability", "FusedSubgraph", "GraphView", "ProviderInfo", "constant_node_value", "constant_node_values",
           "hookimpl"]
