"""Hooks and provider object of ExampleExecutionProvider: the module the entry point names.

Two hooks (registration, and the factory making one ``ExampleProvider`` per session) and the
provider class, whose methods are thin answers built from ``memory`` (device, allocator, copies)
and ``kernels`` (what it runs, how). An EXAMPLE to copy, not an accelerator: it computes with numpy.
"""

from __future__ import annotations

import threading

from ort_core.plugins import ArtifactCache, Capability, ExecutionProvider, ProviderInfo, is_context_node, provider_hooks

from . import __version__
from .kernels import (
    PROVIDER,
    compile_program,
    compile_subgraph,
    program_from_bytes,
    program_to_bytes,
    unsupported_reason,
)
from .memory import ALLOCATOR, DEVICE, STAGING, TRANSFER, unavailable_reason
from .stream import RunStream, Worker

NAME = PROVIDER
OPTIONS = {"device_id": "0", "cache_dir": ""}
"""The provider options it accepts, with their defaults: the core refuses any other name, listing these.
``cache_dir``: a folder where compiled programs are kept between sessions (none by default)."""


def _info() -> ProviderInfo:
    # Loading the library here is cheap and tells the user *now* why the provider is off;
    # unavailable_reason never raises, as registration must not.
    reason = unavailable_reason()
    return ProviderInfo(NAME, (DEVICE,), available=not reason, reason=reason,
                        description="EXAMPLE provider (template for vendors, not an accelerator): "
                                    "float elementwise ops and MatMul in libc memory via cffi",
                        version=__version__, options=OPTIONS)


class ExampleProvider(ExecutionProvider):
    """One session's use of the example device: its options and its stream worker (a thread, started on
    the first run, stopped by ``close``). The library is process-wide (``memory.runtime``); kernels keep
    no state between calls."""

    asynchronous = True  # kernels and copies enqueue work on the run's stream

    def __init__(self, info: ProviderInfo, options=None, session=None) -> None:
        device_id = (options or {}).get("device_id", OPTIONS["device_id"])
        # a bad value is a ValueError: the user gets an error naming the provider and the option
        if str(device_id).strip() != str(DEVICE.id):
            raise ValueError(f"device_id={device_id!r}: {NAME} has a single device, id {DEVICE.id}")
        super().__init__(info, options, session, (DEVICE,))
        self._worker: Worker | None = None
        self._lock = threading.Lock()
        self._programs: dict[str, list] = {}  # subgraph name -> compiled program, for export_context
        folder = str(self.options.get("cache_dir", "") or "")
        self._cache = ArtifactCache(folder) if folder else None

    def stream(self) -> RunStream:
        """A stream for one run on this instance's worker (one per run, so runs keep their errors apart)."""
        worker = self._worker
        if worker is None:
            with self._lock:
                if self.closed:
                    raise RuntimeError(f"{NAME}: the provider was closed with its session")
                if self._worker is None:
                    self._worker = Worker(f"{NAME} stream")
                worker = self._worker
        return RunStream(worker)

    def close(self) -> None:
        with self._lock:
            worker, self._worker = self._worker, None
            super().close()
        if worker is not None:
            worker.stop()

    def get_capability(self, graph):
        opset = graph.opset("")

        def reason(node):  # its own EPContext nodes (saved by export_context) load without compiling again
            return None if is_context_node(node, NAME) else unsupported_reason(node, opset, graph.type_of)

        # fuse=True: connected claimed nodes arrive in compile as one subgraph, so intermediates
        # never leave the device and the core inserts copies only at the borders
        return Capability.from_reasons(graph.nodes(), reason, fuse=True)

    def compile_subgraph(self, subgraph):
        cache, key = self._cache, None
        program = None
        if cache is not None:  # keyed by the subgraph, this provider's version, options and device
            key = cache.key(NAME, __version__, self.options, self.device, subgraph)
            blob = cache.get(key)
            program = None if blob is None else program_from_bytes(blob, subgraph.name)
        if program is None:
            program = compile_program(subgraph, self.session.model_path)
            if cache is not None:
                cache.put(key, program_to_bytes(program))
        self._programs[subgraph.name] = program
        return compile_subgraph(subgraph, program)

    def export_context(self, subgraph):
        """The compiled program of a subgraph, for an EPContext node (session config ep.context_enable)."""
        program = self._programs.get(subgraph.name)
        return None if program is None else program_to_bytes(program)

    def allocator(self, device):
        if device != DEVICE:
            raise ValueError(f"{NAME} allocates on {DEVICE} only, not {device}")
        return ALLOCATOR

    def data_transfer(self):
        return TRANSFER

    def staging_allocator(self):
        """Host memory the core stages this device's values in when a CPU kernel reads them inside a run: what
        a GPU provider backs with pinned (page-locked) memory. Here an ordinary pooled host arena, declared
        host_pinned so that the path is exercised on every machine."""
        return STAGING


ort_register_providers, ort_create_provider = provider_hooks(_info, ExampleProvider)
