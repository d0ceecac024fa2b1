"""Hooks and provider object of QNNExecutionProvider: the module the entry point names.

Registration (available when the QNN HTP library is found, its API version is the verified one and its
backend initialises), the factory making one ``QNNProvider`` per session, and its methods: thin answers built
from ``runtime``, ``options``, ``capability`` and ``kernel``. Values stay in host memory (the HTP simulator on
x86 computes there; on a device QNN copies them itself).
"""

from __future__ import annotations

import threading

import numpy as np

from ort_core.memory import HOST
from ort_core.plugins import (
    Capability,
    ExecutionProvider,
    Preferences,
    ProviderInfo,
    UnsupportedSubgraph,
    provider_hooks,
)

from . import __version__
from . import qnn_api as q
from . import runtime as rt
from .capability import PROBES, probe_tag, unsupported_reason, values_of_subgraph, values_of_view
from .graph import GraphBuilder
from .kernel import CompiledSubgraph
from .options import DEFAULTS, Options, parse

NAME = "QNNExecutionProvider"


def _info() -> ProviderInfo:
    reason = rt.unavailable_reason()  # never raises: a missing library is an answer, not an error
    what = rt.backend().describe() if not reason else "QNN HTP backend (not loaded)"
    return ProviderInfo(NAME, (HOST,), available=not reason, reason=reason,
                        description=f"{what} through its C API (cffi): fused float32 ONNX subgraphs built as QNN "
                                    "graphs (on x86-64 the HTP backend is Qualcomm's Hexagon NPU simulator)",
                        version=__version__, options=dict(DEFAULTS))


_fp16_verdicts: dict[tuple[str, int], bool] = {}
_fp16_lock = threading.Lock()


def computes_fp16(backend: rt.Backend, soc_model: int) -> bool:
    """Whether the HTP target ``soc_model`` computes float32 graphs with fp16 arithmetic, measured once: 1 + 2**-12
    survives float32 arithmetic but not fp16's 11-bit significand. (On SoCs with fp16 the backend relaxes float32
    graphs to fp16 and does not honour a float32 precision setting; the simulator's default v68 target computes
    float32.)"""
    key = (backend.path, soc_model)
    with _fp16_lock:
        if key in _fp16_verdicts:
            return _fp16_verdicts[key]
        ctx = backend.create_context(soc_model)
        try:
            g = GraphBuilder(ctx, "precision_check")
            a = g.tensor("a", q.TENSOR_APP_WRITE, (1, 8))
            b = g.tensor("b", q.TENSOR_APP_WRITE, (1, 8))
            c = g.tensor("c", q.TENSOR_APP_READ, (1, 8))
            g.node("ElementWiseAdd", [a, b], [c])
            graph = g.finalize()
            out = np.empty((1, 8), np.float32)
            graph.execute([np.ones((1, 8), np.float32), np.full((1, 8), 2.0 ** -12, np.float32)], [out])
            verdict = bool(np.all(np.abs(out - (1.0 + 2.0 ** -12)) > 2.0 ** -14))  # the 2**-12 was lost
        finally:
            ctx.close()
        _fp16_verdicts[key] = verdict
        return verdict


class QNNProvider(ExecutionProvider):
    """One session's QNN provider: its options, the loaded backend (or why it could not be loaded), and one
    QNN context holding every graph it compiles (freed by ``close``)."""

    def __init__(self, info: ProviderInfo, options=None, session=None) -> None:
        super().__init__(info, options, session)
        self.opts: Options = parse(self.options)  # ValueError naming the option: an InvalidArgument
        self.problem = ""
        self.backend: rt.Backend | None = None
        try:
            self.backend = rt.backend(self.opts.backend_path or None)
        except rt.QnnUnavailable as e:
            text = str(e)
            path = self.opts.backend_path
            self.problem = text if not path or text.startswith("backend_path") else f"backend_path={path!r}: {text}"
        if self.backend is not None:
            self._check_precision(self.backend)
        self._context: rt.Context | None = None
        self._lock = threading.Lock()

    def _check_precision(self, backend: rt.Backend) -> None:
        opts = self.opts
        try:
            self.backend.device(opts.soc_model)
        except rt.QnnError as e:
            raise ValueError(f"soc_model={opts.soc_model}: the QNN HTP backend refuses it ({e})") from None
        fp16 = computes_fp16(backend, opts.soc_model)
        target = f"soc_model={opts.soc_model}" if opts.soc_model else "the backend's default target (soc_model=0)"
        if opts.fp16 and not fp16:
            raise ValueError(f"enable_htp_fp16_precision=1: {target} computes float32, not fp16; set soc_model to "
                             "an SoC whose HTP computes fp16 (e.g. 57, SM8650)")
        if not opts.fp16 and fp16:
            raise ValueError(f"{target} computes float32 graphs with fp16 arithmetic (the backend relaxes them "
                             "and ignores a float32 precision setting); set enable_htp_fp16_precision=1 to accept "
                             "fp16 results, or leave soc_model at 0 for float32")

    @property
    def tag(self) -> str:
        return probe_tag(self.backend, self.opts.soc_model, self.opts.precision)

    def preferences(self) -> Preferences:
        return Preferences(bakes_weights=True)  # constants become static tensors of the QNN graph

    def get_capability(self, graph):
        nodes = graph.nodes()
        if self.problem:
            return Capability.from_reasons(nodes, lambda node: self.problem)
        opts, backend = self.opts, self.backend
        PROBES.load(opts.cache_dir, self.tag)
        values = values_of_view(graph)
        capability = Capability.from_reasons(
            nodes, lambda node: unsupported_reason(node, values, backend, opts.soc_model, opts.precision))
        PROBES.save(opts.cache_dir, self.tag)
        return capability

    def _session_context(self) -> rt.Context:
        with self._lock:
            if self.closed:
                raise RuntimeError(f"{NAME}: the provider was closed with its session")
            if self._context is None:
                self._context = self.backend.create_context(self.opts.soc_model)
            return self._context

    def compile(self, subgraphs):
        """Every subgraph of the session becomes a graph of one QNN context."""
        if self.problem:
            raise RuntimeError(self.problem)
        context = self._session_context()
        out = []
        for sub in subgraphs:
            values = values_of_subgraph(sub)
            why = next((w for n in sub.nodes if (w := unsupported_reason(n, values, self.backend,
                                                                          self.opts.soc_model,
                                                                          self.opts.precision))), None)
            if why is not None:
                out.append(UnsupportedSubgraph(why))
                continue
            try:
                out.append(CompiledSubgraph(sub, context, self.opts))
            except rt.QnnError as e:
                out.append(UnsupportedSubgraph(f"{sub.name}: {e}"))
        return out

    def close(self) -> None:
        with self._lock:
            context, self._context = self._context, None
            super().close()
        if context is not None:
            context.close()


ort_register_providers, ort_create_provider = provider_hooks(_info, QNNProvider)
