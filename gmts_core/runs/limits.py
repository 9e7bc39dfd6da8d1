"""Size budgets for reading runs, checked while streaming, before anything is parsed or tokenized.

A run file's size is chosen by whoever wrote it, so every reader works inside a
:class:`RunLimits` budget: bytes of one file, of one JSONL line and of one step; characters of
one text field (a prompt or a completion); answers of one group; rows of one step; entries of
one folder; steps of one run. Each is checked *before* the work it bounds: a JSONL line is read
with a bounded ``readline`` (a 50 MB line is refused after reading the limit, never held
whole), a parquet file's footer (row counts, column-chunk byte sizes) is checked before any
column is read, string cells are measured in Arrow (C, still dictionary-encoded) before they
become Python strings, a folder listing stops after the limit, and a single JSONL file's index
stops at its step limit. A budget exceeded raises :class:`RunLimitError` naming the limit, its
value and the setting that raises it (``GMTS_RUN_*`` for the server, ``--run-*`` options for
``gmts analyze-run``, whose defaults are larger: :data:`CLI_LIMITS`).

Long loops also call :func:`gmts_core.progress.checkpoint`, so a reading whose client went away
stops at the next line, row group or folder entry.
"""

from __future__ import annotations

import codecs
import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pyarrow as pa
import pyarrow.compute as pc

from gmts_core.errors import InvalidInputError
from gmts_core.progress import checkpoint
from gmts_core.run_limits import CLI_LIMITS as CLI_LIMITS
from gmts_core.run_limits import LIMIT_NAMES as LIMIT_NAMES
from gmts_core.run_limits import RunLimitError as RunLimitError
from gmts_core.run_limits import RunLimits
from gmts_core.runs.errors import RunFormatError
from gmts_core.runs.files import confined_folder, resolved_inside


def file_size(path: Path, limits: RunLimits, name: str = "max_file_bytes") -> int:
    """``path``'s size in bytes, refused past limit ``name`` (a stat: nothing is read), and
    refused like an open (UnsafeRunFileError) when it leads out of ``limits.root``: the size
    of a file outside the root is never told."""
    base, parts = resolved_inside(path, limits)
    size = os.stat(os.path.join(base, *parts)).st_size
    limits.check(name, size, f"{path}", f"the file has {size:,} bytes")
    return size


def text_encoding(head: bytes) -> str:
    """The encoding of a JSON text file from its first bytes: ``utf-16-le`` or ``utf-16-be``
    (a BOM, or the zero bytes of ASCII text in UTF-16), else ``utf-8``. JSON allows all three."""
    if head.startswith(codecs.BOM_UTF32_LE) or head[:2] == b"\0\0":
        return "utf-8"  # UTF-32: not read (its lines fail as not valid JSON)
    if head.startswith(codecs.BOM_UTF16_LE):
        return "utf-16-le"
    if head.startswith(codecs.BOM_UTF16_BE):
        return "utf-16-be"
    if len(head) >= 2 and head[0] == 0 and head[1] != 0:
        return "utf-16-be"
    if len(head) >= 2 and head[0] != 0 and head[1] == 0:
        return "utf-16-le"
    return "utf-8"


def bounded_lines(
    f: IO[bytes], limits: RunLimits, path: Path, first_line: int = 1, encoding: str = "utf-8"
) -> Iterator[tuple[int, bytes]]:
    """(line number, raw line) of a binary file, each line read with a bounded ``readline``:
    a line longer than ``max_line_bytes`` is refused after reading that many bytes of it.
    In UTF-16 a line ends at a newline code unit (two bytes, at an even offset)."""
    cap = limits.max_line_bytes
    newline = "\n".encode(encoding)
    number = first_line - 1
    while True:
        raw = b""
        while len(raw) <= cap:
            piece = f.readline(cap + 1 - len(raw))
            raw += piece
            if not piece:
                break
            if newline == b"\n\x00" and len(raw) % 2 == 1 and raw.endswith(b"\n"):
                raw += f.read(1)  # UTF-16 LE: the newline's second byte
            if len(raw) % len(newline) == 0 and raw.endswith(newline):
                break
        if not raw:
            return
        number += 1
        if len(raw) > cap:
            raise limits.exceeded(
                "max_line_bytes", f"{path}:{number}", f"the line is longer than {cap:,} bytes"
            )
        checkpoint()
        yield number, raw


def scan_folder(folder: Path, limits: RunLimits) -> list[os.DirEntry[str]]:
    """The entries of ``folder`` (unsorted), refused once there are more than
    ``max_folder_entries``: the listing stops there instead of reading them all. A folder
    that resolves outside ``limits.root`` is refused
    (:func:`~gmts_core.runs.files.confined_folder`)."""
    cap = limits.max_folder_entries
    out: list[os.DirEntry[str]] = []
    confined_folder(folder, limits)  # not a link out of the run root, not a FIFO
    with os.scandir(folder) as it:
        for entry in it:
            out.append(entry)
            if len(out) > cap:
                raise limits.exceeded(
                    "max_folder_entries", f"{folder}", f"the folder has more than {cap:,} entries"
                )
            if len(out) % 1024 == 0:
                checkpoint()
    return out


def check_text(value: str, limits: RunLimits, where: str, what: str) -> str:
    """``value`` itself, refused past ``max_field_chars`` characters (before tokenizing), or
    (InvalidInputError naming ``where`` and ``what``) if it is not text that UTF-8 can write."""
    if not isinstance(value, str):
        raise InvalidInputError(f"{where}: the {what} must be text, got {type(value).__name__}")
    if len(value) > limits.max_field_chars:
        raise limits.exceeded("max_field_chars", where, f"the {what} has {len(value):,} characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInputError(
            f"{where}: the {what} holds a lone surrogate (not valid Unicode)"
        ) from None
    return value


# Each value of a column costs at least this many bytes once decoded (an 8-byte number, or a
# string's offset and index): run-length encoding stores a million of them in a few bytes.
DECODED_BYTES_PER_VALUE = 8
# row groups of one parquet step file: a writer's are few (pandas and polars write one per
# 64 Mi rows); thousands of one-row groups would cost a reading per group
MAX_ROW_GROUPS = 1024


def check_parquet_footer(metadata: Any, columns: list[str], limits: RunLimits, path: Path) -> None:
    """Refuse a parquet file by its footer alone: rows of the step, and the bytes of the
    columns that will be read (summed over row groups): for each column chunk the larger of
    its uncompressed bytes and its values (leaf values, at any nesting depth: a map or list
    cell holds many) times :data:`DECODED_BYTES_PER_VALUE`."""
    limits.check("max_step_rows", metadata.num_rows, f"{path}", f"{metadata.num_rows:,} rows")
    if metadata.num_row_groups > MAX_ROW_GROUPS:  # each is read (and checked) on its own
        raise RunFormatError(
            path,
            None,
            f"{metadata.num_row_groups:,} row groups; a step file of at most "
            f"{MAX_ROW_GROUPS:,} is read (rewrite it with larger row groups)",
        )
    wanted = set(columns)
    total = 0
    for rg in range(metadata.num_row_groups):
        group = metadata.row_group(rg)
        for c in range(group.num_columns):
            chunk = group.column(c)
            if chunk.path_in_schema.split(".")[0] in wanted:
                values = max(int(chunk.num_values), 0) * DECODED_BYTES_PER_VALUE
                total += max(int(chunk.total_uncompressed_size), values, 0)
        checkpoint()
    limits.check(
        "max_step_bytes", total, f"{path}", f"its columns hold {total:,} bytes once decoded"
    )


class StringBudget:
    """The strings of a parquet step, measured in Arrow one row group at a time (still
    dictionary-encoded: a dictionary value counts once per row using it), before the next is
    read and before ``to_pylist`` makes Python strings: refused when a cell (at any nesting
    depth: lists, fixed-size lists, maps, structs, dictionaries) is over ``max_field_chars``,
    when all of them, expanded, pass ``max_step_bytes``, or when a string is not UTF-8."""

    def __init__(self, limits: RunLimits, path: Path) -> None:
        self.limits, self.path, self.total = limits, path, 0

    def add(self, table: Any) -> None:
        for name in table.column_names:
            column = table.column(name)
            for chunk in _chunks(column):
                try:  # invalid UTF-8 in a string column (checked in C, before Python sees it)
                    chunk.validate(full=True)
                except pa.ArrowInvalid as exc:
                    raise InvalidInputError(
                        f"{self.path}: column {name!r} holds a value that is not valid ({exc})"
                    ) from None
            for leaf in _string_leaves(column.type, column):
                for chunk in _chunks(leaf):
                    longest, expanded = _lengths(chunk)
                    if longest > self.limits.max_field_chars:
                        raise self.limits.exceeded(
                            "max_field_chars",
                            f"{self.path}",
                            f"a cell of column {name!r} has {longest:,} characters",
                        )
                    self.total += expanded
                    self.limits.check(
                        "max_step_bytes",
                        self.total,
                        f"{self.path}",
                        f"its text cells expand to {self.total:,} bytes or more",
                    )
            checkpoint()


def _lengths(chunk: Any) -> tuple[int, int]:
    """(longest cell, sum of all cells) of one string/binary array, in characters for
    strings (bytes for binary); a dictionary array is measured on its dictionary."""

    def lengths(values: Any) -> Any:
        if pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
            return pc.utf8_length(values)
        return pc.binary_length(values)

    if len(chunk) == 0:
        return 0, 0
    if pa.types.is_dictionary(chunk.type):
        if len(chunk.dictionary) == 0:
            return 0, 0
        per_value = lengths(chunk.dictionary)
        used = pc.take(per_value, chunk.indices)
        return int(pc.max(per_value).as_py() or 0), int(pc.sum(used).as_py() or 0)
    per_cell = lengths(chunk)
    return int(pc.max(per_cell).as_py() or 0), int(pc.sum(per_cell).as_py() or 0)


def _string_leaves(kind: Any, array: Any) -> Iterator[Any]:
    """The string/binary arrays inside ``array``: lists (variable, large, fixed-size) and maps
    flattened (a map's keys and values both), struct fields taken, dictionaries of nested
    values expanded through their dictionary (each value counted once per row using it)."""
    if pa.types.is_dictionary(kind):
        if _is_text(kind.value_type):
            yield array
        else:  # a dictionary of lists or structs: the values each row uses
            taken = [c.dictionary.take(c.indices) for c in _chunks(array)]
            yield from _string_leaves(kind.value_type, _chunked(taken, kind.value_type))
    elif _is_text(kind):
        yield array
    elif pa.types.is_map(kind):
        chunks = _chunks(array)
        yield from _string_leaves(kind.key_type, _chunked([c.keys for c in chunks], kind.key_type))
        yield from _string_leaves(
            kind.item_type, _chunked([c.items for c in chunks], kind.item_type)
        )
    elif (
        pa.types.is_list(kind)
        or pa.types.is_large_list(kind)
        or pa.types.is_fixed_size_list(kind)
        or _is_list_view(kind)
    ):
        flat = _chunked([c.flatten() for c in _chunks(array)], kind.value_type)
        yield from _string_leaves(kind.value_type, flat)
    elif pa.types.is_struct(kind):
        children = [c.flatten() for c in _chunks(array)]  # offsets and parent nulls applied
        for i in range(kind.num_fields):
            child = _chunked([c[i] for c in children], kind.field(i).type)
            yield from _string_leaves(kind.field(i).type, child)
    elif pa.types.is_union(kind) or pa.types.is_run_end_encoded(kind):
        raise InvalidInputError(f"a column of type {kind} is not read (unions, run-end encoded)")


def _is_list_view(kind: Any) -> bool:
    tests = (getattr(pa.types, n, None) for n in ("is_list_view", "is_large_list_view"))
    return any(t is not None and t(kind) for t in tests)


def _chunked(chunks: list[Any], kind: Any) -> Any:
    return pa.chunked_array(chunks, type=kind)


def _is_text(kind: Any) -> bool:
    return bool(
        pa.types.is_string(kind)
        or pa.types.is_large_string(kind)
        or pa.types.is_binary(kind)
        or pa.types.is_large_binary(kind)
        or pa.types.is_fixed_size_binary(kind)
        or getattr(pa.types, "is_string_view", lambda k: False)(kind)
        or getattr(pa.types, "is_binary_view", lambda k: False)(kind)
    )


def _chunks(array: Any) -> list[Any]:
    return list(array.chunks) if hasattr(array, "chunks") else [array]
