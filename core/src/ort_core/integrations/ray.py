"""ort-core on Ray Data: ``OrtPredictor``, a callable class for ``Dataset.map_batches`` that holds one session per
actor, and ``map_batches``, which sets it up.

Each actor picks its providers from the resources Ray gave it (an actor with a GPU takes the GPU providers
installed and available, a CPU actor OpenVINO when installed and available, then the CPU provider; or the
user's list) and sets ``intra_op_num_threads`` to its CPUs. The model is a path (read by every actor: the file
must be there on every node) or bytes / a ModelProto, put once in Ray's object store so no task carries it.
Columns become inputs and outputs become columns through ``batch_feeds.BatchRunner``. Rows the model refuses
are skipped or fail the run (``on_error``); skipped rows are collected by a ``FailureLog`` actor, once each
even when Ray retries a batch after an actor died (Ray Data restarts dead actors and retries their batches).

Needs ``pip install "ort-core[ray]"``; ``runtime="onnxruntime"`` runs the same adapter on onnxruntime.
"""

from __future__ import annotations

import importlib
import math
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import onnx

try:
    import ray
    import ray.data
    from ray.data.expressions import monotonically_increasing_id
except ImportError as e:  # pragma: no cover - exercised where ray is absent
    raise ImportError('ort_core.integrations.ray needs Ray Data: pip install "ort-core[ray]"') from e

from .batch_feeds import BatchRunner, RowFailure

__all__ = ["FailureLog", "OrtPredictor", "ROW_ID", "StoredModel", "choose_providers", "fixed_batch_size", "map_batches",
           "share_model"]

GPU_PROVIDERS = ("CUDAExecutionProvider", "ROCMExecutionProvider", "DmlExecutionProvider")
"""Taken, in this order, by an actor Ray gave a GPU (TensorRT only when listed: it builds engines per actor)."""
CPU_PROVIDERS = ("OpenVINOExecutionProvider",)
"""Taken before the CPU provider by CPU actors, when installed and available."""
ROW_ID = "row_id"
"""The column ``map_batches`` adds to name rows in failures when ``on_error="skip"`` and no id column is given
(unique per row, not consecutive: Ray numbers rows per task)."""


def choose_providers(available: Sequence[str], gpus: float) -> list[str]:
    """The providers an actor with ``gpus`` GPUs uses, among those ``available``."""
    if gpus > 0:
        chosen = [p for p in GPU_PROVIDERS if p in available]
        if not chosen:
            raise RuntimeError(f"this actor was given {gpus:g} GPU(s) but no GPU provider is available here "
                               f"(available: {list(available)}); install one (pip install ort-ep-cuda) or run "
                               "CPU actors (num_gpus=0)")
    else:
        chosen = [p for p in CPU_PROVIDERS if p in available]
    return chosen + ["CPUExecutionProvider"]


@ray.remote(num_cpus=0)
class FailureLog:
    """Collects the rows actors skipped, keyed by row id: a batch retried after an actor died reports its
    rows again and each is kept once."""

    def __init__(self) -> None:
        self._rows: dict[str, dict[str, Any]] = {}

    def record(self, failures: list[dict[str, Any]]) -> None:
        for f in failures:
            self._rows[repr(f["row"])] = f

    def rows(self) -> list[dict[str, Any]]:
        return list(self._rows.values())


class StoredModel:
    """A model's bytes in Ray's object store, as actors receive it (wrapped so Ray hands the reference over
    instead of resolving it as a constructor argument, which it would keep for every actor restart)."""

    def __init__(self, ref: Any):
        self.ref = ref


class OrtPredictor:
    """One session per actor; call it with a numpy batch (``batch_format="numpy"``).

    ``model``: a path, bytes, or a ``StoredModel`` (``share_model``). ``providers`` / ``provider_options``: as for
    ``InferenceSession`` (default: chosen from the actor's resources). ``runtime``: the module providing
    ``InferenceSession`` ("ort_core", or "onnxruntime" to compare). ``session_config``: SessionOptions
    attributes to set. ``failure_log``: a ``FailureLog`` handle receiving skipped rows. The rest goes to
    ``BatchRunner``.
    """

    def __init__(self, model: Any, *, providers: Sequence[str] | None = None,
                 provider_options: Sequence[Mapping[str, Any]] | None = None, runtime: str = "ort_core",
                 session_config: Mapping[str, Any] | None = None, input_map: Mapping[Any, str] | None = None,
                 output_map: Mapping[str, str] | None = None, keep_columns: Sequence[str] | None = None,
                 id_column: str | None = None, on_error: str = "fail", failure_log: Any = None):
        if isinstance(model, StoredModel):
            model = ray.get(model.ref)
        rt = importlib.import_module(runtime)
        assigned = ray.get_runtime_context().get_assigned_resources() if ray.is_initialized() else {}
        options = rt.SessionOptions()
        for key, value in (session_config or {}).items():
            if not hasattr(options, key):
                raise ValueError(f"session_config: SessionOptions has no attribute '{key}'")
            setattr(options, key, value)
        cpus = assigned.get("CPU", 0)
        if cpus and not options.intra_op_num_threads:
            options.intra_op_num_threads = max(1, int(cpus))
        self.providers = list(providers) if providers else choose_providers(rt.get_available_providers(),
                                                                             assigned.get("GPU", 0))
        self.session = rt.InferenceSession(model, sess_options=options, providers=self.providers,
                                           provider_options=provider_options)
        report = None if failure_log is None else _reporter(failure_log)
        self.runner = BatchRunner(self.session, input_map=input_map, output_map=output_map,
                                  keep_columns=keep_columns, id_column=id_column, on_error=on_error,
                                  on_failures=report)

    def __call__(self, batch: Mapping[str, Any]) -> dict[str, Any]:
        return self.runner(batch)

    def describe(self) -> dict[str, Any]:
        """What this actor runs with: its providers and threads."""
        options = self.session.get_session_options()
        return {"providers": self.session.get_providers(), "intra_op_num_threads": options.intra_op_num_threads}


def _reporter(log: Any) -> Callable[[list[RowFailure]], None]:
    def report(failures: list[RowFailure]) -> None:
        ray.get(log.record.remote([f.as_dict() for f in failures]))  # recorded before the batch counts as done
    return report


def share_model(model: Any) -> Any:
    """What actors receive: a path stays a path; bytes and ModelProtos go into the object store once."""
    if isinstance(model, onnx.ModelProto):
        model = model.SerializeToString()
    if isinstance(model, (bytes, bytearray, memoryview)):
        return StoredModel(ray.put(bytes(model)))
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        if not os.path.isfile(path):
            raise ValueError(f"model file '{path}' does not exist")
        return path
    raise TypeError(f"model must be a path, bytes or an onnx.ModelProto, not {type(model).__name__}")


def fixed_batch_size(model: Any) -> int | None:
    """The batch size the model's first input fixes (its first dimension), None when free or unknown."""
    if isinstance(model, (str, os.PathLike)):
        model = onnx.load(os.fspath(model), load_external_data=False)
    elif isinstance(model, (bytes, bytearray, memoryview)):
        model = onnx.load_from_string(bytes(model))
    graph = model.graph
    weights = {t.name for t in graph.initializer}
    for value in graph.input:
        if value.name in weights:
            continue
        dims = value.type.tensor_type.shape.dim
        return dims[0].dim_value if dims and dims[0].HasField("dim_value") and dims[0].dim_value > 0 else None
    return None


def default_concurrency(num_cpus: float, num_gpus: float) -> int:
    """One actor per GPU (GPU actors) or per ``num_cpus`` of the cluster's CPUs but one: Ray Data's list,
    read and write tasks need a CPU too, and would wait for ever behind actors holding every one."""
    total = ray.cluster_resources()
    if num_gpus:
        return max(1, int(total.get("GPU", 0) // num_gpus))
    cpus = total.get("CPU", 1)
    return max(1, int((cpus - 1 if cpus > 1 else cpus) // max(num_cpus, 1e-9)))


def map_batches(ds: ray.data.Dataset, model: Any, *, providers: Sequence[str] | None = None,
                provider_options: Sequence[Mapping[str, Any]] | None = None, runtime: str = "ort_core",
                session_config: Mapping[str, Any] | None = None, input_map: Mapping[Any, str] | None = None,
                output_map: Mapping[str, str] | None = None, keep_columns: Sequence[str] | None = None,
                id_column: str | None = None, on_error: str = "fail", failure_log: Any = None,
                batch_size: int = 64, concurrency: int | None = None, num_cpus: float = 1,
                num_gpus: float = 0, predictor: type[OrtPredictor] | None = None,
                **ray_remote_args: Any) -> ray.data.Dataset:
    """``ds`` with the model's outputs as columns, computed by ``concurrency`` actors (default: the cluster's
    CPUs but one / ``num_cpus``, or its GPUs / ``num_gpus``; a dataset already in memory and not written may
    give actors every CPU). An actor works on one block at a time, so the dataset needs at least as many
    blocks as actors (``override_num_blocks`` on reading, or ``ds.repartition(target_num_rows_per_block=...)``
    as ``ort-core batch`` does). A fixed-batch model's ``batch_size`` is rounded up to a multiple of its
    batch. With ``on_error="skip"`` and no ``id_column``, a ``row_id`` column is added so that failures
    name their rows. ``predictor``: a subclass of ``OrtPredictor`` (to prepare batches or outputs in the
    actor). Everything else: ``OrtPredictor``."""
    if on_error not in ("fail", "skip"):
        raise ValueError(f"on_error must be 'fail' or 'skip', got {on_error!r}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    fixed = fixed_batch_size(model)
    if fixed:
        batch_size = math.ceil(batch_size / fixed) * fixed
    shared = share_model(model)
    if on_error == "skip" and id_column is None:
        ds = ds.with_column(ROW_ID, monotonically_increasing_id())
        id_column = ROW_ID
    kwargs = dict(providers=providers, provider_options=provider_options, runtime=runtime,
                  session_config=session_config, input_map=input_map, output_map=output_map,
                  keep_columns=keep_columns, id_column=id_column, on_error=on_error, failure_log=failure_log)
    actors = ray.data.ActorPoolStrategy(size=concurrency or default_concurrency(num_cpus, num_gpus))
    return ds.map_batches(predictor or OrtPredictor, fn_constructor_args=(shared,), fn_constructor_kwargs=kwargs,
                          batch_size=batch_size, batch_format="numpy", compute=actors, num_cpus=num_cpus,
                          num_gpus=num_gpus or None, **ray_remote_args)
