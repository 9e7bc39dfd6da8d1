"""Run an analysis over a run's steps into an output folder, resumably and in shards.

Layout of ``OUT/``::

    settings.json            what was asked (a resumed analysis must ask the same)
    parts/steps-{rank}.jsonl one StepReport per line, appended as each step finishes
    report.json              the merged report: settings + every step's row, sorted by step
    dataset.json, tokens/, answers/, steps/   the analysed steps as a dataset: per-token,
                             per-answer and per-step Parquet files, one per step
                             (:mod:`gmts_core.run_dataset`; the steps asked for by --tokens)

Each process of a sharded analysis takes every ``world``-th step (``rank``, ``rank + world``
...), writes its own ``parts`` file, and one process merges them (:func:`merge_report`); the
merged report does not depend on how many processes made it. ``resume`` skips the steps any
``parts`` file already holds (a half-written last line is dropped).
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gmts_core.analysis.analyze import AnalysisConfig
from gmts_core.analysis.records import AnalysisResult
from gmts_core.errors import GMTSError, InvalidInputError
from gmts_core.model.loading import LoadedModel
from gmts_core.run_dataset.schema import write_manifest
from gmts_core.run_dataset.writer import StepColumns, write_step
from gmts_core.runs.analysis import (
    StepReport,
    analyze_step,
    logged_step_report,
)
from gmts_core.runs.base import RunStep, jsonl_records
from gmts_core.runs.dump_dataset import dump_step_columns
from gmts_core.runs.dump_report import dump_step_report
from gmts_core.runs.logged_tokens import (
    MODEL_FREE_METHODS,
    dataset_columns,
    logged_tokens,
    mismatch_columns,
)
from gmts_core.runs.registry import Run
from gmts_core.runs.trainer_metrics import find_trainer_metrics

logger = logging.getLogger(__name__)

REPORT_VERSION = 1


@dataclass(frozen=True)
class RunAnalysisPlan:
    """What to analyse: which steps, which get per-token records, how rewards are found."""

    steps: tuple[int, ...]
    token_steps: frozenset[int] = frozenset()
    reward_kind: str | None = None

    def shard(self, rank: int, world: int) -> list[int]:
        return list(self.steps[rank::world])


def settings_of(
    run: Run,
    model: str | None,
    config: AnalysisConfig,
    plan: RunAnalysisPlan,
    numbers: dict[str, str] | None = None,
) -> dict:
    """What was asked (settings.json); ``numbers``: what a model-free dataset's columns hold
    (:func:`~gmts_core.runs.dump_dataset.dump_numbers`), where one is written."""
    if uses_log(run):
        mode, methods = "logged", ["applied", "entropy", "gmts"]
    elif model is None:  # the dump's own per-token numbers (dump_step_report)
        mode, methods = "logged", list(MODEL_FREE_METHODS)
    else:
        mode, methods = "analysis", list(config.methods)
    out = {
        "version": REPORT_VERSION,
        "run": str(run.path),
        "format": run.format,
        "model": model if mode == "analysis" else None,
        "mode": mode,
        "methods": methods,
        "ratio": config.ratio,
        "scope": config.scope,
        "advantage": config.advantage,
        "loss_aggregation": config.loss_aggregation,
        "temperature": config.temperature,
        "reward_kind": plan.reward_kind,
        "steps": list(plan.steps),
        "token_steps": sorted(plan.token_steps),
    }
    if numbers is not None and mode == "logged" and not uses_log(run):
        out["numbers"] = numbers  # a dump's logged numbers, written as a dataset (no model)
    return out


def uses_log(run: Run) -> bool:
    """A trainer log is reported from its own numbers: the mask that was applied."""
    return run.format == "gmts_trainer_log"


def prepare_output(out: Path, settings: dict, resume: bool) -> None:
    """Create ``out``; without ``resume`` clear earlier parts; with it, check the settings."""
    out.mkdir(parents=True, exist_ok=True)
    saved = out / "settings.json"
    if resume and saved.is_file():
        before = json.loads(saved.read_text())
        if before != settings:
            changed = sorted(k for k in settings if before.get(k) != settings[k])
            raise InvalidInputError(
                f"{out}: --resume with different settings ({', '.join(changed)}); "
                "use a new output folder or drop --resume"
            )
    elif not resume:
        for sub in ("parts", "tokens", "answers", "steps"):
            shutil.rmtree(out / sub, ignore_errors=True)
        (out / "report.json").unlink(missing_ok=True)
    (out / "parts").mkdir(exist_ok=True)
    saved.write_text(json.dumps(settings, indent=1))
    if settings.get("mode") == "analysis" or "numbers" in settings:
        write_manifest(out, tuple(settings["methods"]), settings)
    for part in (out / "parts").glob("steps-*.jsonl"):
        _cut_half_written_tail(part)


def _cut_half_written_tail(part: Path) -> None:
    """Drop a last line without its newline (killed mid-write), so appending stays valid."""
    data = part.read_bytes()
    if data and not data.endswith(b"\n"):
        part.write_bytes(data[: data.rfind(b"\n") + 1])
        logger.warning("%s: dropped a half-written last line", part)


def done_steps(out: Path) -> dict[int, dict[str, Any]]:
    """Step rows already written by any process (a half-written last line is dropped)."""
    rows: dict[int, dict[str, Any]] = {}
    for part in sorted((out / "parts").glob("steps-*.jsonl")):
        for _, _, obj in jsonl_records(part, tolerate_tail=True):
            rows[int(obj["step"])] = obj
    return rows


def analyze_run_shard(
    run: Run,
    lm: LoadedModel | None,
    config: AnalysisConfig,
    plan: RunAnalysisPlan,
    out: Path,
    rank: int = 0,
    world: int = 1,
    on_step: Callable[[StepReport | None], None] | None = None,
) -> int:
    """Analyse this process's share of ``plan.steps`` not done yet; returns how many it did.

    ``on_step`` is called after each step (None for a step skipped because it was done).
    """
    # without a model a dump's own per-token numbers are reported (dump_step_report); a step
    # without them raises there, naming the step
    done = set(done_steps(out))
    mine = plan.shard(rank, world)
    todo = [s for s in mine if s not in done]
    for _ in range(len(mine) - len(todo)):
        if on_step:
            on_step(None)
    count = 0
    # a step's dataset files are built and written on a thread of their own while the next
    # step is analysed (numpy, and pyarrow's compression and writing, release the GIL); at
    # most one step waits to be written. Its report line (what --resume reads as done)
    # follows its files.
    with (
        (out / "parts" / f"steps-{rank}.jsonl").open("a", encoding="utf-8") as part,
        ThreadPoolExecutor(1, thread_name_prefix="gmts-dataset-writer") as writer,
    ):
        pending: tuple[Future[None] | None, StepReport] | None = None

        def finish(written: Future[None] | None, report: StepReport) -> None:
            if written is not None:
                written.result()  # a failed write stops the analysis here
            part.write(json.dumps(report.to_dict(), ensure_ascii=False) + "\n")
            part.flush()
            if on_step:
                on_step(report)

        for step in run.iter_steps(todo):
            written = None
            if uses_log(run):
                report = logged_step_report(step)
            elif lm is None:
                report = dump_step_report(step, config)
                if step.step in plan.token_steps:  # the dump's numbers as a dataset step
                    cols = dump_step_columns(step, config, report)
                    written = writer.submit(write_step, out, cols)
            else:
                assert lm is not None
                report, result = analyze_step(lm, step, config, plan.reward_kind)
                if step.step in plan.token_steps:
                    written = writer.submit(_write_dataset_step, out, step, result, report)
            if pending is not None:
                finish(*pending)
            pending = (written, report)
            count += 1
        if pending is not None:
            finish(*pending)
    return count


def _write_dataset_step(
    out: Path, step: RunStep, result: AnalysisResult, report: StepReport
) -> None:
    """The step's dataset files, with the optional columns of what its dump logged: each
    token's loss mask, logged numbers and train/inference difference, and the step's
    mismatch (schema.OPTIONAL_*_COLUMNS)."""
    cols = StepColumns.from_result(step.step, result)
    x = result.inputs
    if x is not None:
        cols.token_extra = dataset_columns(logged_tokens(step), x.trained, x.logprob)
    cols.step_extra = mismatch_columns(report.mismatch, report.untrained_tokens)
    write_step(out, cols)


def merge_report(
    out: Path, steps: Iterable[int], extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Merge every process's rows into ``out/report.json`` (rows sorted by step), with
    ``extra`` top-level entries (the trainer's own metrics: :func:`trainer_metrics_entry`)."""
    settings = json.loads((out / "settings.json").read_text())
    rows = done_steps(out)
    missing = [s for s in steps if s not in rows]
    if missing:
        raise InvalidInputError(f"{out}: steps not analysed yet: {missing[:10]}")
    report = {**settings, "rows": [rows[s] for s in sorted(steps)], **(extra or {})}
    (out / "report.json").write_text(json.dumps(report, ensure_ascii=False, indent=1))
    return report


def trainer_metrics_entry(run: Run) -> dict[str, Any]:
    """The report's ``trainer_metrics`` (what the trainer itself logged, read from the run's
    folder within the run's limits) or ``trainer_metrics_error`` (why it could not be read);
    nothing when the run holds no metrics log."""
    try:
        found = find_trainer_metrics(run.path, run.limits)
    except GMTSError as exc:
        return {"trainer_metrics_error": str(exc)}
    return {} if found is None else {"trainer_metrics": found.to_dict()}
