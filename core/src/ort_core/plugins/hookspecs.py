"""The provider plugin contract: every hook an execution-provider plugin may implement.

This module only documents and declares the hooks (pluggy hookspecs); implementations live in
the plugins, the built-in CPU provider included (``ort_core.providers.cpu.provider``).

A plugin is a module or object whose functions are decorated with ``ort_core.plugins.hookimpl``
and that is exposed through the entry-point group ``ort_core.providers`` in its ``pyproject.toml``:

    [project.entry-points."ort_core.providers"]
    myep = "ort_ep_myep.plugin"

Contract v2: ``ort_create_provider`` makes one ``ort_core.plugins.ExecutionProvider`` object per
session (``plugins/provider.py`` documents its methods: preferences, get_capability, transform,
compile, export_context (a compiled blob per subgraph, or a ``SharedContext`` for subgraphs sharing one blob,
written with ``sdk_version`` as onnxruntime's EPContext nodes and read back with ``saved_context``),
allocator, data_transfer, stream, close); the module-level
``ort_get_capability`` / ``ort_compile`` / ``ort_allocator`` / ``ort_data_transfer`` hooks below are
contract v1, still served for plugins that have no factory (their answers follow the same rules).

Routing: the core calls ``ort_register_providers`` on every plugin; every other hook is called
*only on the plugin that registered the provider named in the call*, so a plugin never sees
calls for other plugins' providers. A plugin offering several providers receives the
``provider`` name and answers for that one.

Validation: the core checks every answer. A plugin that raises, or returns something that breaks
the contract below, produces an ``OrtWarning`` naming the plugin and the problem; the provider is
then skipped (sessions fall back to the next provider) and the core never crashes because of it.
Exceptions: a bad option value (ValueError from the factory) is the user's error, an
``InvalidArgument``; a failing ``transform`` is an error naming the plugin (the graph may be half
rewritten); ``UnsupportedSubgraph`` from compile hands only that subgraph to the next provider.

Threads: kernels, data-transfer copies, allocator calls and stream methods may be called from any thread,
several at once: the thread of whichever ``run()`` reaches them (an application's thread pool, a server's
request threads), never necessarily the one that made the provider or compiled the kernel. Nothing is
inherited from another call: a runtime whose state is per thread (CUDA's current device, a context made
current) must be set in each call (``cudaSetDevice(device_id)`` at the top of every kernel and copy, or
the device's primary context pushed and popped around the work), not once at creation.
"""

from __future__ import annotations

import pluggy

hookspec = pluggy.HookspecMarker("ort_core")
hookimpl = pluggy.HookimplMarker("ort_core")  # what plugins decorate their hooks with (ort_core.plugins.hookimpl)


@hookspec
def ort_register_providers():
    """Declare the providers this plugin offers.

    Returns a list of ``ort_core.plugins.ProviderInfo``: for each provider its ``name`` (unique,
    e.g. ``"OpenVINOExecutionProvider"``), the ``devices`` its values live on
    (``ort_core.memory.Device``; use ``Device("cpu")`` for providers computing in host memory),
    whether it is ``available`` on this machine and, when not, a ``reason`` a user can act on
    ("libopenvino_c not found: pip install openvino", "no CUDA device visible"). Must be cheap and
    must not raise when the vendor runtime is missing: report unavailability instead.
    """


@hookspec(firstresult=True)
def ort_create_provider(provider, options, session):
    """Make one instance of ``provider`` for one session (contract v2; preferred).

    ``options``: the user's provider options (names already checked against
    ``ProviderInfo.options`` when the provider declares them; values as the user gave them);
    ``session``: an ``ort_core.plugins.SessionContext`` (config entries, model path, optimization
    level). Returns an ``ort_core.plugins.ExecutionProvider`` subclass instance named ``provider``;
    its methods replace the per-call hooks below for that session (``get_capability``,
    ``compile``/``compile_subgraph``, ``allocator``, ``data_transfer``) and ``close`` releases
    what it holds when the session goes. Raise ValueError for a bad option value (the user gets
    an InvalidArgument naming the provider); any other exception skips the provider with a warning.

    A plugin without this hook is served through the v1 hooks below, one call per question.
    """


@hookspec(firstresult=True)
def ort_get_capability(provider, graph, options):
    """Say which of the offered nodes ``provider`` takes.

    ``graph`` is an ``ort_core.plugins.GraphView``: the model's graph (read-only), the opset
    imports, and ``graph.nodes()`` — the nodes still unassigned, in topological order.
    ``options`` is the provider-options dict the user passed for this provider.
    Nodes outside the ONNX domain may be custom ops: ``graph.custom_op(node)`` returns the
    registered ``ort_core.CustomOp`` (or None); a provider may claim them like any node.

    Returns an ``ort_core.plugins.Capability``: ``claimed`` (node ids it takes; only ids of
    offered nodes), ``declined`` (node id -> short reason for *every* offered node it does not
    take) and ``fuse``: True to have connected claimed nodes grouped into fused subgraphs
    (compiled once each), False to compile node by node (kernel-registry providers like CPU).
    Claims must be honest: each claimed node must compile and compute correct results.
    """


@hookspec(firstresult=True)
def ort_compile(provider, subgraph, options):
    """Compile a fused subgraph into a kernel for ``provider``.

    ``subgraph`` is an ``ort_core.plugins.FusedSubgraph``: its nodes (IR), ``inputs`` (every
    value it reads from outside, constants included, in a fixed order), ``outputs`` (values
    read after it or returned by the model), ``constants`` (initializer values it may bake in)
    and ``to_model_proto()`` for SDKs that ingest ONNX directly. For a claimed custom-op node,
    ``subgraph.custom_op(node)`` is its ``CustomOp``; ``op.bind(node, opset)`` gives its kernel.

    Returns either a callable ``kernel(*inputs) -> sequence`` taking one value per
    ``subgraph.inputs`` (numpy arrays on the host, ``ort_core.memory.DeviceTensor``s elsewhere)
    and returning one value per ``subgraph.outputs``, on the provider's device, or an
    ``ort_core.plugins.ContextKernel`` (contract v2), called with a ``KernelContext`` holding
    the inputs, the output buffers to fill (pre-allocated where the model fixes their shape),
    the run's stream and scratch memory. Kernels are stateless and may be called from any thread,
    several at once (see "Threads" above: per-thread runtime state such as the current device is set in
    each call); they must not modify their inputs. Called once per subgraph per session.
    Raising here makes the core fall back to other providers for these nodes.
    """


@hookspec(firstresult=True)
def ort_allocator(provider, device):
    """Return an ``ort_core.memory.Allocator`` for values of ``provider`` on ``device``.

    The allocator declares its ``alignment`` and must honour it for every size, zero included.
    Providers computing in host memory may return ``ort_core.memory.HostAllocator()``. A stream-ordered
    allocator (``stream_ordered = True``) gets the run's stream in ``allocate(nbytes, stream)`` and
    ``free(buffer, stream)`` (see ``ort_core.memory.Allocator``). Called from any thread.
    """


@hookspec(firstresult=True)
def ort_data_transfer(provider):
    """Return an ``ort_core.memory.DataTransfer`` that copies values between ``provider``'s
    devices and the host (both directions), bit-exactly for every tensor dtype. Its copies are called
    from any thread, several at once (see "Threads" above)."""
