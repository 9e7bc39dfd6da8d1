"""miles (and slime-style) per-token rollout dumps, read from miles' Parquet mirror, never the
pickle files.

miles' ``--dump-details DIR`` (and slime's ``--save-debug-rollout-data``) writes each rollout
step as ``DIR/rollout_data/{rollout_id}.pt`` and the train side as
``DIR/train_data/{rollout_id}_{rank}.pt``: ``torch.save`` files, i.e. pickle, which this tool
never loads (loading pickle can run arbitrary code). Next to them miles writes a Parquet mirror
of the per-token rollout columns, ``DIR/dashboard_columns/rollout_{rollout_id}.parquet``
(``miles/ray/rollout/debug_data.py:save_dashboard_columns``, polars, ``row_group_size=8``;
written when polars is installed, ``pip install miles[dashboard]``), one row per sample:

================== =============== ==================================================
column             type            what
================== =============== ==================================================
sample_index       int32           ``Sample.index`` (unique in the run)
response_length    int32           tokens of the response (the last ones of ``tokens``)
total_length       int32           ``len(tokens)``: prompt + response
tokens             list<int32>     prompt and response token ids
loss_mask          list<int8>      per response token: 1 trained, 0 not (tool output)
rollout_log_probs  list<float32>   per response token: the rollout engine's log-prob
================== =============== ==================================================

That mirror is what this reader reads: a step is a ``rollout_{N}.parquet`` file (evaluation
steps, ``rollout_eval_{N}``, are not steps). It holds no text, no reward, no group and no
per-token entropy or advantage (those stay in the ``train_data`` pickles). Where miles'
dashboard has summarised a step, its per-sample cache ``DIR/dashboard/cache/rollout_{N}.parquet``
(``miles/dashboard/dump_reader.py:DumpReader.summary``) adds ``group_index``, ``raw_reward`` /
``reward``, ``adv_mean`` (the mean advantage over trained tokens: the answer's GRPO advantage)
and ``mean_entropy``; without it the answers are grouped by identical prompt tokens and have no
rewards (an analysis then needs a reward rule with a reference, which miles' mirror lacks).

The texts are the token ids decoded by the analysing model's tokenizer
(:attr:`RunGroup.texts_from_ids`); the answers are analysed as the given ids, exactly the
sampled tokens (tool outputs with ``loss_mask`` 0 included), the prompt re-tokenized from its
decoded text.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

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

FOLDER = "dashboard_columns"
FILE_PATTERN = r"rollout_(\d+)\.parquet"
SUMMARY_FOLDER = ("dashboard", "cache")
REQUIRED = ("sample_index", "response_length", "total_length", "tokens")
OPTIONAL = ("loss_mask", "rollout_log_probs")
SUMMARY_COLUMNS = (
    "sample_index",
    "group_index",
    "raw_reward",
    "reward",
    "adv_mean",
    "mean_entropy",
)
MAX_TOKEN_ID = 2**31 - 1


def columns_folder(path: Path, limits: RunLimits) -> Path:
    inner = path / FOLDER
    return inner if has_match(inner, FILE_PATTERN, limits) else path


class MilesReader(NumberedFilesReader):
    name = "miles"
    description = (
        "miles --dump-details Parquet mirror (dashboard_columns/rollout_N.parquet; "
        "the .pt pickles are never loaded)"
    )
    file_pattern = FILE_PATTERN
    parquet = True

    def folder(self, path: Path, limits: RunLimits) -> Path:
        return columns_folder(path, limits)

    def load(self, ref: StepRef, limits: RunLimits) -> RunStep:
        table = read_parquet_step(ref.path, [*REQUIRED, *OPTIONAL], limits)
        missing = [c for c in REQUIRED if c not in table.column_names]
        if missing:
            have = ", ".join(table.column_names) or "nothing"
            raise RunFormatError(
                ref.path, None, f"missing column {missing[0]!r} (the file has: {have})"
            )
        check_columns(table, ref.path)
        cols = {c: table.column(c).to_pylist() for c in table.column_names}
        summary = _summary(ref, limits, cols["sample_index"])
        return RunStep(ref.step, _groups(cols, summary, ref.path), str(ref.path))


def check_columns(table: pa.Table, path: Path) -> None:
    """Refuse a mirror whose values miles would not write, naming the row: a null where a
    value is required, lengths that disagree (``tokens`` vs ``total_length``, the per-token
    lists vs ``response_length``), a token id out of range, a log-prob not finite."""
    for name in REQUIRED:
        _refuse_where(path, table, pc.is_null(table.column(name)), f"column {name!r} is null")
    total, response = table.column("total_length"), table.column("response_length")
    tokens = table.column("tokens")
    _refuse_where(
        path,
        table,
        pc.not_equal(pc.list_value_length(tokens), pc.cast(total, pa.int64())),
        "'tokens' does not hold 'total_length' ids",
    )
    _refuse_where(
        path,
        table,
        pc.or_(pc.less(response, 0), pc.greater(response, total)),
        "'response_length' is not within [0, total_length]",
    )
    ids = pc.list_flatten(tokens)
    if len(ids) and (
        pc.min(ids).as_py() < 0 or pc.max(pc.cast(ids, pa.int64())).as_py() > MAX_TOKEN_ID
    ):
        raise RunFormatError(path, None, f"a token id in 'tokens' is out of [0, {MAX_TOKEN_ID}]")
    for name in OPTIONAL:
        if name not in table.column_names:
            continue
        column = table.column(name)
        lengths = pc.list_value_length(column)
        _refuse_where(
            path,
            table,
            pc.and_(pc.is_valid(column), pc.not_equal(lengths, pc.cast(response, pa.int64()))),
            f"{name!r} does not hold 'response_length' values",
        )
        values = pc.list_flatten(column)
        if pa.types.is_floating(values.type):
            bad = pc.or_kleene(
                pc.invert(pc.is_finite(values)),
                pc.greater(pc.abs(pc.cast(values, pa.float64())), MAX_ABS_NUMBER),
            )
            if pc.any(bad).as_py():
                raise RunFormatError(path, None, f"a value of {name!r} is not finite")
        elif pa.types.is_integer(values.type) and len(values):
            if pc.min(values).as_py() < 0 or pc.max(values).as_py() > 1:
                raise RunFormatError(path, None, f"a value of {name!r} is not 0 or 1")


def _refuse_where(path: Path, table: pa.Table, bad: Any, what: str) -> None:
    if pc.any(pc.fill_null(bad, True)).as_py():
        row = int(pc.index(pc.fill_null(bad, True), True).as_py())
        raise RunFormatError(path, None, f"row {row + 1}: {what}")


def summary_path(step_file: Path) -> Path:
    """Where miles' dashboard caches its per-sample summary of the step in ``step_file``."""
    folder = step_file.parent
    run = folder.parent if folder.name == FOLDER else folder
    return run.joinpath(*SUMMARY_FOLDER, step_file.name)


def _summary(ref: StepRef, limits: RunLimits, samples: list[int]) -> dict[int, dict[str, Any]]:
    """The dashboard's per-sample summary of the step, by sample index, when it exists and
    covers every sample of the mirror (else none: a cache of another dump is not used)."""
    path = summary_path(ref.path)
    if not path.is_file():
        return {}
    table = read_parquet_step(path, list(SUMMARY_COLUMNS), limits)
    if "sample_index" not in table.column_names or "group_index" not in table.column_names:
        return {}
    rows = table.to_pylist()
    by_sample = {r["sample_index"]: r for r in rows if isinstance(r["sample_index"], int)}
    return by_sample if all(s in by_sample for s in samples) else {}


def _number(value: Any, what: str, path: Path, row: int) -> float:
    if value is None:
        return math.nan
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RunFormatError(path, None, f"row {row + 1}: {what} is not a number")
    number = float(value)
    if math.isinf(number) or abs(number) > MAX_ABS_NUMBER:
        raise RunFormatError(path, None, f"row {row + 1}: {what} {value!r} is out of range")
    return number


def _groups(
    cols: dict[str, list[Any]], summary: dict[int, dict[str, Any]], path: Path
) -> list[RunGroup]:
    samples = cols["sample_index"]
    prompts = [
        toks[: total - resp]
        for toks, total, resp in zip(
            cols["tokens"], cols["total_length"], cols["response_length"], strict=True
        )
    ]
    answers = [toks[len(p) :] for toks, p in zip(cols["tokens"], prompts, strict=True)]
    if summary:
        keys = [f"group {summary[s]['group_index']}" for s in samples]
    else:
        keys = [",".join(map(str, p)) for p in prompts]
    cache = summary_path(path)
    groups = []
    for rows in group_by_key(keys):
        first = rows[0]
        if summary and any(prompts[r] != prompts[first] for r in rows):
            raise RunFormatError(
                cache,
                None,
                f"group {summary[samples[first]]['group_index']} holds different prompts",
            )
        group = RunGroup(
            prompt="",
            answers=["" for _ in rows],
            source=f"{path}:row {first + 1}",
            token_ids=[answers[r] for r in rows],
            token_columns={c: [cols[c][r] for r in rows] for c in OPTIONAL if c in cols},
            prompt_token_ids=prompts[first],
            texts_from_ids=True,
            extra={"sample_index": [samples[r] for r in rows]},
        )
        if summary:
            found = [summary[samples[r]] for r in rows]
            rewards = [
                _number(
                    f["raw_reward"] if f.get("raw_reward") is not None else f.get("reward"),
                    "the reward",
                    cache,
                    r,
                )
                for f, r in zip(found, rows, strict=True)
            ]
            if not all(math.isnan(x) for x in rewards):
                group.rewards = rewards
            advantages = [
                _number(f.get("adv_mean"), "adv_mean", cache, r)
                for f, r in zip(found, rows, strict=True)
            ]
            if not any(math.isnan(a) for a in advantages):
                group.advantages = advantages
            group.extra["mean_entropy"] = [f.get("mean_entropy") for f in found]
        groups.append(group)
    return groups
