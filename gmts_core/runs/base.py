"""Training runs as steps -> groups: the types every run reader yields, and their errors.

A run is what a trainer wrote to disk while it trained: a folder of per-step files (TRL, verl,
ROLL, AReaL, this project's trainer log) or one JSONL file. A reader lists the run's steps
cheaply (:class:`StepRef`: which file, where in it) and loads one step at a time
(:class:`RunStep`), so a run of any size is never held in memory; only the step being looked at.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

# the errors live in gmts_core.runs.errors; imported from here too (explicit re-exports)
from gmts_core.runs.errors import NotARunError as NotARunError
from gmts_core.runs.errors import RunFormatError as RunFormatError
from gmts_core.runs.errors import UnsafeRunFileError as UnsafeRunFileError
from gmts_core.runs.errors import UnsafeRunFormatError as UnsafeRunFormatError
from gmts_core.runs.files import open_run_file
from gmts_core.runs.limits import (
    RunLimits,
    StringBudget,
    bounded_lines,
    check_parquet_footer,
    check_text,
    scan_folder,
    text_encoding,
)
from gmts_core.runs.values import MAX_STEP, as_int, check_json
from gmts_core.runs.values import as_float as as_float

logger = logging.getLogger(__name__)

MAX_NAMED = 8  # files named in an error about several files (the rest counted)


@dataclass
class RunGroup:
    """One prompt and the answers sampled for it in one training step.

    ``rewards``/``advantages``: one per answer, as the file has them (None where it has none).
    ``token_ids`` and ``token_columns`` (per-token values, one list per answer) come from files
    that store tokens, i.e. this project's trainer log and miles' Parquet mirror. A file that
    stores token ids only (miles) leaves ``prompt`` and ``answers`` empty, gives
    ``prompt_token_ids`` and sets ``texts_from_ids``: the texts are the ids decoded by the
    analysing model's tokenizer.
    """

    prompt: str
    answers: list[str]
    rewards: list[float] | None = None
    advantages: list[float] | None = None
    reference: Any = None
    chat: bool = False  # the prompt was a chat message list (its text is the user's content)
    source: str = ""  # "file:line" (or "file:row") of the group's first answer
    token_ids: list[list[int]] | None = None
    token_columns: dict[str, list[list[Any]]] = field(default_factory=dict)
    extra: dict[str, list[Any]] = field(default_factory=dict)  # other per-answer columns
    prompt_token_ids: list[int] | None = None
    texts_from_ids: bool = False

    @property
    def size(self) -> int:
        return len(self.answers)


@dataclass
class RunStep:
    """All groups of one training step."""

    step: int
    groups: list[RunGroup]
    source: str  # the file (and line) the step was read from
    # what the reader could not tell from the file, or how it read it (shown with the step)
    notes: list[str] = field(default_factory=list)

    @property
    def num_answers(self) -> int:
        return sum(g.size for g in self.groups)


@dataclass(frozen=True)
class StepRef:
    """Where one step lives: a file, and for single-file runs the byte offset and line."""

    step: int
    path: Path
    offset: int = 0
    line: int = 1
    last: bool = False  # in the run's last file: a half-written tail is tolerated


def jsonl_records(
    path: Path,
    tolerate_tail: bool,
    offset: int = 0,
    first_line: int = 1,
    limits: RunLimits | None = None,
    step_file: bool = False,
) -> Iterator[tuple[int, int, dict[str, Any]]]:
    """(line number, byte offset, object) of each non-empty line of a JSONL file.

    The file is opened by :func:`~gmts_core.runs.files.open_run_file` (a regular file inside
    the run root) and sizes are checked before parsing (:mod:`gmts_core.runs.limits`): the
    file's bytes (``max_step_bytes`` for a ``step_file``, a file that is one step, else
    ``max_file_bytes``), each line's bytes (bounded ``readline``) and, for a ``step_file``,
    its number of lines. UTF-8 (with or without a BOM) and UTF-16 (LE or BE) are read. Each
    object is validated (:func:`~gmts_core.runs.values.check_json`). A line that is not a JSON
    object raises :class:`RunFormatError` naming the file and line; with ``tolerate_tail`` a
    last line that has no newline and does not parse (a writer still busy, or killed
    mid-line) is dropped with a warning instead.
    """
    limits = limits or RunLimits()
    with open_run_file(path, limits, "max_step_bytes" if step_file else "max_file_bytes") as f:
        encoding = text_encoding(f.read(4))
        f.seek(offset)
        pos, rows = offset, 0
        newline = "\n".encode(encoding)
        for number, raw in bounded_lines(f, limits, path, first_line, encoding):
            start, pos = pos, pos + len(raw)
            try:
                text: bytes | str = raw if encoding == "utf-8" else raw.decode(encoding)
            except UnicodeDecodeError as exc:
                raise RunFormatError(path, number, f"not valid {encoding} ({exc.reason})") from None
            if not text.strip() or text.strip() == "\ufeff":
                continue
            rows += 1
            if step_file:
                limits.check("max_step_rows", rows, f"{path}:{number}", f"{rows:,} lines or more")
            try:
                obj = json.loads(
                    text.lstrip("\ufeff") if isinstance(text, str) else text,
                    object_pairs_hook=_one_value_per_key,
                )
            except (ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError
                if tolerate_tail and not raw.endswith(newline):
                    logger.warning("%s:%d: dropping a half-written last line", path, number)
                    return
                reason = "nested too deeply" if isinstance(exc, RecursionError) else exc
                raise RunFormatError(path, number, f"not valid JSON ({reason})") from None
            if not isinstance(obj, dict):
                kind = type(obj).__name__
                raise RunFormatError(path, number, f"expected a JSON object, got {kind}")
            yield number, start, check_json(obj, path, number)


def check_step(step: RunStep, limits: RunLimits) -> RunStep:
    """Refuse a loaded step whose groups or texts are over ``limits`` (answers per group,
    characters per prompt and completion): checked before any tokenizer sees them."""
    limits.check("max_step_rows", step.num_answers, step.source, f"{step.num_answers:,} answers")
    for g in step.groups:
        where = g.source or step.source
        limits.check("max_group_answers", g.size, where, f"the group has {g.size:,} answers")
        check_text(g.prompt, limits, where, "prompt")
        for answer in g.answers:
            check_text(answer, limits, where, "completion")
    return step


def require(obj: dict[str, Any], key: str, path: Path, line: int | None) -> Any:
    """``obj[key]``, or a :class:`RunFormatError` that names the missing column."""
    if key not in obj:
        have = ", ".join(sorted(obj)) or "nothing"
        raise RunFormatError(path, line, f"missing column {key!r} (the line has: {have})")
    return obj[key]


def prompt_text(value: Any, path: Path, line: int | None) -> tuple[str, bool]:
    """A prompt as text, and whether it was a chat message list.

    Chat prompts (``[{"role": ..., "content": ...}, ...]``) become their last user message's
    content when that is the only message, else ``role: content`` lines.
    """
    if isinstance(value, str):
        return value, False
    if isinstance(value, list) and all(isinstance(m, dict) and "content" in m for m in value):
        if len(value) == 1:
            return _content(value[0]["content"], path, line), True
        return "\n".join(
            f"{m.get('role', '?')}: {_content(m['content'], path, line)}" for m in value
        ), True
    raise RunFormatError(path, line, f"a prompt must be text or chat messages, got {value!r:.80}")


def completion_text(value: Any, path: Path, line: int | None) -> str:
    """A completion as text: a string, or a chat message list's last message content."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and value and isinstance(value[-1], dict) and "content" in value[-1]:
        return _content(value[-1]["content"], path, line)
    raise RunFormatError(
        path, line, f"a completion must be text or chat messages, got {value!r:.80}"
    )


def _content(content: Any, path: Path, line: int | None) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # multimodal parts: keep the text ones
        texts = [p.get("text", "") for p in content if isinstance(p, dict)]
        if not all(isinstance(t, str) for t in texts):
            raise RunFormatError(path, line, "a chat content part's 'text' must be a string")
        return "".join(texts)
    if content is None or isinstance(content, (bool, int, float)):
        return "" if content is None else str(content)
    raise RunFormatError(path, line, f"a chat message's content must be text, got {content!r:.80}")


def group_by_key(keys: list[str]) -> list[list[int]]:
    """Row indices grouped by key (the prompt), groups in order of first appearance."""
    groups: dict[str, list[int]] = {}
    for i, key in enumerate(keys):
        groups.setdefault(key, []).append(i)
    return list(groups.values())


def _one_value_per_key(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object, refused (ValueError) when a key appears twice: which value the writer
    meant cannot be told, so neither is read silently."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        twice = next(k for k, _ in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        raise ValueError(f"the key {twice[:80]!r} appears twice in one object")
    return obj


def numbered_files(folder: Path, pattern: str, limits: RunLimits) -> list[StepRef]:
    """One :class:`StepRef` per file of ``folder`` whose name matches ``pattern`` (a regex with
    one group: the step number, ASCII digits), sorted by step; the last one is marked
    ``last``. Two files of one step (``1.jsonl``, ``01.jsonl``) are an error naming them. An
    entry that is no regular file (a FIFO, a device, a link out of the root) is a step all the
    same: reading it refuses it, naming what it is, rather than the step going missing; so is a
    folder with a step file's name (``1.jsonl/``). The folder listing stops (refused) past
    ``max_folder_entries``."""
    rx = re.compile(pattern, re.ASCII)
    found = sorted(
        (int(m.group(1)), Path(e.path))
        for e in scan_folder(folder, limits)
        if (m := rx.fullmatch(e.name))
    )
    refuse_duplicates(found, folder, "step", "files")
    for step, path in found:
        check_step_number(step, path)
    refs = [StepRef(step, p) for step, p in found]
    if refs:
        refs[-1] = StepRef(refs[-1].step, refs[-1].path, last=True)
    return refs


def refuse_duplicates(found: list[tuple[int, Path]], where: Path, what: str, kind: str) -> None:
    """Refuse a step number held by two or more of ``found`` ((number, path), sorted),
    naming each of them (``1.jsonl``, ``01.jsonl``, ``001.jsonl``: only one could be reached)."""
    names: dict[int, list[str]] = {}
    for number, path in found:
        names.setdefault(number, []).append(path.name)
    for number, same in names.items():
        if len(same) > 1:
            shown = same[:MAX_NAMED] + (
                [f"{len(same) - MAX_NAMED} more"] if len(same) > MAX_NAMED else []
            )
            listed = ", ".join(shown[:-1]) + " and " + shown[-1]
            raise RunFormatError(
                where, None, f"{what} {number} is in {len(same)} {kind}, {listed}: keep one"
            )


def check_step_number(step: int, path: Path) -> int:
    return as_int(step, "the step number", path, None, -MAX_STEP, MAX_STEP)


def has_match(folder: Path, pattern: str, limits: RunLimits) -> bool:
    rx = re.compile(pattern, re.ASCII)
    return folder.is_dir() and any(rx.fullmatch(e.name) for e in scan_folder(folder, limits))


def readable_parquet(path: Path, limits: RunLimits) -> bool:
    """Whether ``path`` is a whole parquet file: its footer reads, or it ends with the footer's
    magic bytes (then it is complete, and reading it names what is wrong with it: a schema
    nested too deeply, say); a file still being written has no footer yet. A file that is not
    a regular file inside the run root raises UnsafeRunFileError."""
    with open_run_file(path, limits, "max_step_bytes") as f:
        try:
            pq.read_metadata(f)
            return True
        except (OSError, pa.ArrowException):
            size = f.seek(0, 2)
            if size < 12:
                return False
            f.seek(size - 4)
            return bool(f.read(4) == b"PAR1")


def read_parquet_step(path: Path, columns: list[str] | None, limits: RunLimits) -> Any:
    """A step's parquet file as an Arrow table, read from the file object
    :func:`~gmts_core.runs.files.open_run_file` opened, sizes checked first: the file's bytes,
    then the footer's rows, column bytes and values (:func:`check_parquet_footer`), then row
    group by row group (strings still dictionary-encoded, at any nesting depth) the longest
    string cell, the strings' expanded size and their UTF-8, before the next one is read."""
    with open_run_file(path, limits, "max_step_bytes") as f:
        try:
            parquet = pq.ParquetFile(f)
            names = parquet.schema_arrow.names
            wanted = [c for c in (columns or names) if c in names]
            check_parquet_footer(parquet.metadata, wanted, limits, path)
            # strings stay dictionary-encoded in Arrow: a repeated value is held once until its
            # expanded size has been checked (dictionary pages make the footer's sizes small)
            leaves = [parquet.schema.column(i) for i in range(len(parquet.schema))]
            byte_leaves = [
                c.path
                for c in leaves
                if c.physical_type == "BYTE_ARRAY" and c.path.split(".")[0] in wanted
            ]
            f.seek(0)
            parquet = pq.ParquetFile(f, read_dictionary=byte_leaves)
            budget = StringBudget(limits, path)
            groups = []
            for i in range(parquet.metadata.num_row_groups):
                group = parquet.read_row_group(i, columns=wanted)
                budget.add(group)
                groups.append(group)
            table = pa.concat_tables(groups) if groups else parquet.schema_arrow.empty_table()
        except MemoryError:  # Arrow's too: the address-space limit of a reading process
            raise
        except (OSError, pa.ArrowException) as exc:
            raise RunFormatError(path, None, f"not a readable parquet file ({exc})") from None
    return table.select(wanted)


class NumberedFilesReader:
    """The ``detect`` and ``index`` of a reader whose steps are the files of one folder named
    ``file_pattern`` (a regex whose one group is the step number); a subclass names the format
    and loads a step. :meth:`folder` says where the files lie below the path a user gives;
    with ``parquet`` a last file without a footer (still being written) is left out."""

    file_pattern: str
    parquet: bool = False

    def folder(self, path: Path, limits: RunLimits) -> Path:
        return path

    def detect(self, path: Path, limits: RunLimits) -> bool:
        return has_match(self.folder(path, limits), self.file_pattern, limits)

    def index(self, path: Path, limits: RunLimits) -> list[StepRef]:
        refs = numbered_files(self.folder(path, limits), self.file_pattern, limits)
        if self.parquet and refs and not readable_parquet(refs[-1].path, limits):
            logger.warning("%s: dropping a half-written last file", refs[-1].path)
            refs = refs[:-1]
        return refs
