"""Training runs for the API and the UI: list the runs under the allowed roots, summarise a
run's steps, and show one step's groups (as logged by the trainer, or analysed on demand).

A run id is the name of a folder or JSONL file directly inside one of ``GMTS_RUN_ROOTS``;
like model names it may not contain ``/``, ``..``, ``%``, ``\\`` or ``~``, and a symlink that
leads out of its root is refused. Every reading of a run file works inside the
``GMTS_RUN_MAX_*`` budget (:class:`~gmts_core.runs.limits.RunLimits`, checked while
streaming: 413 naming the limit). Paths in responses and messages are relative to the run
root. Opened runs (their step index) and on-demand step analyses are cached in memory (at most
16 runs and 4096 step reports, least recently used dropped). Analysing a step is a heavy job:
it waits in the job limiter's queue like any analysis; a step with more than
``GMTS_RUN_MAX_STEP_ANSWERS`` answers, or a prompt or answer longer than
``GMTS_MAX_PROMPT_CHARS`` / ``GMTS_MAX_ANSWER_CHARS``, is refused (413) in favour of
``gmts analyze-run``, before any tokenizer sees it.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import anyio.to_thread

from app.core.config import Settings
from app.schemas.analyze_response import DifferencesOut
from app.schemas.runs import (
    LoggedAnswer,
    LoggedGroup,
    LoggedToken,
    RunOverviewResponse,
    RunsResponse,
    RunStepResponse,
    StepOverviewOut,
    StepReportOut,
    TrainerMetricsOut,
)
from app.services.analysis import PreparedAnalysis, check_token_limits
from app.services.jobs import JobLimiter
from app.services.model_registry import ModelRegistry
from app.services.responses import analysis_response
from app.services.run_dump_view import attach_logged, check_token_ids, dump_groups, step_tokens
from app.services.run_roots import MAX_CACHED_RUNS, RunRoots
from gmts_core.config import DEFAULT_METHODS, AnalysisConfig
from gmts_core.errors import GMTSError, InvalidInputError, LimitExceededError
from gmts_core.knobs import knob_default
from gmts_core.progress import Cancelled
from gmts_core.runs import Run
from gmts_core.runs.analysis import (
    StepReport,
    analyze_step,
    group_input,
    logged_differences,
    logged_step_report,
    step_overview,
)
from gmts_core.runs.base import RunStep
from gmts_core.runs.dump_report import dump_step_report
from gmts_core.runs.report import uses_log
from gmts_core.runs.worker import ReaderPool, WorkerLimits
from gmts_core.stats.decoding import token_texts

logger = logging.getLogger(__name__)

_MAX_CACHED_REPORTS = 4096
NUMBERS = ("recomputed", "logged")  # a step's per-token numbers: the model's, or the dump's


@dataclass(frozen=True)
class StepOptions:
    """How a step is analysed on demand (ignored for trainer logs, except ``model``'s
    tokenizer, which turns logged token ids into text)."""

    model: str | None = None
    ratio: float = knob_default(AnalysisConfig, "ratio")
    scope: str = knob_default(AnalysisConfig, "scope")
    methods: tuple[str, ...] = DEFAULT_METHODS
    reward_kind: str | None = None
    # "recomputed": the model's forward pass; "logged": the dump's own per-token numbers only
    numbers: str = "recomputed"
    budget_over: str = knob_default(AnalysisConfig, "budget_over")

    def __post_init__(self) -> None:
        if self.numbers not in NUMBERS:
            raise InvalidInputError(
                f"unknown numbers {self.numbers!r}; valid: {', '.join(NUMBERS)}"
            )

    def config(self) -> AnalysisConfig:
        return AnalysisConfig(
            ratio=self.ratio, scope=self.scope, methods=self.methods, budget_over=self.budget_over
        )


class RunService:
    """The runs under ``settings.run_roots``: listing, overviews and step views."""

    def __init__(self, settings: Settings, models: ModelRegistry, jobs: JobLimiter) -> None:
        self.settings = settings
        self.models = models
        self.jobs = jobs
        self.limits = settings.run_limits
        self._lock = threading.Lock()
        self._reports: OrderedDict[tuple[Any, ...], StepReport] = OrderedDict()
        # the trainer's metrics log of each opened run: (the Run it was read for, the log file's
        # (path, size, mtime) or None when the run holds none, the body)
        self._trainer_logs: OrderedDict[
            Path, tuple[int, tuple[str, int, int] | None, TrainerMetricsOut | None]
        ] = OrderedDict()
        # run files are parsed in processes under hard limits, never in the server's
        self.readers = ReaderPool(
            settings.run_workers,
            WorkerLimits(
                memory_mb=settings.run_worker_memory_mb,
                cpu_s=settings.run_worker_cpu_s,
                wall_s=settings.run_worker_wall_s,
                open_files=settings.run_worker_open_files,
            ),
        )
        self.run_roots = RunRoots(settings, self.readers)
        self.roots = self.run_roots.paths

    # --- the runs in the roots (app.services.run_roots) ---

    def list_runs(self) -> RunsResponse:
        return self.run_roots.list_runs()

    def resolve(self, run_id: str) -> Path:
        return self.run_roots.resolve(run_id)

    def open(self, run_id: str) -> Run:
        return self.run_roots.open(run_id)

    def relative(self, text: str) -> str:
        return self.run_roots.relative(text)

    # --- paths relative to the run root ---

    # --- finding runs ---

    # --- a run's steps ---

    def overview(self, run_id: str) -> RunOverviewResponse:
        """Model-free numbers of (up to ``run_overview_steps``) steps and the reports known."""
        with self.run_roots.relative_errors():
            run = self.open(run_id)
            steps = run.steps
            shown = evenly(steps, self.settings.run_overview_steps)
            overview, reports = [], []
            unreadable: dict[int, str] = {}
            for number in shown:
                try:  # one bad step file is named, the others still shown
                    step = run.step(number)
                except Cancelled:
                    raise
                except GMTSError as exc:
                    unreadable[number] = self.relative(str(exc))
                    continue
                overview.append(StepOverviewOut.model_validate(step_overview(step).to_dict()))
                if uses_log(run):
                    reports.append(self._report_out(logged_step_report(step)))
            if not uses_log(run):
                with self._lock:
                    known = {k[1]: r for k, r in self._reports.items() if k[0] == run.path}
                reports = [self._report_out(known[s]) for s in sorted(known)]
            metrics, error = self._trainer_metrics(run)
            return RunOverviewResponse(
                run=RunRoots.info(run_id, run),
                steps=steps,
                overview=overview,
                reports=reports,
                trainer_metrics=metrics,
                trainer_metrics_error=error,
                unreadable_steps=unreadable,
            )

    def _trainer_metrics(self, run: Run) -> tuple[TrainerMetricsOut | None, str | None]:
        """The trainer's own metrics log in the run's folder, read in a reading process (a
        log that cannot be read says why; the run's overview stands without it). Read again
        only when the log file changed (a growing log) or the run was reopened (its folder
        changed: a new checkpoint, a log that appeared); a refusal is never remembered."""
        with self._lock:
            known = self._trainer_logs.get(run.path)
        if known is not None and known[0] == id(run) and known[1] == _signature(known[1]):
            return known[2], None
        try:
            found = self.readers.trainer_metrics(run.path, run.limits)
        except Cancelled:
            raise
        except GMTSError as exc:
            return None, self.relative(str(exc))
        body, signature = None, None
        if found is not None:
            signature = _signature((found.source, 0, 0))
            found.source = self.relative(found.source)
            body = TrainerMetricsOut.model_validate(found.to_dict())
        with self._lock:
            self._trainer_logs[run.path] = (id(run), signature, body)
            self._trainer_logs.move_to_end(run.path)
            while len(self._trainer_logs) > MAX_CACHED_RUNS:
                self._trainer_logs.popitem(last=False)
        return body, None

    async def overview_queued(self, run_id: str) -> RunOverviewResponse:
        """:meth:`overview` in the job queue, for the route: overviews read up to
        ``run_overview_steps`` steps, so they wait their turn instead of stacking up (an
        unknown run answers at once)."""
        with self.run_roots.relative_errors():
            await anyio.to_thread.run_sync(self.resolve, run_id)
        return await self.jobs.run(lambda: self.overview(run_id))

    def step_view(self, run_id: str, step: int, options: StepOptions) -> RunStepResponse:
        """One step's groups and report: the options checked, the run read, the step as logged
        or analysed on demand. Blocking and heavy: the route runs it in the job queue
        (:meth:`step_view_queued`), the UI's local backend inside ``jobs.run_blocking``."""
        with self.run_roots.relative_errors():
            options.config().validate()
            return self._step_view(run_id, self.open(run_id), step, options)

    async def step_view_queued(
        self, run_id: str, step: int, options: StepOptions
    ) -> RunStepResponse:
        """:meth:`step_view` in the job queue, for the route: bad options and an unknown run
        (a 404 listing the root's names) answer at once, off the event loop."""
        with self.run_roots.relative_errors():
            options.config().validate()
            await anyio.to_thread.run_sync(self.resolve, run_id)
        return await self.jobs.run(lambda: self.step_view(run_id, step, options))

    def _step_view(
        self, run_id: str, run: Run, number: int, options: StepOptions
    ) -> RunStepResponse:
        step = run.step(number)
        steps = run.steps
        i = steps.index(number)
        lm = self.models.get(options.model) if uses_log(run) else None
        head: dict[str, Any] = dict(
            run=run_id,
            step=number,
            format=run.format,
            notes=[self.relative(n) for n in step.notes],
            previous=steps[i - 1] if i > 0 else None,
            next=steps[i + 1] if i + 1 < len(steps) else None,
        )
        if uses_log(run):
            report = logged_step_report(step)
            differences = [
                DifferencesOut.model_validate(d, from_attributes=True)
                for d in logged_differences(step)
            ]
            return RunStepResponse(
                **head,
                mode="logged",
                report=self._report_out(report),
                logged=_logged(step, lm),
                differences=differences,
            )
        if options.numbers == "logged":  # the dump's numbers, no forward pass
            report, _ = self.analyse(run, step, options)
            tokenizer = self.models.tokenizer(options.model)
            groups = dump_groups(step, step_tokens(step), options.config(), tokenizer)
            return RunStepResponse(
                **head, mode="dump", report=self._report_out(report), logged=groups
            )
        report, result = self.analyse(run, step, options, lm)
        body = analysis_response(result)
        attach_logged(body, step, result)
        return RunStepResponse(
            **head, mode="analysis", report=self._report_out(report), analysis=body
        )

    def analyse(
        self, run: Run, step: RunStep, options: StepOptions, lm: Any = None
    ) -> tuple[StepReport, Any]:
        """Analyse one step of ``run`` (sizes checked first, before tokenizing); the report
        is remembered for the run's charts."""
        config = options.config()
        if options.numbers == "logged":  # the dump's own numbers: no model, no size limit
            step_tokens(step)
            report = dump_step_report(step, config)
            self.remember(run, step.step, options, report)
            return report, None
        self._check_step_size(step)
        lm = lm or self.models.get(options.model)
        groups = [group_input(g, options.reward_kind, lm.tokenizer) for g in step.groups]
        check_token_limits(self.settings, lm, PreparedAnalysis(None, None, groups, config))
        report, result = analyze_step(lm, step, config, options.reward_kind)
        self.remember(run, step.step, options, report)
        return report, result

    def remember(self, run: Run, step: int, options: StepOptions, report: StepReport) -> None:
        with self._lock:
            self._reports[(run.path, step, options)] = report
            self._reports.move_to_end((run.path, step, options))
            while len(self._reports) > _MAX_CACHED_REPORTS:
                self._reports.popitem(last=False)

    def known_report(self, run: Run, step: int, options: StepOptions) -> StepReport | None:
        with self._lock:
            return self._reports.get((run.path, step, options))

    def _check_step_size(self, step: RunStep) -> None:
        """The analysis budget of one step, before any tokenizer sees its texts."""
        s = self.settings
        if step.num_answers > s.run_max_step_answers:
            raise LimitExceededError(
                f"step {step.step} has {step.num_answers} answers, over the limit of "
                f"{s.run_max_step_answers} for on-demand analysis (GMTS_RUN_MAX_STEP_ANSWERS); "
                "analyse it with `gmts analyze-run`"
            )
        for g in step.groups:
            longest = max((len(a) for a in g.answers), default=0)
            for what, n, limit, setting in (
                ("a prompt", len(g.prompt), s.max_prompt_chars, "GMTS_MAX_PROMPT_CHARS"),
                ("an answer", longest, s.max_answer_chars, "GMTS_MAX_ANSWER_CHARS"),
            ):
                if n > limit:
                    raise LimitExceededError(
                        f"{g.source}: {what} of {n:,} characters, over the limit of "
                        f"{limit:,} for on-demand analysis ({setting}); analyse it with "
                        "`gmts analyze-run`"
                    )

    def _report_out(self, report: StepReport) -> StepReportOut:
        return StepReportOut.model_validate(
            replace(report, source=self.relative(report.source)).to_dict()
        )

    def report_out(self, report: StepReport) -> StepReportOut:
        return self._report_out(report)


def _signature(known: tuple[str, int, int] | None) -> tuple[str, int, int] | None:
    """(path, size, mtime) of the log file ``known`` names, now (None: no log, or gone)."""
    if known is None:
        return None
    try:
        st = os.stat(known[0])
    except OSError:
        return None
    return known[0], st.st_size, st.st_mtime_ns


def evenly(steps: list[int], n: int) -> list[int]:
    if len(steps) <= n:
        return steps
    return [steps[round(i * (len(steps) - 1) / (n - 1))] for i in range(n)] if n > 1 else steps[:1]


_LOGGED_FLAGS = {"applied": "selected", "entropy": "selected_entropy", "gmts": "selected_gmts"}


def _logged(step: RunStep, lm: Any) -> list[LoggedGroup]:
    """The trainer log's groups with token texts from ``lm``'s tokenizer."""
    groups = []
    vocabulary = len(lm.tokenizer)
    for gi, g in enumerate(step.groups):
        answers = []
        for ai, ids in enumerate(g.token_ids or []):
            col = {c: v[ai] for c, v in g.token_columns.items()}
            check_token_ids(ids, vocabulary, g.source, ai)
            texts = token_texts(lm.tokenizer, ids)
            tokens = [
                LoggedToken(
                    position=t,
                    id=tid,
                    text=texts[t],
                    entropy=col["entropy"][t],
                    logprob=col["logprob"][t],
                    grad_norm=col["grad_norm"][t],
                    grad_proxy=col["grad_proxy"][t],
                    omega=col["omega"][t],
                    selected={m: bool(col[c][t]) for m, c in _LOGGED_FLAGS.items()},
                )
                for t, tid in enumerate(ids)
            ]
            answers.append(
                LoggedAnswer(
                    index=ai,
                    text=g.answers[ai],
                    advantage=(g.advantages or [0.0] * len(g.answers))[ai],
                    length=len(ids),
                    selected_count={m: sum(t.selected[m] for t in tokens) for m in _LOGGED_FLAGS},
                    tokens=tokens,
                )
            )
        groups.append(LoggedGroup(index=gi, prompt=g.prompt, answers=answers))
    return groups
