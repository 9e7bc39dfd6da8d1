"""Run-wide answer rankings and searches as keys: which answers, in which order, how many.

:meth:`~gmts_core.run_dataset.query.AnalysedRun.ranked_answers` asks :func:`answer_keys` for
the page's (step, group, answer) keys and the count of matches, from one scan of the narrow
order and filter columns, then reads the page's rows. A text search uses the answers' word
index where every searched step has one: the matches come from the index
(:mod:`gmts_core.run_dataset.search_postings`: exact with its positions, the third form; a
dataset with an earlier form: its candidates, and where they are not exact, a phrase, their
texts read to check them; the first form: :mod:`gmts_core.run_dataset.text_index`).
Otherwise (a dataset written before the index, a step without its index file, a search with
no word character) every answer's text is read.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager, ExitStack
from typing import Any, Protocol

from gmts_core.run_dataset.folder import DatasetFolder
from gmts_core.run_dataset.reading import Files, ident
from gmts_core.run_dataset.schema import INDEXES
from gmts_core.run_dataset.search_postings import ORDER_COLUMNS, matches, ranked
from gmts_core.run_dataset.text_index import (
    SQL_LOWER,
    WordPlan,
    candidates_sql,
    lower,
    named,
    plan,
)


class AnalysedRun(Protocol):
    """What of :class:`~gmts_core.run_dataset.query.AnalysedRun` a search uses."""

    folder: DatasetFolder

    def _answer_filter(
        self, contains: str | None, zero_signal: bool | None
    ) -> tuple[str, list[Any]]: ...

    def _reading(self, table: str, steps: Sequence[int]) -> AbstractContextManager[Files]: ...

    def _rows(
        self, sql: str, files: Files, params: list[Any] | dict[str, Any]
    ) -> list[dict[str, Any]]: ...


def indexed(run: AnalysedRun, numbers: list[int]) -> str | None:
    """The word index's table that covers every one of these steps ("positions", or its
    earlier forms "postings" and "words"), or None."""
    for table in INDEXES:
        if run.folder.has_folder(table):
            have = {e.step for e in run.folder.steps(table, raw=table == "positions")}
            if all(n in have for n in numbers):
                return table
    return None


def answer_keys(
    run: AnalysedRun,
    order: str,
    direction: str,
    page: tuple[int, int],
    contains: str | None,
    zero_signal: bool | None,
    numbers: list[int],
    pair: tuple[str, str] | None = None,
) -> list[dict[str, Any]]:
    """The ranked keys of one page (``page``: its limit and offset), each row with ``total``,
    the number of matches. ``pair``: rank by the disagreement of these two methods instead of
    the stored pair's (:func:`pair_keys`)."""
    limit, offset = page
    sql_page = f"LIMIT {int(limit)} OFFSET {int(offset)}"
    ranking = f"""ORDER BY {order} {direction} NULLS LAST, step, "group", answer {sql_page}"""
    if pair is not None and order == "disagreement":
        return pair_keys(run, pair, direction, sql_page, contains, zero_signal, numbers)
    words = plan(contains) if contains else None
    table = indexed(run, numbers) if words is not None else None
    if words is not None and table in ("positions", "postings"):
        found = matches(
            run, words, ORDER_COLUMNS[order], contains or "", zero_signal, numbers, table
        )
        return ranked(found, direction == "DESC", limit, offset)
    if words is None or table is None:
        where, params = run._answer_filter(contains, zero_signal)
        sql = f"""SELECT step, "group", answer, count(*) OVER () AS total
                  FROM read_parquet(?) {where} {ranking}"""
        with run._reading("answers", numbers) as files:
            return run._rows(sql, files, [files.paths, *params])
    return _from_index(run, words, ranking, contains or "", zero_signal, numbers)


def _from_index(
    run: AnalysedRun,
    words: WordPlan,
    ranking: str,
    contains: str,
    zero_signal: bool | None,
    numbers: list[int],
) -> list[dict[str, Any]]:
    where: list[str] = []
    params: dict[str, Any] = named(words)
    if zero_signal is not None:
        where.append("a.zero_signal = $zero")
        params["zero"] = bool(zero_signal)
    if not words.exact:  # the candidates' texts checked: only theirs are read
        where.append(f"contains({SQL_LOWER}(a.text), $q)")
        params["q"] = lower(contains)
    sql = f"""WITH cand AS ({candidates_sql(words)})
              SELECT a.step, a."group", a.answer, count(*) OVER () AS total
              FROM read_parquet($answers, file_row_number = true) AS a
              SEMI JOIN cand ON a.step = cand.c_step AND a.file_row_number = cand.c_row
              {"WHERE " + " AND ".join(where) if where else ""} {ranking}"""
    with ExitStack() as stack:
        index = stack.enter_context(run._reading("words", numbers))
        answers = stack.enter_context(run._reading("answers", numbers))
        files = Files([*index.paths, *answers.paths], {**index.names, **answers.names})
        params.update(words=index.paths, answers=answers.paths)
        return run._rows(sql, files, params)


def pair_keys(
    run: AnalysedRun,
    pair: tuple[str, str],
    direction: str,
    page: str,
    contains: str | None,
    zero_signal: bool | None,
    numbers: list[int],
) -> list[dict[str, Any]]:
    """Keys ranked by the disagreement of ``pair`` (tokens one selects and the other does
    not), counted from every token's selections: the tokens files' two selection columns are
    read (the stored ``disagreement`` is the pair chosen at analysis only), each row with
    ``pair_disagreement``."""
    a, b = (ident(f"selected_{m}") for m in pair)
    where, params = run._answer_filter(contains, zero_signal)
    sql = f"""WITH d AS (
                SELECT step AS d_step, "group" AS d_group, answer AS d_answer,
                       count_if({a} <> {b}) AS pair_disagreement
                FROM read_parquet(?) GROUP BY ALL)
              SELECT step, "group", answer, pair_disagreement, count(*) OVER () AS total
              FROM read_parquet(?) JOIN d
                ON step = d_step AND "group" = d_group AND answer = d_answer
              {where}
              ORDER BY pair_disagreement {direction} NULLS LAST, step, "group", answer {page}"""
    with ExitStack() as stack:
        tokens = stack.enter_context(run._reading("tokens", numbers))
        answers = stack.enter_context(run._reading("answers", numbers))
        files = Files([*tokens.paths, *answers.paths], {**tokens.names, **answers.names})
        return run._rows(sql, files, [tokens.paths, answers.paths, *params])
