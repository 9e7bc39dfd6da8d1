"""TRL ``GRPOTrainer(log_completions=True)``: ``completions/completions_{step:05d}.parquet``.

TRL (``GRPOTrainer.log``, ``trl/trainer/grpo_trainer.py``) writes one parquet file per logging
step with the columns ``step``, ``prompt``, ``completion`` (strings, or chat message lists), one
column per reward function (named after it), the columns reward functions logged through
``log_extra`` (any values, numbers too), and ``advantage``: the advantage TRL trained with,
which is authoritative here. Groups are the runs of rows with the same prompt, cut into
blocks of ``num_generations`` (:func:`trl_groups`). Which numeric columns
are rewards, and their weights, is found by :mod:`gmts_core.runs.trl_rewards` (named by the
run's ``trainer_state.json``, else recovered from the advantage); the reward of a completion is
their weighted ``nansum``, TRL's. What could not be told is said in the step's ``notes``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from gmts_core.runs.base import (
    NumberedFilesReader,
    RunFormatError,
    RunGroup,
    RunStep,
    StepRef,
    as_float,
    completion_text,
    has_match,
    prompt_text,
    read_parquet_step,
)
from gmts_core.runs.limits import RunLimits
from gmts_core.runs.trl_rewards import RewardColumns, find_reward_columns
from gmts_core.runs.trl_state import reward_function_names

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
        folder = ref.path.parent
        root = folder.parent if folder.name == "completions" else folder
        named = reward_function_names(root, limits)
        groups, found = groups_from_table(table, ref.path, named)
        return RunStep(ref.step, groups, str(ref.path), notes=[found.note] if found.note else [])


def numeric_columns(table: pa.Table) -> list[str]:
    """The numeric columns after ``completion`` (rewards and numeric extras, in file order)."""
    names = table.column_names
    start = names.index("completion") + 1
    return [
        n
        for n in names[start:]
        if n not in _SKIP
        and (
            pa.types.is_floating(table.schema.field(n).type)
            or pa.types.is_integer(table.schema.field(n).type)
        )
    ]


def trl_groups(keys: list[str]) -> list[list[int]]:
    """The rows of each group. TRL logs a generation batch's rows in order, each prompt's
    ``num_generations`` answers one after the other, and a batch may draw one prompt twice
    (adjacent, or apart): groups are the runs of equal prompts, each cut into blocks of G, the
    greatest common divisor of the runs' lengths (every run is a multiple of G)."""
    runs: list[list[int]] = []
    for row, key in enumerate(keys):
        if runs and keys[runs[-1][0]] == key:
            runs[-1].append(row)
        else:
            runs.append([row])
    size = math.gcd(*(len(r) for r in runs)) if runs else 1
    if size <= 1:  # a run of one answer: no common G to cut by, the runs are the groups
        return runs
    return [run[i : i + size] for run in runs for i in range(0, len(run), size)]


def _as_array(values: list[Any], name: str, path: Path) -> np.ndarray:
    return np.array([as_float(v, name, path, row + 1) for row, v in enumerate(values)], np.float64)


def groups_from_table(
    table: pa.Table, path: Path, named: list[str] | None = None
) -> tuple[list[RunGroup], RewardColumns]:
    """The step's groups (rows with the same prompt) and how its reward columns were found."""
    cols = {n: table.column(n).to_pylist() for n in table.column_names}
    prompts = [prompt_text(p, path, row + 1) for row, p in enumerate(cols["prompt"])]
    keys = [json.dumps(p, sort_keys=True, default=str) for p in cols["prompt"]]
    rows_by_group = trl_groups(keys)
    numeric = {n: _as_array(cols[n], n, path) for n in numeric_columns(table)}
    advantage = _as_array(cols["advantage"], "advantage", path) if "advantage" in cols else None
    found = find_reward_columns(numeric, advantage, rows_by_group, named)
    rewards = found.rewards(numeric)
    extra_names = [n for n in cols if n not in _SKIP and n not in found.names]
    groups = []
    for rows in rows_by_group:
        first = rows[0]
        group = RunGroup(
            prompt=prompts[first][0],
            chat=prompts[first][1],
            answers=[completion_text(cols["completion"][r], path, r + 1) for r in rows],
            source=f"{path}:row {first + 1}",
        )
        if rewards is not None:
            group.rewards = [float(rewards[r]) for r in rows]
        if advantage is not None:
            group.advantages = [float(advantage[r]) for r in rows]
        group.extra = {n: [cols[n][r] for r in rows] for n in extra_names}
        group.extra.update({f"reward:{n}": [cols[n][r] for r in rows] for n in found.names})
        groups.append(group)
    return groups, found
