"""Analysed runs: ``gmts analyze-run -o`` folders under the run roots, queried with DuckDB.

One path for the API routes and the Runs tab: find the analysed runs, resolve one by id (an
entry's name in a run root, never a path), and answer pages and rankings from its Parquet
files (gmts_core.run_dataset) as response models. No model is loaded.

A dataset's bytes are untrusted, so this process never opens one: every query is answered by
a reading process (:mod:`gmts_core.runs.worker`) under hard limits — address space
(``GMTS_RUN_WORKER_MEMORY_MB``), CPU seconds (``GMTS_RUN_WORKER_CPU_S``) and wall time
(``GMTS_ANALYSED_QUERY_TIMEOUT_S``; the process is killed past it, or when the client goes
away) — which opens the files without following links and gives DuckDB only those. Two lanes,
each of ``GMTS_ANALYSED_MAX_CONCURRENT`` processes: a step's views (groups, answers, tokens,
summaries) and run-wide rankings, so a step view never waits behind a run-wide search; a query
waits at most ``GMTS_ANALYSED_QUEUE_WAIT_S`` for its lane (else 429).

Listing never reads a dataset: the run roots' entries are stat-ed and answered from a
background index (:class:`~app.services.run_index.RunIndex`) cached by the manifest's and the
steps folder's (inode, size, mtime); a dataset that cannot be read is listed with its reason.
The step summaries of each run are cached per file by (inode, size, mtime), so a growing run
reads only its new steps.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import stat
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

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
from app.services.run_index import RunIndex
from app.services.run_roots import FORBIDDEN, safe_text
from app.services.runs import RunService
from gmts_core.errors import GMTSError, InvalidInputError
from gmts_core.run_dataset import ANSWER_ORDERS, TOP_ORDERS, QueryLimits
from gmts_core.run_dataset.query import MAX_PAGE
from gmts_core.run_dataset.schema import MANIFEST
from gmts_core.runs.worker import ReaderPool, WorkerLimits
from gmts_core.trusted_cache import user_cache_dir

ANSWER_ORDER_NAMES = tuple(ANSWER_ORDERS)
TOKEN_ORDER_NAMES = tuple(TOP_ORDERS)
__all__ = ["ANSWER_ORDER_NAMES", "MAX_PAGE", "TOKEN_ORDER_NAMES", "AnalysedRunService"]

logger = logging.getLogger(__name__)

REPLY_SLACK_BYTES = 1 << 20
T = TypeVar("T")
Summaries = dict[str, tuple[list[int], dict[str, Any]]]  # step file -> (stat key, summary)


def spill_dir() -> Path:
    """Where the reading processes' DuckDB may spill a large sort (``GMTS_QUERY_SPILL_DIR``,
    else the user's cache): one folder per process, removed when the service closes."""
    return user_cache_dir("GMTS_QUERY_SPILL_DIR", "query-spill")


class AnalysedRunService:
    def __init__(self, settings: Settings, runs: RunService) -> None:
        self.runs = runs
        self.settings = settings
        self._spill = spill_dir()
        _clear_stale(self._spill)
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
        )
        size = settings.analysed_max_concurrent
        # two lanes: a step's views never wait behind a run-wide ranking or search
        self._lanes = {"step": ReaderPool(size, workers), "run": ReaderPool(size, workers)}
        self._slots = {lane: threading.BoundedSemaphore(size) for lane in self._lanes}
        self._lock = threading.Lock()
        self._summaries: dict[Path, Summaries] = {}
        self._index: RunIndex[AnalysedRunInfo] = RunIndex(
            self._index_entry, self._index_failed, max_entries=4 * settings.run_max_folder_entries
        )

    def close(self) -> None:
        for pool in self._lanes.values():
            pool.close()
        _clear_stale(self._spill)

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
                if name in seen or _bad_name(name):
                    continue
                key = _dataset_key(Path(path))
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
            return self._info(path.name, self._refresh(path, "step"))
        except GMTSError as exc:
            return _unreadable(path.name, self.runs.relative(str(exc)))

    def _index_failed(self, path: Path, exc: Exception) -> AnalysedRunInfo:
        return _unreadable(path.name, f"cannot be read (an internal error: {type(exc).__name__})")

    def _path(self, run_id: str) -> Path:
        """The dataset folder of ``run_id``: an entry of a run root (not a link), holding a
        manifest and a steps folder; RunNotFoundError otherwise."""
        if not _bad_name(run_id):
            for root in self.runs.roots:
                path = root / run_id
                if _dataset_key(path) is not None:
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
            "query_limits": {
                "threads": self.limits.threads,
                "memory_limit_mb": self.limits.memory_limit_mb,
                "temp_dir": self.limits.temp_dir,
                "max_cell_chars": self.limits.max_cell_chars,
            },
        }
        # a page's rows, each with at most two cut string cells (4 bytes a character)
        cap = REPLY_SLACK_BYTES + rows * (8 * self.limits.max_cell_chars + 4096)
        if query == "info":
            cap = REPLY_SLACK_BYTES + 4096 * (1 + self.settings.run_max_run_steps)
        with self._slot(lane), self.runs.run_roots.relative_errors():
            return self._lanes[lane].call(request, cap, path.name)

    def _refresh(self, path: Path, lane: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """(manifest and skipped steps, summaries by step) of the dataset at ``path``, reading
        only the step files that changed since the last call."""
        with self._lock:
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
        return reply, rows

    @staticmethod
    def _info(
        name: str, found: tuple[dict[str, Any], list[dict[str, Any]]]
    ) -> AnalysedRunInfo:
        reply, steps = found
        return AnalysedRunInfo(
            id=safe_text(name),
            version=reply["version"],
            methods=reply["methods"],
            num_steps=len(steps),
            first_step=steps[0]["step"] if steps else None,
            last_step=steps[-1]["step"] if steps else None,
            num_tokens=sum(int(s["num_tokens"]) for s in steps),
            skipped_steps={k: v for k, v in list(reply["skipped"].items())[:20]},
        )

    # -- answers ----------------------------------------------------------------------------
    def steps(self, run_id: str) -> AnalysedStepsResponse:
        path = self._path(run_id)
        found = self._refresh(path, "step")
        methods = tuple(found[0]["methods"])
        return AnalysedStepsResponse(
            run=self._info(run_id, found),
            steps=_models(StepSummaryOut, [_step(r, methods) for r in found[1]], run_id),
        )

    def groups(self, run_id: str, step: int, offset: int, limit: int) -> GroupsResponse:
        path = self._path(run_id)
        params = {"step": step, "offset": offset, "limit": limit}
        rows = self._ask(path, "groups", params, "step", limit)["rows"]
        total = self._num_groups(path, step)
        return GroupsResponse(
            page=PageOut(offset=offset, limit=limit, total=total),
            groups=_models(GroupRowOut, [_finite(r) for r in rows], run_id),
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
        methods = _method_names(rows, "selected_count_")
        return AnswersResponse(
            page=PageOut(offset=0, limit=max(len(rows), 1), total=len(rows)),
            answers=_models(AnswerRowOut, [_answer(r, methods) for r in rows], run_id),
        )

    def answer_tokens(
        self, run_id: str, step: int, group: int, answer: int, offset: int, limit: int
    ) -> TokensResponse:
        path = self._path(run_id)
        params = {"step": step, "group": group, "answer": answer, "offset": offset, "limit": limit}
        reply = self._ask(path, "tokens", params, "step", limit)
        rows = reply["rows"]
        methods = _method_names(rows, "selected_")
        return TokensResponse(
            page=PageOut(offset=offset, limit=limit, total=reply.get("total")),
            tokens=_models(TokenRowOut, [_token(r, methods) for r in rows], run_id),
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
        path = self._path(run_id)
        params = {
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
            answers=_models(AnswerRowOut, [_answer(r, ()) for r in reply["rows"]], run_id),
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
        methods = _method_names(rows, "selected_")
        return TokensResponse(
            page=PageOut(offset=offset, limit=limit),
            tokens=_models(TokenRowOut, [_token(r, methods) for r in rows], run_id),
        )

    def zero_signal_groups(
        self, run_id: str, offset: int, limit: int, steps: tuple[int, int] | None
    ) -> ZeroSignalResponse:
        path = self._path(run_id)
        params = {
            "offset": offset,
            "limit": limit,
            "steps": list(steps) if steps is not None else None,
        }
        rows = self._ask(path, "zero_signal", params, "run", limit)["rows"]
        return ZeroSignalResponse(
            page=PageOut(offset=offset, limit=limit),
            groups=_models(ZeroSignalGroupOut, [_finite(r) for r in rows], run_id),
        )


def _bad_name(name: str) -> bool:
    return not name or len(name) > 256 or name in (".", "..") or any(c in name for c in FORBIDDEN)


def _dataset_key(path: Path) -> tuple[int, ...] | None:
    """The (inode, size, mtime) of the folder, its manifest and its steps folder, none of
    them followed if a link; None when ``path`` is no dataset folder."""
    try:
        folder = path.lstat()
        manifest = (path / MANIFEST).lstat()
        steps = (path / "steps").lstat()
    except OSError:
        return None
    if not (
        stat.S_ISDIR(folder.st_mode)
        and stat.S_ISREG(manifest.st_mode)
        and stat.S_ISDIR(steps.st_mode)
    ):
        return None
    return tuple(
        v for st in (manifest, steps) for v in (st.st_ino, st.st_size, st.st_mtime_ns)
    )


def _unreadable(name: str, reason: str) -> AnalysedRunInfo:
    return AnalysedRunInfo(id=safe_text(name), readable=False, reason=reason)


def _clear_stale(folder: Path) -> None:
    """Remove the spill folders of reading processes that are gone."""
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return
    for entry in entries:
        if entry.name.isdigit() and not _alive(int(entry.name)):
            shutil.rmtree(entry.path, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


M = TypeVar("M", bound=BaseModel)


def _models(model: type[M], rows: list[dict[str, Any]], run_id: str) -> list[M]:
    """``rows`` as ``model``; a row the format forbids (a null where a value must be) is a
    422 naming the field, never a 500."""
    out = []
    for row in rows:
        try:
            out.append(model.model_validate(row))
        except ValidationError as exc:
            first = exc.errors()[0]
            field = ".".join(str(p) for p in first.get("loc", ()))
            raise InvalidInputError(
                f"{safe_text(run_id)}: a row of the dataset holds a value its format does not "
                f"allow (field {field!r}: {first.get('msg', 'invalid')})"
            ) from None
    return out


def _method_names(rows: list[dict[str, Any]], prefix: str) -> tuple[str, ...]:
    if not rows:
        return ()
    return tuple(k[len(prefix) :] for k in rows[0] if k.startswith(prefix))


def _finite(row: dict[str, Any]) -> dict[str, Any]:
    """A row with NaN and infinite floats as None (JSON has no NaN)."""
    return {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in row.items()}


def _per_method(row: dict[str, Any], prefix: str, methods: tuple[str, ...]) -> dict[str, Any]:
    return {m: row.pop(f"{prefix}{m}") for m in methods if f"{prefix}{m}" in row}


def _step(row: dict[str, Any], methods: tuple[str, ...]) -> dict[str, Any]:
    row = _finite(row)
    coverage = _per_method(row, "coverage_", methods)
    wasted = _per_method(row, "wasted_", methods)
    return {**row, "coverage": coverage, "wasted": wasted}


def _answer(row: dict[str, Any], methods: tuple[str, ...]) -> dict[str, Any]:
    row = _finite(row)
    counts = _per_method(row, "selected_count_", methods)
    return {**row, "selected_count": counts or None}


def _token(row: dict[str, Any], methods: tuple[str, ...]) -> dict[str, Any]:
    row = _finite(row)
    selected = _per_method(row, "selected_", methods)
    return {**row, "selected": selected}


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
    "list": lambda s, _run, p: s.list_runs(wait=bool(p.get("wait", True))),
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
