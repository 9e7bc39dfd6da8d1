"""Training runs for the API and the UI: list the runs under the allowed roots, summarise a
run's steps, and show one step's groups (as logged by the trainer, or analysed on demand).

A run id is the name of a folder or JSONL file directly inside one of ``GMTS_RUN_ROOTS``;
like model names it may not contain ``/``, ``..``, ``%``, ``\\`` or ``~``, and a symlink that
leads out of its root is refused. Opened runs (their step index) and on-demand step analyses
are cached in memory. Analysing a step is a heavy job: it waits in the job limiter's queue
like any analysis, and a step with more than ``GMTS_RUN_MAX_STEP_ANSWERS`` answers is refused
(413) in favour of ``gmts analyze-run``.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.core.config import Settings
from app.schemas.runs import (
    LoggedAnswer,
    LoggedGroup,
    LoggedToken,
    RunInfo,
    RunOverviewResponse,
    RunsResponse,
    RunStepResponse,
    StepOverviewOut,
    StepReportOut,
)
from app.services.analysis import PreparedAnalysis, check_token_limits
from app.services.bodies import analysis_response
from app.services.errors import RunNotFoundError
from app.services.jobs import JobLimiter
from app.services.model_registry import ModelRegistry
from gmts_core.config import DEFAULT_METHODS, AnalysisConfig
from gmts_core.errors import LimitExceededError
from gmts_core.runs import Run, list_formats, open_run
from gmts_core.runs.analysis import (
    StepReport,
    analyze_step,
    group_input,
    logged_step_report,
    step_overview,
)
from gmts_core.runs.base import RunFormatError, RunStep
from gmts_core.runs.report import uses_log
from gmts_core.stats.decoding import token_texts

logger = logging.getLogger(__name__)

_FORBIDDEN = ("/", "\\", "%", "~", "\x00", "\n", "\r")
_MAX_CACHED_RUNS = 16
_MAX_CACHED_REPORTS = 4096


@dataclass(frozen=True)
class StepOptions:
    """How a step is analysed on demand (ignored for trainer logs, except ``model``'s
    tokenizer, which turns logged token ids into text)."""

    model: str | None = None
    ratio: float = 0.2
    scope: str = "batch"
    methods: tuple[str, ...] = DEFAULT_METHODS
    reward_kind: str | None = None

    def config(self) -> AnalysisConfig:
        return AnalysisConfig(ratio=self.ratio, scope=self.scope, methods=self.methods)


class RunService:
    """The runs under ``settings.run_roots``: listing, overviews and step views."""

    def __init__(self, settings: Settings, models: ModelRegistry, jobs: JobLimiter) -> None:
        self.settings = settings
        self.models = models
        self.jobs = jobs
        self.roots = [Path(r).expanduser() for r in settings.run_roots]
        self._lock = threading.Lock()
        self._runs: OrderedDict[Path, tuple[tuple[float, int], Run]] = OrderedDict()
        self._reports: OrderedDict[tuple[Any, ...], StepReport] = OrderedDict()

    # --- finding runs ---

    def list_runs(self) -> RunsResponse:
        runs = []
        for name, path in self._candidates():
            try:
                runs.append(self._info(name, self._open(path)))
            except (RunFormatError, OSError) as exc:
                logger.debug("not a run: %s (%s)", path, exc)
        return RunsResponse(runs=runs, formats=list_formats())

    def _candidates(self) -> list[tuple[str, Path]]:
        seen: dict[str, Path] = {}
        for root in self.roots:
            if root.is_dir():
                for child in sorted(root.iterdir()):
                    if child.name not in seen and self._inside(root, child):
                        seen[child.name] = child
        return list(seen.items())

    @staticmethod
    def _inside(root: Path, child: Path) -> bool:
        return child.resolve().parent == root.resolve()  # no symlink out of the root

    def resolve(self, run_id: str) -> Path:
        """The path of run ``run_id``; RunNotFoundError (listing the runs) otherwise."""
        bad = not run_id or len(run_id) > 256 or run_id in (".", "..")
        if not bad and not any(c in run_id for c in _FORBIDDEN):
            for root in self.roots:
                child = root / run_id
                if child.exists() and self._inside(root, child):
                    return child
        names = ", ".join(n for n, _ in self._candidates()) or "none (set GMTS_RUN_ROOTS)"
        shown = run_id if len(run_id) <= 80 else run_id[:77] + "..."
        raise RunNotFoundError(f"unknown run {shown!r}; runs: {names}")

    def open(self, run_id: str) -> Run:
        return self._open(self.resolve(run_id))

    def _open(self, path: Path) -> Run:
        stat = path.stat()
        key = (stat.st_mtime, stat.st_size)
        with self._lock:
            hit = self._runs.get(path)
            if hit is not None and hit[0] == key:
                self._runs.move_to_end(path)
                return hit[1]
        run = open_run(path)  # outside the lock: a big JSONL's index is one streaming pass
        with self._lock:
            self._runs[path] = (key, run)
            while len(self._runs) > _MAX_CACHED_RUNS:
                self._runs.popitem(last=False)
        return run

    @staticmethod
    def _info(name: str, run: Run) -> RunInfo:
        steps = run.steps
        return RunInfo(
            id=name,
            format=run.format,
            logged=uses_log(run),
            num_steps=len(steps),
            first_step=steps[0],
            last_step=steps[-1],
        )

    # --- a run's steps ---

    def overview(self, run_id: str) -> RunOverviewResponse:
        """Model-free numbers of (up to ``run_overview_steps``) steps and the reports known."""
        run = self.open(run_id)
        steps = run.steps
        shown = _evenly(steps, self.settings.run_overview_steps)
        overview, reports = [], []
        for step in run.iter_steps(shown):
            overview.append(StepOverviewOut.model_validate(step_overview(step).to_dict()))
            if uses_log(run):
                reports.append(_report_out(logged_step_report(step)))
        if not uses_log(run):
            with self._lock:
                known = {k[1]: r for k, r in self._reports.items() if k[0] == run.path}
            reports = [_report_out(known[s]) for s in sorted(known)]
        return RunOverviewResponse(
            run=self._info(run_id, run), steps=steps, overview=overview, reports=reports
        )

    async def step_view(self, run_id: str, step: int, options: StepOptions) -> RunStepResponse:
        """One step's groups and report; an analysis runs under the job limiter."""
        run = self.open(run_id)
        options.config().validate()
        return await self.jobs.run(lambda: self._step_view(run_id, run, step, options))

    def step_view_blocking(self, run_id: str, step: int, options: StepOptions) -> RunStepResponse:
        run = self.open(run_id)
        options.config().validate()
        return self.jobs.run_blocking(lambda: self._step_view(run_id, run, step, options))

    def _step_view(
        self, run_id: str, run: Run, number: int, options: StepOptions
    ) -> RunStepResponse:
        step = run.step(number)
        steps = run.steps
        i = steps.index(number)
        lm = self.models.get(options.model)
        head: dict[str, Any] = dict(
            run=run_id,
            step=number,
            format=run.format,
            previous=steps[i - 1] if i > 0 else None,
            next=steps[i + 1] if i + 1 < len(steps) else None,
        )
        if uses_log(run):
            report = logged_step_report(step)
            return RunStepResponse(
                **head, mode="logged", report=_report_out(report), logged=_logged(step, lm)
            )
        self._check_step_size(step)
        config = options.config()
        groups = [group_input(g, options.reward_kind) for g in step.groups]
        check_token_limits(self.settings, lm, PreparedAnalysis(None, None, groups, config))
        report, result = analyze_step(lm, step, config, options.reward_kind)
        with self._lock:
            self._reports[(run.path, number, options)] = report
            while len(self._reports) > _MAX_CACHED_REPORTS:
                self._reports.popitem(last=False)
        body = analysis_response(result)
        return RunStepResponse(**head, mode="analysis", report=_report_out(report), analysis=body)

    def _check_step_size(self, step: RunStep) -> None:
        limit = self.settings.run_max_step_answers
        if step.num_answers > limit:
            raise LimitExceededError(
                f"step {step.step} has {step.num_answers} answers, over the limit of {limit} "
                "for on-demand analysis (GMTS_RUN_MAX_STEP_ANSWERS); analyse it with "
                "`gmts analyze-run`"
            )


def _evenly(steps: list[int], n: int) -> list[int]:
    if len(steps) <= n:
        return steps
    return [steps[round(i * (len(steps) - 1) / (n - 1))] for i in range(n)] if n > 1 else steps[:1]


def _report_out(report: StepReport) -> StepReportOut:
    return StepReportOut.model_validate(report.to_dict())


_LOGGED_FLAGS = {"applied": "selected", "entropy": "selected_entropy", "gmts": "selected_gmts"}


def _logged(step: RunStep, lm: Any) -> list[LoggedGroup]:
    """The trainer log's groups with token texts from ``lm``'s tokenizer."""
    groups = []
    for gi, g in enumerate(step.groups):
        answers = []
        for ai, ids in enumerate(g.token_ids or []):
            col = {c: v[ai] for c, v in g.token_columns.items()}
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
