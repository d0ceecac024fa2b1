"""Hooks and provider object of CUDAExecutionProvider: the module the entry point names.

Registration (available when libcudart, libnvrtc and libcublas load and NVML, or else the CUDA runtime, sees a
GPU; otherwise the reason, in words a user can act on; CUDA itself is initialized by the first session), the
factory making one ``CudaProvider`` per session, and its methods: thin answers built from ``runtime``,
``options``, ``kernels`` (what it runs, the plan) and ``launch`` (running plans).
"""

from __future__ import annotations

import threading

from ort_core.plugins import Capability, ExecutionProvider, Preferences, ProviderInfo, provider_hooks

from . import __version__
from . import runtime as rt
from .capability import unsupported_reason
from .kernels import plan_subgraph
from .memory import CudaAllocator, CudaDataTransfer, PinnedArena, cuda_device
from .nvrtc import KernelCache
from .options import DEFAULTS, default_cache_dir, parse
from .stream import CudaStream, StreamPool

NAME = "CUDAExecutionProvider"


def _info() -> ProviderInfo:
    # never raises: a missing library or GPU is an answer; and asks NVML, not CUDA, where it can (fork safety)
    found, reason = rt.listed_devices()
    devices = tuple(cuda_device(d.id) for d in found) or (cuda_device(0),)
    gpus = "; ".join(f"{d.name} (sm_{d.arch})" for d in found) or "no GPU"
    return ProviderInfo(NAME, devices, available=not reason, reason=reason,
                        description=f"NVIDIA GPUs through the CUDA runtime, NVRTC and cuBLAS (cffi): {gpus}",
                        version=__version__, options=dict(DEFAULTS))


class CudaProvider(ExecutionProvider):
    """One session's use of one GPU: its options, allocator, data transfer, the loaded kernels and the cuBLAS
    handle (released by ``close``). A stream per run."""

    asynchronous = True

    def __init__(self, info: ProviderInfo, options=None, session=None) -> None:
        opts = parse(options)  # a ValueError naming the option: the user gets an InvalidArgument
        found, reason = rt.devices()
        if reason:
            raise RuntimeError(f"{NAME} is unavailable: {reason}")
        ids = [d.id for d in found]
        if opts.device_id not in ids:
            raise ValueError(f"device_id={opts.device_id}: no such GPU; valid ids: {', '.join(map(str, ids))}")
        super().__init__(info, options, session, (cuda_device(opts.device_id),))
        self.opts = opts
        self.rt = rt.runtime()
        self.gpu = found[ids.index(opts.device_id)]
        # its own allocator, so gpu_mem_limit bounds this session (the device's memory pool beneath is shared)
        self._allocator = CudaAllocator(self.rt, opts.device_id, opts.gpu_mem_limit, self.gpu.memory_pools)
        self._transfer = CudaDataTransfer(self.rt, opts.device_id, self.gpu.memory_pools)
        self._staging = PinnedArena(self.rt)
        self._streams = StreamPool(self.rt, self.device)
        self._executor = None
        self._lock = threading.Lock()

    def executor(self):
        from .launch import Executor

        with self._lock:
            if self.closed:
                raise RuntimeError(f"{NAME}: the provider was closed with its session")
            if self._executor is None:
                self._executor = Executor(self.rt, self.gpu, self._allocator, self._transfer,
                                          KernelCache(default_cache_dir()), self.opts.use_tf32,
                                          self.opts.enable_cuda_graph)
            return self._executor

    def preferences(self) -> Preferences:
        # constants are uploaded once at compile time (and shapes/axes read on the host), never fed per run
        return Preferences(bakes_weights=True, fused_ops=frozenset({
            "com.microsoft::Gelu", "::LayerNormalization", "com.microsoft::SkipLayerNormalization"}))

    def get_capability(self, graph):
        opsets = dict(graph.opsets)
        return Capability.from_reasons(
            graph.nodes(), lambda node: unsupported_reason(node, opsets, graph.type_of, graph.constant), fuse=True)

    def compile_subgraph(self, subgraph):
        plan = plan_subgraph(subgraph)
        return self.executor().compile(plan, subgraph.constants)

    def stream(self) -> CudaStream:
        return self._streams.take()  # given back by CudaStream.close at the end of the run

    def allocator(self, device):
        if device != self.device:
            raise ValueError(f"{NAME} allocates on {self.device} only, not {device}")
        return self._allocator

    def data_transfer(self):
        return self._transfer

    def staging_allocator(self):
        """Pinned host memory, so that copies between the run's pageable host values and the GPU are asynchronous."""
        return self._staging

    def close(self) -> None:
        with self._lock:
            executor, self._executor = self._executor, None
            super().close()
        if executor is not None:
            executor.close()
        self._streams.clear()
        self._staging.trim()  # blocks still viewed go back through cudaFreeHost when their last view does


ort_register_providers, ort_create_provider = provider_hooks(_info, CudaProvider)
