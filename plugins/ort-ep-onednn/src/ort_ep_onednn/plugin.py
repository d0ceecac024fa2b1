"""Hooks and provider object of DnnlExecutionProvider: the module the entry point names.

Registration, the factory making one ``DnnlProvider`` per session, and its methods: thin answers built
from ``library``, ``options``, ``capability`` and ``kernel``; values stay in host memory (oneDNN's CPU
engine computes there).
"""

from __future__ import annotations

import dataclasses

from ort_core.memory import HOST
from ort_core.plugins import Capability, ExecutionProvider, Preferences, ProviderInfo, provider_hooks

from . import __version__
from . import library as L
from .capability import FUSED_OPS, Context, dtypes_of, unsupported_reason
from .kernel import make_kernel
from .lowering import Spec
from .options import DEFAULTS, Options, parse

NAME = "DnnlExecutionProvider"


def _info() -> ProviderInfo:
    reason = L.unavailable_reason()  # never raises: a missing library is an answer, not an error
    description = "oneDNN (not loaded) through its C API (cffi)"
    if not reason:
        lib = L.library()
        description = (f"oneDNN {lib.version} ({lib.isa_name()}) through its C API (cffi): fused float32 "
                       "subgraphs and int8 Conv/MatMul/Gemm (QDQ groups, QLinear*) as primitives, "
                       "activations channels-last")
    return ProviderInfo(NAME, (HOST,), available=not reason, reason=reason, description=description,
                        version=__version__, options={k: str(v) for k, v in DEFAULTS.items()})


def precision_reason(lib: L.Library, opts: Options) -> str:
    """Why the requested precision cannot be honoured on this CPU, or ""."""
    if opts.precision == "bf16" and not lib.has_bf16:
        return (f"precision=bf16 needs a CPU with AVX512-BF16 or AMX; oneDNN reports {lib.isa_name()} "
                "(use precision=fp32)")
    return ""


def bf16_of(opts: Options) -> bool:
    return opts.precision == "bf16"


class DnnlProvider(ExecutionProvider):
    """One session's oneDNN provider: its parsed options (a bad value is refused when the session is
    made). Values stay in host memory; the loaded library and its CPU engine are process-wide."""

    def __init__(self, info: ProviderInfo, options=None, session=None) -> None:
        super().__init__(info, options, session)
        self.opts = parse(self.options)  # ValueError naming the option: the user gets an InvalidArgument
        budget = getattr(self.session, "intra_op_num_threads", 0)
        if budget and not self.opts.num_threads:  # the session's thread budget, unless our option says
            self.opts = dataclasses.replace(self.opts, num_threads=budget)

    def preferences(self):
        # quantized weights stay DequantizeLinear nodes: a QDQ group becomes one int8 primitive; the erf GELU
        # chain (Div, Erf, Add, Mul, Mul: Erf alone has no primitive) arrives as one Gelu node
        return Preferences(keep_qdq=True, fused_ops=frozenset(f"{d}::{op}" for d, op in FUSED_OPS))

    def get_capability(self, graph):
        opts = self.opts
        nodes = graph.nodes()
        lib = L.library()
        problem = precision_reason(lib, opts)
        if problem:
            return Capability.from_reasons(nodes, lambda node: problem)
        ctx = Context(graph.graph, graph.opset(""), graph.constant)
        return Capability.from_reasons(nodes, lambda node: unsupported_reason(lib, node, ctx, bf16_of(opts)))

    def compile_subgraph(self, subgraph):
        opts = self.opts
        lib = L.library()
        problem = precision_reason(lib, opts)
        if problem:
            raise RuntimeError(problem)
        opset = subgraph.opsets.get("", 0)  # the loader spells the default domain ""
        ctx = Context(subgraph.graph, opset, subgraph.constants.get)
        for node in subgraph.nodes:  # the same rules as capability (cached), so the two never disagree
            why = unsupported_reason(lib, node, ctx, bf16_of(opts))
            if why is not None:
                raise ValueError(f"{node.label}: {why}")
        constants = {n: v for n in subgraph.inputs if (v := ctx.constant(n)) is not None}
        spec = Spec(list(subgraph.nodes), list(subgraph.inputs), list(subgraph.outputs), constants, opset,
                    dtypes_of(ctx, [*subgraph.inputs, *subgraph.outputs]))
        # initializers that are also graph inputs: constant while the session passes them unchanged
        inits = subgraph.graph.initializers
        defaults = {n: inits[n] for n in subgraph.inputs if n not in constants and n in inits}
        return make_kernel(lib, spec, opts, subgraph.name, defaults)


ort_register_providers, ort_create_provider = provider_hooks(_info, DnnlProvider)
