"""The steps index: every step's summary row in one file, so a long run is listed, charted and
polled by reading one file, not one file per step.

``gmts analyze-run`` appends one JSON line to ``OUT/steps.jsonl`` after it writes a step's
summary file (``steps/step_NNNNN.parquet``): the file's name, its (inode, size, mtime) and the
summary row. A reader takes a line's row for a step only while that step's summary file still
has that key; any other step (no line, a stale line, a dataset written before the index) is
read from its own summary file, as before. The index is as untrusted as the rest: read with a
byte budget, each line parsed strictly and its row checked like a summary file's; a line that
fails is ignored (the step's file is read instead).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from gmts_core.errors import InvalidInputError
from gmts_core.run_dataset.folder import DatasetFolder, StatKey, StepEntry, step_name
from gmts_core.run_dataset.schema import step_file

INDEX = "steps.jsonl"
MAX_INDEX_BYTES = 256 << 20  # ~500,000 steps of a dozen methods
COUNTS = ("step", "num_groups", "num_answers", "num_tokens")


def append(root: Path, step: int, row: dict[str, Any]) -> None:
    """Add step ``step``'s summary ``row`` (its summary file written already) to the index:
    one line, written with one ``write`` in append mode."""
    st = os.stat(step_file(root, "steps", step))
    line = {
        "file": step_name(step),
        "key": [st.st_ino, st.st_size, st.st_mtime_ns],
        "row": {
            k: (None if isinstance(v, float) and not math.isfinite(v) else v)
            for k, v in row.items()
        },
    }
    fd = os.open(root / INDEX, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, (json.dumps(line, separators=(",", ":")) + "\n").encode())
    finally:
        os.close(fd)


def checked_row(row: Any, names: list[str], where: str, step: int) -> dict[str, Any]:
    """A summary row holding every column ``names``, counts non-negative integers, values
    numbers or null, of step ``step`` (InvalidInputError otherwise)."""
    if not isinstance(row, dict) or any(n not in row for n in names):
        raise InvalidInputError(f"{where}: a summary without every column of the format")
    for name in COUNTS:
        value = row.get(name)
        if value is None or type(value) is not int or value < 0:
            raise InvalidInputError(f"{where}: '{name}' is missing or negative")
    if row["step"] != step:
        raise InvalidInputError(f"{where}: holds step {row['step']}, not {step}")
    out = {n: row[n] for n in names}
    if not all(v is None or type(v) in (int, float, bool) for v in out.values()):
        raise InvalidInputError(f"{where}: a summary value is not a number")
    return out


def read(folder: DatasetFolder, entries: list[StepEntry], names: list[str]) -> dict[str, Any]:
    """The index's rows of the steps in ``entries`` whose summary file still has the key the
    line records: {file name: row}. Empty without an index (or one over its budget)."""
    try:
        data = folder.read_bytes(INDEX, MAX_INDEX_BYTES)
    except InvalidInputError:
        return {}
    current: dict[str, tuple[StatKey, int]] = {e.name: (e.key, e.step) for e in entries}
    found: dict[str, Any] = {}
    for raw in data.split(b"\n"):
        try:
            line = json.loads(raw)
            name = line["file"]
            key = tuple(line["key"])
            if name in current and key == current[name][0]:
                where = folder.where(INDEX)
                found[name] = checked_row(line["row"], names, where, current[name][1])
        except (ValueError, KeyError, TypeError, RecursionError, InvalidInputError):
            continue  # a half-written, stale or foreign line: the step's own file is read
    return found


def read_row(root: Path, step: int) -> dict[str, Any]:
    """Step ``step``'s row in the index of the dataset at ``root`` (a trusted path: the
    writer's own, for tools), KeyError without one."""
    for raw in reversed((root / INDEX).read_bytes().splitlines()):
        line = json.loads(raw)
        if line["file"] == step_name(step):
            return dict(line["row"])
    raise KeyError(step)
