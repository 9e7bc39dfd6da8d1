"""Query an analysed-run dataset with DuckDB, without loading a step into Python.

DuckDB runs in the process, scans Parquet in parallel, pushes filters and column choices into
the files, keeps top-k rankings in a bounded heap and bounds its memory and threads. A
dataset's bytes are untrusted: every file is opened by
:class:`~gmts_core.run_dataset.folder.DatasetFolder` and read through
:mod:`gmts_core.run_dataset.reading` (footers checked, a locked connection reading only the
query's descriptors). No text from a file becomes SQL: column names come from the schema,
method names match a strict pattern and are quoted, user text is a bound parameter. Run-wide
rankings rank keys, not rows (:mod:`gmts_core.run_dataset.search`): the page's rows are read
afterwards, the count from the same scan (unfiltered: from the steps' summaries).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from gmts_core.errors import InvalidInputError
from gmts_core.run_dataset import steps_index
from gmts_core.run_dataset.folder import DatasetFolder, StatKey, StepEntry, fd_path, step_name
from gmts_core.run_dataset.reading import (
    BUDGETS,
    Files,
    QueryLimits,
    Scan,
    checked_footer,
    cut,
    rows,
    select_list,
    short,
)
from gmts_core.run_dataset.schema import (
    MANIFEST,
    MAX_MANIFEST_BYTES,
    TOP_K,
    TOP_ORDERS,
    Manifest,
    compared_pair,
    parse_manifest,
    schema,
)
from gmts_core.run_dataset.search import answer_keys
from gmts_core.run_dataset.search_postings import page_rows
from gmts_core.run_dataset.text_index import SQL_LOWER, lower

__all__ = ["ANSWER_ORDERS", "MAX_PAGE", "AnalysedRun", "QueryLimits", "Scan"]
logger = logging.getLogger(__name__)

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
        entries = self.folder.steps("steps")
        new = [e for e in entries if e.name not in self._steps or self._steps[e.name][0] != e.key]
        indexed = steps_index.read(self.folder, new, schema("steps", self.methods).names)
        for entry in entries:
            cached = self._steps.get(entry.name)
            if cached is not None and cached[0] == entry.key:
                seen[entry.name] = cached
                continue
            try:
                seen[entry.name] = (entry.key, indexed.get(entry.name) or self.summary(entry))
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
            checked_footer(fd, "steps", self.methods, where)
            try:
                row = pq.read_table(fd_path(fd)).to_pylist()[0]
            except (OSError, ValueError, IndexError, pa.ArrowException) as exc:
                raise InvalidInputError(f"{where}: cannot be read ({short(exc)})") from None
        return steps_index.checked_row(row, schema("steps", self.methods).names, where, entry.step)

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
    def _answer_filter(contains: str | None, zero_signal: bool | None) -> tuple[str, list[Any]]:
        where: list[str] = []
        params: list[Any] = []
        if contains:  # the texts lower-cased as the word index lower-cases them, and the query
            where.append(f"contains({SQL_LOWER}(text), ?)")
            params.append(lower(contains))
        if zero_signal is not None:
            where.append("zero_signal = ?")
            params.append(bool(zero_signal))
        return ("WHERE " + " AND ".join(where) if where else ""), params

    def rank_answers(self, *args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        """:meth:`ranked_answers`' page alone."""
        page: list[dict[str, Any]] = self.ranked_answers(*args, **kwargs)[0]
        return page

    def ranked_answers(
        self,
        by: str = "reward",
        descending: bool = True,
        limit: int = 50,
        offset: int = 0,
        contains: str | None = None,
        zero_signal: bool | None = None,
        steps: tuple[int, int] | None = None,
        pair: tuple[str, str] | None = None,
    ) -> tuple[list[dict[str, Any]], int]:
        """Answers across the run ranked by ``by`` (:data:`ANSWER_ORDERS`), optionally only
        those whose text contains ``contains`` (case-insensitive, literally) or those of
        zero-signal groups (``zero_signal=True``) or of the others (``False``); and how many
        match. One scan of the order and filter columns; the page's rows are read whole
        afterwards (the row groups holding them)."""
        order = _choice(by, ANSWER_ORDERS, "answer order")
        where, params = self._answer_filter(contains, zero_signal)
        direction = "DESC" if descending else "ASC"
        numbers = self._numbers(steps)
        if not numbers:
            return [], 0
        if not where:  # an offset past every answer: an empty page from the summaries
            total = self.count_answers(None, None, steps)
            if offset >= total:
                return [], total
        page = (_page(limit), _offset(offset))
        pair = self._other_pair(pair)
        keys = answer_keys(self, order, direction, page, contains, zero_signal, numbers, pair)
        if not keys:
            total = 0 if where or offset == 0 else self.count_answers(contains, zero_signal, steps)
            return [], total
        total = int(keys[0]["total"])
        found = page_rows(self, keys, _ANSWER_COLS, self.limits.max_cell_chars)
        wanted = {(int(r["step"]), int(r["group"]), int(r["answer"])): r for r in keys}
        for code, key in wanted.items():  # another pair's disagreement, from the tokens
            if code in found and "pair_disagreement" in key:
                found[code]["disagreement"] = int(key["pair_disagreement"])
        return [found[k] for k in wanted if k in found], total

    def _other_pair(self, pair: tuple[str, str] | None) -> tuple[str, str] | None:
        """``pair`` when it is not the stored one (None: the stored disagreement serves)."""
        if pair is None or set(pair) == set(compared_pair(self.methods) or ()):
            return None
        if len(set(pair)) != 2 or not set(pair) <= set(self.methods):
            raise InvalidInputError(f"a pair is two of this run's methods: {self.methods}")
        return pair

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
        keys = answer_keys(self, "step", "ASC", (1, 0), contains, zero_signal, numbers)
        return int(keys[0]["total"]) if keys else 0

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
        return cut(expr, self.limits.max_cell_chars)

    def _columns(self, names: Sequence[str]) -> str:
        return select_list(names, self.limits.max_cell_chars)

    @contextmanager
    def _reading(self, table: str, steps: Sequence[int]) -> Iterator[Files]:
        """The verified descriptors of ``table``'s files of ``steps`` (a file missing is
        'no analysed step'), closed when the query is done."""
        files = Files()
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
                checked_footer(fd, table, self.methods, where)
                files.paths.append(fd_path(fd))
                files.names[fd_path(fd)] = where
            yield files

    def _has_step(self, name: str) -> bool:
        with self._lock:
            if name in self._steps:
                return True
        return any(e.name == name for e in self.folder.steps("steps"))

    def _rows(
        self, sql: str, files: Files, params: list[Any] | dict[str, Any]
    ) -> list[dict[str, Any]]:
        found, scan = rows(sql, files, params, self.limits, self.root.name, self._profile)
        if scan is not None:
            self.last_scan = scan
        return found


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
