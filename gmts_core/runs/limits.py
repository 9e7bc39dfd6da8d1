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

Long loops also call :func:`gmts_core.cancel.checkpoint`, so a reading whose client went away
stops at the next line, row group or folder entry.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, fields
from pathlib import Path
from typing import IO, Any

import pyarrow as pa
import pyarrow.compute as pc

from gmts_core.cancel import checkpoint
from gmts_core.errors import LimitExceededError

MiB = 1 << 20


@dataclass(frozen=True)
class RunLimits:
    """How much of a run one reading may touch (defaults: the server's).

    ``setting_prefix``/``setting_style`` only shape the error messages: ``env`` names the
    ``GMTS_RUN_MAX_*`` environment variable, ``cli`` the ``--run-max-*`` option.
    """

    max_file_bytes: int = 1024 * MiB  # one file (a single-file JSONL run is read whole to index)
    max_line_bytes: int = 8 * MiB  # one JSONL line (a ROLL step is one line)
    max_step_bytes: int = 256 * MiB  # one step: its file, its lines, its parquet columns
    max_field_chars: int = 64_000  # one prompt or completion, before any tokenizer sees it
    max_group_answers: int = 512  # answers sampled for one prompt in one step
    max_step_rows: int = 16_384  # lines / parquet rows / samples of one step
    max_folder_entries: int = 10_000  # entries listed in one folder (more: refused)
    max_run_steps: int = 100_000  # steps one run's index may hold (a single JSONL file's)
    setting_style: str = "env"

    def setting(self, name: str) -> str:
        """The setting that raises limit ``name`` (a field of this class)."""
        if self.setting_style == "cli":
            return "--run-" + name.replace("_", "-")
        return "GMTS_RUN_" + name.upper()

    def exceeded(self, name: str, where: str, what: str) -> RunLimitError:
        value = getattr(self, name)
        return RunLimitError(name, value, self.setting(name), where, what)

    def check(self, name: str, amount: int, where: str, what: str) -> None:
        """Raise :class:`RunLimitError` if ``amount`` is over limit ``name``."""
        if amount > getattr(self, name):
            raise self.exceeded(name, where, what)


#: ``gmts analyze-run``'s defaults: a person's own machine, one run at a time.
CLI_LIMITS = RunLimits(
    max_file_bytes=64 * 1024 * MiB,
    max_line_bytes=256 * MiB,
    max_step_bytes=4096 * MiB,
    max_field_chars=1_000_000,
    max_group_answers=8_192,
    max_step_rows=1_000_000,
    max_folder_entries=1_000_000,
    max_run_steps=10_000_000,
    setting_style="cli",
)

LIMIT_NAMES = tuple(f.name for f in fields(RunLimits) if f.name.startswith("max_"))


class RunLimitError(LimitExceededError):
    """A run file is larger than a :class:`RunLimits` budget; the message names the limit
    and the setting that raises it."""

    code = "run_limit_exceeded"

    def __init__(self, limit: str, value: int, setting: str, where: str, what: str) -> None:
        self.limit, self.value, self.setting = limit, value, setting
        super().__init__(
            f"{where}: {what}, over the limit {limit} = {value:,} (raise it with {setting})"
        )


def file_size(path: Path, limits: RunLimits, name: str = "max_file_bytes") -> int:
    """``path``'s size in bytes, refused past limit ``name`` (a stat: nothing is read)."""
    size = path.stat().st_size
    limits.check(name, size, f"{path}", f"the file has {size:,} bytes")
    return size


def bounded_lines(
    f: IO[bytes], limits: RunLimits, path: Path, first_line: int = 1
) -> Iterator[tuple[int, bytes]]:
    """(line number, raw line) of a binary file, each line read with a bounded ``readline``:
    a line longer than ``max_line_bytes`` is refused after reading that many bytes of it."""
    cap = limits.max_line_bytes
    number = first_line - 1
    while True:
        raw = f.readline(cap + 1)
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
    ``max_folder_entries``: the listing stops there instead of reading them all."""
    cap = limits.max_folder_entries
    out: list[os.DirEntry[str]] = []
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
    """``value`` itself, refused past ``max_field_chars`` characters (before tokenizing)."""
    if len(value) > limits.max_field_chars:
        raise limits.exceeded("max_field_chars", where, f"the {what} has {len(value):,} characters")
    return value


def check_parquet_footer(metadata: Any, columns: list[str], limits: RunLimits, path: Path) -> None:
    """Refuse a parquet file by its footer alone: rows of the step, and the uncompressed bytes
    of the columns that will be read (summed over row groups)."""
    limits.check("max_step_rows", metadata.num_rows, f"{path}", f"{metadata.num_rows:,} rows")
    wanted = set(columns)
    total = 0
    for rg in range(metadata.num_row_groups):
        group = metadata.row_group(rg)
        for c in range(group.num_columns):
            chunk = group.column(c)
            if chunk.path_in_schema.split(".")[0] in wanted:
                total += max(int(chunk.total_uncompressed_size), 0)
    limits.check(
        "max_step_bytes", total, f"{path}", f"its columns hold {total:,} bytes uncompressed"
    )


def check_arrow_strings(table: Any, limits: RunLimits, path: Path) -> None:
    """Refuse a table whose longest string cell (at any nesting depth: chat messages are
    lists of structs) is over ``max_field_chars``, or whose strings, expanded (a dictionary
    value counts once per row using it), hold more than ``max_step_bytes``: measured in Arrow
    before ``to_pylist`` makes Python strings."""
    total = 0
    for name in table.column_names:
        column = table.column(name)
        for leaf in _string_leaves(column.type, column):
            for chunk in _chunks(leaf):
                longest, expanded = _lengths(chunk)
                if longest > limits.max_field_chars:
                    raise limits.exceeded(
                        "max_field_chars",
                        f"{path}",
                        f"a cell of column {name!r} has {longest:,} characters",
                    )
                total += expanded
        limits.check(
            "max_step_bytes", total, f"{path}", f"its text cells expand to {total:,} bytes or more"
        )
        checkpoint()


def _lengths(chunk: Any) -> tuple[int, int]:
    """(longest cell, sum of all cells) of one string/binary array, in characters for
    strings (bytes for binary); a dictionary array is measured on its dictionary."""

    def lengths(values: Any) -> Any:
        if pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
            return pc.utf8_length(values)
        return pc.binary_length(values)

    if pa.types.is_dictionary(chunk.type):
        per_value = lengths(chunk.dictionary)
        used = pc.take(per_value, chunk.indices)
        return int(pc.max(per_value).as_py() or 0), int(pc.sum(used).as_py() or 0)
    per_cell = lengths(chunk)
    return int(pc.max(per_cell).as_py() or 0), int(pc.sum(per_cell).as_py() or 0)


def _string_leaves(kind: Any, array: Any) -> Iterator[Any]:
    """The string/binary arrays inside ``array`` (lists flattened, struct fields taken)."""
    if pa.types.is_dictionary(kind):
        if _is_text(kind.value_type):
            yield array
    elif _is_text(kind):
        yield array
    elif pa.types.is_list(kind) or pa.types.is_large_list(kind):
        flat = pa.chunked_array([c.flatten() for c in _chunks(array)], type=kind.value_type)
        yield from _string_leaves(kind.value_type, flat)
    elif pa.types.is_struct(kind):
        children = [c.flatten() for c in _chunks(array)]  # offsets and parent nulls applied
        for i in range(kind.num_fields):
            child = pa.chunked_array([c[i] for c in children], type=kind.field(i).type)
            yield from _string_leaves(kind.field(i).type, child)


def _is_text(kind: Any) -> bool:
    return bool(
        pa.types.is_string(kind)
        or pa.types.is_large_string(kind)
        or pa.types.is_binary(kind)
        or pa.types.is_large_binary(kind)
    )


def _chunks(array: Any) -> list[Any]:
    return list(array.chunks) if hasattr(array, "chunks") else [array]
