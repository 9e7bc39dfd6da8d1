"""Query an analysed-run dataset with DuckDB, without loading a step into Python.

Why DuckDB: it runs inside the process (no server), scans Parquet in parallel, pushes filters
and column selection down into the files (row groups whose min/max statistics cannot match
are skipped, and only the columns a query names are decoded), computes top-k rankings with a
bounded heap, and answers in Arrow, so a page of 50 rows is all that reaches Python. Polars'
lazy scans would do the same for one file; DuckDB also bounds its own memory
(``memory_limit``) and threads, which a shared server needs.

A dataset's bytes are untrusted (anyone who can write into a run root writes them), so:

- every file is opened by :class:`~gmts_core.run_dataset.folder.DatasetFolder` (no link
  followed at any component, regular files only, checked on the open descriptor) and DuckDB
  reads that descriptor (``/proc/self/fd/N``), never a name: what was checked is what is read,
  and nothing is ever a glob pattern;
- each query runs on a connection of its own whose configuration is locked after it is set:
  external access off, the only readable paths that query's descriptors, no extensions, its
  threads, memory and spill folder bounded;
- a file's Parquet footer is checked before any data is read: its row count, row groups and
  bytes within the table's budget (:data:`BUDGETS`), every column of the format's schema
  present with its type;
- no text from a file ever becomes SQL: column names come from the format's schema, method
  names match a strict pattern (:data:`~gmts_core.run_dataset.schema.METHOD_NAME`) and are
  quoted as identifiers too, orders and filters come from fixed tables, and user text is a
  bound parameter; one statement per call;
- string cells longer than ``QueryLimits.max_cell_chars`` come back cut, with a marker.

Run-wide rankings rank keys, not rows: the order and filter columns are sorted, and only the
page's rows are read whole (their texts) afterwards; the matching count comes from the same
scan (or, unfiltered, from the steps' summaries).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from gmts_core.errors import InvalidInputError
from gmts_core.run_dataset.folder import DatasetFolder, StatKey, StepEntry, fd_path, step_name
from gmts_core.run_dataset.schema import (
    MANIFEST,
    MAX_MANIFEST_BYTES,
    TOP_K,
    TOP_ORDERS,
    Manifest,
    parse_manifest,
    schema,
)

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
    "step",
    "group",
    "answer",
    "prompt",
    "text",
    "reward",
    "advantage",
    "length",
    "zero_signal",
    "entropy_mean",
    "gamma_sum",
    "disagreement",
)
_TOKEN_COLS = (
    "step",
    "group",
    "answer",
    "position",
    "token_id",
    "text",
    "logprob",
    "entropy",
    "grad_norm",
    "gamma",
    "entropy_rank",
    "gamma_rank",
)
MAX_PAGE = 1000
GiB = 1 << 30


@dataclass(frozen=True)
class Budget:
    """What one file of a table may hold, checked in its footer before a row is read."""

    bytes: int
    rows: int
    row_groups: int


BUDGETS: dict[str, Budget] = {
    "tokens": Budget(16 * GiB, 1 << 27, 4096),  # 134 M tokens in one step
    "answers": Budget(4 * GiB, 1 << 22, 1024),  # 4 M answers in one step
    "steps": Budget(1 << 20, 1, 1),  # a step's summary is one row
    "top": Budget(256 << 20, 4 * TOP_K * len(TOP_ORDERS), 64),
}
logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class QueryLimits:
    """How much of the machine a query may use: DuckDB's threads, memory cap and spill
    folder (None: no spilling), and the longest string cell a response carries."""

    threads: int = 2
    memory_limit_mb: int = 1024
    temp_dir: str | None = None
    max_cell_chars: int = 20_000


@dataclass(frozen=True)
class Scan:
    """What one query read, from DuckDB's profile: files (relative to the run root), and row
    groups of those files."""

    files: tuple[str, ...]
    row_groups_scanned: int
    row_groups_total: int

    @classmethod
    def from_profile(cls, profile: dict[str, Any], names: dict[str, str]) -> Scan:
        files: list[str] = []
        scanned = total = 0
        stack = list(profile.get("children", [])) + list(profile.get("operator", []))
        while stack:
            node = stack.pop()
            stack.extend(node.get("children", []))
            kind = node.get("operator_type") or node.get("type") or ""
            if kind == "TABLE_SCAN":
                info = node.get("extra_info", {})
                listed = info.get("Filename(s)", "") if isinstance(info, dict) else ""
                files.extend(names.get(n.strip(), n.strip()) for n in listed.split(",") if n)
                scanned += int(node.get("row_groups_scanned", 0) or 0)
                total += int(node.get("total_row_groups_to_scan", 0) or 0)
        return cls(tuple(sorted(set(files))), scanned, total)


@dataclass
class _Files:
    """The descriptors one query reads, by their /proc/self/fd names (and names to show)."""

    paths: list[str] = field(default_factory=list)
    names: dict[str, str] = field(default_factory=dict)


class AnalysedRun:
    """One analysed-run dataset folder: its steps, pages of a step, and run-wide queries.

    ``source`` is the folder's path (its parent trusted) or an open
    :class:`~gmts_core.run_dataset.folder.DatasetFolder`. Thread-safe: each query opens its
    own connection. The per-step summaries are cached by (inode, size, mtime), so polling a
    growing run reads only the steps that appeared since the last call.
    """

    def __init__(
        self,
        source: Path | str | DatasetFolder,
        limits: QueryLimits = QueryLimits(),
        profile: bool = False,
    ) -> None:
        self.folder = source if isinstance(source, DatasetFolder) else DatasetFolder.at(source)
        self.root = Path(self.folder.name)
        data = self.folder.read_bytes(MANIFEST, MAX_MANIFEST_BYTES)
        self.manifest: Manifest = parse_manifest(data, self.folder.where(MANIFEST))
        self.limits = limits
        self._lock = threading.Lock()
        self._profile = profile  # each query records what it scanned in last_scan
        self.last_scan: Scan | None = None
        self._steps: dict[str, tuple[StatKey, dict[str, Any]]] = {}
        self.skipped: dict[str, str] = {}  # step files left out of steps(), and why

    @property
    def methods(self) -> tuple[str, ...]:
        return self.manifest.methods

    def close(self) -> None:
        self.folder.close()

    # -- per step ---------------------------------------------------------------------------
    def steps(self) -> list[dict[str, Any]]:
        """Every written step's summary row, sorted by step; new files are read, old are not.
        A summary that cannot be read is left out, its reason in :attr:`skipped`."""
        seen: dict[str, tuple[StatKey, dict[str, Any]]] = {}
        skipped: dict[str, str] = {}
        for entry in self.folder.steps("steps"):
            cached = self._steps.get(entry.name)
            if cached is not None and cached[0] == entry.key:
                seen[entry.name] = cached
                continue
            try:
                seen[entry.name] = (entry.key, self.summary(entry))
            except InvalidInputError as exc:
                logger.info("%s", exc)
                skipped[entry.name] = str(exc)
        with self._lock:
            self._steps, self.skipped = seen, skipped
        return sorted((row for _, row in seen.values()), key=lambda r: r["step"])

    def summary(self, entry: StepEntry) -> dict[str, Any]:
        """One step's summary row, its footer and values checked (InvalidInputError)."""
        where = self.folder.where("steps", entry.name)
        with self.folder.opened("steps", entry.name, max_bytes=BUDGETS["steps"].bytes) as fd:
            self._checked(fd, "steps", where)
            try:
                row = pq.read_table(fd_path(fd)).to_pylist()[0]
            except (OSError, ValueError, IndexError, pa.ArrowException) as exc:
                raise InvalidInputError(f"{where}: cannot be read ({_short(exc)})") from None
        for name in ("step", "num_groups", "num_answers", "num_tokens"):
            if row.get(name) is None or row[name] < 0:
                raise InvalidInputError(f"{where}: '{name}' is missing or negative")
        if row["step"] != entry.step:
            raise InvalidInputError(f"{where}: holds step {row['step']}, not {entry.step}")
        return {k: row[k] for k in schema("steps", self.methods).names}

    def step_numbers(self) -> list[int]:
        return [int(r["step"]) for r in self.steps()]

    def step_groups(self, step: int, offset: int = 0, limit: int = 50) -> list[dict[str, Any]]:
        """A page of the step's groups: size, rewards, zero signal, disagreement."""
        sql = f"""
            SELECT "group", {self._cut("any_value(prompt)")} AS prompt, count(*) AS answers,
                   avg(reward) AS reward_mean, bool_and(zero_signal) AS zero_signal,
                   sum(disagreement) AS disagreement, avg(length) AS mean_length
            FROM read_parquet(?) GROUP BY "group" ORDER BY "group"
            LIMIT {_page(limit)} OFFSET {_offset(offset)}"""
        with self._reading("answers", [step]) as files:
            return self._rows(sql, files, [files.paths])

    def group_answers(self, step: int, group: int) -> list[dict[str, Any]]:
        """The answers of one group of a step."""
        counts = [f"selected_count_{m}" for m in self.methods]
        sql = f"""SELECT {self._columns((*_ANSWER_COLS, *counts))} FROM read_parquet(?)
                  WHERE "group" = ? ORDER BY answer LIMIT {4 * MAX_PAGE}"""
        with self._reading("answers", [step]) as files:
            return self._rows(sql, files, [files.paths, int(group)])

    def answer_tokens(
        self, step: int, group: int, answer: int, offset: int = 0, limit: int = MAX_PAGE
    ) -> list[dict[str, Any]]:
        """A page of one answer's tokens with every method's selection; each row carries
        ``total``, the answer's tokens."""
        sel = [f"selected_{m}" for m in self.methods]
        sql = f"""SELECT {self._columns((*_TOKEN_COLS, *sel))}, count(*) OVER () AS total
                  FROM read_parquet(?) WHERE "group" = ? AND answer = ? ORDER BY position
                  LIMIT {_page(limit)} OFFSET {_offset(offset)}"""
        with self._reading("tokens", [step]) as files:
            return self._rows(sql, files, [files.paths, int(group), int(answer)])

    # -- across the run ---------------------------------------------------------------------
    def _numbers(self, steps: tuple[int, int] | None) -> list[int]:
        numbers = self.step_numbers()
        if steps is not None:
            numbers = [s for s in numbers if steps[0] <= s <= steps[1]]
        return numbers

    @staticmethod
    def _answer_filter(
        contains: str | None, zero_signal: bool | None
    ) -> tuple[str, list[Any]]:
        where: list[str] = []
        params: list[Any] = []
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
        return self.ranked_answers(by, descending, limit, offset, contains, zero_signal, steps)[0]

    def ranked_answers(
        self,
        by: str = "reward",
        descending: bool = True,
        limit: int = 50,
        offset: int = 0,
        contains: str | None = None,
        zero_signal: bool | None = None,
        steps: tuple[int, int] | None = None,
    ) -> tuple[list[dict[str, Any]], int]:
        """:meth:`rank_answers`' page and how many answers match, from one scan of the
        order and filter columns; the page's rows are read whole afterwards."""
        order = _choice(by, ANSWER_ORDERS, "answer order")
        where, params = self._answer_filter(contains, zero_signal)
        direction = "DESC" if descending else "ASC"
        numbers = self._numbers(steps)
        if not numbers:
            return [], 0
        keys_sql = f"""SELECT step, "group", answer, count(*) OVER () AS total
                       FROM read_parquet(?) {where}
                       ORDER BY {order} {direction} NULLS LAST, step, "group", answer
                       LIMIT {_page(limit)} OFFSET {_offset(offset)}"""
        with self._reading("answers", numbers) as files:
            keys = self._rows(keys_sql, files, [files.paths, *params])
        if not keys:
            total = 0 if where or offset == 0 else self.count_answers(contains, zero_signal, steps)
            return [], total
        total = int(keys[0]["total"])
        by_step: dict[int, list[tuple[int, int]]] = {}
        for k in keys:
            by_step.setdefault(int(k["step"]), []).append((int(k["group"]), int(k["answer"])))
        found: dict[tuple[int, int, int], dict[str, Any]] = {}
        cols = self._columns(_ANSWER_COLS)
        for step, pairs in by_step.items():
            sql = f"""SELECT {cols} FROM read_parquet(?)
                      WHERE "group" BETWEEN ? AND ?
                        AND list_contains(?, "group"::BIGINT * 4294967296 + answer)"""
            codes = [g * 4294967296 + a for g, a in pairs]
            groups = [g for g, _ in pairs]
            with self._reading("answers", [step]) as files:
                rows = self._rows(sql, files, [files.paths, min(groups), max(groups), codes])
            for row in rows:
                found[(int(row["step"]), int(row["group"]), int(row["answer"]))] = row
        page = [found[k] for k in ((int(r["step"]), int(r["group"]), int(r["answer"])) for r in keys)
                if k in found]
        return page, total

    def count_answers(
        self,
        contains: str | None = None,
        zero_signal: bool | None = None,
        steps: tuple[int, int] | None = None,
    ) -> int:
        """How many answers :meth:`rank_answers` with these filters would rank (unfiltered:
        the steps' summaries, no scan)."""
        numbers = self._numbers(steps)
        if not numbers:
            return 0
        if not contains and zero_signal is None:
            wanted = set(numbers)
            return sum(int(r["num_answers"]) for r in self.steps() if r["step"] in wanted)
        where, params = self._answer_filter(contains, zero_signal)
        with self._reading("answers", numbers) as files:
            rows = self._rows(
                f"SELECT count(*) AS n FROM read_parquet(?) {where}", files, [files.paths, *params]
            )
        return int(rows[0]["n"])

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
        numbers = self._numbers(steps)
        if not numbers:
            return []
        sel = [f"selected_{m}" for m in self.methods]
        sql = f"""SELECT {self._columns((*_TOKEN_COLS, "score", *sel))} FROM read_parquet(?)
                  WHERE order_key = ?
                  ORDER BY score DESC, step, "group", answer, position
                  LIMIT {int(limit)} OFFSET {int(offset)}"""
        with self._reading("top", numbers) as files:
            return self._rows(sql, files, [files.paths, by])

    def zero_signal_groups(
        self, limit: int = 50, offset: int = 0, steps: tuple[int, int] | None = None
    ) -> list[dict[str, Any]]:
        """Groups whose answers all got the same reward, across the run."""
        numbers = self._numbers(steps)
        if not numbers:
            return []
        sql = f"""SELECT step, "group", {self._cut("any_value(prompt)")} AS prompt,
                         count(*) AS answers, any_value(reward) AS reward
                  FROM read_parquet(?) WHERE zero_signal GROUP BY step, "group"
                  ORDER BY step, "group" LIMIT {_page(limit)} OFFSET {_offset(offset)}"""
        with self._reading("answers", numbers) as files:
            return self._rows(sql, files, [files.paths])

    # -- reading ----------------------------------------------------------------------------
    def _cut(self, expr: str) -> str:
        """``expr`` (a string) cut to max_cell_chars characters, with a marker saying so."""
        n = int(self.limits.max_cell_chars)
        return (
            f"CASE WHEN length({expr}) > {n} THEN left({expr}, {n}) || ' …[cut: ' || "
            f"length({expr}) || ' characters]' ELSE {expr} END"
        )

    def _columns(self, names: Sequence[str]) -> str:
        """The select list of these schema columns: each quoted, strings cut."""
        out = []
        for name in names:
            ident = _ident(name)
            out.append(f"{self._cut(ident)} AS {ident}" if name in _STRINGS else ident)
        return ", ".join(out)

    @contextmanager
    def _reading(self, table: str, steps: Sequence[int]) -> Iterator[_Files]:
        """The verified descriptors of ``table``'s files of ``steps`` (a file missing is
        'no analysed step'), closed when the query is done."""
        files = _Files()
        with ExitStack() as stack:
            for step in steps:
                name = step_name(int(step))
                where = self.folder.where(table, name)
                if len(steps) == 1 and not self._has_step(name):
                    raise InvalidInputError(f"{self.root.name}: no analysed step {step}")
                try:
                    fd = stack.enter_context(
                        self.folder.opened(table, name, max_bytes=BUDGETS[table].bytes)
                    )
                except InvalidInputError as exc:
                    if len(steps) == 1:
                        raise InvalidInputError(
                            f"{self.root.name}: no analysed step {step} ({exc})"
                        ) from None
                    logger.info("%s", exc)  # a run-wide query leaves a missing file out
                    continue
                self._checked(fd, table, where)
                files.paths.append(fd_path(fd))
                files.names[fd_path(fd)] = where
            yield files

    def _has_step(self, name: str) -> bool:
        with self._lock:
            if name in self._steps:
                return True
        return any(e.name == name for e in self.folder.steps("steps"))

    def _checked(self, fd: int, table: str, where: str) -> None:
        """The Parquet file on ``fd``, its footer within the table's budget and its columns
        those of the format's schema (InvalidInputError naming the first that is not)."""
        budget = BUDGETS[table]
        try:
            with pq.ParquetFile(fd_path(fd)) as file:
                meta = file.metadata
                arrow = file.schema_arrow
        except (OSError, ValueError, pa.ArrowException) as exc:
            raise InvalidInputError(f"{where}: not a readable Parquet file ({_short(exc)})") from None
        if meta.num_rows > budget.rows or meta.num_row_groups > budget.row_groups:
            raise InvalidInputError(
                f"{where}: {meta.num_rows:,} rows in {meta.num_row_groups:,} row groups, over "
                f"the {budget.rows:,} rows and {budget.row_groups:,} row groups it may hold"
            )
        size = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
        if size > budget.bytes:
            raise InvalidInputError(f"{where}: {size:,} bytes once decoded, over {budget.bytes:,}")
        for want in schema(table, self.methods):
            i = arrow.get_field_index(want.name)
            if i < 0:
                raise InvalidInputError(f"{where}: no column '{want.name}'")
            got = arrow.field(i).type
            if not _same_type(got, want.type):
                raise InvalidInputError(
                    f"{where}: column '{want.name}' is {_short_type(got)}, not {want.type}"
                )

    def _connect(self, files: _Files) -> duckdb.DuckDBPyConnection:
        """A connection that can read these descriptors and nothing else, its settings
        locked."""
        con = duckdb.connect(
            ":memory:",
            config={
                "threads": self.limits.threads,
                "memory_limit": f"{self.limits.memory_limit_mb}MB",
                "autoinstall_known_extensions": False,
                "autoload_known_extensions": False,
            },
        )
        try:
            allowed = ", ".join(_literal(p) for p in files.paths)
            con.execute(f"SET allowed_paths = [{allowed}]")
            temp = self.limits.temp_dir
            if self._profile:
                con.execute("PRAGMA enable_profiling = 'no_output'")
                con.execute("SET profiling_mode = 'detailed'")
            if temp:
                con.execute(f"SET temp_directory = {_literal(temp)}")
            else:
                con.execute("SET max_temp_directory_size = '0B'")
            con.execute("SET enable_external_access = false")
            con.execute("SET lock_configuration = true")
        except BaseException:
            con.close()
            raise
        return con

    def _rows(self, sql: str, files: _Files, params: list[Any]) -> list[dict[str, Any]]:
        if not files.paths:
            return []
        con = self._connect(files)
        try:
            cur = con.execute(sql, params)
            names = [d[0] for d in cur.description]
            rows = [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
            if self._profile:
                info = json.loads(con.get_profiling_information(format="json"))
                self.last_scan = Scan.from_profile(info, files.names)
        except duckdb.Error as exc:  # a damaged or foreign file in the dataset
            message = _short(exc)
            for path, name in files.names.items():
                message = message.replace(path, name)
            raise InvalidInputError(
                f"{self.root.name}: the dataset cannot be read ({message})"
            ) from None
        finally:
            con.close()
        return rows


_STRINGS = {"prompt", "text"}


def _ident(name: str) -> str:
    """``name`` quoted as an SQL identifier (the names are the schema's, and a method's name
    matches METHOD_NAME; the quoting makes any other text one identifier still)."""
    return '"' + name.replace('"', '""') + '"'


def _literal(text: str) -> str:
    """A string literal of a path this module made (``/proc/self/fd/N``, the spill folder)."""
    return "'" + text.replace("'", "''") + "'"


def _same_type(got: pa.DataType, want: pa.DataType) -> bool:
    def plain(t: pa.DataType) -> pa.DataType:
        t = t.value_type if pa.types.is_dictionary(t) else t
        return pa.string() if pa.types.is_large_string(t) or pa.types.is_string_view(t) else t

    return plain(got) == plain(want)


def _short_type(t: pa.DataType) -> str:
    text = str(t)
    return text if len(text) <= 80 else text[:77] + "..."


def _short(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text if len(text) <= 300 else text[:297] + "..."


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
