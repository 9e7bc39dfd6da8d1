"""The rule for files this library caches and later trusts: the current user's alone, and
unchanged since they were written.

Two caches follow it: the native kernels' compiled library (:mod:`gmts_core.native.build`) and
the safetensors folders converted from GGUF files (:mod:`gmts_core.model.gguf`). A cached file
is used only when its folder and the file itself are owned by the current user and writable by
no group or other user (the file a regular file, not a symbolic link), and its SHA-256 equals
the one recorded when it was written. The trust boundary is the current user: whoever can write
as that user can change a file and its record alike.

Large cached files (a converted model's 500 MB of weights) are hashed once, when written; the
record also keeps each file's :func:`file_stamp`, and a later check hashes only the files whose
stamp differs (a changed file, or one copied or restored: its status-change time is new).

A converted GGUF folder is written by one process at a time (:func:`exclusive`): two
processes filling it at once (a server and a command started together, or test workers) would
otherwise replace each other's folder while one of them reads it. The native library needs no
lock: a concurrent build writes an equal file, and each file is replaced atomically.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class UnsafeCache(RuntimeError):
    """The cache folder is not the current user's alone: nothing is written to or read from it."""


def sha256_file(path: Path) -> str:
    """The file's SHA-256 as hex, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def file_stamp(info: os.stat_result) -> list[int]:
    """What changes whenever a file's bytes, mode or place change: inode, size, modification
    and status-change times (ns). The status-change time cannot be set back from user space
    (``utime`` sets it to now), so a file rewritten and given its old mtime still differs."""
    return [info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns]


def owned_and_private(path: Path, what: str, folder: bool = False) -> str | None:
    """Why ``path`` cannot be trusted, or None: it must be the current user's, writable by no
    group or other users, and (a file) a regular file, not a symbolic link."""
    return private_reason(path.stat() if folder else path.lstat(), path, what, folder)


def private_reason(info: os.stat_result, path: Path, what: str, folder: bool = False) -> str | None:
    """:func:`owned_and_private` of an ``info`` already taken (``lstat`` for a file)."""
    kind_ok = stat.S_ISDIR(info.st_mode) if folder else stat.S_ISREG(info.st_mode)
    if not kind_ok:
        return f"the {what} {path} is not a {'folder' if folder else 'regular file'}"
    if info.st_uid != os.geteuid():
        return f"the {what} {path} is owned by uid {info.st_uid}, not by this user"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"the {what} {path} is writable by its group or by others"
    return None


def check_folder(folder: Path) -> None:
    """Raise :class:`UnsafeCache` unless ``folder`` is the current user's and not group- or
    world-writable."""
    reason = owned_and_private(folder, "cache folder", folder=True)
    if reason is not None:
        raise UnsafeCache(reason)


def make_private_folder(folder: Path) -> None:
    """Create ``folder`` (mode 0700) if missing, then :func:`check_folder` it."""
    if not folder.exists():
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    check_folder(folder)


@contextmanager
def exclusive(lock: Path) -> Iterator[None]:
    """Hold an exclusive lock on the file ``lock`` (created, mode 0600, in a private cache
    folder) across processes: ``flock``, released when the block ends or the process dies.
    Where the platform has no ``fcntl`` (Windows), nothing is locked."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - POSIX only
        yield
        return
    fd = os.open(lock, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def user_cache_dir(env_var: str, name: str) -> Path:
    """``$<env_var>``, else ``$XDG_CACHE_HOME/gmts-explorer/<name>``, else
    ``~/.cache/gmts-explorer/<name>``."""
    env = os.environ.get(env_var)
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gmts-explorer" / name
