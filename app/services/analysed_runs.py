"""Analysed runs: ``gmts analyze-run -o`` folders under the run roots, queried with DuckDB.

One path for the API routes and the Runs tab. A dataset's bytes are untrusted, so this process
never opens one: a reading process (:mod:`gmts_core.runs.worker`) answers each query under
hard limits (memory and CPU: ``GMTS_RUN_WORKER_*``; wall time:
``GMTS_ANALYSED_QUERY_TIMEOUT_S``, killed past it or when the client goes away). Two lanes of
``GMTS_ANALYSED_MAX_CONCURRENT`` processes each, a step's views and run-wide rankings, so a
step view never waits behind a run-wide search (at niceness +10, it yields the CPU to them); a
query waits at most ``GMTS_ANALYSED_QUEUE_WAIT_S`` for its lane (else 429). Listing answers
from a background index (:class:`~app.services.run_index.RunIndex`) keyed by the manifest's
and the steps folder's (inode, size, mtime); step summaries are cached per file.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

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
from app.services.analysed_folders import (
    bad_name,
    clear_stale,
    dataset_key,
    spill_dir,
    unreadable,
)
from app.services.analysed_rows import (
    answer_row,
    finite,
    method_names,
    models,
    run_info,
    step_row,
    token_row,
)
from app.services.errors import QueueFullError, RunNotFoundError
from app.services.run_index import RunIndex
from app.services.run_roots import safe_text
from app.services.runs import RunService
from gmts_core.errors import GMTSError
from gmts_core.run_dataset import ANSWER_ORDERS, TOP_ORDERS, QueryLimits
from gmts_core.run_dataset.query import MAX_PAGE
from gmts_core.run_dataset.schema import compared_pair as compared_pair  # the UI's
from gmts_core.runs.worker import ReaderPool, WorkerLimits

ANSWER_ORDER_NAMES = tuple(ANSWER_ORDERS)
TOKEN_ORDER_NAMES = tuple(TOP_ORDERS)
__all__ = ["ANSWER_ORDER_NAMES", "MAX_PAGE", "TOKEN_ORDER_NAMES", "AnalysedRunService"]

logger = logging.getLogger(__name__)

REPLY_SLACK_BYTES = 1 << 20
Summaries = dict[str, tuple[list[int], dict[str, Any]]]  # step file -> (stat key, summary)


class AnalysedRunService:
    def __init__(self, settings: Settings, runs: RunService) -> None:
        self.runs = runs
        self.settings = settings
        self._spill = spill_dir()
        clear_stale(self._spill)
        self.limits = QueryLimits(
            threads=settings.analysed_query_threads,
            memory_limit_mb=settings.analysed_query_memory_mb,
            temp_dir=str(self._spill),
            max_cell_chars=settings.analysed_max_cell_chars,
        )
        workers = WorkerLimits(
            memory_mb=settings.run_worker_memory_mb,
            cpu_s=settings.run_worker_cpu_s,
            wall_s=settings.analysed_query_timeout_s,
            open_files=settings.analysed_worker_open_files,
            preload=("gmts_core.run_dataset.requests:warm",),
        )
        size = settings.analysed_max_concurrent
        run = replace(workers, nice=10)  # lanes: step views never wait; run-wide work yields CPU
        self._lanes = {"step": ReaderPool(size, workers), "run": ReaderPool(size, run)}
        self._slots = {lane: threading.BoundedSemaphore(size) for lane in self._lanes}
        self._lock = threading.Lock()
        self._summaries: dict[Path, Summaries] = {}
        # each dataset's last answer, by its key (dataset_key): a poll of an unchanged run
        self._seen: dict[Path, tuple[tuple[int, ...], Any]] = {}
        self._index: RunIndex[AnalysedRunInfo] = RunIndex(
            self._index_entry, self._index_failed, max_entries=4 * settings.run_max_folder_entries
        )
        self._run_lane_started = False

    def close(self) -> None:
        for pool in self._lanes.values():
            pool.close()
        clear_stale(self._spill)

    # -- finding runs -----------------------------------------------------------------------
    def _folders(self) -> Iterator[tuple[str, Path, tuple[int, ...]]]:
        """(name, path, key) of each dataset folder in the roots: at most
        GMTS_RUN_MAX_FOLDER_ENTRIES entries a root, names usable as run ids, never a link."""
        cap = self.settings.run_max_folder_entries
        seen: set[str] = set()
        for root in self.runs.roots:
            try:
                with os.scandir(root) as it:
                    entries = []
                    for i, entry in enumerate(it):
                        if i >= cap:
                            logger.warning("%s: more than %d entries; listing %d", root, cap, cap)
                            break
                        entries.append((entry.name, entry.path))
            except OSError:
                continue
            for name, path in sorted(entries):
                if name in seen or bad_name(name):
                    continue
                key = dataset_key(Path(path))
                if key is not None:
                    seen.add(name)
                    yield name, Path(path), key

    def list_runs(self, wait: bool = True) -> AnalysedRunsResponse:
        """Every analysed run in the roots, from the background index: one that cannot be
        read is a row with ``readable: false`` and its reason; one being read for the first
        time (after waiting GMTS_RUN_LIST_WAIT_S, or not at all with ``wait=False``) a row
        with ``state: indexing``."""
        found = list(self._folders())
        pending = [path for _, path, key in found if not self._index.lookup(path, key)[0]]
        if pending and wait:
            self._index.wait(pending, self.settings.run_list_wait_s)
        rows = []
        for name, path, key in found:
            known, row = self._index.lookup(path, key)
            if not known or row is None:
                row = AnalysedRunInfo(id=safe_text(name), state="indexing")
            rows.append(row)
        return AnalysedRunsResponse(runs=rows)

    def _index_entry(self, path: Path) -> AnalysedRunInfo:
        try:
            return run_info(path.name, self._refresh(path, "step"))
        except GMTSError as exc:
            return unreadable(path.name, self.runs.relative(str(exc)))

    def _index_failed(self, path: Path, exc: Exception) -> AnalysedRunInfo:
        return unreadable(path.name, f"cannot be read (an internal error: {type(exc).__name__})")

    def _path(self, run_id: str) -> Path:
        """The dataset folder of ``run_id``: an entry of a run root (not a link), holding a
        manifest and a steps folder; RunNotFoundError otherwise."""
        if not bad_name(run_id):
            for root in self.runs.roots:
                path = root / run_id
                if dataset_key(path) is not None:
                    return path
        shown = safe_text(run_id if len(run_id) <= 80 else run_id[:77] + "...")
        raise RunNotFoundError(
            f"{shown!r} is not an analysed run (a `gmts analyze-run -o` folder in a run root)"
        )

    # -- queries in the reading processes ---------------------------------------------------
    @contextmanager
    def _slot(self, lane: str) -> Iterator[None]:
        if not self._slots[lane].acquire(timeout=self.settings.analysed_queue_wait_s):
            raise QueueFullError("analysed-run queries are busy; retry shortly", 2)
        try:
            yield
        finally:
            self._slots[lane].release()

    def _ask(
        self, path: Path, query: str, params: dict[str, Any], lane: str, rows: int = 0
    ) -> dict[str, Any]:
        """Query ``query`` of the dataset at ``path`` in a reading process of ``lane``."""
        request = {
            "op": "analysed",
            "root": str(path.parent),
            "name": path.name,
            "query": query,
            "params": params,
            "query_limits": asdict(self.limits),
        }
        # a page's rows, each with at most two cut string cells (4 bytes a character)
        cap = REPLY_SLACK_BYTES + rows * (8 * self.limits.max_cell_chars + 4096)
        if query == "info":
            cap = REPLY_SLACK_BYTES + 4096 * (1 + self.settings.run_max_run_steps)
        with self._slot(lane), self.runs.run_roots.relative_errors():
            return self._lanes[lane].call(request, cap, path.name)

    def _refresh(self, path: Path, lane: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """(manifest and skipped steps, summaries by step) of the dataset at ``path``, reading
        only the step files that changed since the last call; nothing at all while the
        manifest and the steps folder are unchanged (a poll of an idle run costs 3 stats)."""
        self._start_run_lane()
        key = dataset_key(path)
        with self._lock:
            seen = self._seen.get(path)
            if seen is not None and key is not None and seen[0] == key:
                return seen[1]
            cached = dict(self._summaries.get(path, {}))
        known = {name: key for name, (key, _) in cached.items()}
        reply = self._ask(path, "info", {"known": known}, lane)
        merged: Summaries = {}
        for name in reply["names"]:
            if name in reply["changed"]:
                key, row = reply["changed"][name]
                merged[name] = (key, row)
            elif name in cached and name not in reply["skipped"]:
                merged[name] = cached[name]
        with self._lock:
            self._summaries[path] = merged
            while len(self._summaries) > 4 * self.settings.run_max_folder_entries:
                self._summaries.pop(next(iter(self._summaries)))
        rows = sorted((row for _, row in merged.values()), key=lambda r: r["step"])
        if key is not None and not reply["skipped"]:  # a skipped file is tried again
            with self._lock:
                self._seen[path] = (key, (reply, rows))
                while len(self._seen) > 4 * self.settings.run_max_folder_entries:
                    self._seen.pop(next(iter(self._seen)))
        return reply, rows

    def _start_run_lane(self) -> None:
        """The first time a dataset is read (a listing, a run opened): the run-wide lane's
        first reading process starts in the background, so the first ranking or search does
        not wait for one (and the server's own start does not share the CPU with it)."""
        with self._lock:
            if self._run_lane_started:
                return
            self._run_lane_started = True
        self._lanes["run"].prestart()

    # -- answers ----------------------------------------------------------------------------
    def run(self, run_id: str) -> AnalysedRunInfo:
        """The run's row alone: what a poll compares (an unchanged run: three stats)."""
        return run_info(run_id, self._refresh(self._path(run_id), "step"))

    def steps(self, run_id: str) -> AnalysedStepsResponse:
        path = self._path(run_id)
        found = self._refresh(path, "step")
        methods = tuple(found[0]["methods"])
        return AnalysedStepsResponse(
            run=run_info(run_id, found),
            steps=models(StepSummaryOut, [step_row(r, methods) for r in found[1]], run_id),
        )

    def groups(self, run_id: str, step: int, offset: int, limit: int) -> GroupsResponse:
        path = self._path(run_id)
        params = {"step": step, "offset": offset, "limit": limit}
        rows = self._ask(path, "groups", params, "step", limit)["rows"]
        total = self._num_groups(path, step)
        return GroupsResponse(
            page=PageOut(offset=offset, limit=limit, total=total),
            groups=models(GroupRowOut, [finite(r) for r in rows], run_id),
        )

    def _num_groups(self, path: Path, step: int) -> int | None:
        with self._lock:
            summaries = self._summaries.get(path, {})
            row = next((r for _, r in summaries.values() if r["step"] == step), None)
        return None if row is None else int(row["num_groups"])

    def group_answers(self, run_id: str, step: int, group: int) -> AnswersResponse:
        path = self._path(run_id)
        reply = self._ask(path, "answers", {"step": step, "group": group}, "step", 4 * MAX_PAGE)
        rows = reply["rows"]
        methods = method_names(rows, "selected_count_")
        return AnswersResponse(
            page=PageOut(offset=0, limit=max(len(rows), 1), total=len(rows)),
            answers=models(AnswerRowOut, [answer_row(r, methods) for r in rows], run_id),
        )

    def answer_tokens(
        self, run_id: str, step: int, group: int, answer: int, offset: int, limit: int
    ) -> TokensResponse:
        path = self._path(run_id)
        params = {"step": step, "group": group, "answer": answer, "offset": offset, "limit": limit}
        reply = self._ask(path, "tokens", params, "step", limit)
        rows = reply["rows"]
        methods = method_names(rows, "selected_")
        return TokensResponse(
            page=PageOut(offset=offset, limit=limit, total=reply.get("total")),
            tokens=models(TokenRowOut, [token_row(r, methods) for r in rows], run_id),
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
        pair: tuple[str, str] | None = None,
    ) -> AnswersResponse:
        path = self._path(run_id)
        params = {
            "pair": list(pair) if pair else None,
            "by": by,
            "descending": bool(descending),
            "offset": offset,
            "limit": limit,
            "contains": contains,
            "zero_signal": zero_signal,
            "steps": list(steps) if steps is not None else None,
        }
        reply = self._ask(path, "rank_answers", params, "run", limit)
        return AnswersResponse(
            page=PageOut(offset=offset, limit=limit, total=reply["total"]),
            answers=models(AnswerRowOut, [answer_row(r, ()) for r in reply["rows"]], run_id),
        )

    def rank_tokens(
        self, run_id: str, by: str, offset: int, limit: int, steps: tuple[int, int] | None
    ) -> TokensResponse:
        path = self._path(run_id)
        params = {
            "by": by,
            "offset": offset,
            "limit": limit,
            "steps": list(steps) if steps is not None else None,
        }
        rows = self._ask(path, "rank_tokens", params, "run", limit)["rows"]
        methods = method_names(rows, "selected_")
        return TokensResponse(
            page=PageOut(offset=offset, limit=limit),
            tokens=models(TokenRowOut, [token_row(r, methods) for r in rows], run_id),
        )

    def zero_signal_groups(
        self, run_id: str, offset: int, limit: int, steps: tuple[int, int] | None
    ) -> ZeroSignalResponse:
        path = self._path(run_id)
        span = list(steps) if steps is not None else None
        params = {"offset": offset, "limit": limit, "steps": span}
        rows = self._ask(path, "zero_signal", params, "run", limit)["rows"]
        return ZeroSignalResponse(
            page=PageOut(offset=offset, limit=limit),
            groups=models(ZeroSignalGroupOut, [finite(r) for r in rows], run_id),
        )


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
        tuple(str(p["pair"]).split(",", 1)) if p.get("pair") else None,  # type: ignore[arg-type]
    )


Query = Callable[[AnalysedRunService, str, dict[str, Any]], Any]
# the UI's backend asks by name; each entry calls the method its route calls
QUERIES: dict[str, Query] = {
    "list": lambda s, _run, p: s.list_runs(wait=bool(p.get("wait", True))),
    "run": lambda s, run, _p: s.run(run),
    "steps": lambda s, run, _p: s.steps(run),
    "groups": lambda s, run, p: s.groups(
        run, int(p["step"]), int(p.get("offset", 0)), int(p.get("limit", 50))
    ),
    "answers": lambda s, run, p: s.group_answers(run, int(p["step"]), int(p["group"])),
    "tokens": lambda s, run, p: s.answer_tokens(
        run,
        int(p["step"]),
        int(p["group"]),
        int(p["answer"]),
        int(p.get("offset", 0)),
        int(p.get("limit", MAX_PAGE)),
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
