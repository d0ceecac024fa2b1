"""ExecutionProvider: the object a plugin's factory makes for one session (provider contract v2).

A plugin declares its providers once per process (``ort_register_providers``) and makes one
``ExecutionProvider`` per session (``ort_create_provider``). The instance owns what a session's
use of the provider needs: the devices it chose, its options, the session's config entries and
the model's path, and whatever vendor handles, caches and streams it opens; ``close`` releases
them. The core never subclasses it for a vendor; plugins do. Validation of what an instance
answers lives in ``manager``; this module only defines the base class and its small types.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidGraph
from ..ir.graph import Graph, Node
from ..memory.device import Device
from ..memory.host import HostAllocator, HostDataTransfer
from ..memory.protocols import Allocator, DataTransfer
from ..memory.stream import Stream
from .context import CONTEXT_DOMAIN, CONTEXT_OP, context_blob
from .hookspecs import hookimpl
from .types import Capability, FusedSubgraph, GraphView, ProviderInfo, TransformView

Kernel = Callable[..., Sequence[Any]]


@dataclass(frozen=True)
class SessionContext:
    """What a provider instance may know of the session that made it.

    ``config``: the session's config entries (``SessionOptions.add_session_config_entry``), a
    read-only copy (onnxruntime's ``ep.context_*`` keys among them). ``model_path``: the model's
    file path, or None for a model given as bytes or a ModelProto (a provider caching compiled
    artifacts keys them on content then). ``optimization_level``: the session's graph
    optimization level as an int (0 disabled .. 99 all). ``intra_op_num_threads``: the session's thread
    budget as the user set it (0: not set, every available CPU): a provider running its own thread pool
    sizes it by this unless its own thread option says otherwise (ort_core.threads).
    """

    config: Mapping[str, str] = field(default_factory=dict)
    model_path: str | None = None
    optimization_level: int = 99
    intra_op_num_threads: int = 0


@dataclass(frozen=True)
class Preferences:
    """What a provider asks of the core before its session optimizes the model (asked once per build).

    ``keep_qdq``: it runs quantized (QDQ) groups, so DequantizeLinear of quantized weights must stay nodes
    rather than be folded into float weights (the default folds them: faster for float providers).
    ``bakes_weights``: it builds constant initializers into its compiled artifact, so its subgraphs list
    them in ``constants`` only, not in ``inputs``: the core keeps no copy for it and feeds none at run time
    (the default: weights are inputs, copied once to its device at session creation).
    ``layout``: "NHWC" for a provider that computes channels-last: the layout-sensitive ops it claims (Conv, the
    pools, LRN, inference BatchNormalization on 4-D tensors) reach its ``compile`` as the same ops of domain
    ``com.ms.internal.nhwc`` (onnxruntime's name), data input and output NHWC, weights and attributes as ONNX has
    them, with Transposes between the layouts that cancel where its nodes meet (``optimizer/layout.py``; done after
    partitioning, before its ``transform``, at every optimization level). Such a provider must take Transpose.
    "NCHW" (the default): the ops as the model has them.
    ``fused_ops``: the fused ops of ort-core's optimizer it runs, as "domain::op_type". At level extended and
    up the core then fuses those patterns before partitioning, so its ``get_capability`` sees one fused node
    where the model has a chain; a provider declaring none sees the standard ops, and may still fuse the
    nodes it claimed in ``transform``. The fused ops of the contract (``optimizer/cpu_fusion.py`` and the
    fusion modules beside it make them; the semantics are onnxruntime's for its contrib ops, those of the
    CPU provider's kernels in ``providers/cpu/ops/fused.py`` and ``fused_transformer.py`` for ort-core's own):

    - ``com.microsoft::FusedConv``: Conv + activation (Relu, LeakyRelu, Clip, Sigmoid, Tanh, HardSigmoid),
      or Conv + residual Add (+ activation)
    - ``com.microsoft::FusedGemm``: Gemm + activation (the same, without Clip)
    - ``com.microsoft::Gelu`` and ``com.microsoft::BiasGelu`` (the erf GELU chain, without and with a bias
      Add before it), ``com.microsoft::FastGelu`` (the tanh chain, bias as its second input)
    - ``com.microsoft::SkipLayerNormalization``: LayerNormalization(Add(x, skip)) over the last axis
    - ``com.microsoft::Attention``: a self-attention block (Q/K/V weights packed once) whose mask it takes
    - ``::LayerNormalization``: the ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div chain over the last axis (the
      standard op from opset 17; below it, onnxruntime's contrib op of that name in the ONNX domain)
    - ``ort_core::FusedBatchNormalization``: BatchNormalization + activation
    - ``ort_core::MatMulBias``: MatMul + bias Add
    - ``ort_core::SelfAttention``: the same block with a mask onnxruntime's Attention does not take
    - ``ort_core::AffineLinearClassifier`` / ``AffineLinearRegressor``: ai.onnx.ml's linear model with the affine
      steps before it (Scaler, Add/Sub/Mul/Div by a constant, MatMul by a constant) composed in float64 into its
      inputs ``M`` and ``d``: scores ``x M + d`` (``optimizer/ml_fusion.py``)
    """

    keep_qdq: bool = False
    bakes_weights: bool = False
    fused_ops: frozenset[str] = frozenset()
    layout: str = "NCHW"


@dataclass(frozen=True)
class SharedContext:
    """``export_context``'s answer for a subgraph compiled into a blob it shares with other subgraphs of the same
    provider instance (QNN keeps every graph of a model in one context binary).

    ``blob``: the whole shared blob, the same bytes for every subgraph in it; ``graph``: the name of this subgraph's
    graph inside the blob, unique in it. The core writes onnxruntime's shared layout: the first of those subgraphs
    (in execution order) becomes an EPContext node with ``main_context=1`` holding the blob (embedded, or one file
    beside the model), each other one a node with ``main_context=0`` and no ``ep_cache_context``; every node is named
    after its ``graph`` and has it as ``partition_name`` (onnxruntime's QNN provider finds a node's graph in the blob
    by the node's name). ``ExecutionProvider.saved_context`` reads them back."""

    blob: bytes
    graph: str


@dataclass(frozen=True)
class SavedContext:
    """A compiled context read back from one EPContext node (``ExecutionProvider.saved_context``).

    ``node``: the node. ``main``: the node holding the blob: ``node`` itself, or for a node with ``main_context=0`` the
    main node of the same ``source`` it shares the blob of. ``graph``: the name of ``node``'s graph inside the blob:
    its ``partition_name``, else its node name. ``sdk_version``: the ``ep_sdk_version`` it was saved with ('' when
    the node has none). ``blob``: the bytes, read from ``main`` on first use (the attribute, or the file beside the
    model it names); nodes sharing a blob have the same ``main``, so a provider deserializes it once per main node.
    """

    node: Node
    main: Node
    graph: str
    sdk_version: str = ""
    model_path: str | None = None

    @functools.cached_property
    def blob(self) -> bytes:
        return context_blob(self.main, self.model_path)


def _main_context(node: Node) -> int:
    value = node.attrs.get("main_context", 1)
    if isinstance(value, bool) or not isinstance(value, int) or value not in (0, 1):
        raise InvalidGraph(f"{node.label}: main_context must be 0 or 1, got {value!r}")
    return value


def _source(node: Node) -> str:
    return str(node.attrs.get("source", "")).strip().lower()


def _main_node_of(node: Node, graph: Graph) -> Node:
    """The main EPContext node a ``main_context=0`` node shares the blob of: the only main node of its source in
    ``graph``, else the nearest one before it (onnxruntime writes the main node first)."""
    mains, before, seen = [], [], False
    for n in graph.nodes:
        if n is node or (node.id >= 0 and n.id == node.id):
            seen = True
        elif (n.op_type == CONTEXT_OP and n.domain == CONTEXT_DOMAIN and _source(n) == _source(node)
              and _main_context(n) == 1):
            mains.append(n)
            if not seen:
                before.append(n)
    if len(mains) == 1:
        return mains[0]
    if before:
        return before[-1]
    where = "none" if not mains else f"{len(mains)}, none of them before it"
    raise InvalidGraph(f"{node.label}: main_context=0, but the model has {where} EPContext node(s) of source "
                       f"'{node.attrs.get('source', '')}' with main_context=1 holding the context it shares")


class UnsupportedSubgraph(Exception):
    """A provider's compile turned out unable to run one subgraph (a limit its capability could not
    see). Raised from ``ExecutionProvider.compile_subgraph`` or returned in ``compile``'s list in
    that subgraph's place: the core hands just that subgraph's nodes to the next provider in the
    session's list and says so in the placement line. Any other exception from compile marks the
    plugin as broken, and the session goes on without the provider."""


class ExecutionProvider:
    """One provider as one session uses it; plugins subclass it and return it from
    ``ort_create_provider``.

    ``name``/``info``: the ProviderInfo it was declared with. ``options``: the provider options
    the user gave, already checked against ``info.options`` (unknown names are refused before the
    factory runs). ``session``: a SessionContext. ``devices``: the devices this
    instance computes on, chosen by the factory (a ``device_id`` option picks one of
    ``info.devices``); the first is where its kernels' values live.

    Override ``get_capability`` and ``compile_subgraph`` (or ``compile`` for providers that
    compile all their subgraphs at once); host-memory providers keep the default
    ``allocator``/``data_transfer``; device providers return their own. ``close`` is called once,
    when the session is garbage-collected or the interpreter exits; a value that outlives the
    session must keep what it needs alive itself (its buffer's owner).

    Threads: its kernels, copies, allocators and streams are called from whichever thread runs the
    session, several at once, not only from the one that created the instance or compiled the kernels;
    per-thread runtime state (CUDA's current device) is set in each call, never assumed from creation.
    """

    def __init__(self, info: ProviderInfo, options: Mapping[str, str] | None = None,
                 session: SessionContext | None = None, devices: Sequence[Device] | None = None) -> None:
        self.info = info
        self.name = info.name
        self.options: dict[str, Any] = dict(options or {})
        self.session = session or SessionContext()
        self.devices: tuple[Device, ...] = tuple(devices or info.devices[:1])
        self.closed = False

    @property
    def device(self) -> Device:
        """Where this instance's kernels take and leave their values."""
        return self.devices[0]

    asynchronous = False
    """True for a provider whose kernels and copies enqueue work on a stream: the core then asks ``stream()``
    for one stream per run, passes it to its ContextKernels and copies, and synchronizes it where the host
    (or another stream) reads its values and at the end of the run."""

    def stream(self) -> Stream | None:
        """A new Stream for one run (called once per run when ``asynchronous``); None for synchronous
        providers. Concurrent runs each get their own, so their work and errors stay apart. Called, and its
        stream used, from the run's thread: any thread."""
        return None

    # ----------------------------------------------------------------- placement
    def preferences(self) -> Preferences:
        """What it wants kept or done before placement (see Preferences); asked before optimization."""
        return Preferences()

    def get_capability(self, graph: GraphView) -> Capability:
        """Which offered nodes it takes (see ``hookspecs.ort_get_capability`` for the rules)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement get_capability")

    def transform(self, view: TransformView) -> int:
        """Rewrite its own claimed nodes after partitioning (fusions, layout changes): ``view.model`` in
        place, only nodes in ``view.claimed``; ``view.fuse()`` applies ort-core's fusion passes. Returns how
        many rewrites it made. Nothing is partitioned again: what it produces stays its own. Default: none."""
        return 0

    # ------------------------------------------------------------------- compile
    def compile(self, subgraphs: Sequence[FusedSubgraph]) -> list[Kernel | UnsupportedSubgraph]:
        """Kernels for ``subgraphs`` (all of this provider's in the session, in execution order),
        one per subgraph, or an ``UnsupportedSubgraph`` in the place of one it hands on.

        The default compiles one at a time through ``compile_subgraph``; a provider keeping every
        graph of a model in one compiled context (QNN) overrides this instead.
        """
        out: list[Kernel | UnsupportedSubgraph] = []
        for sub in subgraphs:
            try:
                out.append(self.compile_subgraph(sub))
            except UnsupportedSubgraph as e:
                out.append(e)
            except Exception as e:
                try:
                    e.ort_subgraph = sub  # which subgraph failed, for the core's message
                except AttributeError:
                    pass
                raise
        return out

    def compile_subgraph(self, subgraph: FusedSubgraph) -> Kernel:
        """A kernel for one subgraph: ``kernel(*inputs) -> outputs``, one value per
        ``subgraph.inputs``/``subgraph.outputs``, on ``self.device``. Stateless across calls and
        safe to call from any thread, several at once (a runtime keeping the current device per thread
        gets it set in each call); never modifies its inputs."""
        raise NotImplementedError(f"{type(self).__name__} does not implement compile_subgraph")

    def export_context(self, subgraph: FusedSubgraph) -> bytes | SharedContext | None:
        """The compiled artifact of a subgraph this instance compiled, to be saved in an EPContext node
        (session config ``ep.context_enable``, or ``ModelCompiler``), or None when it has none.

        ``bytes``: a blob holding this subgraph alone, written in its own node (``main_context=1``). A
        ``SharedContext``: this subgraph's graph inside one blob shared with other subgraphs of this instance,
        written once, onnxruntime's way (see SharedContext). Each node gets ``ep_sdk_version=self.sdk_version``.
        A provider that exports contexts also claims its own EPContext nodes (``ort_core.plugins.is_context_node(
        node, self.name)``) and compiles them from ``self.saved_context(node, subgraph.graph)`` (its blob and graph
        name) without compiling again."""
        return None

    @property
    def sdk_version(self) -> str:
        """The version of the vendor SDK or runtime that builds this instance's compiled contexts, written into each
        EPContext node's ``ep_sdk_version`` (QNN: its library's build id, as onnxruntime's QNN provider writes it).
        Default: the plugin's version (``info.version``)."""
        return self.info.version

    def saved_context(self, node: Node, graph: Graph, strict_version: bool = False) -> SavedContext:
        """The compiled context of an EPContext ``node`` of ``graph`` (the model's graph: ``subgraph.graph``), with
        the name of its graph in it; for a ``main_context=0`` node, the blob of the main node it shares.

        ``ep_sdk_version``: onnxruntime's providers differ on a mismatch, so the provider decides. onnxruntime's
        QNN provider ignores the attribute on load (the QNN runtime itself refuses a context binary it cannot
        read); its OpenVINO provider refused a node saved by another OpenVINO version. ``strict_version=True``
        does the latter: an ``InvalidGraph`` naming the node and both versions when the node's differs from
        ``self.sdk_version``. Raises InvalidGraph for a node whose main node or blob cannot be found."""
        version = str(node.attrs.get("ep_sdk_version", ""))
        if strict_version and version and version != self.sdk_version:
            raise InvalidGraph(f"{node.label}: its context was saved by {node.attrs.get('source', '')} SDK "
                               f"'{version}', and {self.name} runs '{self.sdk_version}': compile the model again")
        main = node if _main_context(node) == 1 else _main_node_of(node, graph)
        name = str(node.attrs.get("partition_name", "")) or node.name
        return SavedContext(node, main, name, version, self.session.model_path)

    # -------------------------------------------------------------------- memory
    def allocator(self, device: Device) -> Allocator:
        """The allocator for values on ``device`` (one of ``self.devices``); called from any thread. A
        stream-ordered one (``stream_ordered``) is given the run's stream on allocate and on free."""
        if not device.is_host:
            raise ValueError(f"{self.name} has no allocator for {device}")
        return HostAllocator()

    def data_transfer(self) -> DataTransfer:
        """Copies between this instance's devices and the host, both ways, bit-exactly; its copies are called
        from any thread (set per-thread device state in each)."""
        return HostDataTransfer()

    def staging_allocator(self) -> Allocator | None:
        """An allocator of page-locked host memory (its ``device``: type "cpu", memory "host_pinned"), pooled,
        for the host side of this provider's asynchronous copies: values the host reads inside a run (a CPU
        kernel's input) are copied down into it, and host values going up to this provider's stream (feeds, CPU
        results) are first copied into it, then up; each such buffer is held until run()'s closing
        synchronization. None (the default): plain host memory both ways. Values handed to the caller never live
        in it."""
        return None

    # ----------------------------------------------------------------- lifecycle
    def close(self) -> None:
        """Release vendor handles, compiled artifacts and device memory pools (called once)."""
        self.closed = True

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} on {', '.join(map(str, self.devices))}>"


class HookProvider(ExecutionProvider):
    """A provider whose plugin implements the module-level hooks of contract v1
    (``ort_get_capability``/``ort_compile``/``ort_allocator``/``ort_data_transfer``) and no factory:
    each method is one routed hook call with the session's options. Kept so that such plugins run
    unchanged; new plugins implement ``ort_create_provider``."""

    def __init__(self, info: ProviderInfo, options: Mapping[str, str] | None, session: SessionContext | None,
                 call: Callable[..., Any]) -> None:
        super().__init__(info, options, session, info.devices)
        self._call = call  # call(hook_name, **kwargs) reaching only the owning plugin

    def get_capability(self, graph: GraphView) -> Capability:
        return self._call("ort_get_capability", graph=graph, options=self.options)

    def compile_subgraph(self, subgraph: FusedSubgraph) -> Kernel:
        return self._call("ort_compile", subgraph=subgraph, options=self.options)

    def allocator(self, device: Device) -> Allocator:
        return self._call("ort_allocator", device=device)

    def data_transfer(self) -> DataTransfer:
        return self._call("ort_data_transfer")


def provider_hooks(info: Callable[[], ProviderInfo],
                   make: Callable[[ProviderInfo, dict, SessionContext], ExecutionProvider]) -> tuple:
    """The two hooks of a plugin offering one provider: registration answers ``[info()]`` (asked afresh, so
    availability is read when the core asks), the factory returns ``make(info(), options, session)``. A
    plugin module assigns them under the hooks' names, where pluggy finds them:

        ort_register_providers, ort_create_provider = provider_hooks(_info, MyProvider)
    """

    @hookimpl
    def ort_register_providers():
        return [info()]

    @hookimpl
    def ort_create_provider(provider, options, session):
        return make(info(), options, session)

    return ort_register_providers, ort_create_provider
