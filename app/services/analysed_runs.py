"""Analysed runs: ``gmts analyze-run -o`` folders under the run roots, queried with DuckDB.

One path for the API routes and the Runs tab: find the analysed runs, resolve one by id (with
the run service's own rules: inside a run root, no link out of it), and answer pages and
rankings from its Parquet files (gmts_core.run_dataset) as response models. No model is
loaded. Queries hold one of ``GMTS_ANALYSED_MAX_CONCURRENT`` slots; each is capped by
``GMTS_ANALYSED_QUERY_THREADS`` threads and ``GMTS_ANALYSED_QUERY_MEMORY_MB``.
"""

from __future__ import annotations

import logging
import math
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from app.core.config import Settings
from app.schemas.analysed_runs import (
    AnalysedRunInfo,
    AnalysedRunsResponse,
    AnalysedStepsResponse,
    AnswerRowOut,
    AnswersResponse,
    GroupRowOut,
    GroupsResponse,
    PageOut,
    StepSummaryOut,
    TokenRowOut,
    TokensResponse,
    ZeroSignalGroupOut,
    ZeroSignalResponse,
)
from app.services.errors import QueueFullError, RunNotFoundError
from app.services.runs import RunService
from gmts_core.run_dataset import ANSWER_ORDERS, TOP_ORDERS, AnalysedRun, QueryLimits, is_dataset
from gmts_core.run_dataset.query import MAX_PAGE

ANSWER_ORDER_NAMES = tuple(ANSWER_ORDERS)
TOKEN_ORDER_NAMES = tuple(TOP_ORDERS)
__all__ = ["ANSWER_ORDER_NAMES", "MAX_PAGE", "TOKEN_ORDER_NAMES", "AnalysedRunService"]

logger = logging.getLogger(__name__)

_MAX_OPEN = 8
_SLOT_WAIT_S = 30.0
T = TypeVar("T")


class AnalysedRunService:
    def __init__(self, settings: Settings, runs: RunService) -> None:
        self.runs = runs
        self.limits = QueryLimits(
            threads=settings.analysed_query_threads,
            memory_limit_mb=settings.analysed_query_memory_mb,
        )
        self._slots = threading.BoundedSemaphore(settings.analysed_max_concurrent)
        self._lock = threading.Lock()
        self._open: OrderedDict[Path, AnalysedRun] = OrderedDict()

    # -- finding runs -----------------------------------------------------------------------
    def _folders(self) -> Iterator[tuple[str, Path]]:
        for root in self.runs.roots:
            try:
                with os.scandir(root) as it:
                    entries = sorted((e.name, e) for e in it)
            except OSError:
                continue
            for name, entry in entries:
                try:
                    if entry.is_dir(follow_symlinks=False) and is_dataset(Path(entry.path)):
                        yield name, Path(entry.path)
                except OSError:
                    continue

    def list_runs(self) -> AnalysedRunsResponse:
        rows = []
        for name, _ in self._folders():
            try:
                rows.append(self._info(name, self._run(name)))
            except (RunNotFoundError, ValueError, OSError) as exc:
                logger.info("analysed run %s not listed: %s", name, exc)
        return AnalysedRunsResponse(runs=rows)

    def _run(self, run_id: str) -> AnalysedRun:
        path = self.runs.resolve(run_id)
        if not path.is_dir() or not is_dataset(path):
            raise RunNotFoundError(
                f"{run_id!r} is not an analysed run (a `gmts analyze-run -o` folder)"
            )
        with self._lock:
            run = self._open.get(path)
            if run is not None:
                self._open.move_to_end(path)
                return run
        run = AnalysedRun(path, self.limits)
        with self._lock:
            self._open[path] = run
            while len(self._open) > _MAX_OPEN:
                self._open.popitem(last=False)[1].close()
        return run

    @contextmanager
    def _slot(self) -> Iterator[None]:
        if not self._slots.acquire(timeout=_SLOT_WAIT_S):
            raise QueueFullError("analysed-run queries are busy; retry shortly", 2)
        try:
            yield
        finally:
            self._slots.release()

    def _query(self, run_id: str, fn: Callable[[AnalysedRun], T]) -> T:
        run = self._run(run_id)
        with self._slot():
            return fn(run)

    @staticmethod
    def _info(name: str, run: AnalysedRun) -> AnalysedRunInfo:
        steps = run.steps()
        return AnalysedRunInfo(
            id=name,
            version=run.manifest.version,
            methods=list(run.methods),
            num_steps=len(steps),
            first_step=steps[0]["step"] if steps else None,
            last_step=steps[-1]["step"] if steps else None,
            num_tokens=sum(int(s["num_tokens"]) for s in steps),
        )

    # -- answers ----------------------------------------------------------------------------
    def steps(self, run_id: str) -> AnalysedStepsResponse:
        run = self._run(run_id)
        rows = run.steps()
        return AnalysedStepsResponse(
            run=self._info(run_id, run), steps=[_step(r, run.methods) for r in rows]
        )

    def groups(self, run_id: str, step: int, offset: int, limit: int) -> GroupsResponse:
        rows = self._query(run_id, lambda r: r.step_groups(step, offset, limit))
        return GroupsResponse(
            page=PageOut(offset=offset, limit=limit),
            groups=[GroupRowOut(**_finite(row)) for row in rows],
        )

    def group_answers(self, run_id: str, step: int, group: int) -> AnswersResponse:
        run = self._run(run_id)
        with self._slot():
            rows = run.group_answers(step, group)
        return AnswersResponse(
            page=PageOut(offset=0, limit=len(rows), total=len(rows)),
            answers=[_answer(r, run.methods) for r in rows],
        )

    def answer_tokens(
        self, run_id: str, step: int, group: int, answer: int, offset: int, limit: int
    ) -> TokensResponse:
        run = self._run(run_id)
        with self._slot():
            rows = run.answer_tokens(step, group, answer, offset, limit)
        return TokensResponse(
            page=PageOut(offset=offset, limit=limit),
            tokens=[_token(r, run.methods) for r in rows],
        )

    def rank_answers(
        self,
        run_id: str,
        by: str,
        descending: bool,
        offset: int,
        limit: int,
        contains: str | None,
        zero_signal: bool | None,
        steps: tuple[int, int] | None,
    ) -> AnswersResponse:
        run = self._run(run_id)
        with self._slot():
            rows = run.rank_answers(by, descending, limit, offset, contains, zero_signal, steps)
            total = run.count_answers(contains, zero_signal, steps)
        return AnswersResponse(
            page=PageOut(offset=offset, limit=limit, total=total),
            answers=[_answer(r, ()) for r in rows],
        )

    def rank_tokens(
        self, run_id: str, by: str, offset: int, limit: int, steps: tuple[int, int] | None
    ) -> TokensResponse:
        run = self._run(run_id)
        with self._slot():
            rows = run.rank_tokens(by, limit, offset, steps)
        return TokensResponse(
            page=PageOut(offset=offset, limit=limit),
            tokens=[_token(r, run.methods) for r in rows],
        )

    def zero_signal_groups(
        self, run_id: str, offset: int, limit: int, steps: tuple[int, int] | None
    ) -> ZeroSignalResponse:
        rows = self._query(run_id, lambda r: r.zero_signal_groups(limit, offset, steps))
        return ZeroSignalResponse(
            page=PageOut(offset=offset, limit=limit),
            groups=[ZeroSignalGroupOut(**_finite(row)) for row in rows],
        )


def _finite(row: dict[str, Any]) -> dict[str, Any]:
    """A row with NaN and infinite floats as None (JSON has no NaN)."""
    return {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in row.items()}


def _per_method(row: dict[str, Any], prefix: str, methods: tuple[str, ...]) -> dict[str, Any]:
    return {m: row.pop(f"{prefix}{m}") for m in methods if f"{prefix}{m}" in row}


def _step(row: dict[str, Any], methods: tuple[str, ...]) -> StepSummaryOut:
    row = _finite(row)
    coverage = _per_method(row, "coverage_", methods)
    wasted = _per_method(row, "wasted_", methods)
    return StepSummaryOut(**row, coverage=coverage, wasted=wasted)


def _answer(row: dict[str, Any], methods: tuple[str, ...]) -> AnswerRowOut:
    row = _finite(row)
    counts = _per_method(row, "selected_count_", methods)
    return AnswerRowOut(**row, selected_count=counts or None)


def _token(row: dict[str, Any], methods: tuple[str, ...]) -> TokenRowOut:
    row = _finite(row)
    selected = _per_method(row, "selected_", methods)
    return TokenRowOut(**row, selected=selected)


def _span(params: dict[str, Any]) -> tuple[int, int] | None:
    first, last = params.get("step_from"), params.get("step_to")
    if first is None and last is None:
        return None
    return (int(first or 0), int(last) if last is not None else 2**31 - 1)


def _rank_answers(service: AnalysedRunService, run_id: str, p: dict[str, Any]) -> Any:
    zero = p.get("zero_signal")
    return service.rank_answers(
        run_id,
        str(p.get("by", "reward")),
        bool(p.get("descending", True)),
        int(p.get("offset", 0)),
        int(p.get("limit", 50)),
        p.get("contains") or None,
        None if zero is None else bool(zero),
        _span(p),
    )


Query = Callable[[AnalysedRunService, str, dict[str, Any]], Any]
# the UI's backend asks by name; each entry calls the method its route calls
QUERIES: dict[str, Query] = {
    "list": lambda s, _run, _p: s.list_runs(),
    "steps": lambda s, run, _p: s.steps(run),
    "groups": lambda s, run, p: s.groups(
        run, int(p["step"]), int(p.get("offset", 0)), int(p.get("limit", 50))
    ),
    "answers": lambda s, run, p: s.group_answers(run, int(p["step"]), int(p["group"])),
    "tokens": lambda s, run, p: s.answer_tokens(
        run, int(p["step"]), int(p["group"]), int(p["answer"]), 0, MAX_PAGE
    ),
    "rank_answers": _rank_answers,
    "rank_tokens": lambda s, run, p: s.rank_tokens(
        run, str(p.get("by", "gamma")), int(p.get("offset", 0)), int(p.get("limit", 50)), _span(p)
    ),
}


def query(service: AnalysedRunService, kind: str, run_id: str, params: dict[str, Any]) -> Any:
    """One query by name (:data:`QUERIES`), as a response model."""
    if kind not in QUERIES:
        raise ValueError(f"unknown analysed-run query {kind!r}; one of {', '.join(QUERIES)}")
    return QUERIES[kind](service, run_id, params)
