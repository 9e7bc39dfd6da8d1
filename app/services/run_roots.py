"""The run roots (``GMTS_RUN_ROOTS``): finding, listing and opening the runs in them.

A run id is an entry's name in a root: never a path, never a link out of the root. Listing
never reads a run (the background :class:`~app.services.run_index.RunIndex` does, in a reading
process); opening one is cached while its size and time stay the same (so is the reason it
cannot be opened). Every error leaves with paths relative to the root (:meth:`RunRoots.relative`).
"""

from __future__ import annotations

import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from app.core.config import Settings
from app.schemas.runs import (
    RunInfo,
    RunsResponse,
)
from app.services.errors import RunNotFoundError
from app.services.run_index import RunIndex
from gmts_core.errors import GMTSError
from gmts_core.progress import Cancelled
from gmts_core.runs import NotARunError, Run, list_formats
from gmts_core.runs.base import RunFormatError
from gmts_core.runs.report import uses_log
from gmts_core.runs.worker import ReaderPool

logger = logging.getLogger(__name__)

FORBIDDEN = ("/", "\\", "%", "~", "\x00", "\n", "\r")
MAX_CACHED_RUNS = 16


def safe_text(text: str) -> str:
    """``text`` as valid UTF-8: bytes a file name could not decode (surrogate escapes) shown
    as ``\\xff``; any other lone surrogate as ``\\udcxx``."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        pass
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


class RunRoots:
    """The runs under ``settings.run_roots``: listed from the index, opened in ``readers``."""

    def __init__(self, settings: Settings, readers: ReaderPool) -> None:
        self.settings = settings
        self.readers = readers
        self.limits = settings.run_limits
        # absolute: the run files are read in worker processes that start in "/", where a
        # relative root (GMTS_RUN_ROOTS=outputs) would name another folder
        self.paths = [Path(r).expanduser().absolute() for r in settings.run_roots]
        self._lock = threading.Lock()
        self._runs: OrderedDict[Path, tuple[tuple[float, int], Run | GMTSError]] = OrderedDict()
        self._index = RunIndex(
            self._index_entry, self._index_failed, max_entries=4 * settings.run_max_folder_entries
        )
        prefixes = {str(p) for r in self.paths for p in (r, r.absolute(), r.resolve())}
        self._prefixes = sorted(prefixes, key=len, reverse=True)  # the longest match first

    def relative(self, text: str) -> str:
        """``text`` with every run root's path taken out (``<root>/run/x`` -> ``run/x``)."""
        for prefix in self._prefixes:
            text = text.replace(prefix + os.sep, "")
        for prefix in self._prefixes:
            text = text.replace(prefix, "<run root>")
        return safe_text(text)

    @contextmanager
    def relative_errors(self) -> Iterator[None]:
        """Errors leave this service with paths relative to the run root."""
        try:
            yield
        except GMTSError as exc:
            exc.args = tuple(self.relative(a) if isinstance(a, str) else a for a in exc.args)
            raise

    def list_runs(self) -> RunsResponse:
        """Every entry of the run roots that is (or looks like) a run, from the background
        index (:class:`~app.services.run_index.RunIndex`): never reads a run itself. One
        that cannot be opened is listed with ``readable: false`` and the reason; one not
        indexed yet (after waiting ``run_list_wait_s``) with ``state: indexing``."""
        with self.relative_errors():
            ignored, truncated = 0, False
            seen: set[str] = set()
            rows: list[tuple[str, Path, tuple[int, int] | None, RunInfo | None]] = []
            for root in self.paths:
                entries, cut = self._root_entries(root)
                truncated |= cut
                for name, path in entries:
                    if name in seen:
                        continue
                    seen.add(name)
                    rows.append(self._listed(name, path))
            pending = [path for _, path, key, row in rows if key is not None and row is None]
            if pending:
                self._index.wait(pending, self.settings.run_list_wait_s)
            runs: list[RunInfo] = []
            for name, path, key, row in rows:
                if key is not None and row is None:
                    known, row = self._index.lookup(path, key)
                    if not known:
                        row = _indexing(safe_text(name))
                if row is None:
                    ignored += 1
                else:
                    runs.append(row)
            return RunsResponse(
                runs=runs, formats=list_formats(), ignored=ignored, truncated=truncated
            )

    def _listed(
        self, name: str, path: Path
    ) -> tuple[str, Path, tuple[int, int] | None, RunInfo | None]:
        """(name, path, key, row) of one root entry: a row at once when the name alone says
        it cannot be opened or the index knows it; else its key, and the row None (queued)."""
        shown = safe_text(name)
        if shown != name:
            reason = "the name is not valid UTF-8 (shown with \\x escapes); rename it to open it"
            return name, path, None, _unreadable(shown, reason)
        if any(c in name for c in FORBIDDEN):
            return (
                name,
                path,
                None,
                _unreadable(shown, "the name holds a character run ids may not contain"),
            )
        try:
            stat = path.stat()
        except OSError as exc:  # a broken link, a file removed meanwhile, a link loop
            return name, path, None, _unreadable(shown, f"cannot be read ({exc.strerror or exc})")
        key = (stat.st_size, stat.st_mtime_ns)
        known, row = self._index.lookup(path, key)
        return name, path, None if known else key, row

    def _root_entries(self, root: Path) -> tuple[list[tuple[str, Path]], bool]:
        """The first ``max_folder_entries`` entries of ``root`` inside it, by name; and
        whether the root held more."""
        if not root.is_dir():
            return [], False
        cap, truncated = self.limits.max_folder_entries, False
        found: list[tuple[str, Path]] = []
        with os.scandir(root) as it:
            for entry in it:
                if len(found) >= cap:
                    truncated = True
                    break
                found.append((entry.name, Path(entry.path)))
        found.sort(key=lambda e: os.fsencode(e[0]))
        if truncated:
            logger.warning("%s holds more than %d entries; listing %d", root, cap, cap)
        return [(n, p) for n, p in found if self._inside(root, p)], truncated

    def _index_entry(self, path: Path) -> RunInfo | None:
        """The listing row of the run at ``path`` (on the index's thread): None when it is
        no run; a row saying why when it cannot be opened."""
        name = path.name
        try:
            return self.info(name, self._open(path))
        except Cancelled:
            raise
        except NotARunError as exc:
            if path.suffix.lower() == ".jsonl":  # meant as a run: say why it is not one
                return _unreadable(name, self.relative(str(exc)))
            return None
        except (GMTSError, OSError) as exc:
            return _unreadable(name, self.relative(str(exc)))

    def _index_failed(self, path: Path, exc: Exception) -> RunInfo:
        return _unreadable(path.name, f"cannot be read (an internal error: {type(exc).__name__})")

    @staticmethod
    def _inside(root: Path, child: Path) -> bool:
        try:
            return child.resolve().parent == root.resolve()  # no symlink out of the root
        except (OSError, RuntimeError):  # a symlink loop
            return False

    def resolve(self, run_id: str) -> Path:
        """The path of run ``run_id``; RunNotFoundError (listing the runs) otherwise."""
        bad = not run_id or len(run_id) > 256 or run_id in (".", "..")
        if not bad and not any(c in run_id for c in FORBIDDEN):
            for root in self.paths:
                child = root / run_id
                if child.exists() and self._inside(root, child):
                    return child
        listed = [safe_text(n) for root in self.paths for n, _ in self._root_entries(root)[0]]
        names = ", ".join(listed[:50]) or "none (set GMTS_RUN_ROOTS)"
        shown = safe_text(run_id if len(run_id) <= 80 else run_id[:77] + "...")
        raise RunNotFoundError(f"unknown run {shown!r}; runs: {names}")

    def open(self, run_id: str) -> Run:
        with self.relative_errors():
            return self._open(self.resolve(run_id))

    def _open(self, path: Path) -> Run:
        """The run at ``path`` (cached while its size and time stay the same; so is the
        reason it cannot be opened)."""
        stat = path.stat()
        key = (stat.st_mtime, stat.st_size)
        with self._lock:
            hit = self._runs.get(path)
        if hit is None or hit[0] != key:
            # every file of the run is opened inside the run root (no link leads out of it)
            limits = replace(self.limits, root=os.path.realpath(path.parent))
            try:  # outside the lock, in a reading process: a big JSONL's index is one pass
                value: Run | GMTSError = self.readers.open_run(path, limits)
            except Cancelled:
                raise
            except GMTSError as exc:
                value = exc
            except OSError as exc:  # unreadable (permissions, a file removed meanwhile...)
                value = RunFormatError(path, None, f"cannot be read ({exc.strerror or exc})")
            with self._lock:
                self._runs[path] = (key, value)
                while len(self._runs) > MAX_CACHED_RUNS:
                    self._runs.popitem(last=False)
        else:
            value = hit[1]
            with self._lock:
                if path in self._runs:
                    self._runs.move_to_end(path)
        if isinstance(value, GMTSError):
            raise value
        return value

    @staticmethod
    def info(name: str, run: Run) -> RunInfo:
        steps = run.steps
        return RunInfo(
            id=name,
            format=run.format,
            logged=uses_log(run),
            num_steps=len(steps),
            first_step=steps[0],
            last_step=steps[-1],
        )


def _indexing(name: str) -> RunInfo:
    reason = "being indexed in the background; list the runs again in a moment"
    return _unreadable(name, reason, state="indexing")


def _unreadable(name: str, reason: str, state: str = "unreadable") -> RunInfo:
    return RunInfo(
        id=name,
        readable=False,
        state=state,
        reason=reason,
        format=None,
        logged=False,
        num_steps=None,
        first_step=None,
        last_step=None,
    )
