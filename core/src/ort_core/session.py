"""InferenceSession: the one place where the pipeline is written out in order.

load -> resolve providers -> partition -> compile each subgraph -> execution plan -> run.
Input checking and the ORT-compatible query methods live here too; kernels, partitioning and
plugin plumbing live in their own packages.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np

from . import external_initializers
from .config_entries import check_session_config
from .customops import CustomOpRegistry, global_registry, infer_static_types
from .ep_devices import OrtMemoryInfo
from .ep_selection import providers_from_options
from .epcontext import write_context_model
from .errors import (
    Fail,
    InvalidArgument,
    InvalidGraph,
    KernelError,
    NotImplementedOp,
    OrtError,
    PluginError,
    reset_severity,
    severity,
    warn,
)
from .io_types import ModelMetadata, NodeArg, SubgraphAssignment, check_feed
from .iobinding import IOBinding, checked_input
from .ir import Model, load_model, model_to_proto, save_model
from .ir.dimensions import override_free_dimensions
from .ir.isolated import MODES as INFERENCE_MODES
from .ir.isolated import prestart as prestart_inference_helper
from .ir.load import EXTERNAL_FOLDER_KEY
from .ir.validate import validate_model
from .limits import RunContext, parse_max_tensor_bytes, run_context, too_large
from .limits import current as current_limits
from .lora import active_feeds
from .memory.device import HOST
from .memory.host_heap import keep_freed_memory
from .model_config import options_from_model
from .optimizer import EXTENDED, optimize
from .optimizer.cpu_fusion import fuse_nodes
from .options import RunOptions, SessionOptions
from .ortvalue import OrtValue, default_transfers
from .pipeline import BodyPlanner, Placement, place, placed_kernels
from .placement import explain
from .planning import build_plan
from .plugins.context import ENABLE_KEY as CONTEXT_ENABLE_KEY
from .plugins.manager import CPU, SessionProvider, get_registry
from .plugins.provider import SessionContext
from .plugins.types import FusedSubgraph
from .profiling import Profiler
from .threads import BLAS, budget_of
from .transfers import Transfers

STRICT_KEY = "session.disable_cpu_ep_fallback"
"""Session config entry (onnxruntime's name): "1" makes every fallback an error — a requested
provider that is missing or unavailable, a plugin that fails, and any node left to the CPU
provider when the CPU provider was not requested explicitly."""

CHECK_OUTPUTS_KEY = "ort_core.check_kernel_outputs"
"""Session config entry: "1" makes every kernel's outputs be checked against the model's static
types (dtype, fixed dims, count); a mismatch raises KernelError naming the provider and node.
Costs a little per step; meant for certification and debugging."""


RECORD_ASSIGNMENT_KEY = "session.record_ep_graph_assignment_info"
"""Session config entry (onnxruntime's name) that onnxruntime needs set to "1" before
get_provider_graph_assignment_info() answers; ort-core answers unless it is set to something else."""


SHAPE_INFERENCE_KEY = "ort_core.shape_inference"
"""Session config entry: "isolated" (default) runs onnx's type and shape inference in a helper process
(a fresh interpreter, started once per process), so that an inference function crashing on a hostile
model cannot take the interpreter down (off POSIX nothing is inferred); "in_process" runs it here, a
few ms faster per session, for trusted models; "off" skips it (types then come from the model's
declarations only)."""


ORT_ARENA_OPTIONS = frozenset({"arena_extend_strategy", "initial_chunk_size_bytes", "max_mem",
                               "max_dead_bytes_per_chunk", "initial_growth_chunk_size_bytes",
                               "max_power_of_two_extend_bytes"})
"""onnxruntime's arena settings (OrtArenaCfg's keys), which code written for it hands its CPU provider (RapidOCR
does) and onnxruntime accepts: taken off the CPU provider's options with a warning that they have no effect in
ort-core, whose CPU provider takes ``use_arena``; any other name it does not declare is still refused."""


class InferenceSession:
    """Load a model and run it (mirrors onnxruntime.InferenceSession).

    ``path_or_bytes``: a file path, serialized bytes or an onnx.ModelProto. ``providers``: names
    or ``(name, options)`` tuples in priority order; the CPU provider is always added last.
    Unknown or unavailable providers are skipped with a warning naming them and the reason.
    """

    def __init__(self, path_or_bytes: Any, sess_options: SessionOptions | None = None,
                 providers: Sequence[Any] | None = None, provider_options: Sequence[dict] | None = None,
                 **kwargs: Any) -> None:
        # what the model's metadata sets (ort_config, when ORT_LOAD_CONFIG_FROM_MODEL=1) goes to a copy
        self._sess_options = options_from_model(path_or_bytes, sess_options or SessionOptions())
        # onnxruntime's attributes that code written for it reads (values as onnxruntime sets them)
        self._sess_options_initial = sess_options
        self._model_path, self._model_bytes = _model_source(path_or_bytes)
        self._enable_fallback = int(kwargs.get("enable_fallback", 1)) == 1
        self._fallback_providers = [CPU]
        # log_severity_level 3 (error) and up silences the warnings of this session's creation
        token = severity(int(self._sess_options.log_severity_level))
        try:
            self._create(path_or_bytes, providers, provider_options)
        finally:
            reset_severity(token)

    def _create(self, path_or_bytes: Any, providers, provider_options) -> None:
        self._sess_options.warn_unapplied()
        self._profiler = Profiler(self._sess_options.profile_file_prefix) if self._sess_options.enable_profiling \
            else None
        t_start = time.perf_counter_ns()
        self._max_tensor_bytes = parse_max_tensor_bytes(self._sess_options._config)
        threads = self._sess_options.intra_op_num_threads
        try:
            budget = budget_of(threads)
        except ValueError as e:
            raise InvalidArgument(f"SessionOptions.{e}") from None
        BLAS.register(self, threads)  # numpy's BLAS pool follows the largest budget of the live sessions
        # what kernels see at creation and in runs
        self._limits = RunContext(self._max_tensor_bytes, threads=budget)
        config = self._sess_options._config
        check_session_config(config)
        inference = config.get(SHAPE_INFERENCE_KEY, "isolated")
        if inference not in INFERENCE_MODES:
            raise InvalidArgument(f"session config entry '{SHAPE_INFERENCE_KEY}' must be one of "
                                  f"{list(INFERENCE_MODES)}, got {inference!r}")
        if inference == "isolated":
            prestart_inference_helper()  # its start-up overlaps plugin discovery and loading below
        registry = get_registry()
        given = external_initializers.supplied(self._sess_options)
        supply = (lambda proto, label: external_initializers.apply(proto, given, label, self._max_tensor_bytes)) \
            if given else None
        self._model: Model = load_model(path_or_bytes, _external_folder(path_or_bytes, config), inference,
                                        max_tensor_bytes=self._max_tensor_bytes, supply=supply)
        _override_initializers(self._model, self._sess_options._initializers)
        # session registrations first, then global ones; a snapshot taken now
        self._custom_ops = CustomOpRegistry.chain(self._sess_options.custom_ops, global_registry())
        # refuses malformed graphs (cycles, values defined twice or never, unknown domains and
        # opsets) before any pass walks the graph
        validate_model(self._model, {op.domain for op in self._custom_ops})
        override_free_dimensions(self._model, self._sess_options._free_dims_by_name,
                                 self._sess_options._free_dims_by_denotation)
        self._strict = self._sess_options._config.get(STRICT_KEY, "0") == "1"
        self._context = SessionContext(dict(config), self._model_path, int(self._sess_options.graph_optimization_level),
                                       threads)
        # provider instances of this session, closed when it is garbage-collected or at exit
        self._instances: dict[str, SessionProvider] = {}
        self._finalizer = weakref.finalize(self, _close_instances, self._instances)
        self._use_providers(registry, providers, provider_options)
        if self._sess_options.enable_cpu_mem_arena and getattr(self._instances[CPU].ep, "uses_arena", False):
            keep_freed_memory()  # numpy's arrays: freed memory kept for the next run, as in onnxruntime's arena
        # what every build (set_providers too) starts from: optimization and placement rewrite a copy
        self._loaded = self._model
        with run_context(self._limits):  # folding and kernel factories obey the limit
            self._build()
            if self._sess_options.optimized_model_filepath:  # after the build: CPU fusions included
                _save_optimized(self._model, self._sess_options.optimized_model_filepath, config)
            if config.get(CONTEXT_ENABLE_KEY, "0") == "1":
                write_context_model(self._model, self._partition, self._instances, config, self._model_path)
        if self._profiler is not None:
            self._profiler.record("Session", "session_initialization", t_start, time.perf_counter_ns(), {})

    # ------------------------------------------------------------------ build
    def _use_providers(self, registry, providers, provider_options, unknown_raises: bool = False) -> None:
        """Resolve the user's provider list and make this session's instances (old ones closed)."""
        if not providers and not provider_options:  # the options' providers, policy or delegate (onnxruntime's)
            chosen = providers_from_options(self._sess_options, self._model, self._strict)
            providers = chosen if chosen is not None else providers
        elif self._sess_options.has_providers():
            warn("Specified 'providers'/'provider_options' when creating InferenceSession but SessionOptions has "
                 "already been configured with providers. InferenceSession will only use the providers passed to "
                 "InferenceSession().")
        names, options, self._cpu_explicit = _resolve_providers(registry, providers, provider_options, self._strict,
                                                                unknown_raises)
        _close_instances(self._instances)
        self._provider_options = options
        self._providers = []
        for name in names:
            try:
                self._instances[name] = registry.create(name, options[name], self._context)
            except PluginError as e:
                if self._strict or name == CPU:
                    raise
                warn(f"{e}; provider skipped")
                continue
            self._providers.append(name)

    def _preferences(self) -> dict:
        """Each provider's Preferences; one whose answer breaks the contract is left out (with a warning
        naming it), as a failing get_capability is, or raises in strict mode."""
        prefs = {}
        for p in list(self._providers):
            try:
                prefs[p] = self._instances[p].preferences()
            except PluginError as e:
                if self._strict or p == CPU:
                    raise
                warn(f"{e}; provider skipped")
                self._providers.remove(p)
        return prefs

    def _build(self) -> None:
        """The pipeline from the loaded model: optimize for this session's providers (their preferences
        asked first), place and compile (graph bodies too, through the body planner), then plan.
        set_providers runs it again from the start."""
        self._model = model = self._loaded.copy()
        graph = model.graph
        prefs = self._preferences()
        keep_qdq = any(pref.keep_qdq for pref in prefs.values())
        level = int(self._sess_options.graph_optimization_level)
        self._optimizer_stats = _optimize(model, level, _cpu_evaluator(self._instances[CPU], model), keep_qdq=keep_qdq)
        infer_static_types(graph, model.opset_imports, self._custom_ops)
        early = frozenset().union(*(pref.fused_ops for p, pref in prefs.items() if p != CPU))
        if early and level >= EXTENDED:  # the fused ops some provider runs: made before it is offered nodes
            self._optimizer_stats["early_fusion"] = fuse_nodes(model, {n.id for n in graph.nodes}, frozenset(early))
        check_outputs = self._sess_options._config.get(CHECK_OUTPUTS_KEY, "0") == "1"
        where = Placement(self._providers, self._instances, model.opset_imports, self._custom_ops, self._strict,
                          {p for p, pref in prefs.items() if pref.bakes_weights}, check_outputs, model.source,
                          channels_last={p for p, pref in prefs.items() if pref.layout == "NHWC"})
        where.bodies = self._bodies = BodyPlanner(where)
        part, kernels = place(graph, where, model)
        for provider, count in part.transformed.items():  # the providers' own rewrites (CPU: its fusions)
            key = "cpu_fusion" if provider == CPU else f"transform:{provider}"
            self._optimizer_stats[key] = count
        self._partition = part
        if self._strict and not self._cpu_explicit:
            _refuse_cpu_fallback(graph, part)
        if any(p != CPU for p in self._providers):
            warn("provider assignment:\n" + "\n".join("  " + line for line in part.summary(
                graph, self._providers)))

        self._plan, self._output_slots = build_plan(graph, placed_kernels(part, kernels, self._instances),
                                                    self._instances, check_outputs, model.source)
        # IOBinding routes copy through the same providers' transfers as the plan (other installed
        # providers' for devices outside the session)
        self._transfers = Transfers((self._instances[p] for p in self._providers), default_transfers())
        self._plan.context = self._limits
        if self._profiler is not None:
            self._plan.steps = self._profiler.wrap_steps(self._plan.steps)
        inits = graph.initializers
        overridable = {v.name for v in graph.inputs if v.name in inits}
        self._input_slots = {v.name: self._plan.slots[(v.name, HOST)] for v in graph.inputs}
        self._inputs = [NodeArg.from_value_info(v) for v in graph.inputs if v.name not in inits]
        self._overridable = [NodeArg.from_value_info(v) for v in graph.inputs if v.name in overridable]
        self._feedable = {a.name: a for a in self._inputs + self._overridable}
        self._required = [a.name for a in self._inputs]
        self._optional_outputs = {v.name for v in graph.outputs if v.type.kind == "optional"}
        self._all_output_names = list(self._output_slots)
        self._all_output_slots = list(self._output_slots.values())

    # -------------------------------------------------------------------- run
    def run(self, output_names: Sequence[str] | None, input_feed: dict[str, Any],
            run_options: RunOptions | None = None) -> list[Any]:
        """Compute ``output_names`` (all outputs when None) from ``input_feed`` (name -> array)."""
        if not isinstance(input_feed, dict):
            raise InvalidArgument(f"input_feed must be a dict of input name -> array, "
                                  f"got {type(input_feed).__name__}")
        feeds: dict[int, Any] = {}
        for name, value in input_feed.items():
            if type(value) is not np.ndarray and not getattr(getattr(value, "device", None), "is_host", True):
                # an OrtValue on a device goes straight to the consumers on that device
                outs = self.run_with_ort_values(output_names, input_feed, run_options)
                return [o.numpy() for o in outs]
            feeds[self._input_slots[name]] = check_feed(self._feedable_arg(name), value)
        adapted = active_feeds(run_options)
        if adapted:
            self._feed_adapters(adapted, input_feed, feeds)
            self._check_all_fed({**input_feed, **adapted})
        else:
            self._check_all_fed(input_feed)
        if not output_names:  # None or [] (as in onnxruntime): every output
            want, names = self._all_output_slots, self._all_output_names
        else:
            names = list(output_names)
            self._check_output_names(names)
            want = [self._output_slots[n] for n in names]
        BLAS.before_run()
        if self._profiler is not None:
            t0 = time.perf_counter_ns()
            results = self._plan.run(feeds, want, run_options)
            self._profiler.record("Session", "model_run", t0, time.perf_counter_ns(), {})
        else:
            results = self._plan.run(feeds, want, run_options)
        self._check_computed(names, results)
        return results

    def run_async(self, output_names: Sequence[str] | None, input_feed: dict[str, Any], callback: Any,
                  user_data: Any, run_options: RunOptions | None = None) -> None:
        """run() on a worker thread; returns at once and the thread then calls ``callback(outputs, user_data,
        err_message)``, as onnxruntime does: ``(list of arrays, user_data, "")`` on success, ``([], user_data,
        message)`` when the run fails (a bad feed or output name included). Missing inputs raise here, before
        the thread starts. Other runs of the session may go on at the same time. An exception raised by the
        callback is reported through ``threading.excepthook``."""
        if not callable(callback):
            raise InvalidArgument(f"run_async: callback must be callable as callback(outputs, user_data, "
                                  f"err_message), got {type(callback).__name__}")
        if not isinstance(input_feed, dict):
            raise InvalidArgument(f"input_feed must be a dict of input name -> array, "
                                  f"got {type(input_feed).__name__}")
        self._check_all_fed(input_feed)
        feed = dict(input_feed)  # the caller may change its dict while the run goes on

        def work() -> None:
            try:
                outputs = self.run(output_names, feed, run_options)
            except Exception as e:  # noqa: BLE001 - every failure reaches the callback, never a silent thread
                callback([], user_data, str(e) if isinstance(e, OrtError) else f"{type(e).__name__}: {e}")
                return
            callback(outputs, user_data, "")

        threading.Thread(target=work, name="ort_core.run_async", daemon=True).start()

    def _feed_adapters(self, adapted: dict[str, Any], given: dict[str, Any], feeds: dict[int, Any]) -> None:
        """The parameters of the run's active LoRA adapters, fed as the inputs of their names (overridable
        initializers, usually); a name the model has no input for, or one also in the feed, is refused."""
        for name, value in adapted.items():
            if name in given:
                raise InvalidArgument(f"input '{name}' is given in the feed and by an active LoRA adapter; give it "
                                      "once (onnxruntime silently uses the adapter's)")
            if name not in self._feedable:
                raise InvalidArgument(f"Invalid input name: {name} (a parameter of an active LoRA adapter; the "
                                      f"model's inputs and overridable initializers are {sorted(self._feedable)})")
            feeds[self._input_slots[name]] = check_feed(self._feedable[name], value)

    def _feedable_arg(self, name: str) -> NodeArg:
        arg = self._feedable.get(name)
        if arg is None:
            raise InvalidArgument(f"invalid input name '{name}'; the model's inputs are "
                                  f"{[a.name for a in self._inputs]}")
        return arg

    def _check_all_fed(self, given, hint: str = "") -> None:
        missing = [n for n in self._required if n not in given]
        if missing:
            # onnxruntime's wording (code matches on it), then what the model requires
            raise InvalidArgument(f"Required inputs ({missing}) are missing from input feed ({list(given)}); "
                                  f"the model requires {self._required}{hint}")

    def _check_computed(self, names, results) -> None:
        for n, r in zip(names, results):
            if r is None and n not in self._optional_outputs:
                raise InvalidGraph(f"output '{n}' was not computed (an upstream kernel omitted it)")

    def _check_output_names(self, names) -> None:
        unknown = [n for n in names if n not in self._output_slots]
        if unknown:
            raise InvalidArgument(f"invalid output name(s) {unknown}; the model's outputs are "
                                  f"{list(self._output_slots)}")

    # ---------------------------------------------------------------- queries
    def get_inputs(self) -> list[NodeArg]:
        return list(self._inputs)

    def get_outputs(self) -> list[NodeArg]:
        # read afresh: a custom op's first run may complete the output types
        return [NodeArg.from_value_info(v) for v in self._model.graph.outputs]

    def get_overridable_initializers(self) -> list[NodeArg]:
        return list(self._overridable)

    def get_input_memory_infos(self) -> list[OrtMemoryInfo]:
        """Where each input of get_inputs() is read: the device of the provider whose nodes take it (the first
        such device when several do), host memory ("Cpu") when only host providers read it. An input bound
        there with IOBinding reaches its consumers without a copy."""
        devices = {}
        for (name, device) in self._plan.slots:
            if not device.is_host:
                devices.setdefault(name, device)
        return [OrtMemoryInfo.of(devices.get(a.name, HOST)) for a in self._inputs]

    def get_output_memory_infos(self) -> list[OrtMemoryInfo]:
        """Where each output of get_outputs() is produced: the device of the provider computing it, host
        memory ("Cpu") for the CPU provider. run() copies outputs to the host; an output bound on this device
        with IOBinding is handed over without a copy."""
        return [OrtMemoryInfo.of(self._plan.location.get(v.name, HOST)) for v in self._model.graph.outputs]

    def get_modelmeta(self) -> ModelMetadata:
        return ModelMetadata.from_model(self._model)

    def get_providers(self) -> list[str]:
        return list(self._providers)

    def get_provider_options(self) -> dict[str, dict]:
        return {p: dict(self._provider_options.get(p, {})) for p in self._providers}

    def get_provider_graph_assignment_info(self) -> list[SubgraphAssignment]:
        """Which provider runs which nodes: one OrtEpAssignedSubgraph (``ep_name``, ``get_nodes()``) per compiled
        subgraph, in execution order. ort-core always records it; the session config entry
        session.record_ep_graph_assignment_info set to anything but "1" refuses it, as onnxruntime does (which
        also refuses it when the entry is not set)."""
        if self._sess_options._config.get(RECORD_ASSIGNMENT_KEY, "1") != "1":
            raise Fail(f"Session configuration entry '{RECORD_ASSIGNMENT_KEY}' must be set to \"1\" to retrieve "
                       "EP graph assignment information.")
        return [SubgraphAssignment(p, sg.name, tuple(n.name for n in sg.nodes), tuple(n.op_type for n in sg.nodes),
                                   tuple(n.id for n in sg.nodes), tuple(n.domain for n in sg.nodes))
                for p, sg in self._partition.subgraphs]

    def explain(self) -> str:
        """The partition as text: subgraphs per provider, declined nodes with reasons, copies."""
        return explain(self)

    def get_session_options(self) -> SessionOptions:
        return self._sess_options

    def set_providers(self, providers=None, provider_options=None) -> None:
        """Rebuild the session for another provider list (as onnxruntime allows); an unknown provider name
        raises (onnxruntime's RuntimeError, as Fail), naming it."""
        token = severity(int(self._sess_options.log_severity_level))
        try:
            self._use_providers(get_registry(), providers, provider_options, unknown_raises=True)
            with run_context(self._limits):
                self._build()
        finally:
            reset_severity(token)

    def end_profiling(self) -> str:
        """Stop profiling and write the Chrome-trace JSON; returns its path ('' when not profiling)."""
        if self._profiler is None or not self._profiler.active:
            return ""
        return self._profiler.write()

    def get_profiling_start_time_ns(self) -> int:
        return self._profiler.wall_start_ns if self._profiler is not None else 0

    @property
    def model_path(self) -> str | None:
        return self._model_path

    def disable_fallback(self) -> None:
        """Recorded in ``_enable_fallback`` for onnxruntime code (onnxruntime then no longer re-creates the session
        on the CPU provider after a provider error); ort-core skips a provider that fails when the session is
        made, whatever it says (strict mode, session.disable_cpu_ep_fallback, refuses instead)."""
        self._enable_fallback = False

    def enable_fallback(self) -> None:
        """Recorded for onnxruntime code (``_enable_fallback``); see disable_fallback."""
        self._enable_fallback = True

    # onnxruntime's attributes for what the get_* methods return, read by code written for it
    _inputs_meta = property(get_inputs)
    _outputs_meta = property(get_outputs)
    _overridable_initializers = property(get_overridable_initializers)
    _model_meta = property(get_modelmeta)

    # ------------------------------------------------------------ IOBinding
    def io_binding(self):
        """An ort_core.IOBinding for this session (inputs/outputs bound to devices)."""
        return IOBinding(self)

    def run_with_iobinding(self, iobinding, run_options: RunOptions | None = None) -> None:
        """Run with the inputs and outputs bound in ``iobinding``; results go to its get_outputs().

        Inputs bound on a device reach consumers on that device without a copy; outputs bound
        to the device of the provider producing them are handed over without a copy; other
        outputs are copied once to the device they are bound to.
        """
        if getattr(iobinding, "_session", None) is not self:
            raise InvalidArgument("run_with_iobinding: the IOBinding was not made by this session's io_binding()")
        iobinding._store(_run_placed(self, iobinding._inputs, iobinding._layout(), run_options))

    def run_with_ort_values(self, output_names: Sequence[str] | None, input_dict_ort_values: dict[str, Any],
                            run_options: RunOptions | None = None) -> list[Any]:
        """Like run(), with OrtValues in and out: outputs are host OrtValues (``output_names`` None:
        all). Inputs on a device reach consumers on that device without a host round trip."""
        if not isinstance(input_dict_ort_values, dict):
            raise InvalidArgument(f"input_dict_ort_values must be a dict of input name -> OrtValue, "
                                  f"got {type(input_dict_ort_values).__name__}")
        inputs = {n: v if isinstance(v, OrtValue) else OrtValue(v, HOST) for n, v in input_dict_ort_values.items()}
        names = list(self._output_slots) if not output_names else list(output_names)
        values = _run_placed(self, inputs, [(n, HOST) for n in names], run_options)
        return [OrtValue(v, HOST) for v in values]


def _model_source(source: Any) -> tuple[str | None, Any]:
    """onnxruntime's ``_model_path`` and ``_model_bytes`` for a model argument: (path, None) for a path,
    (None, the bytes as given) for serialized bytes, (None, None) for an onnx.ModelProto (onnxruntime takes none)."""
    if isinstance(source, (str, os.PathLike)):
        return os.fspath(source), None
    if isinstance(source, (bytes, bytearray, memoryview)):
        return None, source
    return None, None


def _external_folder(source: Any, config: dict[str, str]) -> str | None:
    """Where a model given as bytes or a ModelProto keeps its external data (a path model: its folder)."""
    if isinstance(source, (str, os.PathLike)):
        return None
    return config.get(EXTERNAL_FOLDER_KEY) or None


def _override_initializers(model: Model, given: dict[str, OrtValue]) -> None:
    """SessionOptions.add_initializer: each value replaces the model's initializer of that name, as a read-only
    host copy taken now (later writes to the OrtValue do not reach the session). The element type and shape
    must be the initializer's: onnxruntime would reinterpret the bytes of another type."""
    inits = model.graph.initializers
    for name, ortvalue in given.items():
        if name not in inits:
            raise InvalidArgument(f"SessionOptions.add_initializer: the model has no initializer '{name}' "
                                  f"(its initializers: {sorted(inits)[:20]})")
        old = inits[name]
        value = np.array(ortvalue.numpy(), copy=True)
        if value.dtype != old.dtype or value.shape != old.shape:
            raise InvalidArgument(f"SessionOptions.add_initializer('{name}'): given {value.dtype} "
                                  f"{list(value.shape)}, the model's initializer is {old.dtype} {list(old.shape)}")
        value.flags.writeable = False
        inits[name] = value


def _optimize(model: Model, level: int, evaluate, keep_qdq: bool = False) -> dict[str, int]:
    """The optimizer's passes; one failing on a model it did not expect becomes an error naming the model
    (an OrtError, as everything the session raises), not a stray exception from inside a pass."""
    try:
        return optimize(model, level, evaluate, keep_qdq=keep_qdq)
    except OrtError:
        raise
    except Exception as e:  # noqa: BLE001 - chained, so the pass at fault stays visible
        raise Fail(f"{model.source}: graph optimization failed: {type(e).__name__}: {e} (set "
                   "SessionOptions.graph_optimization_level to ORT_DISABLE_ALL to skip it)") from e


def _save_optimized(model: Model, path: str, config: dict[str, str]) -> None:
    """Write the optimized model; initializers go to the external file the session config names
    (session.optimized_model_external_initializers_file_name), else to a '.data' file beside it past protobuf's
    2 GiB."""
    external = external_initializers.save_options(config)
    if external is not None:
        external_initializers.save_with_external(model_to_proto(model), path, *external)
        return
    total = sum(int(v.nbytes) for v in model.graph.initializers.values())
    save_model(model, path, external_data_threshold=1024 if total > (1 << 30) else None)


def _close_instances(instances: dict) -> None:
    """Close a session's provider instances (its finalizer; also before set_providers makes new ones)."""
    for ep in list(instances.values()):
        ep.close()
    instances.clear()


def _cpu_evaluator(cpu, model: Model):
    """evaluate(node, inputs) -> outputs through the CPU provider instance's compile (for folding)."""

    def evaluate(node, inputs):
        names = list(dict.fromkeys(i for i in node.inputs if i))
        values = {n: v for n, v in zip(node.inputs, inputs) if n}
        outputs = [o for o in node.outputs if o]
        sub = FusedSubgraph(node.name or node.op_type, [node], names, outputs, {}, model.opset_imports,
                            model.graph)
        (kernel,) = cpu.compile([sub])
        results = kernel(*[values[n] for n in names])
        for value in results:  # as in a run: folding a chain that doubles a constant stops at the limit
            if type(value) is np.ndarray and value.nbytes > current_limits().max_tensor_bytes:
                raise KernelError(too_large(node.label, value))
        by_name = dict(zip(outputs, results))
        return [by_name.get(o) for o in node.outputs]

    return evaluate


def _refuse_cpu_fallback(graph, part) -> None:
    """Strict mode: nodes no requested provider claimed are an error, not a CPU fallback."""
    left = [nid for nid, p in part.assignment.items() if p == CPU]
    if not left:
        return
    lines = []
    by_id = graph.nodes_by_id()
    for nid in left[:10]:
        node = by_id[nid]
        reasons = "; ".join(f"{p}: {r[nid]}" for p, r in part.declined.items() if nid in r and p != CPU)
        lines.append(f"  {node.label}: {reasons or 'not claimed'}")
    more = f"\n  ... and {len(left) - 10} more" if len(left) > 10 else ""
    raise NotImplementedOp(f"{STRICT_KEY}=1 and {len(left)} node(s) would fall back to {CPU}:\n"
                           + "\n".join(lines) + more)


def _resolve_providers(registry, providers, provider_options, strict: bool = False, unknown_raises: bool = False):
    """Validate the user's provider list -> (names, options per name, CPU requested explicitly).

    Unknown or unavailable providers are skipped with a warning, or refused in strict mode; with
    ``unknown_raises`` (set_providers, as onnxruntime) a name no plugin offers raises Fail.
    """
    if providers is None:
        providers = [CPU]
    if isinstance(providers, str):
        providers = [providers]
    if provider_options is not None and len(provider_options) != len(providers):
        raise InvalidArgument(f"provider_options has {len(provider_options)} entries but providers has "
                              f"{len(providers)}; give one options dict per provider")
    resolved: list[str] = []
    options: dict[str, dict] = {}
    for k, entry in enumerate(providers):
        if isinstance(entry, (tuple, list)) and len(entry) == 2:
            name, opts = entry
        elif isinstance(entry, str):
            name, opts = entry, {}
        else:
            raise InvalidArgument(f"providers[{k}] must be a name or a (name, options) tuple, got {entry!r}")
        if provider_options is not None:
            opts = {**(opts or {}), **(provider_options[k] or {})}
        if not isinstance(opts, dict):
            raise InvalidArgument(f"options for provider '{name}' must be a dict, got {type(opts).__name__}")
        reg = registry.providers.get(name)
        if reg is None and unknown_raises:
            raise Fail(f"Unknown Provider Type: {name} (installed: {', '.join(sorted(registry.providers))})")
        if strict and (reg is None or not reg.info.available):
            why = "is not installed" if reg is None else f"is unavailable: {reg.info.reason}"
            raise InvalidArgument(f"provider '{name}' {why} ({STRICT_KEY}=1 refuses to fall back)")
        if reg is None:
            warn(f"provider '{name}' is not installed (known: {sorted(registry.providers)}); skipping it")
            continue
        if not reg.info.available:
            warn(f"provider '{name}' is unavailable: {reg.info.reason}; skipping it")
            continue
        if name in resolved:
            continue
        if name == CPU:
            opts = _without_arena_settings(opts or {})
        resolved.append(name)
        options[name] = {str(key): v for key, v in (opts or {}).items()}
    explicit = CPU in resolved
    if not explicit:
        resolved.append(CPU)
        options[CPU] = {}
    return resolved, options, explicit


def _without_arena_settings(opts: dict) -> dict:
    ignored = sorted(str(k) for k in opts if k in ORT_ARENA_OPTIONS)
    if ignored:
        warn(f"{CPU} option(s) {ignored} have no effect in ort-core: onnxruntime's arena settings (ort-core's CPU "
             "provider takes use_arena)")
    return {k: v for k, v in opts.items() if k not in ORT_ARENA_OPTIONS}


def _run_placed(sess: InferenceSession, inputs: dict[str, Any], outputs: list[tuple[str, Any]],
                run_options: RunOptions | None) -> list[Any]:
    """Run ``sess`` on OrtValues (name -> OrtValue, any device) for outputs wanted on devices.

    Host inputs are checked and fed as run() feeds them; device inputs are fed where they are
    and the plan is re-targeted (ExecutionPlan.route) so that only the copies they and the
    wanted output devices need are made. Returns one value per ``outputs`` entry, on its device.
    """
    feeds: dict[int, Any] = {}
    placed: dict[str, Any] = {}
    on_device: dict[str, Any] = {}
    adapted = active_feeds(run_options)
    if adapted:  # the active LoRA adapters' parameters, fed as run() feeds them
        sess._feed_adapters(adapted, inputs, feeds)
        inputs = {**inputs, **{n: OrtValue(v, HOST) for n, v in adapted.items()}}
    for name, ortvalue in inputs.items():
        if name in adapted:
            continue
        value = checked_input(sess._feedable_arg(name), ortvalue)
        if ortvalue.device.is_host:
            feeds[sess._input_slots[name]] = value
        else:
            placed[name] = ortvalue.device
            on_device[name] = value
    sess._check_all_fed(inputs, " (bind them before running)")
    if not outputs:
        raise InvalidArgument("no output requested: bind at least one output (bind_output)")
    names = [n for n, _ in outputs]
    sess._check_output_names(names)
    route = sess._plan.route(placed, tuple(outputs), sess._transfers.direct_copier)
    for name, value in on_device.items():
        feeds[route.inputs[name]] = value
    BLAS.before_run()
    results = sess._plan.run(feeds, route.want, run_options, route)
    sess._check_computed(names, results)
    return results
