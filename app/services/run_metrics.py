"""A run's metrics over steps (reward, coverage, overlap, wasted share), computed lazily in the
background so the Runs tab can chart them as soon as a run opens.

The first ask for a run (with given analysis options) starts one background thread that
analyses up to ``GMTS_RUN_METRICS_STEPS`` evenly spaced steps, one heavy job per step in the
job limiter's queue (so people's own requests interleave with it); every later ask returns the
rows done so far and the progress. Rows are cached: per run and options in memory, at most
``GMTS_RUN_METRICS_RUNS`` runs (the least recently asked is dropped and its thread stopped),
and each step row also in :class:`~app.services.runs.RunService`'s report cache, which the
step view fills too. A thread nobody asked about for ``GMTS_RUN_METRICS_IDLE_S`` seconds
stops at its next step (the page was closed), and a changed run file starts afresh.
A trainer log needs no model: its rows are the logged numbers.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from app.schemas.runs import RunMetricsResponse
from app.services.jobs import wait_in_queue
from app.services.runs import RunService, StepOptions, evenly
from gmts_core.errors import GMTSError
from gmts_core.progress import Cancelled, CancelToken
from gmts_core.runs import Run
from gmts_core.runs.analysis import StepReport, logged_step_report
from gmts_core.runs.report import uses_log

logger = logging.getLogger(__name__)


@dataclass
class _Progress:
    run_id: str
    run: Run
    steps: list[int]
    options: StepOptions
    last_asked: float
    token: CancelToken = field(default_factory=CancelToken)
    reports: dict[int, StepReport] = field(default_factory=dict)
    error: str | None = None
    running: bool = True
    thread: threading.Thread | None = None


class RunMetrics:
    """Background per-step analyses of runs, one thread per (run, options), bounded."""

    def __init__(self, runs: RunService, clock: Callable[[], float] = time.monotonic) -> None:
        self.runs = runs
        self.settings = runs.settings
        self._clock = clock
        self._lock = threading.Lock()
        self._jobs: OrderedDict[tuple[Any, ...], _Progress] = OrderedDict()

    def get(self, run_id: str, options: StepOptions) -> RunMetricsResponse:
        """The rows done so far for ``run_id``; starts the background analysis if needed."""
        run = self.runs.open(run_id)
        options.config().validate()
        key = (run.path, id(run), options)  # a changed file reopens as a new Run
        with self._lock:
            prog = self._jobs.get(key)
            if prog is None:
                steps = evenly(run.steps, self.settings.run_metrics_steps)
                prog = _Progress(run_id, run, steps, options, self._clock())
                self._jobs[key] = prog
                self._start(prog)
                while len(self._jobs) > self.settings.run_metrics_runs:
                    _, old = self._jobs.popitem(last=False)
                    old.token.cancel("dropped from the metrics cache")
            self._jobs.move_to_end(key)
            prog.last_asked = self._clock()
            done = dict(prog.reports)
            return RunMetricsResponse(
                run=run_id,
                steps_total=len(prog.steps),
                steps_done=len(done),
                running=prog.running,
                error=prog.error,
                reports=[self.runs.report_out(done[s]) for s in sorted(done)],
            )

    def _start(self, prog: _Progress) -> None:
        prog.thread = threading.Thread(
            target=self._work, args=(prog,), name=f"run-metrics {prog.run_id}", daemon=True
        )
        prog.thread.start()

    def wait(self, timeout_s: float | None = None) -> bool:
        """Wait for every background analysis to end (tests, shutdown); False on timeout."""
        with self._lock:
            threads = [p.thread for p in self._jobs.values() if p.thread is not None]
        for thread in threads:
            thread.join(timeout_s)
        return not any(t.is_alive() for t in threads)

    def _work(self, prog: _Progress) -> None:
        try:
            with wait_in_queue(self.settings.ui_queue_wait_s):
                for number in prog.steps:
                    if self._clock() - prog.last_asked > self.settings.run_metrics_idle_s:
                        prog.error = "stopped: nobody looked at this run's metrics for a while"
                        return
                    prog.token.raise_if_cancelled()
                    try:
                        report = self._report(prog, number)
                    except Cancelled:
                        raise
                    except GMTSError as exc:  # one bad step: say so, chart the others
                        prog.error = prog.error or self.runs.relative(str(exc))
                        continue
                    with self._lock:
                        prog.reports[number] = report
        except Cancelled as exc:
            prog.error = f"stopped: {exc.reason}"
        except Exception:  # a bug must not kill the thread silently
            logger.exception("run metrics of %s failed", prog.run_id)
            prog.error = "stopped: an internal error (see the server log)"
        finally:
            prog.running = False

    def _report(self, prog: _Progress, number: int) -> StepReport:
        known = self.runs.known_report(prog.run, number, prog.options)
        if known is not None:
            return known

        def job() -> StepReport:
            step = prog.run.step(number)
            if uses_log(prog.run):
                return logged_step_report(step)
            return self.runs.analyse(prog.run, step, prog.options)[0]

        return self.runs.jobs.run_blocking(job, prog.token)
