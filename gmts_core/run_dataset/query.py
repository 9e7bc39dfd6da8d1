"""Query an analysed-run dataset with DuckDB, without loading a step into Python.

Why DuckDB: it runs inside the process (no server), scans Parquet in parallel, pushes filters
and column selection down into the files (row groups whose min/max statistics cannot match
are skipped, and only the columns a query names are decoded), computes top-k rankings with a
bounded heap, and answers in Arrow, so a page of 50 rows is all that reaches Python. Polars'
lazy scans would do the same for one file; DuckDB also bounds its own memory
(``memory_limit``) and threads, which a shared server needs.

Every query takes its files explicitly: a step's view opens that step's one file, a whole-run
ranking the run's files of one table. Order and filter columns come from fixed tables
(:data:`ANSWER_ORDERS`, ``schema.TOP_ORDERS``); user text reaches SQL only as a bound parameter.
"""

from __future__ import annotations

import json
import logging
import stat
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pyarrow.parquet as pq

from gmts_core.errors import InvalidInputError
from gmts_core.run_dataset.schema import TOP_K, TOP_ORDERS, Manifest, check_manifest, step_file

ANSWER_ORDERS: dict[str, str] = {
    "reward": "reward",
    "advantage": "advantage",
    "abs_advantage": "abs(advantage)",
    "length": "length",
    "disagreement": "disagreement",
    "entropy_mean": "entropy_mean",
    "gamma_sum": "gamma_sum",
}
_ANSWER_COLS = (
    'step, "group", answer, prompt, text, reward, advantage, length, zero_signal, '
    "entropy_mean, gamma_sum, disagreement"
)
_TOKEN_COLS = (
    'step, "group", answer, position, token_id, text, logprob, entropy, grad_norm, gamma, '
    "entropy_rank, gamma_rank"
)
MAX_PAGE = 1000
_MAX_STEP_FILE_BYTES = 1 << 20  # a step's summary file is one row
logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class QueryLimits:
    """How much of the machine a query may use: DuckDB's threads and memory cap."""

    threads: int = 2
    memory_limit_mb: int = 1024


@dataclass(frozen=True)
class Scan:
    """What one query read, from DuckDB's profile: files, and row groups of those files."""

    files: tuple[str, ...]
    row_groups_scanned: int
    row_groups_total: int

    @classmethod
    def from_profile(cls, profile: dict[str, Any]) -> Scan:
        files: list[str] = []
        scanned = total = 0
        stack = list(profile.get("operator", []))
        while stack:
            node = stack.pop()
            stack.extend(node.get("children", []))
            if node.get("type") == "TABLE_SCAN":
                names = node.get("extra_info", {}).get("Filename(s)", "")
                files.extend(n.strip() for n in names.split(",") if n.strip())
                scanned += int(node.get("row_groups_scanned", 0))
                total += int(node.get("total_row_groups_to_scan", 0))
        return cls(tuple(sorted(set(files))), scanned, total)


class AnalysedRun:
    """One analysed-run dataset folder: its steps, pages of a step, and run-wide queries.

    Thread-safe: each query runs on its own cursor of one in-memory DuckDB database. The
    per-step summaries are cached by (file name, size, mtime), so polling a growing run reads
    only the steps that appeared since the last call.
    """

    def __init__(
        self, root: Path, limits: QueryLimits = QueryLimits(), profile_dir: Path | None = None
    ) -> None:
        self.root = root
        self.manifest: Manifest = check_manifest(root)
        self._con = duckdb.connect(
            ":memory:",
            config={
                "threads": limits.threads,
                "memory_limit": f"{limits.memory_limit_mb}MB",
                "enable_external_access": True,
            },
        )
        self._lock = threading.Lock()
        # with a folder, each query records what it scanned in :attr:`last_scan`
        self._profile_dir = profile_dir
        self.last_scan: Scan | None = None
        self._steps: dict[str, tuple[tuple[int, int], dict[str, Any]]] = {}

    @property
    def methods(self) -> tuple[str, ...]:
        return self.manifest.methods

    # -- per step ---------------------------------------------------------------------------
    def steps(self) -> list[dict[str, Any]]:
        """Every written step's summary row, sorted by step; new files are read, old are not."""
        folder = self.root / "steps"
        seen: dict[str, tuple[tuple[int, int], dict[str, Any]]] = {}
        for path in sorted(folder.glob("step_*.parquet")):
            st = path.lstat()
            if not stat.S_ISREG(st.st_mode) or st.st_size > _MAX_STEP_FILE_BYTES:
                logger.warning("%s: not a regular step file of its size; skipped", path)
                continue
            key = (st.st_size, st.st_mtime_ns)
            cached = self._steps.get(path.name)
            if cached is not None and cached[0] == key:
                seen[path.name] = cached
                continue
            try:
                row = pq.read_table(path).to_pylist()[0]
            except (OSError, ValueError, IndexError) as exc:  # pyarrow's errors are both
                logger.warning("%s: unreadable step summary (%s); skipped", path, exc)
                continue
            seen[path.name] = (key, row)
        with self._lock:
            self._steps = seen
        return sorted((row for _, row in seen.values()), key=lambda r: r["step"])

    def step_numbers(self) -> list[int]:
        return [int(r["step"]) for r in self.steps()]

    def _file(self, table: str, step: int) -> str:
        path = step_file(self.root, table, step)
        if not _regular(self.root / "steps" / path.name) or not _regular(path):
            raise InvalidInputError(f"{self.root.name}: no analysed step {step}")
        return str(path)

    def step_groups(self, step: int, offset: int = 0, limit: int = 50) -> list[dict[str, Any]]:
        """A page of the step's groups: size, rewards, zero signal, disagreement."""
        sql = f"""
            SELECT "group", any_value(prompt) AS prompt, count(*) AS answers,
                   avg(reward) AS reward_mean, bool_and(zero_signal) AS zero_signal,
                   sum(disagreement) AS disagreement, avg(length) AS mean_length
            FROM read_parquet(?) GROUP BY "group" ORDER BY "group"
            LIMIT {_page(limit)} OFFSET {_offset(offset)}"""
        return self._rows(sql, [self._file("answers", step)])

    def group_answers(self, step: int, group: int) -> list[dict[str, Any]]:
        """The answers of one group of a step."""
        counts = ", ".join(f"selected_count_{m}" for m in self.methods)
        sql = f"""SELECT {_ANSWER_COLS}{", " + counts if counts else ""} FROM read_parquet(?)
                  WHERE "group" = ? ORDER BY answer"""
        return self._rows(sql, [self._file("answers", step), int(group)])

    def answer_tokens(
        self, step: int, group: int, answer: int, offset: int = 0, limit: int = MAX_PAGE
    ) -> list[dict[str, Any]]:
        """A page of one answer's tokens with every method's selection."""
        sel = ", ".join(f"selected_{m}" for m in self.methods)
        sql = f"""SELECT {_TOKEN_COLS}{", " + sel if sel else ""} FROM read_parquet(?)
                  WHERE "group" = ? AND answer = ? ORDER BY position
                  LIMIT {_page(limit)} OFFSET {_offset(offset)}"""
        return self._rows(sql, [self._file("tokens", step), int(group), int(answer)])

    # -- across the run ---------------------------------------------------------------------
    def _files(self, table: str, steps: tuple[int, int] | None) -> list[str]:
        numbers = self.step_numbers()
        if steps is not None:
            numbers = [s for s in numbers if steps[0] <= s <= steps[1]]
        files = [step_file(self.root, table, s) for s in numbers]
        return [str(f) for f in files if _regular(f)]

    def _answer_filter(
        self, contains: str | None, zero_signal: bool | None, steps: tuple[int, int] | None
    ) -> tuple[str, list[Any]] | None:
        files = self._files("answers", steps)
        if not files:
            return None
        where: list[str] = []
        params: list[Any] = [files]
        if contains:
            where.append("contains(lower(text), lower(?))")
            params.append(contains)
        if zero_signal is not None:
            where.append("zero_signal = ?")
            params.append(bool(zero_signal))
        return ("WHERE " + " AND ".join(where) if where else ""), params

    def rank_answers(
        self,
        by: str = "reward",
        descending: bool = True,
        limit: int = 50,
        offset: int = 0,
        contains: str | None = None,
        zero_signal: bool | None = None,
        steps: tuple[int, int] | None = None,
    ) -> list[dict[str, Any]]:
        """Answers across the run ranked by ``by`` (:data:`ANSWER_ORDERS`), optionally only
        those whose text contains ``contains`` (case-insensitive, literally) or those of
        zero-signal groups (``zero_signal=True``) or of the others (``False``)."""
        order = _choice(by, ANSWER_ORDERS, "answer order")
        found = self._answer_filter(contains, zero_signal, steps)
        if found is None:
            return []
        where, params = found
        direction = "DESC" if descending else "ASC"
        sql = f"""SELECT {_ANSWER_COLS} FROM read_parquet(?) {where}
                  ORDER BY {order} {direction} NULLS LAST, step, "group", answer
                  LIMIT {_page(limit)} OFFSET {_offset(offset)}"""
        return self._rows(sql, params)

    def count_answers(
        self,
        contains: str | None = None,
        zero_signal: bool | None = None,
        steps: tuple[int, int] | None = None,
    ) -> int:
        """How many answers :meth:`rank_answers` with these filters would rank."""
        found = self._answer_filter(contains, zero_signal, steps)
        if found is None:
            return 0
        where, params = found
        return int(self._rows(f"SELECT count(*) AS n FROM read_parquet(?) {where}", params)[0]["n"])

    def rank_tokens(
        self,
        by: str = "gamma",
        limit: int = 50,
        offset: int = 0,
        steps: tuple[int, int] | None = None,
    ) -> list[dict[str, Any]]:
        """Tokens across the run with the highest ``by`` (one of TOP_ORDERS), exact for the
        first TOP_K: read from each step's top table, not from every token."""
        _choice(by, TOP_ORDERS, "token order")
        if _offset(offset) + _page(limit) > TOP_K:
            raise InvalidInputError(f"a token ranking shows its first {TOP_K} tokens")
        files = self._files("top", steps)
        if not files:
            return []
        sel = ", ".join(f"selected_{m}" for m in self.methods)
        sql = f"""SELECT {_TOKEN_COLS}, score{", " + sel if sel else ""} FROM read_parquet(?)
                  WHERE order_key = ?
                  ORDER BY score DESC, step, "group", answer, position
                  LIMIT {int(limit)} OFFSET {int(offset)}"""
        return self._rows(sql, [files, by])

    def zero_signal_groups(
        self, limit: int = 50, offset: int = 0, steps: tuple[int, int] | None = None
    ) -> list[dict[str, Any]]:
        """Groups whose answers all got the same reward, across the run."""
        files = self._files("answers", steps)
        if not files:
            return []
        sql = f"""SELECT step, "group", any_value(prompt) AS prompt, count(*) AS answers,
                         any_value(reward) AS reward
                  FROM read_parquet(?) WHERE zero_signal GROUP BY step, "group"
                  ORDER BY step, "group" LIMIT {_page(limit)} OFFSET {_offset(offset)}"""
        return self._rows(sql, [files])

    def _rows(self, sql: str, params: list[Any]) -> list[dict[str, Any]]:
        cur = self._con.cursor()
        try:
            if self._profile_dir is not None:
                out = self._profile_dir / f"profile-{threading.get_ident()}.json"
                cur.execute("PRAGMA enable_profiling='json'")
                cur.execute(f"PRAGMA profiling_output='{out}'")
                cur.execute("SET profiling_mode='detailed'")
            cur.execute(sql, params)
            names = [d[0] for d in cur.description]
            rows = [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
        except duckdb.Error as exc:  # a damaged or foreign file in the dataset
            raise InvalidInputError(
                f"{self.root.name}: the dataset cannot be read ({exc})"
            ) from None
        finally:
            cur.close()
        if self._profile_dir is not None:
            self.last_scan = Scan.from_profile(json.loads(out.read_text()))
        return rows

    def close(self) -> None:
        self._con.close()


def _regular(path: Path) -> bool:
    """A regular file, not a link, FIFO or device (DuckDB would follow or block on those)."""
    try:
        return stat.S_ISREG(path.lstat().st_mode)
    except OSError:
        return False


def _page(limit: int) -> int:
    if not 1 <= int(limit) <= MAX_PAGE:
        raise InvalidInputError(f"limit must be 1-{MAX_PAGE}, got {limit}")
    return int(limit)


def _offset(offset: int) -> int:
    if int(offset) < 0:
        raise InvalidInputError(f"offset must be >= 0, got {offset}")
    return int(offset)


def _choice(name: str, table: dict[str, str], what: str) -> str:
    if name not in table:
        raise InvalidInputError(f"unknown {what} {name!r}; choose one of {', '.join(table)}")
    return table[name]
