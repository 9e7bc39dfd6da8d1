"""The errors of reading a run: a file that does not fit its format (naming the file and line),
a path in no known format, a dump only pickle can read."""

from __future__ import annotations

from pathlib import Path

from gmts_core.errors import InvalidInputError


class RunFormatError(InvalidInputError):
    """A run file does not fit its format; the message starts with ``file:line:``."""

    code = "run_format"

    def __init__(self, path: Path | str, line: int | None, message: str) -> None:
        self.path, self.line = str(path), line
        where = f"{path}:{line}" if line is not None else str(path)
        super().__init__(f"{where}: {message}")


class NotARunError(RunFormatError):
    """The path is in no format any reader knows (a listing skips it)."""

    code = "not_a_run"


class UnsafeRunFormatError(RunFormatError):
    """A dump that only pickle can read (``.pt``, ``.pkl``...): refused, never loaded."""

    code = "unsafe_run_format"


class UnsafeRunFileError(RunFormatError):
    """A run file that is not a regular file inside its run root (a FIFO, a device, a link
    out of the root): refused, never read."""

    code = "unsafe_run_file"
