"""The CPU provider: its registration hook and factory, and the provider object they make.

An ordinary plugin of the contract (registered through the ``ort_core.providers`` entry point
like any other): claims every node that has a registered kernel (registered custom ops included,
whose own kernels it runs), compiles node by node, computes in host memory. Kernels live in ``ops/``.
"""

from __future__ import annotations

from ...errors import KernelError
from ...ir.graph import onnx_domain
from ...memory import HOST, HostAllocator
from ...memory.arena import host_arena
from ...optimizer import EXTENDED
from ...plugins import Capability, ExecutionProvider, Preferences, ProviderInfo, is_context_node, provider_hooks
from . import ops  # noqa: F401  (importing registers the kernels)
from .registry import lookup, outer_scope_names

NAME = "CPUExecutionProvider"


OPTIONS = {"use_arena": "1"}
"""Provider options (onnxruntime's CPU provider takes ``use_arena`` too): "0" gives plain aligned
numpy buffers instead of the pooled host arena for host values made through the allocator."""

INFO = ProviderInfo(NAME, (HOST,), True, description="numpy kernels, always available", options=OPTIONS)


class CPUProvider(ExecutionProvider):
    """Claims every node with a registered kernel for its op type and opset (registered custom ops
    included) and compiles node by node: each subgraph it gets is one node."""

    def __init__(self, info, options, session) -> None:
        super().__init__(info, options, session)
        arena = str(self.options.get("use_arena", OPTIONS["use_arena"])).strip().lower()
        if arena not in ("0", "1", "true", "false"):
            raise ValueError(f"use_arena must be '0' or '1', got {self.options['use_arena']!r}")
        self.uses_arena = arena in ("1", "true")
        self._allocator = host_arena() if self.uses_arena else HostAllocator()

    def get_capability(self, graph):
        def reason(node):
            opset = graph.opset(node.domain)
            if graph.custom_op(node) is not None or lookup(node.domain, node.op_type, opset) is not None:
                return None
            if is_context_node(node):
                return (f"an EPContext node: a subgraph compiled for '{node.attrs.get('source', '?')}', which "
                        "only that provider can load")
            dom = f"{node.domain}::" if node.domain else ""
            return f"no CPU kernel for {dom}{node.op_type} at opset {opset}"

        return Capability.from_reasons(graph.nodes(), reason, fuse=False)

    def preferences(self):
        """At level extended and up the quantized weights' DequantizeLinear stay nodes until its transform:
        its QDQ fusion builds integer kernels from them and folds whatever is left into float weights."""
        return Preferences(keep_qdq=self.session.optimization_level >= EXTENDED)

    def transform(self, view):
        """ort-core's fusions over its nodes, at optimization level extended and up."""
        return view.fuse() if self.session.optimization_level >= EXTENDED else 0

    def compile_subgraph(self, subgraph):
        if len(subgraph.nodes) != 1:
            raise KernelError(f"the CPU provider compiles single nodes, got {len(subgraph.nodes)}")
        node = subgraph.nodes[0]
        opset = subgraph.opsets.get(onnx_domain(node.domain), 0)
        custom = subgraph.custom_op(node)
        if custom is not None:  # registered custom ops win over built-in kernels, as in onnxruntime
            return _adapt(custom.bind(node, opset, subgraph.graph), node, subgraph.inputs, subgraph.outputs)
        kd = lookup(node.domain, node.op_type, opset)
        if kd is None:
            raise KernelError(f"{node.label}: no CPU kernel at opset {opset}")
        kernel = kd.build(node, opset, subgraph.graph, subgraph.bodies)
        return _adapt(kernel, node, subgraph.inputs, subgraph.outputs)

    def allocator(self, device):
        return self._allocator


ort_register_providers, ort_create_provider = provider_hooks(lambda: INFO, CPUProvider)


def _adapt(kernel, node, inputs, outputs):
    """Map the subgraph's input/output order onto the node's positional slots.

    Kernels take the node's inputs in order (None for omitted ones) followed, for nodes with
    subgraphs, by the outer-scope values those subgraphs read, in ``outer_scope_names(node)``
    order. Most nodes need no mapping and get their kernel back unchanged (no per-call overhead).
    """
    in_idx = [inputs.index(n) if n else None for n in node.inputs]
    in_idx += [inputs.index(n) for n in outer_scope_names(node)]
    out_idx = [node.outputs.index(o) for o in outputs]
    same_in = in_idx == list(range(len(inputs)))
    same_out = out_idx == list(range(len(node.outputs)))
    if same_in and same_out:
        return kernel

    def adapted(*xs):
        args = xs if same_in else [None if i is None else xs[i] for i in in_idx]
        res = kernel(*args)
        return res if same_out else [res[i] for i in out_idx]

    return adapted
