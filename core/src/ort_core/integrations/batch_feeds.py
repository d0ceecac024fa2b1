"""Dataset batches to model runs and back: the part of batch inference that knows nothing of a cluster engine
(``integrations.ray`` drives it from Ray Data).

A batch is a mapping column -> numpy array with one entry per row (Ray Data's "numpy" batch format).
``BatchRunner`` maps columns to the model's inputs (by name, through ``input_map``, or the one candidate
column of a one-input model), converts them to the declared element types (numbers only; a row whose values
would change on the way to an integer type is refused), checks every row against the declared dimensions,
runs the good rows in as few runs as the model's batch dimension allows and maps outputs back to columns.

Rows of a column holding per-row arrays of different shapes (ragged data) run in one group per shape. A model
with a fixed batch size N gets chunks of N; the last chunk is padded with copies of its last real row and the
padding's outputs are dropped. A row the model refuses (wrong shape or type, or a run that fails for that row
alone) is a ``RowFailure`` naming the row (the ``id_column``'s value, else its position in the batch) and the
reason: with ``on_error="skip"`` the rest of its batch goes on and the failures go to ``on_failures``;
with ``"fail"`` the batch raises ``RowError``. Mistakes of configuration (an input with no column, an output
that is not per row) raise ``ValueError`` at once, whatever ``on_error`` says.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from onnx import TensorProto, helper

__all__ = ["BatchRunner", "RowError", "RowFailure", "element_dtype", "input_specs"]

ON_ERROR = ("fail", "skip")


@dataclass(frozen=True)
class RowFailure:
    """A row the model refused: ``row`` identifies it (id column value or position in its batch)."""

    row: Any
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return {"row": _plain(self.row), "reason": self.reason}


class RowError(ValueError):
    """Rows of a batch were refused and ``on_error`` is "fail"; ``failures`` lists every one."""

    def __init__(self, failures: Sequence[RowFailure]):
        self.failures = list(failures)
        first = self.failures[0]
        more = f" (and {len(self.failures) - 1} more rows of this batch)" if len(self.failures) > 1 else ""
        super().__init__(f"row {_plain(first.row)!r} refused: {first.reason}{more}")


@dataclass(frozen=True)
class InputSpec:
    """One model input as rows see it: element type, the dims of one row (None: free) and the batch size
    the model fixes (None: any). ``dims`` is None when the model does not declare the input's rank."""

    name: str
    dtype: np.dtype
    dims: tuple[int | None, ...] | None
    batch: int | None

    def shown(self) -> str:
        if self.dims is None:
            return "any shape"
        return "[" + ", ".join("?" if d is None else str(d) for d in self.dims) + "]"


def element_dtype(type_text: str, name: str) -> np.dtype:
    """numpy dtype of a declared ``tensor(...)`` type; object for strings."""
    if not (type_text.startswith("tensor(") and type_text.endswith(")")):
        raise ValueError(f"model input '{name}' is {type_text}: batch inference feeds tensors only")
    try:
        code = TensorProto.DataType.Value(type_text[7:-1].upper())
    except ValueError:
        raise ValueError(f"model input '{name}' has element type {type_text}, which batches cannot feed") from None
    return np.dtype(object) if code == TensorProto.STRING else np.dtype(helper.tensor_dtype_to_np_dtype(code))


def input_specs(session: Any) -> list[InputSpec]:
    """The session's inputs as ``InputSpec``s; the first dimension is the batch."""
    specs = []
    for arg in session.get_inputs():
        shape = list(arg.shape or [])
        if not shape:  # rank unknown: rows are stacked along a new first axis, unchecked
            specs.append(InputSpec(arg.name, element_dtype(arg.type, arg.name), None, None))
            continue
        fixed = tuple(d if isinstance(d, int) and d >= 0 else None for d in shape)
        specs.append(InputSpec(arg.name, element_dtype(arg.type, arg.name), fixed[1:], fixed[0]))
    return specs


class BatchRunner:
    """Runs ``session`` over batches of rows; call it with a batch, get the output batch.

    ``input_map``: column (or a tuple of columns, stacked as the last axis: one feature each) -> model input.
    ``output_map``: model output -> column; only the outputs named there are computed. Default: every output
    under its own name. ``keep_columns``: the batch's columns copied to the output (default: all but those
    fed to the model). ``id_column`` names rows in failures. ``on_failures`` receives the ``RowFailure``s of
    each batch when ``on_error`` is "skip" (default: a warning).
    """

    def __init__(self, session: Any, *, input_map: Mapping[Any, str] | None = None,
                 output_map: Mapping[str, str] | None = None, keep_columns: Sequence[str] | None = None,
                 id_column: str | None = None, on_error: str = "fail",
                 on_failures: Callable[[list[RowFailure]], None] | None = None):
        if on_error not in ON_ERROR:
            raise ValueError(f"on_error must be one of {ON_ERROR}, got {on_error!r}")
        self.session = session
        self.inputs = input_specs(session)
        names = [s.name for s in self.inputs]
        self.input_map: dict[str, tuple[str, ...]] = {}
        for cols, name in (input_map or {}).items():
            if name not in names:
                raise ValueError(f"input_map maps {cols!r} to '{name}', which is not an input of the model "
                                 f"(its inputs: {names})")
            if name in self.input_map:
                raise ValueError(f"input_map gives model input '{name}' two sources: "
                                 f"{self.input_map[name]!r} and {cols!r}")
            self.input_map[name] = (cols,) if isinstance(cols, str) else tuple(cols)
        outputs = [o.name for o in session.get_outputs()]
        if output_map:
            unknown = [n for n in output_map if n not in outputs]
            if unknown:
                raise ValueError(f"output_map names '{unknown[0]}', which is not an output of the model "
                                 f"(its outputs: {outputs})")
            self.output_names = list(output_map)
            self.output_columns = [output_map[n] for n in self.output_names]
        else:
            self.output_names, self.output_columns = outputs, list(outputs)
        if len(set(self.output_columns)) != len(self.output_columns):
            raise ValueError(f"output_map sends two outputs to one column: {self.output_columns}")
        batches = {s.batch for s in self.inputs if s.batch is not None}
        if len(batches) > 1:
            raise ValueError(f"the model's inputs fix different batch sizes {sorted(batches)}: rows cannot be "
                             "split into runs")
        self.fixed_batch = batches.pop() if batches else None
        self.keep_columns = None if keep_columns is None else list(keep_columns)
        self.id_column = id_column
        self.on_error = on_error
        self.on_failures = on_failures
        self._layouts: dict[tuple[str, ...], tuple[dict[str, tuple[str, ...]], list[str]]] = {}

    # -- columns ------------------------------------------------------------------------------------------------

    def _layout(self, columns: tuple[str, ...]) -> tuple[dict[str, tuple[str, ...]], list[str]]:
        """(model input -> its columns, columns kept) for a batch with these columns; cached per column set."""
        known = self._layouts.get(columns)
        if known is not None:
            return known
        if self.id_column is not None and self.id_column not in columns:
            raise ValueError(f"id column '{self.id_column}' is not in the batch (columns: {list(columns)})")
        sources: dict[str, tuple[str, ...]] = {}
        for spec in self.inputs:
            cols = self.input_map.get(spec.name)
            if cols is None and spec.name in columns:
                cols = (spec.name,)
            if cols is None and len(self.inputs) == 1:
                cols = self._only_candidate(spec, columns)
            if cols is None:
                raise ValueError(f"no column for model input '{spec.name}' (rows of {spec.shown()}): the batch "
                                 f"has columns {list(columns)}; map one with input_map={{'COLUMN': '{spec.name}'}}")
            missing = [c for c in cols if c not in columns]
            if missing:
                raise ValueError(f"column '{missing[0]}' (for model input '{spec.name}') is not in the batch "
                                 f"(columns: {list(columns)})")
            sources[spec.name] = cols
        if self.keep_columns is None:
            fed = {c for cols in sources.values() for c in cols}
            kept = [c for c in columns if c not in fed]
        else:
            missing = [c for c in self.keep_columns if c not in columns]
            if missing:
                raise ValueError(f"keep_columns names '{missing[0]}', which is not in the batch "
                                 f"(columns: {list(columns)})")
            kept = list(self.keep_columns)
        clash = [c for c in self.output_columns if c in kept]
        if clash:
            raise ValueError(f"output column '{clash[0]}' would replace the batch's column of that name: rename "
                             "the output with output_map or leave the column out with keep_columns")
        self._layouts[columns] = (sources, kept)
        return sources, kept

    def _only_candidate(self, spec: InputSpec, columns: tuple[str, ...]) -> tuple[str, ...] | None:
        candidates = [c for c in columns if c != self.id_column and c not in (self.keep_columns or ())]
        if len(candidates) == 1:
            return (candidates[0],)
        if spec.dims is not None and len(spec.dims) == 1 and spec.dims[0] == len(candidates) > 1:
            return tuple(candidates)  # a table whose columns are the features of a vector input, in order
        return None

    # -- rows ---------------------------------------------------------------------------------------------------

    def _rows(self, batch: Mapping[str, Any], cols: tuple[str, ...], spec: InputSpec, n: int,
              failed: dict[int, str]) -> np.ndarray | list[np.ndarray | None]:
        """The input's rows: one array [n, ...] or a list of per-row arrays (ragged columns); refused rows
        are added to ``failed`` (row position -> reason)."""
        where = f"column '{cols[0]}'" if len(cols) == 1 else f"columns {list(cols)}"
        if len(cols) > 1:
            parts = [np.asarray(batch[c]) for c in cols]
            bad = [c for c, p in zip(cols, parts) if p.ndim != 1 or p.dtype.kind == "O"]
            if bad:
                raise ValueError(f"column '{bad[0]}' is stacked as one feature of input '{spec.name}' but "
                                 "does not hold one number per row")
            column = np.stack(parts, axis=-1)
        else:
            column = np.asarray(batch[cols[0]])
        if column.dtype.kind == "O" and spec.dtype.kind != "O":
            try:  # a list column whose rows all have one shape stacks in one go
                column = np.stack(list(column))
            except (TypeError, ValueError):
                return self._ragged(column, spec, where, failed)
            if column.dtype.kind == "O":
                return self._ragged(column, spec, where, failed)
        values = self._convert(column, spec, where, failed)
        if values is None:
            return [None] * n
        reason = self._shape_problem(values.shape[1:], spec, where)
        if reason:
            failed.update((k, reason) for k in range(n) if k not in failed)
        return values

    def _ragged(self, column: np.ndarray, spec: InputSpec, where: str,
                failed: dict[int, str]) -> list[np.ndarray | None]:
        rows: list[np.ndarray | None] = []
        for k, item in enumerate(column):
            one: dict[int, str] = {}
            try:
                value = np.asarray(item)
            except (TypeError, ValueError) as e:
                failed.setdefault(k, f"{where}: cannot read the row as an array ({e})")
                rows.append(None)
                continue
            value = self._convert(value[None], spec, where, one)
            reason = one.get(0) or (None if value is None else self._shape_problem(value.shape[1:], spec, where))
            if reason:
                failed.setdefault(k, reason)
                rows.append(None)
            else:
                rows.append(value[0])
        return rows

    @staticmethod
    def _convert(values: np.ndarray, spec: InputSpec, where: str, failed: dict[int, str]) -> np.ndarray | None:
        """``values`` ([rows, ...]) as the input's element type; None when the column cannot become it."""
        want, have = spec.dtype, values.dtype
        if have == want:
            return values
        if want.kind == "O":
            if have.kind in "OUS":
                return values.astype(object)
        elif have.kind in "biuf":
            converted = values.astype(want)
            if want.kind in "biu" and (have.kind != want.kind or have.itemsize > want.itemsize):
                changed = (converted.astype(have) != values).reshape(len(values), -1).any(axis=1)
                reason = (f"{where}: values change when {have} becomes {want} "
                          f"(input '{spec.name}' is {want}): fractions or range")
                for k in np.flatnonzero(changed):
                    failed.setdefault(int(k), reason)
            return converted
        reason = f"{where} holds {have} values; input '{spec.name}' takes {want}"
        for k in range(len(values)):
            failed.setdefault(k, reason)
        return None

    @staticmethod
    def _shape_problem(row_shape: tuple[int, ...], spec: InputSpec, where: str) -> str | None:
        if spec.dims is None:
            return None
        if len(row_shape) != len(spec.dims) or any(d is not None and d != s for d, s in zip(spec.dims, row_shape)):
            return (f"{where}: input '{spec.name}' takes rows of shape {spec.shown()}, "
                    f"got {list(row_shape)}")
        return None

    # -- runs ---------------------------------------------------------------------------------------------------

    def __call__(self, batch: Mapping[str, Any]) -> dict[str, np.ndarray]:
        columns = tuple(batch)
        sources, kept = self._layout(columns)
        n = len(batch[columns[0]]) if columns else 0
        failed: dict[int, str] = {}
        rows = {spec.name: self._rows(batch, sources[spec.name], spec, n, failed) for spec in self.inputs}
        if failed and self.on_error == "fail":
            raise RowError(self._failures(batch, failed))
        good = [k for k in range(n) if k not in failed]
        pieces = []  # (row positions, outputs)
        for group in self._groups(rows, good):
            feeds = {name: _take(values, group) for name, values in rows.items()}
            pieces.extend(self._run_chunks(feeds, group, failed))
        if failed and self.on_error == "fail":
            raise RowError(self._failures(batch, failed))
        result = self._assemble(batch, kept, pieces, n)
        if failed:
            self._report(self._failures(batch, failed))
        return result

    @staticmethod
    def _groups(rows: Mapping[str, Any], good: list[int]) -> list[np.ndarray]:
        """Row positions that can run together: all good rows, or one group per row shape when ragged."""
        if not good:
            return []
        ragged = [v for v in rows.values() if isinstance(v, list)]
        if not ragged:
            return [np.asarray(good)]
        by_shape: dict[tuple, list[int]] = {}
        for k in good:
            by_shape.setdefault(tuple(v[k].shape for v in ragged), []).append(k)
        return [np.asarray(g) for g in by_shape.values()]

    def _run_chunks(self, feeds: dict[str, np.ndarray], group: np.ndarray,
                    failed: dict[int, str]) -> list[tuple[np.ndarray, list[np.ndarray]]]:
        step = self.fixed_batch or len(group)
        pieces = []
        for start in range(0, len(group), step):
            part = slice(start, start + step)
            chunk = feeds if step >= len(group) else {k: v[part] for k, v in feeds.items()}
            pieces.extend(self._run_isolating(chunk, group[part], failed))
        return pieces

    def _run_isolating(self, feeds: dict[str, np.ndarray], positions: np.ndarray,
                       failed: dict[int, str]) -> list[tuple[np.ndarray, list[np.ndarray]]]:
        """Run the chunk; when the run fails, run its rows one by one to find which the model refuses."""
        try:
            return [(positions, self._run(feeds, len(positions)))]
        except _NotPerRow:
            raise
        except Exception as e:  # noqa: BLE001 - any refusal by the runtime is a row failure, isolated below
            if len(positions) == 1:
                failed[int(positions[0])] = f"the model refused the row: {_first_line(e)}"
                return []
        pieces = []
        for j in range(len(positions)):
            pieces.extend(self._run_isolating({k: v[j:j + 1] for k, v in feeds.items()}, positions[j:j + 1], failed))
        return pieces

    def _run(self, feeds: dict[str, np.ndarray], count: int) -> list[np.ndarray]:
        size = self.fixed_batch or count
        if count < size:  # the last chunk of a fixed-batch model: pad with copies of its last row
            feeds = {k: np.concatenate([v, np.repeat(v[-1:], size - count, axis=0)]) for k, v in feeds.items()}
        outputs = self.session.run(self.output_names, feeds)
        for name, out in zip(self.output_names, outputs):
            out = np.asarray(out)
            if out.ndim == 0 or out.shape[0] != size:
                raise _NotPerRow(f"output '{name}' has shape {list(out.shape)} for a run of {size} rows: its "
                                 "first dimension is not the batch; leave it out with output_map")
        return [np.asarray(o)[:count] for o in outputs]

    # -- results ------------------------------------------------------------------------------------------------

    def _assemble(self, batch: Mapping[str, Any], kept: list[str], pieces: list, n: int) -> dict[str, np.ndarray]:
        positions = np.concatenate([p for p, _ in pieces]) if pieces else np.zeros(0, dtype=np.int64)
        order = None if _ascending(positions) else np.argsort(positions, kind="stable")
        if order is not None:
            positions = positions[order]
        everything = len(positions) == n
        out: dict[str, np.ndarray] = {c: (batch[c] if everything else np.asarray(batch[c])[positions]) for c in kept}
        for j, column in enumerate(self.output_columns):
            parts = [outs[j] for _, outs in pieces]
            if not parts:
                out[column] = np.empty(0, dtype=object)
                continue
            if len({p.shape[1:] for p in parts}) == 1:
                values = parts[0] if len(parts) == 1 else np.concatenate(parts)
            else:  # groups of ragged rows gave outputs of different shapes: one array per row
                values = np.empty(len(positions), dtype=object)
                values[:] = [row for p in parts for row in p]
            out[column] = values if order is None else values[order]
        return out

    def _failures(self, batch: Mapping[str, Any], failed: dict[int, str]) -> list[RowFailure]:
        ids = None if self.id_column is None else batch[self.id_column]
        return [RowFailure(k if ids is None else _plain(ids[k]), failed[k]) for k in sorted(failed)]

    def _report(self, failures: list[RowFailure]) -> None:
        if self.on_failures is not None:
            self.on_failures(failures)
            return
        first = failures[0]
        warnings.warn(f"{len(failures)} row(s) skipped; row {first.row!r}: {first.reason}", UserWarning,
                      stacklevel=3)


class _NotPerRow(ValueError):
    """An output that cannot be split into rows: a mistake of configuration, never a row failure."""


def _take(values: np.ndarray | list, positions: np.ndarray) -> np.ndarray:
    if isinstance(values, list):
        return np.stack([values[k] for k in positions])
    if len(positions) == len(values) and _ascending(positions):
        return values
    return values[positions]


def _ascending(positions: np.ndarray) -> bool:
    return len(positions) < 2 or bool(np.all(positions[1:] > positions[:-1]))


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"


def _plain(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else value
