"""TRL ``GRPOTrainer(log_completions=True)``: ``completions/completions_{step:05d}.parquet``.

TRL (``GRPOTrainer.log``) writes one parquet file per logging step with the columns ``step``,
``prompt``, ``completion`` (strings, or chat message lists), one column per reward function
(named after it), any extra logged columns, and ``advantage``. Groups are the rows with the
same prompt. The reward of a completion is the sum of the reward-function columns (NaN skipped,
TRL's default of unit weights); those are the numeric columns between ``completion`` and
``advantage``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pyarrow as pa

from gmts_core.runs.base import (
    NumberedFilesReader,
    RunFormatError,
    RunGroup,
    RunStep,
    StepRef,
    as_float,
    completion_text,
    group_by_key,
    has_match,
    prompt_text,
    read_parquet_step,
)
from gmts_core.runs.limits import RunLimits

FILE_PATTERN = r"completions_(\d+)\.parquet"
_SKIP = {"step", "prompt", "completion", "advantage", "image", "images"}


def completions_folder(path: Path, limits: RunLimits) -> Path:
    inner = path / "completions"
    return inner if has_match(inner, FILE_PATTERN, limits) else path


class TRLReader(NumberedFilesReader):
    name = "trl"
    description = "TRL GRPOTrainer log_completions (completions/completions_NNNNN.parquet)"
    file_pattern = FILE_PATTERN
    parquet = True

    def folder(self, path: Path, limits: RunLimits) -> Path:
        return completions_folder(path, limits)

    def load(self, ref: StepRef, limits: RunLimits) -> RunStep:
        table = read_parquet_step(ref.path, None, limits)
        names = table.column_names
        for col in ("prompt", "completion"):
            if col not in names:
                raise RunFormatError(
                    ref.path, None, f"missing column {col!r} (the file has: {', '.join(names)})"
                )
        return RunStep(ref.step, groups_from_table(table, ref.path), str(ref.path))


def reward_columns(table: pa.Table) -> list[str]:
    """The numeric columns between ``completion`` and ``advantage`` (TRL's reward columns)."""
    names = table.column_names
    start = names.index("completion") + 1
    stop = names.index("advantage") if "advantage" in names else len(names)
    return [
        n
        for n in names[start:stop]
        if n not in _SKIP
        and (
            pa.types.is_floating(table.schema.field(n).type)
            or pa.types.is_integer(table.schema.field(n).type)
        )
    ]


def groups_from_table(table: pa.Table, path: Path) -> list[RunGroup]:
    cols = {n: table.column(n).to_pylist() for n in table.column_names}
    rewards_by = reward_columns(table)
    extra_names = [n for n in cols if n not in _SKIP and n not in rewards_by]
    prompts = [prompt_text(p, path, row + 1) for row, p in enumerate(cols["prompt"])]
    keys = [json.dumps(p, sort_keys=True, default=str) for p in cols["prompt"]]
    groups = []
    for rows in group_by_key(keys):
        first = rows[0]
        group = RunGroup(
            prompt=prompts[first][0],
            chat=prompts[first][1],
            answers=[completion_text(cols["completion"][r], path, r + 1) for r in rows],
            source=f"{path}:row {first + 1}",
        )
        if rewards_by:
            group.rewards = [_reward_sum(cols, rewards_by, r, path) for r in rows]
        if "advantage" in cols:
            group.advantages = [
                as_float(cols["advantage"][r], "advantage", path, r + 1) for r in rows
            ]
        group.extra = {n: [cols[n][r] for r in rows] for n in extra_names}
        group.extra.update({f"reward:{n}": [cols[n][r] for r in rows] for n in rewards_by})
        groups.append(group)
    return groups


def _reward_sum(cols: dict[str, list[Any]], names: list[str], row: int, path: Path) -> float:
    values = [as_float(cols[n][row], n, path, row + 1) for n in names]
    finite = [v for v in values if not math.isnan(v)]
    return sum(finite) if finite else float("nan")
