"""The run roots' index: each entry's format and steps, found in the background.

Listing the runs never reads a run: it stats each entry and answers from the index, cached
by (path, size, mtime); an entry not indexed yet (or changed since) is queued for the one
indexing thread (a bounded worker of its own: listings never stack up readings) and listed
as ``indexing``. A listing waits for the entries it queued at most ``GMTS_RUN_LIST_WAIT_S``
seconds (answering as soon as they are done). Indexing one entry never fails the others: an
entry that cannot be read, for any reason, is one row marked unreadable with its reason.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Generic, TypeVar

logger = logging.getLogger(__name__)

Key = tuple[int, ...]  # what changes when the entry does: (size, mtime in ns), or more
RunInfo = TypeVar("RunInfo")  # the listing's row (runs: app.schemas.runs.RunInfo)


class RunIndex(Generic[RunInfo]):
    """``rows(paths)``: each path's cached row, or None while it is being indexed."""

    def __init__(
        self,
        index_one: Callable[[Path], RunInfo | None],
        on_error: Callable[[Path, Exception], RunInfo],
        max_entries: int,
    ) -> None:
        self._index_one = index_one  # an unreadable entry is a row saying why (None: not a run)
        self._on_error = on_error  # the row of an entry whose indexing raised anyway
        self._max_entries = max_entries
        self._done: dict[Path, tuple[Key, RunInfo | None]] = {}
        self._queued: deque[tuple[Path, Key]] = deque()
        self._busy: set[Path] = set()
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None

    def lookup(self, path: Path, key: Key) -> tuple[bool, RunInfo | None]:
        """(known, row): the cached row of ``path`` at ``key``; not known: queued."""
        with self._changed:
            hit = self._done.get(path)
            if hit is not None and hit[0] == key:
                return True, hit[1]
            if path not in self._busy:
                self._busy.add(path)
                self._queued.append((path, key))
                self._start()
                self._changed.notify_all()
            return False, None

    def wait(self, paths: list[Path], timeout_s: float) -> None:
        """Until none of ``paths`` is being indexed, or ``timeout_s`` passed."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while any(p in self._busy for p in paths):
                left = deadline - time.monotonic()
                if left <= 0 or not self._changed.wait(left):
                    return

    def _start(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._work, name="run-index", daemon=True)
            self._thread.start()

    def _work(self) -> None:
        while True:
            with self._changed:
                if not self._queued:
                    self._thread = None
                    return
                path, key = self._queued.popleft()
            try:
                row = self._index_one(path)
            except Exception as exc:  # a bug must not stop the index of the other entries
                logger.exception("indexing %s failed", path)
                row = self._on_error(path, exc)
            with self._changed:
                self._done[path] = (key, row)
                while len(self._done) > self._max_entries:
                    self._done.pop(next(iter(self._done)))
                self._busy.discard(path)
                self._changed.notify_all()
