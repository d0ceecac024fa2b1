"""Option objects of the drop-in API: SessionOptions, RunOptions and their enums.

Same names and defaults as onnxruntime's Python API. Options ort-core accepts but does not act on
are listed in ``NOT_APPLIED``, with what it does instead, and warned about when set to a non-default
value.
"""

from __future__ import annotations

import enum
import os
from typing import Any

from .config_entries import checked_key, missing
from .customops.registry import CustomOpRegistry
from .errors import InvalidArgument, warn
from .ir.dimensions import check_override


class GraphOptimizationLevel(enum.IntEnum):
    ORT_DISABLE_ALL = 0
    ORT_ENABLE_BASIC = 1
    ORT_ENABLE_EXTENDED = 2
    ORT_ENABLE_LAYOUT = 3
    ORT_ENABLE_ALL = 99


class ExecutionMode(enum.IntEnum):
    ORT_SEQUENTIAL = 0
    ORT_PARALLEL = 1


class ExecutionOrder(enum.IntEnum):
    DEFAULT = 0
    PRIORITY_BASED = 1
    MEMORY_EFFICIENT = 2


# attribute -> (values ort-core honours as they are, what it does instead); setting one to anything else warns,
# once per session, that it has no effect (code written for onnxruntime sets them often: they must not pass
# silently, and the values that mean what ort-core does anyway must not warn)
NOT_APPLIED: dict[str, tuple[object, str]] = {
    "inter_op_num_threads": ((0, 1), "nodes run one after another (ORT_SEQUENTIAL)"),
    "execution_mode": ((0,), "nodes run one after another (ORT_SEQUENTIAL)"),
}


class SessionOptions:
    """Per-session configuration (mirrors onnxruntime.SessionOptions). As there, setting an attribute it does
    not have raises AttributeError: a misspelt option must not pass silently."""

    __slots__ = ("graph_optimization_level", "execution_mode", "execution_order", "intra_op_num_threads",
                 "inter_op_num_threads", "log_severity_level", "log_verbosity_level", "logid", "enable_cpu_mem_arena",
                 "enable_mem_pattern", "enable_mem_reuse", "use_deterministic_compute", "use_per_session_threads",
                 "enable_profiling", "profile_file_prefix", "optimized_model_filepath", "_config",
                 "_free_dims_by_name", "_free_dims_by_denotation", "_custom_ops", "_initializers", "_ep_added",
                 "_ep_policy", "_ep_delegate", "_external_values", "_external_files")

    def __init__(self) -> None:
        self.graph_optimization_level = GraphOptimizationLevel.ORT_ENABLE_ALL
        self.execution_mode = ExecutionMode.ORT_SEQUENTIAL
        self.execution_order = ExecutionOrder.DEFAULT
        self.intra_op_num_threads = 0
        self.inter_op_num_threads = 0
        self.log_severity_level = -1  # as onnxruntime: the default logger's severity
        self.log_verbosity_level = 0
        self.logid = ""
        self.enable_cpu_mem_arena = True
        self.enable_mem_pattern = True
        self.enable_mem_reuse = True
        self.use_deterministic_compute = False
        self.use_per_session_threads = True
        self.enable_profiling = False
        self.profile_file_prefix = "onnxruntime_profile_"
        self.optimized_model_filepath = ""
        self._config: dict[str, str] = {}
        self._free_dims_by_name: dict[str, int] = {}
        self._free_dims_by_denotation: dict[str, int] = {}
        self._custom_ops = CustomOpRegistry()
        self._initializers: dict[str, Any] = {}
        self._ep_added: list[Any] = []  # ep_selection.Added, in the order added
        self._ep_policy: Any = None
        self._ep_delegate: Any = None
        self._external_values: dict[str, Any] = {}  # add_external_initializers: name -> OrtValue
        self._external_files: dict[str, memoryview] = {}  # ..._from_files_in_memory: file name -> bytes

    # ------------------------------------------------ providers (onnxruntime's plugin-EP API)
    def add_provider(self, provider_name: str, provider_options: dict | None = None) -> None:
        """Add a provider by name, with its options, for sessions made with these options and no ``providers=``
        (providers added explicitly, this way or by add_provider_for_devices, win over a selection policy)."""
        from .ep_selection import added_provider  # options stand below the provider machinery

        self._ep_added.append(added_provider(provider_name, provider_options))

    def add_provider_for_devices(self, ep_devices: Any, provider_options: dict | None = None) -> None:
        """Add the provider of ``ep_devices`` (OrtEpDevices of one provider, from ``ort_core.get_ep_devices()``)
        with ``provider_options``; its ``device_id`` option comes from the device unless given."""
        from .ep_selection import added_for_devices

        self._ep_added.append(added_for_devices(ep_devices, provider_options))

    def set_provider_selection_policy(self, policy: Any) -> None:
        """Let an ``ort_core.OrtExecutionProviderDevicePolicy`` choose the providers of sessions made with these
        options and no ``providers=`` (replaces a delegate set before; ignored when providers were added)."""
        from .ep_selection import checked_policy

        self._ep_policy, self._ep_delegate = checked_policy(policy), None

    def set_provider_selection_policy_delegate(self, delegate: Any) -> None:
        """Let ``delegate(ep_devices, model_metadata, runtime_metadata, max_selections) -> [OrtEpDevice]`` choose
        the providers, in priority order, when a session is made (replaces a policy set before)."""
        from .ep_selection import checked_delegate

        self._ep_delegate, self._ep_policy = checked_delegate(delegate), None

    def has_providers(self) -> bool:
        """Whether providers were added, or a policy or delegate set, to choose the providers of sessions."""
        return bool(self._ep_added) or self._ep_policy is not None or self._ep_delegate is not None

    def _copy(self) -> SessionOptions:
        """A copy (config entries, overrides, providers and initializers copied; custom ops shared)."""
        other = SessionOptions()
        for name in self.__slots__:
            value = getattr(self, name)
            setattr(other, name, value.copy() if isinstance(value, (dict, list)) else value)
        return other

    def add_session_config_entry(self, key: str, value: str) -> None:
        """Set a config entry (an empty key is refused, as in onnxruntime; values that do not parse for the keys
        onnxruntime parses are refused when a session is made)."""
        self._config[checked_key(key)] = str(value)

    def get_session_config_entry(self, key: str) -> str:
        """The entry's value; a key never set raises (a RuntimeError, as in onnxruntime, that is also a KeyError)."""
        if key not in self._config:
            raise missing(key, "SessionOptions")
        return self._config[key]

    def add_free_dimension_override_by_name(self, dim_name: str, dim_value: int) -> None:
        """Fix the symbolic dimension ``dim_name`` to ``dim_value`` (shown by get_inputs(), enforced on run)."""
        name, size = check_override("name", dim_name, dim_value)
        self._free_dims_by_name[name] = size

    def add_free_dimension_override_by_denotation(self, dim_denotation: str, dim_value: int) -> None:
        """Fix every dimension denoted ``dim_denotation`` (such as "DATA_BATCH") to ``dim_value``."""
        denotation, size = check_override("denotation", dim_denotation, dim_value)
        self._free_dims_by_denotation[denotation] = size

    def add_initializer(self, name: str, ortvalue: Any) -> None:
        """Replace the model's initializer ``name`` with the tensor held by ``ortvalue`` (an ort_core.OrtValue of
        the initializer's element type and shape) in sessions made with these options.

        Each session takes a host copy of the value when it is made: later writes to the OrtValue or its array
        do not reach a session (onnxruntime reads the OrtValue's memory for the session's lifetime instead, so
        there it must outlive the session). A name the model has no initializer for is refused when the session
        is made (onnxruntime ignores it); adding one name twice is refused here, as in onnxruntime."""
        from .ortvalue import OrtValue  # options stand below the value types

        if not isinstance(name, str) or not name:
            raise InvalidArgument(f"add_initializer: name must be a non-empty string, got {name!r}")
        if not isinstance(ortvalue, OrtValue):
            raise InvalidArgument(f"add_initializer('{name}'): the value must be an OrtValue "
                                  f"(ort_core.OrtValue.ortvalue_from_numpy(array)), got {type(ortvalue).__name__}")
        if not ortvalue.is_tensor():
            raise InvalidArgument(f"add_initializer('{name}'): the OrtValue must hold a tensor, not "
                                  f"{type(ortvalue.value).__name__}")
        if name in self._initializers:
            raise InvalidArgument(f"add_initializer: an OrtValue for '{name}' has already been added")
        if name in self._external_values:
            raise InvalidArgument(f"add_initializer: '{name}' was given to add_external_initializers already")
        self._initializers[name] = ortvalue

    def add_external_initializers(self, names: Any, ortvalues: Any) -> None:
        """Supply the data of the model's initializers ``names`` that are stored as external data, from
        ``ortvalues`` (tensor OrtValues of their types and shapes): sessions made with these options take a host
        copy of each and do not read the external file for it. A name the model lacks, or whose initializer is not
        external, is refused when the session is made, as in onnxruntime."""
        from .external_initializers import checked_values

        self._external_values.update(checked_values(names, ortvalues, self._external_values, self._initializers))

    def add_external_initializers_from_files_in_memory(self, names: Any, buffers: Any, lengths: Any) -> None:
        """Supply whole external-data files from memory: ``names`` as the model's external-data locations name
        them, ``buffers`` (bytes-like objects) holding each file's contents, ``lengths`` their sizes. Sessions made
        with these options read external tensors from these buffers (kept, not copied, until then), and every
        external tensor must then be in one of them, as in onnxruntime."""
        from .external_initializers import checked_files

        self._external_files.update(checked_files(names, buffers, lengths, self._external_files))

    def register_custom_op(self, *ops: Any) -> None:
        """Register custom ops (``ort_core.custom_op`` / ``ort_core.CustomOp``) for sessions using these
        options; they win over ops registered globally with ``ort_core.register_custom_op``."""
        self._custom_ops.register(*ops)

    def register_custom_ops_library(self, library_path: str | os.PathLike) -> None:
        """Load a C custom-op library built against ort-core's ``ort_core_custom_op.h`` and register its
        ops for sessions using these options (onnxruntime's name; its own C API is not supported)."""
        from .customops.c_library import load_custom_ops_library

        self._custom_ops.register(*load_custom_ops_library(library_path))

    @property
    def custom_ops(self) -> CustomOpRegistry:
        """The custom ops registered on these options."""
        return self._custom_ops

    def warn_unapplied(self) -> None:
        """An OrtWarning for each option set away from its default that ort-core does not apply."""
        for attr, (honoured, instead) in NOT_APPLIED.items():
            value = getattr(self, attr)
            if value not in honoured:
                shown = value.name if isinstance(value, enum.Enum) else value
                warn(f"SessionOptions.{attr} = {shown} has no effect in ort-core: {instead}")


class RunOptions:
    """Per-run configuration; ``terminate = True`` (from any thread) stops a run between steps. Setting an
    attribute it does not have raises AttributeError, as in onnxruntime."""

    __slots__ = ("log_severity_level", "log_verbosity_level", "logid", "terminate",
                 "only_execute_path_to_fetches", "_config", "_adapters")

    def __init__(self) -> None:
        self.log_severity_level = -1  # as onnxruntime: the default logger's severity
        self.log_verbosity_level = 0
        self.logid = ""
        self.terminate = False
        self.only_execute_path_to_fetches = False
        self._config: dict[str, str] = {}
        self._adapters: list[Any] = []

    @property
    def run_tag(self) -> str:
        """The run's tag: ``logid`` under the name of onnxruntime's C API (RunOptionsSetRunTag); an ort-core
        extra, as onnxruntime's Python RunOptions has ``logid`` only."""
        return self.logid

    @run_tag.setter
    def run_tag(self, value: str) -> None:
        self.logid = value

    def add_active_adapter(self, adapter: Any) -> None:
        """Make the runs using these options feed ``adapter``'s parameters (an ort_core.LoraAdapter) as the model
        inputs of the same names; later adapters win for a name, as they are fed after."""
        from .lora import checked_adapter

        self._adapters.append(checked_adapter(adapter))

    def add_run_config_entry(self, key: str, value: str) -> None:
        self._config[checked_key(key)] = str(value)

    def get_run_config_entry(self, key: str) -> str:
        """The entry's value; a key never set raises (a RuntimeError, as in onnxruntime, that is also a KeyError)."""
        if key not in self._config:
            raise missing(key, "RunOptions")
        return self._config[key]
