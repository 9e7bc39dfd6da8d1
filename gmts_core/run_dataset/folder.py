"""An analysed-run folder opened so that what is checked is what is read.

A dataset folder is untrusted: whoever can write into a run root chooses its bytes, its names
and what each name is (a link, a FIFO, a device, a folder swapped in while a query runs). So
nothing here opens a path by name from the top. The folder is opened once, with ``O_NOFOLLOW``,
from its parent's descriptor; every file below it is opened one component at a time from the
folder's descriptor, again with ``O_NOFOLLOW`` (a link at any component is refused, never
followed), the file itself also with ``O_NONBLOCK`` (a FIFO never blocks the open) and checked
to be a regular file of at most its budget *on the open descriptor* (``fstat``). DuckDB then
reads the descriptor, by its ``/proc/self/fd/N`` name, never the file's name: a file swapped
after the check is not the file read, and names are never glob patterns.

Names are used literally: step files are listed from the folder's descriptor (at most
:data:`MAX_ENTRIES` entries) and only names of the exact form ``step_NNNNN.parquet`` count.
Every error names paths relative to the run root (``run/answers/step_00001.parquet``), never
the server's own.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from gmts_core.errors import InvalidInputError
from gmts_core.special_files import file_kind

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_STEP_NAME = re.compile(r"step_(\d{5,10})\.parquet")
_STEP_INDEX = re.compile(r"step_(\d{5,10})\.idx")  # the word index's positions form
MAX_ENTRIES = 100_000  # entries of one table folder (a run of 100,000 steps)
# where a process sees its own descriptors as files (Linux; /dev/fd elsewhere)
_FD_DIR = "/proc/self/fd" if os.path.isdir("/proc/self/fd") else "/dev/fd"

StatKey = tuple[int, int, int]  # (inode, size, mtime in ns): a file unchanged since it was read


class DatasetFileError(InvalidInputError):
    """A file of an analysed run that is not a regular file inside it, or over its budget."""

    code = "unsafe_run_file"


@dataclass(frozen=True)
class StepEntry:
    """One ``table/step_NNNNN.parquet`` entry as listed (not yet opened)."""

    step: int
    name: str
    key: StatKey


class DatasetFolder:
    """The descriptor of one analysed-run folder, opened without following links.

    ``name`` is the run's id (the folder's name in its run root), used in every message.
    Close it (or use it as a context manager); each :meth:`open_file` descriptor is closed by
    the caller (:meth:`opened` does it).
    """

    def __init__(self, parent: Path | str, name: str) -> None:
        if not name or "/" in name or name in (".", "..") or "\x00" in name:
            raise DatasetFileError(f"{name!r}: not a run name")
        self.name = name
        parent_fd = os.open(os.fspath(parent), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            self.fd = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
        except OSError as exc:
            raise _refused(name, exc, "a folder") from None
        finally:
            os.close(parent_fd)

    @classmethod
    def at(cls, path: Path | str) -> DatasetFolder:
        """The dataset folder at ``path`` (its parent is trusted: the caller chose it)."""
        path = Path(os.path.abspath(path))
        return cls(path.parent, path.name)

    def __enter__(self) -> DatasetFolder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def where(self, *parts: str) -> str:
        """A path relative to the run root, for messages."""
        return "/".join((self.name, *parts))

    def _subfolder(self, folder: str) -> int:
        try:
            return os.open(folder, _DIR_FLAGS, dir_fd=self.fd)
        except OSError as exc:
            raise _refused(self.where(folder), exc, "a folder") from None

    def open_file(self, *parts: str, max_bytes: int) -> int:
        """A descriptor of the regular file ``parts`` (at most 2 components) of at most
        ``max_bytes``; DatasetFileError for a link at any component, a FIFO, a device, a
        folder, a missing file or one over the budget."""
        where = self.where(*parts)
        parent = self._subfolder(parts[0]) if len(parts) == 2 else os.dup(self.fd)
        try:
            try:  # refuse special files before opening them (opening some has side effects)
                before = os.stat(parts[-1], dir_fd=parent, follow_symlinks=False)
            except OSError as exc:
                raise _refused(where, exc, "a file") from None
            if not stat.S_ISREG(before.st_mode):
                raise DatasetFileError(f"{where}: {file_kind(before.st_mode)}, not a file: refused")
            try:
                fd = os.open(parts[-1], _FILE_FLAGS, dir_fd=parent)
            except OSError as exc:
                raise _refused(where, exc, "a file") from None
        finally:
            os.close(parent)
        try:
            after = os.fstat(fd)  # what was opened, whatever the name points at now
            if not stat.S_ISREG(after.st_mode):
                raise DatasetFileError(f"{where}: {file_kind(after.st_mode)}, not a file: refused")
            if after.st_size > max_bytes:
                raise DatasetFileError(
                    f"{where}: {after.st_size:,} bytes, over the {max_bytes:,} this file may hold"
                )
            os.set_blocking(fd, True)
            return fd
        except BaseException:
            os.close(fd)
            raise

    @contextmanager
    def opened(self, *parts: str, max_bytes: int) -> Iterator[int]:
        fd = self.open_file(*parts, max_bytes=max_bytes)
        try:
            yield fd
        finally:
            os.close(fd)

    def read_bytes(self, name: str, max_bytes: int) -> bytes:
        """The whole of the small file ``name`` (a manifest), at most ``max_bytes``."""
        with self.opened(name, max_bytes=max_bytes) as fd:
            chunks, total = [], 0
            while chunk := os.read(fd, 1 << 16):
                total += len(chunk)
                if total > max_bytes:  # grown since the check
                    raise DatasetFileError(f"{self.where(name)}: over {max_bytes:,} bytes")
                chunks.append(chunk)
        return b"".join(chunks)

    def has_folder(self, folder: str) -> bool:
        try:
            mode = os.stat(folder, dir_fd=self.fd, follow_symlinks=False).st_mode
        except OSError:
            return False
        return stat.S_ISDIR(mode)

    def steps(self, table: str, raw: bool = False) -> list[StepEntry]:
        """The ``step_NNNNN.parquet`` entries of ``table`` (``raw``: ``step_NNNNN.idx``), by
        step; other names, links and special files are left out (a link or FIFO never counts
        as a step)."""
        pattern = _STEP_INDEX if raw else _STEP_NAME
        fd = self._subfolder(table)
        found: list[StepEntry] = []
        try:
            with os.scandir(fd) as it:
                for i, entry in enumerate(it):
                    if i >= MAX_ENTRIES:
                        raise DatasetFileError(
                            f"{self.where(table)}: more than {MAX_ENTRIES:,} entries"
                        )
                    match = pattern.fullmatch(entry.name)
                    if match is None:
                        continue
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    if stat.S_ISREG(st.st_mode):
                        key = (st.st_ino, st.st_size, st.st_mtime_ns)
                        found.append(StepEntry(int(match.group(1)), entry.name, key))
        finally:
            os.close(fd)
        found.sort(key=lambda e: (e.step, e.name))
        return found


def fd_path(fd: int) -> str:
    """The name under which this process reads its open descriptor ``fd`` as a file."""
    return f"{_FD_DIR}/{fd}"


def step_name(step: int) -> str:
    return f"step_{step:05d}.parquet"


def _refused(where: str, exc: OSError, what: str) -> DatasetFileError:
    if exc.errno == errno.ELOOP:
        return DatasetFileError(f"{where}: a symbolic link, not {what}: refused")
    if exc.errno == errno.ENOTDIR:
        return DatasetFileError(f"{where}: not {what} (or a link on its path): refused")
    if exc.errno == errno.ENOENT:
        return DatasetFileError(f"{where}: not found")
    return DatasetFileError(f"{where}: cannot be opened ({exc.strerror or exc.errno})")
