"""A run-wide text search through the word index's postings, ranked without SQL.

Per step: the answers that match, from the index's third form
(:mod:`gmts_core.run_dataset.positions`: a word's answer rows, or a phrase's words' positions
and separators, exact, no text read; a phrase of more than ``MAX_RUNS`` runs: its first word's
answers, their texts checked) or its second (:func:`postings.matching`, a byte search of
the step's words, then only the matched words' postings; where that is not exact, a phrase,
the texts of the row groups holding candidates, checked as the scan checks them: lower-cased,
literal), then the zero-signal filter and the order column read for those steps alone (three
narrow columns). Then one ranking of the matches in NumPy, in the
order the SQL path gives: ``ORDER BY key DESC|ASC NULLS LAST, step, group, answer`` (NaN above
every number, as DuckDB orders it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, ExitStack
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from gmts_core.errors import InvalidInputError
from gmts_core.run_dataset.folder import DatasetFolder, step_name
from gmts_core.run_dataset.positions import PositionsFile, phrase, phrase_mask, word_mask
from gmts_core.run_dataset.postings import matching
from gmts_core.run_dataset.reading import BUDGETS, Files
from gmts_core.run_dataset.text_index import WordPlan, lower, lower_texts

SEARCH_THREADS = 2  # steps searched at once by a run-wide search (its wall time on 2 cores)
# an answer order's SQL (query.ANSWER_ORDERS, and "step" for a count) -> (column, absolute)
ORDER_COLUMNS: dict[str, tuple[str, bool]] = {
    "reward": ("reward", False),
    "advantage": ("advantage", False),
    "abs(advantage)": ("advantage", True),
    "length": ("length", False),
    "disagreement": ("disagreement", False),
    "entropy_mean": ("entropy_mean", False),
    "gamma_sum": ("gamma_sum", False),
    "step": ("step", False),
}


class Reader(Protocol):
    folder: DatasetFolder

    def _reading(self, table: str, steps: Sequence[int]) -> AbstractContextManager[Files]: ...


Found = dict[str, np.ndarray]  # step, group, answer, value, null: one entry per match


def _by_step(files: Files) -> dict[str, tuple[str, str]]:
    """step file name -> (descriptor path, name to show)."""
    return {where.rsplit("/", 1)[-1]: (path, where) for path, where in files.names.items()}


def matches(
    run: Reader,
    words: WordPlan,
    order: tuple[str, bool],
    contains: str,
    zero_signal: bool | None,
    numbers: list[int],
    table: str = "postings",
) -> Found:
    """Every match of the search in these steps, with its order value: from the word index's
    ``table`` ("positions": exact, no text read; "postings": a phrase's candidates checked
    against their texts)."""
    column, absolute = order
    with ExitStack() as stack:
        answers = _by_step(stack.enter_context(run._reading("answers", numbers)))
        if table == "positions":
            index = {step_name(n): _positions(run, n, words, contains) for n in numbers}
        else:
            postings = _by_step(stack.enter_context(run._reading("postings", numbers)))
            index = {name: _postings(*where, words, contains) for name, where in postings.items()}
        todo = [
            (step, name)
            for step, name in ((n, step_name(n)) for n in numbers)
            if name in index and name in answers  # a file missing or refused: left out
        ]

        def one(item: tuple[int, str]) -> Found | None:
            step, name = item
            return _step(step, index[name], answers[name], column, zero_signal)

        with ThreadPoolExecutor(SEARCH_THREADS) as pool:  # NumPy and reads release the GIL
            parts = [found for found in pool.map(one, todo) if found is not None]
    if not parts:
        return {k: np.zeros(0) for k in ("step", "group", "answer", "value", "null")}
    out = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    if absolute:
        out["value"] = np.abs(out["value"])
    return out


# a step's matching: its answers file and their count -> which of its answers match (a mask)
Matcher = Callable[[pq.ParquetFile, int], np.ndarray]


def _postings(path: str, where: str, words: WordPlan, contains: str) -> Matcher:
    def match(file: pq.ParquetFile, rows: int) -> np.ndarray:
        mask = matching(path, where, rows, words)
        if not words.exact and mask.any():
            mask &= _texts_hold(file, np.flatnonzero(mask), contains, rows)
        return mask

    return match


def _positions(run: Reader, step: int, words: WordPlan, contains: str) -> Matcher:
    """The positions file's matching of a step (opened when its step is searched, closed
    after: one descriptor at a time)."""
    name = step_name(step).replace(".parquet", ".idx")
    p = phrase(contains)

    def match(file: pq.ParquetFile, rows: int) -> np.ndarray:
        with run.folder.opened("positions", name, max_bytes=BUDGETS["postings"].bytes) as fd:
            index = PositionsFile(fd, run.folder.where("positions", name), rows)
            if p is not None:  # a phrase: exact from the index
                return phrase_mask(index, p)
            # one word run: its answer rows, exact; a phrase of more than MAX_RUNS runs: its
            # first word's answers (a superset), their texts checked
            mask = word_mask(index, words.conditions[0], words.params[0])
        if not words.exact and mask.any():
            mask &= _texts_hold(file, np.flatnonzero(mask), contains, rows)
        return mask

    return match


def _step(
    step: int,
    match: Matcher,
    answers: tuple[str, str],
    column: str,
    zero_signal: bool | None,
) -> Found | None:
    path, where = answers
    try:
        file = pq.ParquetFile(path)
        meta = file.metadata
        mask = match(file, meta.num_rows)
        if not mask.any():
            return None
        wanted = ["group", "answer", *([column] if column != "step" else []), "zero_signal"]
        table = file.read(columns=wanted)
        if zero_signal is not None:
            mask &= table["zero_signal"].fill_null(not zero_signal).to_numpy() == zero_signal
    except InvalidInputError:
        raise
    except (OSError, ValueError, pa.ArrowException) as exc:
        raise InvalidInputError(f"{where}: cannot be read ({type(exc).__name__})") from None
    rows = np.flatnonzero(mask)
    if column == "step":
        values, null = np.full(len(rows), float(step)), np.zeros(len(rows), bool)
    else:
        col = table[column].take(pa.array(rows))
        null = col.is_null().to_numpy(zero_copy_only=False)
        values = col.fill_null(0).to_numpy(zero_copy_only=False).astype(np.float64)
    return {
        "step": np.full(len(rows), step, np.int64),
        "group": table["group"].take(pa.array(rows)).to_numpy().astype(np.int64),
        "answer": table["answer"].take(pa.array(rows)).to_numpy().astype(np.int64),
        "value": values,
        "null": null,
    }


def _texts_hold(file: pq.ParquetFile, rows: np.ndarray, contains: str, total: int) -> np.ndarray:
    """Of the answers at ``rows``, which hold ``contains``: only the row groups holding them
    are read (a mask over the step's answers)."""
    meta = file.metadata
    bounds = np.cumsum([0, *(meta.row_group(i).num_rows for i in range(meta.num_row_groups))])
    groups = np.unique(np.searchsorted(bounds, rows, side="right") - 1)
    held = np.zeros(total, bool)
    needle = lower(contains)
    for g in groups.tolist():
        texts = file.read_row_group(g, columns=["text"])["text"]
        hit = pc.match_substring(lower_texts(texts.fill_null("")), needle).to_numpy(
            zero_copy_only=False
        )
        held[bounds[g] : bounds[g] + len(hit)] = hit
    return held


def ranked(found: Found, descending: bool, limit: int, offset: int) -> list[dict[str, Any]]:
    """The page ``[offset, offset + limit)`` of the matches in the SQL path's order, each key
    with ``total``."""
    n = len(found["step"])
    value, null = found["value"], found["null"].astype(bool)
    nan = np.isnan(value) & ~null
    plain = np.where(nan | null, 0.0, value)
    # one number that never puts a later row before an earlier one: for the first cut
    rough = np.where(null, np.inf, np.where(nan, -np.inf if descending else np.inf, plain))
    if descending:
        rough = np.where(null | nan, rough, -plain)
    want = min(n, offset + limit)
    if want == 0:
        return []
    pick = np.arange(n)
    if want < n:
        cut = np.partition(rough, want - 1)[want - 1]
        pick = np.flatnonzero(rough <= cut)
    nan_key = ~nan[pick] if descending else nan[pick]
    keys = (
        found["answer"][pick],
        found["group"][pick],
        found["step"][pick],
        -plain[pick] if descending else plain[pick],
        nan_key,
        null[pick],
    )
    order = pick[np.lexsort(keys)][offset : offset + limit]
    return [
        {
            "step": int(found["step"][i]),
            "group": int(found["group"][i]),
            "answer": int(found["answer"][i]),
            "total": n,
        }
        for i in order
    ]


def page_rows(
    run: Reader, keys: list[dict[str, Any]], columns: Sequence[str], max_chars: int
) -> dict[tuple[int, int, int], dict[str, Any]]:
    """The answers rows of a page's ``keys`` ({(step, group, answer): row}, ``columns`` of
    each, texts cut to ``max_chars`` as :func:`~gmts_core.run_dataset.reading.cut` cuts
    them): per step, only the row groups whose ``group`` statistics admit a key are read."""
    by_step: dict[int, set[tuple[int, int]]] = {}
    for k in keys:
        by_step.setdefault(int(k["step"]), set()).add((int(k["group"]), int(k["answer"])))
    found: dict[tuple[int, int, int], dict[str, Any]] = {}
    with run._reading("answers", sorted(by_step)) as files:
        for name, (path, where) in _by_step(files).items():
            step = int(name[5:].split(".")[0])
            wanted = by_step.get(step, set())
            try:
                file = pq.ParquetFile(path)
                table = file.read_row_groups(_groups_of(file, wanted), columns=list(columns))
            except (OSError, ValueError, pa.ArrowException) as exc:
                raise InvalidInputError(f"{where}: cannot be read ({type(exc).__name__})") from None
            codes = {g * 2**32 + a for g, a in wanted}
            mine = pc.equal(table["step"], step).fill_null(False).to_numpy(zero_copy_only=False)
            group = table["group"].fill_null(-1).to_numpy().astype(np.int64)
            answer = table["answer"].fill_null(-1).to_numpy().astype(np.int64)
            keep = mine & np.isin(group * 2**32 + answer, np.array(sorted(codes), np.int64))
            for row in table.filter(pa.array(keep)).to_pylist():  # the page's rows alone
                code = (int(row["step"]), int(row["group"]), int(row["answer"]))
                found[code] = {k: _cut(row[k], max_chars) for k in columns}
    return found


def _groups_of(file: pq.ParquetFile, wanted: set[tuple[int, int]]) -> list[int]:
    """The row groups whose ``group`` min/max admit one of ``wanted`` (all without them)."""
    meta = file.metadata
    column = meta.schema.to_arrow_schema().get_field_index("group")
    groups = np.array(sorted({g for g, _ in wanted}))
    out = []
    for i in range(meta.num_row_groups):
        stats = meta.row_group(i).column(column).statistics if column >= 0 else None
        if stats is None or not stats.has_min_max:
            out.append(i)
            continue
        first = int(np.searchsorted(groups, stats.min, side="left"))  # the first g >= min
        if first < len(groups) and groups[first] <= stats.max:
            out.append(i)
    return out


def _cut(value: Any, n: int) -> Any:
    if isinstance(value, str) and len(value) > n:
        return f"{value[:n]} …[cut: {len(value)} characters]"
    return value
