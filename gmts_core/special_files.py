"""What a file that is not a regular file is, in words: one wording for every reader of files
from outside (run files, analysed datasets) when it refuses a FIFO, a device, a socket, a
folder or a link where a file should be."""

from __future__ import annotations

import stat

_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISLNK, "a symbolic link"),
)


def file_kind(mode: int) -> str:
    """What a file of this ``st_mode`` is (``a FIFO``, ``a folder``...)."""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")
