"""Analysed-run queries by name, as JSON in and JSON out: what a reading process answers.

The server never opens a dataset itself: it sends ``{"query": name, "params": ...}`` to a
reading process (:mod:`gmts_core.runs.worker`, under its memory, CPU and time limits), which
opens the dataset folder (:class:`~gmts_core.run_dataset.folder.DatasetFolder`) below the run
root it was given, answers with :func:`answer`, and closes it. Parameters are checked here
again (types and ranges): the caller's validation is not trusted to have run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from gmts_core.errors import InvalidInputError
from gmts_core.run_dataset import steps_index
from gmts_core.run_dataset.folder import DatasetFolder
from gmts_core.run_dataset.query import AnalysedRun, QueryLimits
from gmts_core.run_dataset.schema import schema
from gmts_core.run_dataset.text_index import lower

INT32 = 2**31 - 1


def _int(params: dict[str, Any], name: str, default: int | None = None, top: int = INT32) -> int:
    value = params.get(name, default)
    if type(value) is not int or not 0 <= value <= top:
        raise InvalidInputError(f"{name} must be an integer in 0-{top}")
    return value


def _span(params: dict[str, Any]) -> tuple[int, int] | None:
    span = params.get("steps")
    if span is None:
        return None
    if not (isinstance(span, list) and len(span) == 2 and all(type(v) is int for v in span)):
        raise InvalidInputError("steps must be [first, last]")
    return (span[0], span[1])


def _info(run: AnalysedRun, params: dict[str, Any]) -> dict[str, Any]:
    """The manifest and the step summaries that changed since ``known`` ({name: key})."""
    known = params.get("known") or {}
    entries = run.folder.steps("steps")
    changed: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    new = [e for e in entries if known.get(e.name) != list(e.key)]
    indexed = steps_index.read(run.folder, new, schema("steps", run.methods).names) if new else {}
    for entry in new:
        try:
            row = indexed.get(entry.name) or run.summary(entry)
            changed[entry.name] = [list(entry.key), row]
        except InvalidInputError as exc:
            skipped[entry.name] = str(exc)
    return {
        "version": run.manifest.version,
        "methods": list(run.methods),
        "names": [e.name for e in entries],
        "changed": changed,
        "skipped": skipped,
    }


def _groups(run: AnalysedRun, p: dict[str, Any]) -> dict[str, Any]:
    rows = run.step_groups(_int(p, "step"), _int(p, "offset", 0), _int(p, "limit", 50))
    return {"rows": rows}


def _answers(run: AnalysedRun, p: dict[str, Any]) -> dict[str, Any]:
    return {"rows": run.group_answers(_int(p, "step"), _int(p, "group"))}


def _tokens(run: AnalysedRun, p: dict[str, Any]) -> dict[str, Any]:
    rows = run.answer_tokens(
        _int(p, "step"),
        _int(p, "group"),
        _int(p, "answer"),
        _int(p, "offset", 0),
        _int(p, "limit", 1000),
    )
    total = rows[0].pop("total") if rows else None
    for row in rows[1:]:
        row.pop("total", None)
    return {"rows": rows, "total": total}


def _rank_answers(run: AnalysedRun, p: dict[str, Any]) -> dict[str, Any]:
    contains = p.get("contains")
    zero = p.get("zero_signal")
    if contains is not None and (not isinstance(contains, str) or len(contains) > 200):
        raise InvalidInputError("contains must be text of at most 200 characters")
    if zero is not None and not isinstance(zero, bool):
        raise InvalidInputError("zero_signal must be true, false or absent")
    pair = p.get("pair")
    if pair is not None and not (
        isinstance(pair, list) and len(pair) == 2 and all(isinstance(m, str) for m in pair)
    ):
        raise InvalidInputError("pair must be two method names")
    rows, total = run.ranked_answers(
        str(p.get("by", "reward")),
        bool(p.get("descending", True)),
        _int(p, "limit", 50),
        _int(p, "offset", 0, 10_000_000),
        contains or None,
        zero,
        _span(p),
        (pair[0], pair[1]) if pair else None,
    )
    return {"rows": rows, "total": total}


def _rank_tokens(run: AnalysedRun, p: dict[str, Any]) -> dict[str, Any]:
    rows = run.rank_tokens(
        str(p.get("by", "gamma")), _int(p, "limit", 50), _int(p, "offset", 0), _span(p)
    )
    return {"rows": rows}


def _zero_signal(run: AnalysedRun, p: dict[str, Any]) -> dict[str, Any]:
    rows = run.zero_signal_groups(_int(p, "limit", 50), _int(p, "offset", 0), _span(p))
    return {"rows": rows}


QUERIES: dict[str, Callable[[AnalysedRun, dict[str, Any]], dict[str, Any]]] = {
    "info": _info,
    "groups": _groups,
    "answers": _answers,
    "tokens": _tokens,
    "rank_answers": _rank_answers,
    "rank_tokens": _rank_tokens,
    "zero_signal": _zero_signal,
}


def warm() -> None:
    """A reading process's one-time costs, paid before it says it is ready rather than on
    its first query's clock: pyarrow's compute functions (their first call imports pandas),
    Parquet reading and a DuckDB connection's first statement over an Arrow table."""
    lower("Warm up")
    texts = pa.array(["Warm up", None])
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table({"text": texts}), sink)
    table = pq.read_table(pa.BufferReader(sink.getvalue()))
    con = duckdb.connect(":memory:", config={"threads": 1})
    try:
        con.register("warm", table)
        con.execute("SELECT lower(text) FROM warm ORDER BY text LIMIT 1").fetchall()
    finally:
        con.close()


def answer(
    parent: str, name: str, query: str, params: dict[str, Any], limits: QueryLimits
) -> dict[str, Any]:
    """Query ``query`` of the analysed run ``name`` in the folder ``parent`` (a run root)."""
    if query not in QUERIES:
        raise InvalidInputError(f"unknown analysed-run query {query!r}")
    with DatasetFolder(parent, name) as folder:
        run = AnalysedRun(folder, limits)
        return QUERIES[query](run, params)
