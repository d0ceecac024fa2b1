"""The ``ort-core batch`` command: a model over a dataset on Ray Data, with Ray Data's progress display and a
summary (rows written, rows/s, rows refused).

Input: a Parquet or CSV file, or a folder of Parquet files, CSV files or images (images are read at the
model's height and width, scaled to [0, 1], normalized with ``--mean``/``--std`` when given and laid out as
the model's input declares, NCHW or NHWC). Output: a folder of Parquet (default) or CSV files. The cluster is a
local one started for the command unless ``--address`` names a running one. Refused rows are written to
``OUT/_failures.jsonl`` (``--on-error skip``) or stop the run (``--on-error fail``, the default). Ray is
imported only when the command runs, so ``ort-core`` works without the ``ray`` extra.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

import numpy as np

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp")
FAILURES_FILE = "_failures.jsonl"


def add_parser(sub: Any) -> None:
    p = sub.add_parser("batch", help="run a model over a dataset on Ray Data (needs ort-core[ray])",
                       description=__doc__.split("\n\n")[0])
    p.add_argument("model", help="path to an .onnx file")
    p.add_argument("--input", "-i", required=True, metavar="DATA",
                   help="a .parquet or .csv file, or a folder of Parquet files, CSV files or images")
    p.add_argument("--output", "-o", required=True, metavar="OUT", help="folder to write the results into")
    p.add_argument("--format", choices=("parquet", "csv"), default="parquet", help="output format")
    p.add_argument("--overwrite", action="store_true", help="write into OUT even if it already holds files")
    p.add_argument("--address", help="a running Ray cluster (host:port, or 'auto'); default: start a local one")
    p.add_argument("--concurrency", type=int, help="actors, one session each (default: CPUs / --num-cpus, "
                                                   "or GPUs / --num-gpus)")
    p.add_argument("--batch-size", type=int, default=64, help="rows per batch (default 64)")
    p.add_argument("--num-cpus", type=float, default=1, help="CPUs per actor, its session's threads (default 1)")
    p.add_argument("--num-gpus", type=float, default=0, help="GPUs per actor (default 0)")
    p.add_argument("--providers", "-p", help="comma-separated providers (default: chosen from each actor's "
                                             "resources)")
    p.add_argument("--on-error", choices=("fail", "skip"), default="fail",
                   help="a row the model refuses stops the run (fail) or is listed in OUT/_failures.jsonl (skip)")
    p.add_argument("--input-map", action="append", default=[], metavar="COLUMN=INPUT",
                   help="feed a column to a model input (COL1,COL2,...=INPUT stacks columns as features)")
    p.add_argument("--output-map", action="append", default=[], metavar="OUTPUT=COLUMN",
                   help="write a model output under another column name; only mapped outputs are written")
    p.add_argument("--keep-columns", metavar="COLS", help="comma-separated input columns copied to the output "
                                                          "(default: all not fed to the model)")
    p.add_argument("--id-column", help="the column naming rows in failures (default: the image path for "
                                       "images, else a row_id column added to the output)")
    p.add_argument("--image-size", metavar="HxW", help="size images are read at (default: the model's)")
    p.add_argument("--mean", help="per-channel mean subtracted from images scaled to [0, 1], such as "
                                  "0.485,0.456,0.406")
    p.add_argument("--std", help="per-channel standard deviation images are divided by, such as "
                                 "0.229,0.224,0.225")


def run(args: argparse.Namespace) -> int:
    try:
        import ray
        import ray.data
    except ImportError:
        raise ValueError('ort-core batch needs Ray Data: pip install "ort-core[ray]"') from None
    from . import ray as ort_ray
    from .batch_feeds import RowError

    _check_output(args.output, args.overwrite)
    input_map = _pairs(args.input_map, "--input-map", "COLUMN=INPUT", columns_first=True)
    output_map = _pairs(args.output_map, "--output-map", "OUTPUT=COLUMN") or None
    kind, files = _input_kind(args.input)
    graph = _graph(args.model)
    if args.format == "csv":
        _check_scalar_outputs(graph, output_map)
    local = args.address is None
    # a local cluster declares one CPU more than this machine lets the process use: actors take the real ones
    # (one session thread each), Ray Data's list, read and write tasks the extra one (else they wait for ever)
    spare = {"num_cpus": len(os.sched_getaffinity(0)) + 1} if local and hasattr(os, "sched_getaffinity") else {}
    try:
        ray.init(address=args.address, include_dashboard=False, logging_level="WARNING", **spare)
    except ConnectionError as e:
        hint = ("" if os.environ.get("RAY_AUTH_MODE") else "; a cluster started by `ray start` asks for its token: "
                "set RAY_AUTH_MODE=token here (the token is read from ~/.ray/auth_token or RAY_AUTH_TOKEN)")
        raise ValueError(f"cannot reach the Ray cluster at {args.address}: {e}{hint}") from None
    try:
        ds, id_column = _read(ray, kind, files, graph, args)
        # blocks of at most two batches as they stream: every actor gets work, even from one large file
        ds = ds.repartition(target_num_rows_per_block=2 * max(1, args.batch_size))
        if args.id_column:
            id_column = args.id_column
        log = ort_ray.FailureLog.remote()
        providers = [p.strip() for p in args.providers.split(",") if p.strip()] if args.providers else None
        keep = [c.strip() for c in args.keep_columns.split(",") if c.strip()] if args.keep_columns else None
        out = ort_ray.map_batches(ds, os.path.abspath(args.model) if local else _model_bytes(args.model, graph),
                                  providers=providers, input_map=input_map or None, output_map=output_map,
                                  keep_columns=keep, id_column=id_column, on_error=args.on_error,
                                  failure_log=log, batch_size=args.batch_size, concurrency=args.concurrency,
                                  num_cpus=args.num_cpus, num_gpus=args.num_gpus)
        t0 = time.perf_counter()
        try:
            if args.format == "parquet":
                out.write_parquet(args.output)
            else:
                out.map_batches(_one_value_per_row, batch_format="numpy").write_csv(args.output)
        except Exception as e:  # noqa: BLE001 - Ray wraps the actors' errors; show the cause, not the wrapping
            cause = _cause(e)
            if isinstance(cause, (RowError, ValueError, TypeError, RuntimeError)):
                raise ValueError(f"{cause} (files already written to '{args.output}' are incomplete)") from None
            raise
        seconds = time.perf_counter() - t0
        failures = ray.get(log.rows.remote())
        written = _count(ray, args.output, args.format)
    finally:
        if local:
            ray.shutdown()
    print(f"rows written: {written} to {args.output} ({args.format}); {written / max(seconds, 1e-9):.1f} rows/s "
          f"over {seconds:.2f} s")
    if failures:
        path = os.path.join(args.output, FAILURES_FILE)
        with open(path, "w", encoding="utf-8") as f:
            for row in failures:
                f.write(json.dumps(row, default=str) + "\n")
        print(f"rows refused: {len(failures)}, listed in {path}; first: row {failures[0]['row']!r}: "
              f"{failures[0]['reason']}")
    else:
        print("rows refused: 0")
    return 0


def _check_output(path: str, overwrite: bool) -> None:
    if os.path.isfile(path):
        raise ValueError(f"output '{path}' is a file; give a folder to write into")
    if os.path.isdir(path) and os.listdir(path) and not overwrite:
        raise ValueError(f"output folder '{path}' already holds files; choose another or pass --overwrite")
    if os.path.isdir(path) and overwrite:
        stale = os.path.join(path, FAILURES_FILE)
        if os.path.exists(stale):
            os.remove(stale)


def _one_value_per_row(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Columns of rows of one value ([N, 1, 1]) as plain columns ([N]), which CSV can hold."""
    return {k: (v.reshape(len(v)) if v.ndim > 1 and v[0].size == 1 else v) for k, v in batch.items()}


def _graph(path: str) -> Any:
    """The model's graph, read once here for what the command checks before starting the cluster (weights kept
    in external files are not read)."""
    import onnx

    if not os.path.isfile(path):
        raise ValueError(f"model file '{path}' does not exist")
    return onnx.load(path, load_external_data=False).graph


def _check_scalar_outputs(graph: Any, output_map: dict[Any, str] | None) -> None:
    """CSV holds one value per cell: every output written must have one value per row."""
    for value in graph.output:
        if output_map and value.name not in output_map:
            continue
        dims = value.type.tensor_type.shape.dim[1:]
        if any(not (d.HasField("dim_value") and d.dim_value == 1) for d in dims):
            shown = ["?" if not d.HasField("dim_value") else d.dim_value for d in dims]
            raise ValueError(f"output '{value.name}' has rows of shape {shown}: CSV holds one value per row and "
                             "column; write Parquet (--format parquet) or leave it out with --output-map")


def _pairs(items: list[str], flag: str, form: str, columns_first: bool = False) -> dict[Any, str]:
    pairs: dict[Any, str] = {}
    for item in items:
        left, sep, right = item.partition("=")
        if not sep or not left.strip() or not right.strip():
            raise ValueError(f"{flag} expects {form}, got '{item}'")
        key: Any = left.strip()
        if columns_first and "," in key:
            key = tuple(c.strip() for c in key.split(",") if c.strip())
        pairs[key] = right.strip()
    return pairs


def _input_kind(path: str) -> tuple[str, list[str]]:
    """("parquet" | "csv" | "images", the files)."""
    if os.path.isfile(path):
        files = [path]
    elif os.path.isdir(path):
        files = sorted(os.path.join(root, f) for root, _, names in os.walk(path) for f in names
                       if not f.startswith((".", "_")))
    else:
        raise ValueError(f"input '{path}' does not exist")
    for kind, suffixes in (("parquet", (".parquet",)), ("csv", (".csv",)), ("images", IMAGE_SUFFIXES)):
        chosen = [f for f in files if f.lower().endswith(suffixes)]
        if chosen:
            return kind, chosen
    raise ValueError(f"input '{path}' holds no .parquet, .csv or image ({', '.join(IMAGE_SUFFIXES)}) files")


def _read(ray: Any, kind: str, files: list[str], graph: Any, args: argparse.Namespace) -> tuple[Any, str | None]:
    """The dataset, and the column naming its rows (the path, for images)."""
    if kind == "parquet":
        return ray.data.read_parquet(files), None
    if kind == "csv":
        return ray.data.read_csv(files), None
    layout, size, channels = _image_layout(graph, args.image_size)
    ds = ray.data.read_images(files, size=size, mode="L" if channels == 1 else "RGB", include_paths=True)
    mean = _floats(args.mean, "--mean", channels)
    std = _floats(args.std, "--std", channels)
    return ds.map_batches(_ImagePrep(layout, mean, std), batch_format="numpy"), "path"


class _ImagePrep:
    """uint8 images [N, H, W, C] -> float32 in the model's layout, scaled to [0, 1] and normalized."""

    def __init__(self, layout: str, mean: np.ndarray | None, std: np.ndarray | None):
        self.layout, self.mean, self.std = layout, mean, std

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        x = np.asarray(batch["image"], dtype=np.float32)
        if x.ndim == 3:  # grey images read as [N, H, W]
            x = x[..., None]
        x *= 1.0 / 255.0
        if self.mean is not None:
            x -= self.mean
        if self.std is not None:
            x /= self.std
        if self.layout == "NCHW":
            x = np.ascontiguousarray(x.transpose(0, 3, 1, 2))
        return {**batch, "image": x}


def _image_layout(graph: Any, size_text: str | None) -> tuple[str, tuple[int, int] | None, int]:
    """(NCHW | NHWC, (height, width) to read at, channels) from the model's first input."""
    weights = {t.name for t in graph.initializer}
    first = next((v for v in graph.input if v.name not in weights), None)
    dims = [d.dim_value if d.HasField("dim_value") else None for d in first.type.tensor_type.shape.dim] if first else []
    if len(dims) != 4:
        raise ValueError(f"images feed a 4-D input [N, C, H, W] or [N, H, W, C]; the model's first input has "
                         f"{len(dims)} dimensions")
    layout = "NHWC" if dims[3] in (1, 3) and dims[1] not in (1, 3) else "NCHW"
    h, w = (dims[2], dims[3]) if layout == "NCHW" else (dims[1], dims[2])
    channels = (dims[1] if layout == "NCHW" else dims[3]) or 3
    if size_text:
        try:
            h, w = (int(v) for v in size_text.lower().split("x"))
        except ValueError:
            raise ValueError(f"--image-size expects HxW such as 224x224, got '{size_text}'") from None
    if not (h and w):
        raise ValueError("the model does not fix its input's height and width: give --image-size HxW")
    return layout, (h, w), channels


def _floats(text: str | None, flag: str, channels: int) -> np.ndarray | None:
    if not text:
        return None
    try:
        values = np.asarray([float(v) for v in text.split(",")], dtype=np.float32)
    except ValueError:
        raise ValueError(f"{flag} expects comma-separated numbers, got '{text}'") from None
    if len(values) not in (1, channels):
        raise ValueError(f"{flag} gives {len(values)} values for images of {channels} channels")
    if flag == "--std" and np.any(values == 0):
        raise ValueError("--std values must not be 0")
    return values


def _model_bytes(path: str, graph: Any) -> bytes:
    """A model for a remote cluster travels through the object store (its nodes may not see this file)."""
    import onnx

    if any(t.data_location == onnx.TensorProto.EXTERNAL for t in graph.initializer):
        raise ValueError(f"'{path}' keeps weights in external files: on a cluster give a model with its weights "
                         "inside (onnx.save(model, path, save_as_external_data=False)), or run locally")
    with open(path, "rb") as f:
        return f.read()


def _count(ray: Any, path: str, fmt: str) -> int:
    reader = ray.data.read_parquet if fmt == "parquet" else ray.data.read_csv
    try:
        return reader(path, file_extensions=[fmt]).count()
    except (FileNotFoundError, ValueError):  # nothing was written (every row refused)
        return 0


def _cause(e: BaseException) -> BaseException:
    """The user-side exception inside Ray's wrappers."""
    seen = set()
    while id(e) not in seen:
        seen.add(id(e))
        inner = getattr(e, "cause", None) or e.__cause__
        if inner is None or inner is e:
            break
        e = inner
    return e
