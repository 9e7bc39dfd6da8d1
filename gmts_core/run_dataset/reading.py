"""Reading an analysed run's files where their bytes cannot become anything but data.

What every query of :mod:`gmts_core.run_dataset.query` goes through:

- :func:`checked_footer`: a file's Parquet footer checked before any data is read — its row
  count, row groups and decoded bytes within the table's budget (:data:`BUDGETS`), every
  column of the format's schema present with its type;
- :func:`connect`: a DuckDB connection of the query's own, its configuration locked after it
  is set — external access off, the only readable paths that query's descriptors (opened by
  :class:`~gmts_core.run_dataset.folder.DatasetFolder`, read as ``/proc/self/fd/N``, never by
  name), no extensions, threads, memory and spill folder bounded;
- :func:`rows`: one statement, its parameters bound, DuckDB's errors with each descriptor's
  name replaced by the file's path relative to the run root.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
from duckdb.func import PythonUDFType

from gmts_core.errors import InvalidInputError
from gmts_core.run_dataset.folder import fd_path
from gmts_core.run_dataset.schema import TOP_K, TOP_ORDERS, schema
from gmts_core.run_dataset.text_index import SQL_LOWER, lower_texts

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
    "words": Budget(4 * GiB, 1 << 26, 1024),  # the answers' word index, first form
    "postings": Budget(4 * GiB, 4096, 4096),  # its second form: a row per 1 M words
}


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
class Files:
    """The descriptors one query reads, by their /proc/self/fd names (and names to show)."""

    paths: list[str] = field(default_factory=list)
    names: dict[str, str] = field(default_factory=dict)


def checked_footer(fd: int, table: str, methods: tuple[str, ...], where: str) -> None:
    """The Parquet file on ``fd``: its footer within the table's budget and its columns
    those of the format's schema (InvalidInputError naming the first that is not)."""
    budget = BUDGETS[table]
    try:
        with pq.ParquetFile(fd_path(fd)) as file:
            meta = file.metadata
            arrow = file.schema_arrow
    except (OSError, ValueError, pa.ArrowException) as exc:
        raise InvalidInputError(f"{where}: not a readable Parquet file ({short(exc)})") from None
    if meta.num_rows > budget.rows or meta.num_row_groups > budget.row_groups:
        raise InvalidInputError(
            f"{where}: {meta.num_rows:,} rows in {meta.num_row_groups:,} row groups, over "
            f"the {budget.rows:,} rows and {budget.row_groups:,} row groups it may hold"
        )
    size = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
    if size > budget.bytes:
        raise InvalidInputError(f"{where}: {size:,} bytes once decoded, over {budget.bytes:,}")
    for want in schema(table, methods):
        i = arrow.get_field_index(want.name)
        if i < 0:
            raise InvalidInputError(f"{where}: no column '{want.name}'")
        got = arrow.field(i).type
        if not _same_type(got, want.type):
            raise InvalidInputError(
                f"{where}: column '{want.name}' is {_short_type(got)}, not {want.type}"
            )


def connect(files: Files, limits: QueryLimits, profile: bool) -> duckdb.DuckDBPyConnection:
    """A connection that can read these descriptors and nothing else, its settings locked."""
    con = duckdb.connect(
        ":memory:",
        config={
            "threads": limits.threads,
            "memory_limit": f"{limits.memory_limit_mb}MB",
            "autoinstall_known_extensions": False,
            "autoload_known_extensions": False,
        },
    )
    try:  # the word index's case rule, for a text search's scan (text_index.lower_texts)
        varchar = duckdb.sqltype("VARCHAR")
        con.create_function(SQL_LOWER, lower_texts, [varchar], varchar, type=PythonUDFType.ARROW)
        allowed = ", ".join(_literal(p) for p in files.paths)
        con.execute(f"SET allowed_paths = [{allowed}]")
        if profile:
            con.execute("PRAGMA enable_profiling = 'no_output'")
            con.execute("SET profiling_mode = 'detailed'")
        if limits.temp_dir:
            con.execute(f"SET temp_directory = {_literal(limits.temp_dir)}")
        else:
            con.execute("SET max_temp_directory_size = '0B'")
        con.execute("SET enable_external_access = false")
        con.execute("SET lock_configuration = true")
    except BaseException:
        con.close()
        raise
    return con


def rows(
    sql: str,
    files: Files,
    params: list[Any] | dict[str, Any],
    limits: QueryLimits,
    run: str,
    profile: bool,
) -> tuple[list[dict[str, Any]], Scan | None]:
    """The rows of one statement over ``files`` (and, with ``profile``, what it scanned)."""
    if not files.paths:
        return [], None
    con = connect(files, limits, profile)
    scan = None
    try:
        cur = con.execute(sql, params)
        names = [d[0] for d in cur.description]
        out = [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
        if profile:
            info = json.loads(con.get_profiling_information(format="json"))
            scan = Scan.from_profile(info, files.names)
    except duckdb.Error as exc:  # a damaged or foreign file in the dataset
        message = short(exc)
        for path, name in files.names.items():
            message = message.replace(path, name)
        raise InvalidInputError(f"{run}: the dataset cannot be read ({message})") from None
    finally:
        con.close()
    return out, scan


STRINGS = {"prompt", "text"}  # the schemas' free-text columns (one token's text included)


def cut(expr: str, n: int) -> str:
    """SQL of ``expr`` (a string) cut to ``n`` characters, with a marker saying so."""
    n = int(n)
    return (
        f"CASE WHEN length({expr}) > {n} THEN left({expr}, {n}) || ' …[cut: ' || "
        f"length({expr}) || ' characters]' ELSE {expr} END"
    )


def select_list(names: Sequence[str], n: int) -> str:
    """SQL selecting these schema columns: each quoted as an identifier, texts cut."""
    out = []
    for name in names:
        quoted = ident(name)
        out.append(f"{cut(quoted, n)} AS {quoted}" if name in STRINGS else quoted)
    return ", ".join(out)


def ident(name: str) -> str:
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


def short(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text if len(text) <= 300 else text[:297] + "..."
