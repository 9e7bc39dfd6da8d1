"""Opening run files: only a regular file, inside the run's root, within its size budget.

Every run file is opened by :func:`open_run_file`, never by path elsewhere (pyarrow reads
parquet from the file object it returns). The path is resolved (every symlink) and must lie
inside ``RunLimits.root`` when one is set (the server sets the run root; a link inside a run
that leads out of it is refused). The resolved path is then opened one component at a time
from the root with ``O_NOFOLLOW`` (a folder or file swapped for a link after resolving is
refused, not followed), the file itself also with ``O_NONBLOCK`` (a FIFO never blocks the
open). A file that is not regular is refused before it is opened (``lstat``) and again after
(``fstat`` on the open descriptor: no gap between the check and the use), and so is one over
its size budget. Folder listings (:func:`confined_folder`) are confined the same way.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import BinaryIO, Protocol

from gmts_core.runs.errors import UnsafeRunFileError
from gmts_core.special_files import file_kind


class RunLimits(Protocol):
    """What this module needs of :class:`gmts_core.runs.limits.RunLimits` (which lists
    folders through this module, so it is not imported here)."""

    @property
    def root(self) -> str | None: ...

    def check(self, name: str, amount: int, where: str, what: str) -> None: ...


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def resolved_inside(path: Path | str, limits: RunLimits) -> tuple[str, list[str]]:
    """``path`` with every link resolved, and its components below ``limits.root`` (all of
    them when there is no root); UnsafeRunFileError when it resolves outside the root."""
    try:
        real = os.path.realpath(path, strict=True)
    except OSError as exc:
        raise UnsafeRunFileError(path, None, f"cannot be opened ({exc.strerror or exc})") from None
    base = os.path.realpath(limits.root) if limits.root is not None else os.sep
    rel = os.path.relpath(real, base)
    if rel == os.pardir or rel.startswith(os.pardir + os.sep):
        raise UnsafeRunFileError(path, None, "a link that leads out of the run root: refused")
    return base, [] if rel == os.curdir else rel.split(os.sep)


def _open_folder_chain(base: str, parts: list[str], path: Path | str) -> int:
    """A descriptor of ``base/parts...``, each folder opened with ``O_NOFOLLOW`` from its
    parent's descriptor (a component that became a link since resolving is refused)."""
    fd = os.open(base, _DIR_FLAGS)
    try:
        for name in parts:
            try:
                child = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                raise _changed(path, exc) from None
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def _changed(path: Path | str, exc: OSError) -> UnsafeRunFileError:
    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
        return UnsafeRunFileError(path, None, "changed into a link while being opened: refused")
    return UnsafeRunFileError(path, None, f"cannot be opened ({exc.strerror or exc})")


def open_run_file(path: Path | str, limits: RunLimits, budget: str = "max_file_bytes") -> BinaryIO:
    """``path`` opened for binary reading, if it is a regular file inside ``limits.root`` of
    at most ``budget`` bytes (a :class:`RunLimits` field); UnsafeRunFileError or
    RunLimitError otherwise. The caller closes it (``with open_run_file(...) as f``)."""
    base, parts = resolved_inside(path, limits)
    if not parts:
        raise UnsafeRunFileError(path, None, "not a regular file (the run root itself)")
    folder = _open_folder_chain(base, parts[:-1], path)
    try:
        try:  # refuse special files before opening them (opening some has side effects)
            before = os.stat(parts[-1], dir_fd=folder, follow_symlinks=False)
        except OSError as exc:
            raise _changed(path, exc) from None
        if not stat.S_ISREG(before.st_mode):
            raise UnsafeRunFileError(
                path, None, f"{file_kind(before.st_mode)}, not a file: refused"
            )
        try:
            fd = os.open(parts[-1], _FILE_FLAGS, dir_fd=folder)
        except OSError as exc:
            raise _changed(path, exc) from None
    finally:
        os.close(folder)
    try:
        after = os.fstat(fd)  # what was opened, whatever the name points at now
        if not stat.S_ISREG(after.st_mode):
            raise UnsafeRunFileError(path, None, f"{file_kind(after.st_mode)}, not a file: refused")
        limits.check(budget, after.st_size, str(path), f"the file has {after.st_size:,} bytes")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def confined_folder(folder: Path | str, limits: RunLimits) -> str:
    """``folder`` resolved, refused (UnsafeRunFileError) when it lies outside ``limits.root``
    or is not a folder: what a listing of a run's files may scan."""
    base, parts = resolved_inside(folder, limits)
    real = os.path.join(base, *parts)
    mode = os.stat(real, follow_symlinks=False).st_mode
    if not stat.S_ISDIR(mode):
        raise UnsafeRunFileError(folder, None, f"{file_kind(mode)}, not a folder: refused")
    return real
