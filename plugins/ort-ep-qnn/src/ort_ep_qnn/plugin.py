"""Hooks and provider object of QNNExecutionProvider: the module the entry point names.

Registration (available when the QNN HTP library is found, its API version is the verified one and its
backend initialises), the factory making one ``QNNProvider`` per session, and its methods: thin answers built
from ``runtime``, ``options``, ``capability``, ``qdq``, ``contexts`` and ``kernel``. Values stay in host memory
(the HTP simulator on x86 computes there; on a device QNN copies them itself).
"""

from __future__ import annotations

import logging
import os
import threading

import numpy as np

from ort_core.memory import HOST
from ort_core.plugins import (
    ArtifactCache,
    Capability,
    ExecutionProvider,
    Preferences,
    ProviderInfo,
    UnsupportedSubgraph,
    provider_hooks,
)
from ort_core.plugins.context import ENABLE_KEY
from ort_core.plugins.provider import SharedContext

from . import __version__, power
from . import qnn_api as q
from . import runtime as rt
from .capability import Prober, probe_tag, quantized_reason, unsupported_reason, values_of_subgraph, values_of_view
from .contexts import LoadedContexts, context_reason, is_qnn_context_node, load_contexts
from .graph import GraphBuilder
from .kernel import CompiledSubgraph, ContextMismatch, Stage, build_stages, loaded_stages
from .lowering import DATA_INPUTS
from .options import DEFAULTS, Options, parse
from .qdq import is_dequantized_constant, make_plan

NAME = "QNNExecutionProvider"
log = logging.getLogger("ort_ep_qnn")


def _info() -> ProviderInfo:
    reason = rt.unavailable_reason()  # never raises: a missing library is an answer, not an error
    what = rt.backend().describe() if not reason else "QNN HTP backend (not loaded)"
    return ProviderInfo(NAME, (HOST,), available=not reason, reason=reason,
                        description=f"{what} through its C API (cffi): fused ONNX subgraphs (float32, fp16, QDQ "
                                    "groups on fixed-point tensors) built as QNN graphs, EPContext models saved and "
                                    "loaded (on x86-64 the HTP backend is Qualcomm's Hexagon NPU simulator)",
                        version=__version__, options=dict(DEFAULTS))


_fp16_verdicts: dict[tuple[str, rt.Target], bool] = {}
_fp16_lock = threading.Lock()


def computes_fp16(backend: rt.Backend, target: rt.Target) -> bool:
    """Whether the HTP ``target`` computes float32 graphs with fp16 arithmetic, measured once: 1 + 2**-12
    survives float32 arithmetic but not fp16's 11-bit significand. (On SoCs with fp16 the backend relaxes float32
    graphs to fp16 and does not honour a float32 precision setting; the simulator's default v68 target computes
    float32.)"""
    key = (backend.path, target)
    with _fp16_lock:
        if key in _fp16_verdicts:
            return _fp16_verdicts[key]
        ctx = backend.create_context(target)
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
        self.power_vote: power.PowerVote | None = None  # htp_performance_mode's vote, withdrawn by close
        self.prober = Prober()  # this session's probes and verdicts (with the backend: those of the cache folder too)
        if self.backend is not None:
            self._check_precision(self.backend)
            self.prober = Prober(self.opts.cache_dir, self.tag)
            self.power_vote = power.cast(self.backend, self.opts.htp_performance_mode)
        self._context: rt.Context | None = None
        self._lock = threading.Lock()
        self._exports: dict[str, rt.Context] = {}  # subgraph name -> its own context (ep.context_enable=1)
        self._shared: rt.Context | None = None  # one context for every subgraph saved (ep.context_enable=1)
        self._shared_graphs: dict[str, str] = {}  # subgraph name -> its graph in the shared context
        self._shared_blob: bytes | None = None
        self._reexports: dict[str, bytes] = {}  # subgraph name -> the binary of the EPContext node it is
        self._loaded: list[LoadedContexts] = []
        self._retired: list[rt.Context] = []  # contexts whose graphs kernels still run, freed with the session
        folder = os.path.join(self.opts.cache_dir, "contexts") if self.opts.context_cache else ""
        self._artifacts = ArtifactCache(folder) if folder else None  # context_cache=1: compiled contexts kept

    def _check_precision(self, backend: rt.Backend) -> None:
        opts = self.opts
        try:
            self.backend.device(opts.target)
        except rt.QnnError as e:
            raise ValueError(f"{opts.target}: the QNN HTP backend refuses it ({e})") from None
        fp16 = computes_fp16(backend, opts.target)
        target = str(opts.target) if opts.soc_model or opts.htp_arch else "the backend's default target (soc_model=0)"
        if opts.fp16 and not fp16:
            raise ValueError(f"enable_htp_fp16_precision=1: {target} computes float32, not fp16; set soc_model to "
                             "an SoC whose HTP computes fp16 (e.g. 57, SM8650)")
        if not opts.fp16 and fp16:
            raise ValueError(f"{target} computes float32 graphs with fp16 arithmetic (the backend relaxes them "
                             "and ignores a float32 precision setting); set enable_htp_fp16_precision=1 to accept "
                             "fp16 results, or leave soc_model at 0 for float32")

    @property
    def tag(self) -> str:
        return probe_tag(self.backend, self.opts.target, self.opts.precision)

    def preferences(self) -> Preferences:
        # constants become static tensors of the QNN graph; QDQ groups stay nodes, to run on fixed-point tensors;
        # the erf GELU chain fused into one Gelu where QNN's Gelu computes (fp16 targets: it does not finalize
        # in float32 on the simulator's v68 target, where Erf does not either)
        fused = frozenset({"com.microsoft::Gelu", "com.microsoft::BiasGelu"}) if self.opts.fp16 else frozenset()
        # layout NHWC: the HTP computes channels-last; the core hands over Conv, the pools and LRN in their NHWC forms
        # and removes the Transposes between them, which this provider otherwise puts around each
        return Preferences(keep_qdq=True, bakes_weights=True, fused_ops=fused, layout="NHWC")

    def get_capability(self, graph):
        nodes = graph.nodes()
        if self.problem:
            return Capability.from_reasons(nodes, lambda node: self.problem)
        opts, backend, prober = self.opts, self.backend, self.prober
        values = values_of_view(graph)

        def reason(node):  # QNN's own EPContext nodes (this provider's or onnxruntime's) load without compiling
            if is_qnn_context_node(node):
                return context_reason(node)
            return unsupported_reason(node, values, backend, opts.target, opts.precision, prober)

        capability = Capability.from_reasons(nodes, reason)
        prober.verdicts.save()
        return capability

    def _session_context(self) -> rt.Context:
        return self._lazy_context("_context")

    def _lazy_context(self, attr: str) -> rt.Context:
        """The QNN context held in ``attr`` (``_context``: the session's graphs; ``_shared``: the graphs saved in
        one shared context), made on first use."""
        with self._lock:
            if self.closed:
                raise RuntimeError(f"{NAME}: the provider was closed with its session")
            if getattr(self, attr) is None:
                setattr(self, attr, self.backend.create_context(self.opts.target))
            return getattr(self, attr)

    @property
    def sdk_version(self) -> str:
        """The QNN library's build id (e.g. 'v2.51.0.260929181845'), which onnxruntime's QNN provider writes as
        ``ep_sdk_version`` too. On load the attribute is not compared, as onnxruntime does not: the backend itself
        refuses a context binary it cannot read, and that error then names both versions."""
        return self.backend.build_id if self.backend is not None else ""

    def compile(self, subgraphs):
        """Every subgraph of the session becomes a graph of one QNN context. With ``ep.context_enable=1``, several
        subgraphs are built in one context of their own, saved once (onnxruntime's shared layout: one EPContext node
        with ``main_context=1`` holding it, the others naming their graph in it); a single subgraph, or subgraphs
        one of which does not finalize as one graph, each get a context of their own, each EPContext node then
        holding a whole context. EPContext nodes of QNN are deserialized, not compiled."""
        if self.problem:
            raise RuntimeError(self.problem)
        export = self.session.config.get(ENABLE_KEY, "0") == "1"
        context_nodes = [n for sub in subgraphs for n in sub.nodes if is_qnn_context_node(n)]
        loaded = None
        if context_nodes:
            graph = subgraphs[0].graph
            try:
                loaded = load_contexts(context_nodes, self.backend, self.opts.target,
                                       lambda node: self.saved_context(node, graph))
            except (rt.QnnError, KeyError, ValueError) as e:
                # no other provider can run an EPContext node of QNN: a plain error, which the core reports
                # naming this plugin (an UnsupportedSubgraph would hand it on with the reason unsaid)
                raise RuntimeError(f"{NAME}: a QNN EPContext node of the model cannot be loaded: {e}"
                                   f"{self._version_note(context_nodes)}") from None
            self._loaded.append(loaded)
        fresh = [sub for sub in subgraphs if not any(is_qnn_context_node(n) for n in sub.nodes)]
        failed: dict[str, set] = {sub.name: set() for sub in subgraphs}
        if export and len(fresh) > 1:
            try:
                return [self._compile_one(sub, export, loaded, failed[sub.name], share=True) for sub in subgraphs]
            except _Unshareable:  # a graph that did not finalize stays in the shared context: one context each
                with self._lock:
                    if self._shared is not None:
                        self._retired.append(self._shared)
                    self._shared, self._shared_graphs = None, {}
        return [self._compile_one(sub, export, loaded, failed[sub.name]) for sub in subgraphs]

    def _compile_one(self, sub, export: bool, loaded: LoadedContexts | None, failed: set, share: bool = False):
        """The kernel of one subgraph, or an UnsupportedSubgraph; ``failed`` keeps the ranges of its nodes that did
        not finalize as one graph (``build_stages``), so that building it again skips them. ``share``: build it in
        the shared export context (``_Unshareable`` where it does not finalize there as one graph)."""
        values = values_of_subgraph(sub)
        has_contexts = any(is_qnn_context_node(n) for n in sub.nodes)
        why = next((w for n in sub.nodes if not is_qnn_context_node(n)
                    and (w := unsupported_reason(n, values, self.backend, self.opts.target,
                                                 self.opts.precision, self.prober))), None)
        if why is not None:
            return UnsupportedSubgraph(why)
        shared = share and not has_contexts
        try:
            if shared:
                context = self._shared_context()
                try:
                    stages = self._stages(sub, values, context, loaded, failed)
                except (rt.QnnError, ContextMismatch):
                    raise _Unshareable() from None
                if failed or len(stages) > 1:
                    raise _Unshareable()
            elif self._artifacts is not None and not export and not has_contexts:
                stages = self._cached_stages(sub, values, failed)
            else:
                context = self._own_context(sub.name) if export else self._session_context()
                stages = self._stages(sub, values, context, loaded, failed)
                if export and failed:  # graphs that did not finalize stay in it: build again in a fresh one
                    context = self._own_context(sub.name, fresh=True)
                    stages = self._stages(sub, values, context, loaded, failed)
            constants = {o: values.constant(o) for n in sub.nodes if is_dequantized_constant(n, values)
                         for o in n.outputs if o in sub.outputs}
            kernel = CompiledSubgraph(sub.name, stages, sub.inputs, sub.outputs, constants)
        except (rt.QnnError, ContextMismatch, KeyError) as e:
            return UnsupportedSubgraph(f"{sub.name}: {e}")
        if shared and stages:
            self._shared_graphs[sub.name] = stages[0].graph.name
        if has_contexts and len(sub.nodes) == 1 and id(sub.nodes[0]) in loaded.whole:
            # a node whose binary holds its graphs only: saved again as it is (a binary shared with
            # main_context=0 nodes stays with its original node, which the core then writes unchanged)
            self._reexports[sub.name] = loaded.whole[id(sub.nodes[0])]
        return kernel

    def _cached_stages(self, sub, values, failed: set) -> list[Stage]:
        """``context_cache=1``: the subgraph's graphs from the QNN context the cache holds for it (deserialized,
        nothing built), else built in a context of its own, which is then saved there. The key covers the
        subgraph (nodes and weights), the options, the SoC model and the plugin's and QNN's builds; an entry that
        cannot be loaded is built and saved again."""
        cache, b = self._artifacts, self.backend
        key = cache.key(NAME, f"{__version__}+{self.sdk_version}", self.options,
                        str(self.opts.target), sub)
        blob = cache.get(key)
        if blob is not None:
            try:
                graphs = b.system().graphs(blob)
                context = self._keep(b.context_from_binary(self.opts.target, blob))
                return loaded_stages(graphs, context, sub.inputs, sub.outputs, sub.name, self.opts)
            except (rt.QnnError, ContextMismatch, KeyError, ValueError) as e:
                log.warning("%s: its cached QNN context cannot be used (%s); building it again", sub.name, e)
        context = self._keep(b.create_context(self.opts.target))
        stages = self._stages(sub, values, context, None, failed)
        if failed:  # graphs that did not finalize stay in a context: the one saved is built again without them
            context = self._keep(b.create_context(self.opts.target))
            stages = self._stages(sub, values, context, None, failed)
        cache.put(key, context.binary())
        return stages

    def _keep(self, context: rt.Context) -> rt.Context:
        with self._lock:
            self._retired.append(context)
        return context

    def _version_note(self, nodes) -> str:
        saved = sorted({str(n.attrs.get("ep_sdk_version", "")) for n in nodes} - {"", self.sdk_version})
        return f" (saved by QNN {', '.join(saved)}; this is QNN {self.sdk_version})" if saved else ""

    def _stages(self, sub, values, context: rt.Context, loaded: LoadedContexts | None,
                failed: set | None = None) -> list[Stage]:
        """Runs of ordinary nodes built and finalized in ``context``; EPContext nodes' graphs retrieved from their
        deserialized contexts."""
        stages: list[Stage] = []
        run: list = []
        nodes = list(sub.nodes)

        opts, backend = self.opts, self.backend
        plan = make_plan(nodes, values.qdq, lambda n: quantized_reason(n, values, backend, opts.target, opts.precision,
                                                                        self.prober) is None, DATA_INPUTS)
        if plan.quantized:
            log.info("%s: %d op(s) on quantized tensors: %s", sub.name, len(plan.quantized),
                     ", ".join(n.op_type for n in nodes if n.id in plan.quantized))

        def flush(rest) -> None:
            if run:
                wanted = set(sub.outputs) | {n for node in rest for n in node.inputs if n}
                stages.extend(build_stages(run, wanted, sub.name, context, self.opts, values, plan, failed))
                run.clear()

        for k, node in enumerate(nodes):
            if is_dequantized_constant(node, values):
                continue  # the float constant it computes is baked where it is read (or returned as it is)
            if not is_qnn_context_node(node):
                run.append(node)
                continue
            flush(nodes[k:])
            ctx, graphs = loaded.graphs_of(node)
            stages.extend(loaded_stages(graphs, ctx, node.inputs, node.outputs, node.label, self.opts))
        flush([])
        return stages

    def _own_context(self, name: str, fresh: bool = False) -> rt.Context:
        with self._lock:
            if self.closed:
                raise RuntimeError(f"{NAME}: the provider was closed with its session")
            ctx = self._exports.get(name)
            if fresh and ctx is not None:
                self._retired.append(ctx)  # its graphs' kernels are dropped; freed with the session
                ctx = None
            if ctx is None:
                ctx = self._exports[name] = self.backend.create_context(self.opts.target)
            return ctx

    def _shared_context(self) -> rt.Context:
        return self._lazy_context("_shared")

    def export_context(self, subgraph):
        """For a subgraph compiled with ``ep.context_enable=1``: its graph in the context shared by the session's
        subgraphs (a SharedContext, the context serialized once), or the serialized context of its own (every graph
        it was built as); the binary of the one EPContext node it was loaded from; None otherwise."""
        if subgraph.name in self._reexports:
            return self._reexports[subgraph.name]
        if any(is_qnn_context_node(n) for n in subgraph.nodes):
            return None
        if subgraph.name in self._shared_graphs:
            with self._lock:
                if self._shared_blob is None:
                    self._shared_blob = self._shared.binary()
                blob = self._shared_blob
            return SharedContext(blob, self._shared_graphs[subgraph.name])
        ctx = self._exports.get(subgraph.name)
        return None if ctx is None else ctx.binary()

    def close(self) -> None:
        with self._lock:
            context, self._context = self._context, None
            exports, self._exports = list(self._exports.values()) + self._retired, {}
            if self._shared is not None:
                exports.append(self._shared)
            self._shared = None
            loaded, self._loaded = self._loaded, []
            vote, self.power_vote = self.power_vote, None
            super().close()
        if vote is not None:
            vote.close()
        for ctx in ([context] if context is not None else []) + exports:
            ctx.close()
        for contexts in loaded:
            contexts.close()
        self.prober.close()


class _Unshareable(Exception):
    """A subgraph does not finalize as one graph in the shared export context (which that leaves unserializable)."""


ort_register_providers, ort_create_provider = provider_hooks(_info, QNNProvider)
