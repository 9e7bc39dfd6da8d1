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
from collections.abc import Iterator
from contextlib import contextmanager
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
    RunInfo,
    RunOverviewResponse,
    RunsResponse,
    RunStepResponse,
    StepOverviewOut,
    StepReportOut,
    TrainerMetricsOut,
)
from app.services.analysis import PreparedAnalysis, check_token_limits
from app.services.errors import Cancelled, RunNotFoundError
from app.services.jobs import JobLimiter
from app.services.model_registry import ModelRegistry
from app.services.responses import analysis_response
from app.services.run_index import RunIndex
from gmts_core.config import DEFAULT_METHODS, AnalysisConfig
from gmts_core.errors import GMTSError, LimitExceededError
from gmts_core.knobs import knob_default
from gmts_core.runs import NotARunError, Run, list_formats
from gmts_core.runs.analysis import (
    StepReport,
    analyze_step,
    group_input,
    logged_differences,
    logged_step_report,
    step_overview,
)
from gmts_core.runs.base import RunFormatError, RunStep
from gmts_core.runs.report import uses_log
from gmts_core.runs.worker import ReaderPool, WorkerLimits
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
    ratio: float = knob_default(AnalysisConfig, "ratio")
    scope: str = knob_default(AnalysisConfig, "scope")
    methods: tuple[str, ...] = DEFAULT_METHODS
    reward_kind: str | None = None

    def config(self) -> AnalysisConfig:
        return AnalysisConfig(ratio=self.ratio, scope=self.scope, methods=self.methods)


def safe_text(text: str) -> str:
    """``text`` as valid UTF-8: bytes a file name could not decode (surrogate escapes) shown
    as ``\\xff``; any other lone surrogate as ``\\udcxx``."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        pass
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


class RunService:
    """The runs under ``settings.run_roots``: listing, overviews and step views."""

    def __init__(self, settings: Settings, models: ModelRegistry, jobs: JobLimiter) -> None:
        self.settings = settings
        self.models = models
        self.jobs = jobs
        self.limits = settings.run_limits
        # absolute: the run files are read in worker processes that start in "/", where a
        # relative root (GMTS_RUN_ROOTS=outputs) would name another folder
        self.roots = [Path(r).expanduser().absolute() for r in settings.run_roots]
        self._lock = threading.Lock()
        self._runs: OrderedDict[Path, tuple[tuple[float, int], Run | GMTSError]] = OrderedDict()
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
        self._index = RunIndex(
            self._index_entry, self._index_failed, max_entries=4 * settings.run_max_folder_entries
        )
        prefixes = {str(p) for r in self.roots for p in (r, r.absolute(), r.resolve())}
        self._prefixes = sorted(prefixes, key=len, reverse=True)  # the longest match first

    # --- paths relative to the run root ---

    def relative(self, text: str) -> str:
        """``text`` with every run root's path taken out (``<root>/run/x`` -> ``run/x``)."""
        for prefix in self._prefixes:
            text = text.replace(prefix + os.sep, "")
        for prefix in self._prefixes:
            text = text.replace(prefix, "<run root>")
        return safe_text(text)

    @contextmanager
    def _relative_errors(self) -> Iterator[None]:
        """Errors leave this service with paths relative to the run root."""
        try:
            yield
        except GMTSError as exc:
            exc.args = tuple(self.relative(a) if isinstance(a, str) else a for a in exc.args)
            raise

    # --- finding runs ---

    def list_runs(self) -> RunsResponse:
        """Every entry of the run roots that is (or looks like) a run, from the background
        index (:class:`~app.services.run_index.RunIndex`): never reads a run itself. One
        that cannot be opened is listed with ``readable: false`` and the reason; one not
        indexed yet (after waiting ``run_list_wait_s``) with ``state: indexing``."""
        with self._relative_errors():
            ignored, truncated = 0, False
            seen: set[str] = set()
            rows: list[tuple[str, Path, tuple[int, int] | None, RunInfo | None]] = []
            for root in self.roots:
                entries, cut = self._root_entries(root)
                truncated |= cut
                for name, path in entries:
                    if name in seen:
                        continue
                    seen.add(name)
                    rows.append(self._listed(name, path))
            pending = [path for _, path, key, row in rows if key is not None and row is None]
            if pending:
                self._index.wait(pending, self.settings.run_list_wait_s)
            runs: list[RunInfo] = []
            for name, path, key, row in rows:
                if key is not None and row is None:
                    known, row = self._index.lookup(path, key)
                    if not known:
                        row = _indexing(safe_text(name))
                if row is None:
                    ignored += 1
                else:
                    runs.append(row)
            return RunsResponse(
                runs=runs, formats=list_formats(), ignored=ignored, truncated=truncated
            )

    def _listed(
        self, name: str, path: Path
    ) -> tuple[str, Path, tuple[int, int] | None, RunInfo | None]:
        """(name, path, key, row) of one root entry: a row at once when the name alone says
        it cannot be opened or the index knows it; else its key, and the row None (queued)."""
        shown = safe_text(name)
        if shown != name:
            reason = "the name is not valid UTF-8 (shown with \\x escapes); rename it to open it"
            return name, path, None, _unreadable(shown, reason)
        if any(c in name for c in _FORBIDDEN):
            return (
                name,
                path,
                None,
                _unreadable(shown, "the name holds a character run ids may not contain"),
            )
        try:
            stat = path.stat()
        except OSError as exc:  # a broken link, a file removed meanwhile, a link loop
            return name, path, None, _unreadable(shown, f"cannot be read ({exc.strerror or exc})")
        key = (stat.st_size, stat.st_mtime_ns)
        known, row = self._index.lookup(path, key)
        return name, path, None if known else key, row

    def _root_entries(self, root: Path) -> tuple[list[tuple[str, Path]], bool]:
        """The first ``max_folder_entries`` entries of ``root`` inside it, by name; and
        whether the root held more."""
        if not root.is_dir():
            return [], False
        cap, truncated = self.limits.max_folder_entries, False
        found: list[tuple[str, Path]] = []
        with os.scandir(root) as it:
            for entry in it:
                if len(found) >= cap:
                    truncated = True
                    break
                found.append((entry.name, Path(entry.path)))
        found.sort(key=lambda e: os.fsencode(e[0]))
        if truncated:
            logger.warning("%s holds more than %d entries; listing %d", root, cap, cap)
        return [(n, p) for n, p in found if self._inside(root, p)], truncated

    def _index_entry(self, path: Path) -> RunInfo | None:
        """The listing row of the run at ``path`` (on the index's thread): None when it is
        no run; a row saying why when it cannot be opened."""
        name = path.name
        try:
            return self._info(name, self._open(path))
        except Cancelled:
            raise
        except NotARunError as exc:
            if path.suffix.lower() == ".jsonl":  # meant as a run: say why it is not one
                return _unreadable(name, self.relative(str(exc)))
            return None
        except (GMTSError, OSError) as exc:
            return _unreadable(name, self.relative(str(exc)))

    def _index_failed(self, path: Path, exc: Exception) -> RunInfo:
        return _unreadable(path.name, f"cannot be read (an internal error: {type(exc).__name__})")

    @staticmethod
    def _inside(root: Path, child: Path) -> bool:
        try:
            return child.resolve().parent == root.resolve()  # no symlink out of the root
        except (OSError, RuntimeError):  # a symlink loop
            return False

    def resolve(self, run_id: str) -> Path:
        """The path of run ``run_id``; RunNotFoundError (listing the runs) otherwise."""
        bad = not run_id or len(run_id) > 256 or run_id in (".", "..")
        if not bad and not any(c in run_id for c in _FORBIDDEN):
            for root in self.roots:
                child = root / run_id
                if child.exists() and self._inside(root, child):
                    return child
        listed = [safe_text(n) for root in self.roots for n, _ in self._root_entries(root)[0]]
        names = ", ".join(listed[:50]) or "none (set GMTS_RUN_ROOTS)"
        shown = safe_text(run_id if len(run_id) <= 80 else run_id[:77] + "...")
        raise RunNotFoundError(f"unknown run {shown!r}; runs: {names}")

    def open(self, run_id: str) -> Run:
        with self._relative_errors():
            return self._open(self.resolve(run_id))

    def _open(self, path: Path) -> Run:
        """The run at ``path`` (cached while its size and time stay the same; so is the
        reason it cannot be opened)."""
        stat = path.stat()
        key = (stat.st_mtime, stat.st_size)
        with self._lock:
            hit = self._runs.get(path)
        if hit is None or hit[0] != key:
            # every file of the run is opened inside the run root (no link leads out of it)
            limits = replace(self.limits, root=os.path.realpath(path.parent))
            try:  # outside the lock, in a reading process: a big JSONL's index is one pass
                value: Run | GMTSError = self.readers.open_run(path, limits)
            except Cancelled:
                raise
            except GMTSError as exc:
                value = exc
            except OSError as exc:  # unreadable (permissions, a file removed meanwhile...)
                value = RunFormatError(path, None, f"cannot be read ({exc.strerror or exc})")
            with self._lock:
                self._runs[path] = (key, value)
                while len(self._runs) > _MAX_CACHED_RUNS:
                    self._runs.popitem(last=False)
        else:
            value = hit[1]
            with self._lock:
                if path in self._runs:
                    self._runs.move_to_end(path)
        if isinstance(value, GMTSError):
            raise value
        return value

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
        with self._relative_errors():
            run = self.open(run_id)
            steps = run.steps
            shown = evenly(steps, self.settings.run_overview_steps)
            overview, reports = [], []
            for step in run.iter_steps(shown):
                overview.append(StepOverviewOut.model_validate(step_overview(step).to_dict()))
                if uses_log(run):
                    reports.append(self._report_out(logged_step_report(step)))
            if not uses_log(run):
                with self._lock:
                    known = {k[1]: r for k, r in self._reports.items() if k[0] == run.path}
                reports = [self._report_out(known[s]) for s in sorted(known)]
            metrics, error = self._trainer_metrics(run)
            return RunOverviewResponse(
                run=self._info(run_id, run),
                steps=steps,
                overview=overview,
                reports=reports,
                trainer_metrics=metrics,
                trainer_metrics_error=error,
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
            while len(self._trainer_logs) > _MAX_CACHED_RUNS:
                self._trainer_logs.popitem(last=False)
        return body, None

    async def overview_queued(self, run_id: str) -> RunOverviewResponse:
        """:meth:`overview` in the job line, for the route: overviews read up to
        ``run_overview_steps`` steps, so they wait their turn instead of stacking up (an
        unknown run answers at once)."""
        with self._relative_errors():
            await anyio.to_thread.run_sync(self.resolve, run_id)
        return await self.jobs.run(lambda: self.overview(run_id))

    def step_view(self, run_id: str, step: int, options: StepOptions) -> RunStepResponse:
        """One step's groups and report: the options checked, the run read, the step as logged
        or analysed on demand. Blocking and heavy: the route runs it in the job line
        (:meth:`step_view_queued`), the UI's local backend inside ``jobs.run_blocking``."""
        with self._relative_errors():
            options.config().validate()
            return self._step_view(run_id, self.open(run_id), step, options)

    async def step_view_queued(
        self, run_id: str, step: int, options: StepOptions
    ) -> RunStepResponse:
        """:meth:`step_view` in the job line, for the route: bad options and an unknown run
        (a 404 listing the root's names) answer at once, off the event loop."""
        with self._relative_errors():
            options.config().validate()
            await anyio.to_thread.run_sync(self.resolve, run_id)
        return await self.jobs.run(lambda: self.step_view(run_id, step, options))

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
        report, result = self.analyse(run, step, options, lm)
        body = analysis_response(result)
        return RunStepResponse(
            **head, mode="analysis", report=self._report_out(report), analysis=body
        )

    def analyse(
        self, run: Run, step: RunStep, options: StepOptions, lm: Any = None
    ) -> tuple[StepReport, Any]:
        """Analyse one step of ``run`` (sizes checked first, before tokenizing); the report
        is remembered for the run's charts."""
        self._check_step_size(step)
        lm = lm or self.models.get(options.model)
        config = options.config()
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


def _indexing(name: str) -> RunInfo:
    reason = "being indexed in the background; list the runs again in a moment"
    return _unreadable(name, reason, state="indexing")


def _unreadable(name: str, reason: str, state: str = "unreadable") -> RunInfo:
    return RunInfo(
        id=name,
        readable=False,
        state=state,
        reason=reason,
        format=None,
        logged=False,
        num_steps=None,
        first_step=None,
        last_step=None,
    )


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
            outside = next((t for t in ids if not 0 <= t < vocabulary), None)
            if outside is not None:
                raise RunFormatError(
                    g.source,
                    None,
                    f"answer {ai}: token id {outside} is not in the vocabulary of the model's "
                    f"tokenizer ({vocabulary} tokens): a log of another model?",
                )
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
