"""The token log of ``GMTSGRPOTrainer(log_selection=True)``: what the trainer actually trained.

Every logging step the trainer writes ``OUTPUT_DIR/gmts_selection/selection_{step:05d}.parquet``
next to TRL's ``completions/`` folder: one row per completion token of every micro-batch since
the previous log, with the columns of :data:`TOKEN_COLUMNS`. ``selected`` is the mask the loss
was multiplied by (the active method); ``selected_entropy`` and ``selected_gmts`` are what
entropy and GMTS selection would have kept at the same ratio, for comparison. ``omega`` (the
effective per-token coefficient) is present once the trainer computes it, else null.

Groups are the answers with the same prompt within the step.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from gmts_core.runs.base import (
    NumberedFilesReader,
    RunFormatError,
    RunGroup,
    RunStep,
    StepRef,
    group_by_key,
    has_match,
    read_parquet_step,
)
from gmts_core.runs.limits import RunLimits
from gmts_core.runs.values import MAX_ABS_NUMBER

FOLDER = "gmts_selection"
FILE_PATTERN = r"selection_(\d+)\.parquet"
# (name, arrow type): the file's schema, in order
TOKEN_COLUMNS: tuple[tuple[str, pa.DataType], ...] = (
    ("step", pa.int64()),
    ("micro_batch", pa.int32()),  # which loss call since the previous log
    ("answer", pa.int32()),  # answer index within the micro-batch (all processes, in order)
    ("position", pa.int32()),  # token position within the answer
    ("prompt", pa.string()),
    ("completion", pa.string()),
    ("token_id", pa.int64()),
    ("entropy", pa.float64()),  # H, nats
    ("logprob", pa.float64()),
    ("grad_norm", pa.float64()),  # g
    ("grad_proxy", pa.float64()),  # gamma = |A| w g
    ("advantage", pa.float64()),
    ("weight", pa.float64()),  # w_i of the loss aggregation
    ("omega", pa.float64()),  # effective coefficient, null until the trainer computes it
    ("method", pa.string()),  # the active selection method
    ("selected", pa.bool_()),  # the mask applied to the loss
    ("selected_entropy", pa.bool_()),
    ("selected_gmts", pa.bool_()),
)
SCHEMA = pa.schema([pa.field(n, t) for n, t in TOKEN_COLUMNS])
PER_TOKEN = (
    "entropy",
    "weight",
    "logprob",
    "grad_norm",
    "grad_proxy",
    "omega",
    "selected",
    "selected_entropy",
    "selected_gmts",
)


def write_log_step(folder: Path, tables: list[pa.Table], step: int) -> Path | None:
    """The one writer of the token log (TRL's and verl's loggers call it): ``tables`` (rows of
    :data:`SCHEMA`) as ``folder/selection_{step:05d}.parquet``, each row's ``step`` set to
    ``step``, pandas' or any other schema metadata dropped (the file's schema is SCHEMA alone),
    written to a temporary name and renamed so that readers never see a half-written file.
    None when there are no rows to write."""
    if not tables:
        return None
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"selection_{step:05d}.parquet"
    table = pa.concat_tables(tables).replace_schema_metadata(None)
    steps = pa.array([step] * len(table), pa.int64())
    table = table.set_column(table.schema.get_field_index("step"), "step", steps)
    tmp = path.with_suffix(".parquet.tmp")
    pq.write_table(table, tmp)
    tmp.replace(path)
    return path


def log_folder(path: Path, limits: RunLimits) -> Path:
    return path / FOLDER if has_match(path / FOLDER, FILE_PATTERN, limits) else path


class TrainerLogReader(NumberedFilesReader):
    name = "gmts_trainer_log"
    description = "GMTSGRPOTrainer(log_selection=True) (gmts_selection/selection_NNNNN.parquet)"
    file_pattern = FILE_PATTERN
    parquet = True

    def folder(self, path: Path, limits: RunLimits) -> Path:
        return log_folder(path, limits)

    def load(self, ref: StepRef, limits: RunLimits) -> RunStep:
        table = read_parquet_step(ref.path, [n for n, _ in TOKEN_COLUMNS], limits)
        missing = [n for n, _ in TOKEN_COLUMNS if n not in table.column_names]
        if missing:
            raise RunFormatError(ref.path, None, f"missing column {missing[0]!r}")
        check_token_table(table, ref.path)
        cols = {n: table.column(n).to_pylist() for n, _ in TOKEN_COLUMNS}
        return RunStep(ref.step, _groups(cols, ref.path), str(ref.path))


# columns that may be null (the trainer did not compute them); every other one is required
NULLABLE = {"logprob", "omega", "weight", "method"}
MAX_TOKEN_ID = 2**31 - 1  # a vocabulary is smaller; the model's tokenizer checks its own size


def check_token_table(table: pa.Table, path: Path) -> None:
    """Refuse a token log whose values the format does not allow, naming the row and column:
    a null where a value is required, a number that is not finite or past
    :data:`~gmts_core.runs.values.MAX_ABS_NUMBER`, a token id or index out of range.
    Checked in Arrow, before any value becomes Python."""
    for name, kind in TOKEN_COLUMNS:
        column = table.column(name)
        if name not in NULLABLE and column.null_count:
            _refuse(path, column, pc.is_null(column), f"column {name!r} is null")
        if pa.types.is_floating(kind):
            values = pc.cast(column, pa.float64())
            bad = pc.or_kleene(
                pc.invert(pc.is_finite(values)), pc.greater(pc.abs(values), MAX_ABS_NUMBER)
            )
            if pc.any(bad).as_py():
                _refuse(path, column, bad, f"column {name!r} is not finite or out of range")
        elif pa.types.is_integer(kind) and name != "step":
            top = MAX_TOKEN_ID if name == "token_id" else 2**31 - 1
            values = pc.cast(column, pa.int64())
            bad = pc.or_kleene(pc.less(values, 0), pc.greater(values, top))
            if pc.any(bad).as_py():
                _refuse(path, column, bad, f"column {name!r} is out of range [0, {top}]")


def _refuse(path: Path, column: Any, bad: Any, what: str) -> None:
    row = int(pc.index(pc.fill_null(bad, False), True).as_py())
    value = column[row].as_py()
    raise RunFormatError(path, None, f"row {row + 1}: {what} ({value!r:.40})")


def _groups(cols: dict[str, list[Any]], path: Path) -> list[RunGroup]:
    # answers in file order: rows of one (micro_batch, answer) are contiguous, by position
    answers: dict[tuple[int, int], list[int]] = {}
    for row, key in enumerate(zip(cols["micro_batch"], cols["answer"], strict=True)):
        answers.setdefault(key, []).append(row)
    keys = list(answers)
    groups = []
    for members in group_by_key([cols["prompt"][answers[k][0]] for k in keys]):
        rows_of = [answers[keys[m]] for m in members]
        first = rows_of[0][0]
        groups.append(
            RunGroup(
                prompt=cols["prompt"][first],
                answers=[cols["completion"][rows[0]] for rows in rows_of],
                advantages=[float(cols["advantage"][rows[0]]) for rows in rows_of],
                source=f"{path}:row {first + 1}",
                token_ids=[[int(cols["token_id"][r]) for r in rows] for rows in rows_of],
                token_columns={
                    c: [[cols[c][r] for r in rows] for rows in rows_of] for c in PER_TOKEN
                },
                extra={"method": [cols["method"][rows[0]] for rows in rows_of]},
            )
        )
    return groups
