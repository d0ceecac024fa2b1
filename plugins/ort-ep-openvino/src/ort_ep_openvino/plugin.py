"""Hooks and provider object of OpenVINOExecutionProvider: the module the entry point names.

Registration, the factory making one ``OpenVINOProvider`` per session, and its methods: thin answers
built from ``runtime``, ``options``, ``capability`` and ``kernel``; values stay in host memory
(OpenVINO's CPU device computes there; other devices copy inside OpenVINO).
"""

from __future__ import annotations

import dataclasses
import threading

from ort_core.memory import HOST
from ort_core.plugins import Capability, ExecutionProvider, Preferences, ProviderInfo, provider_hooks

from . import __version__
from . import runtime as rt
from .capability import Context, Prober, unsupported_reason
from .kernel import compile_subgraph
from .options import DEFAULTS, PRECISION_CAPABILITY, Options, parse, verdict_dir

NAME = "OpenVINOExecutionProvider"


def _info() -> ProviderInfo:
    reason = rt.unavailable_reason()  # never raises: a missing library is an answer, not an error
    version = ""
    if not reason:
        version = rt.runtime().version
    return ProviderInfo(NAME, (HOST,), available=not reason, reason=reason,
                        description=f"OpenVINO {version or '(not loaded)'} through its C API (cffi): "
                                    "fused ONNX subgraphs compiled for CPU, GPU, NPU or AUTO",
                        version=__version__, options={k: str(v) for k, v in DEFAULTS.items()})


class OpenVINOProvider(ExecutionProvider):
    """One session's OpenVINO provider: its parsed options (a bad value is refused when the session is
    made), its own OpenVINO core (made on first use) and its probe verdicts, both released with the
    session. Values stay in host memory. The verdicts outlive the session only in their cache folder
    (``cache_dir``, else ``verdict_dir()``), so a later session or process does not probe again."""

    def __init__(self, info: ProviderInfo, options=None, session=None) -> None:
        super().__init__(info, options, session)
        self.opts = parse(self.options)  # ValueError naming the option: the user gets an InvalidArgument
        budget = getattr(self.session, "intra_op_num_threads", 0)
        if budget and not self.opts.num_of_threads:  # the session's thread budget, unless our option says
            self.opts = dataclasses.replace(self.opts, num_of_threads=budget)
        self._core: rt.Core | None = None
        self._prober: Prober | None = None
        self._device_problem: str | None = None
        self._lock = threading.Lock()

    @property
    def core(self) -> rt.Core:
        """This provider's ov_core_t (RuntimeUnavailable or OpenVINOError when OpenVINO cannot make one)."""
        with self._lock:
            if self._core is None:
                self._core = rt.Core(rt.runtime())
            return self._core

    @property
    def prober(self) -> Prober:
        core = self.core
        with self._lock:
            if self._prober is None:
                self._prober = Prober(core, probe_device(self.opts), self.opts.cache_dir or verdict_dir())
            return self._prober

    def preferences(self) -> Preferences:
        # with enable_qdq_optimizer, quantized weights stay DequantizeLinear(int8 constant): OpenVINO's
        # low-precision transformations need them to run convolutions and products in int8
        return Preferences(keep_qdq=self.opts.enable_qdq_optimizer)

    def get_capability(self, graph):
        nodes = graph.nodes()
        device_problem = self.device_reason()
        if device_problem:
            # every node gets the reason; the session falls back to the next provider for all of them
            return Capability.from_reasons(nodes, lambda node: device_problem)
        ctx, prober = Context.of_view(graph, self.opts.enable_qdq_optimizer), self.prober
        capability = Capability.from_reasons(nodes, lambda node: unsupported_reason(node, ctx, prober))
        prober.verdicts.save()
        return capability

    def compile_subgraph(self, subgraph):
        problem = self.device_reason()
        if problem:
            raise RuntimeError(problem)
        ctx, prober = Context.of_subgraph(subgraph, self.opts.enable_qdq_optimizer), self.prober
        for node in subgraph.nodes:  # the same rule as capability (cached), so the two never disagree
            why = unsupported_reason(node, ctx, prober)
            if why is not None:
                raise ValueError(f"{node.label}: {why}")
        return compile_subgraph(subgraph, self.opts, self.core)

    def device_reason(self) -> str:
        """Why the requested device cannot be used here (absent, or the precision unsupported), or ""; asked of
        OpenVINO once per instance (capability and every compile read it)."""
        if self._device_problem is None:
            try:
                self._device_problem = device_reason(self.opts, self.core)
            except (rt.RuntimeUnavailable, rt.OpenVINOError) as e:
                self._device_problem = str(e)
        return self._device_problem


def probe_device(opts: Options) -> str:
    """The device probes compile for: the one named, or for AUTO/HETERO/MULTI the first listed
    (plain AUTO: CPU, which AUTO always has and falls back to)."""
    devices = opts.devices
    return devices[0] if devices else "CPU"


def device_reason(opts: Options, core: rt.Core) -> str:
    """Why the device ``opts`` names cannot be used through ``core`` (absent, or the precision unsupported),
    or ""."""
    available = core.available_devices()
    for dev in opts.devices:
        if not _present(dev, available):
            return f"OpenVINO device {dev} is not available here (available: {', '.join(available) or 'none'})"
    need = PRECISION_CAPABILITY.get(opts.precision)
    if need:
        for dev in opts.devices or ["CPU"]:
            try:
                caps = core.get_property(dev, "OPTIMIZATION_CAPABILITIES").split()
            except rt.OpenVINOError as e:
                return f"cannot ask {dev} for its capabilities: {e}"
            if need not in caps:
                return (f"precision {opts.precision} is not supported by OpenVINO's {dev} device "
                        f"(it offers {' '.join(caps)})")
    return ""


def _present(device: str, available: list[str]) -> bool:
    if device in available:
        return True
    base, _, index = device.partition(".")
    # one GPU is listed as 'GPU' but answers to 'GPU.0' too; 'GPU' alone means any GPU
    return (not index and any(a.split(".")[0] == base for a in available)) or (index == "0" and base in available)


ort_register_providers, ort_create_provider = provider_hooks(_info, OpenVINOProvider)
