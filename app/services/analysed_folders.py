"""Analysed-run folders in the run roots: which names are run ids, a folder's change key
(its manifest and steps folder, never followed if links), and the reading processes' spill
folders (``GMTS_QUERY_SPILL_DIR``)."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

from app.schemas.analysed_runs import AnalysedRunInfo
from app.services.run_roots import FORBIDDEN, safe_text
from gmts_core.run_dataset.schema import MANIFEST
from gmts_core.trusted_cache import user_cache_dir


def spill_dir() -> Path:
    """Where the reading processes' DuckDB may spill a large sort (``GMTS_QUERY_SPILL_DIR``,
    else the user's cache): one folder per process, removed when the service closes."""
    return user_cache_dir("GMTS_QUERY_SPILL_DIR", "query-spill")


def bad_name(name: str) -> bool:
    return not name or len(name) > 256 or name in (".", "..") or any(c in name for c in FORBIDDEN)


def dataset_key(path: Path) -> tuple[int, ...] | None:
    """The (inode, size, mtime) of the folder, its manifest and its steps folder, none of
    them followed if a link; None when ``path`` is no dataset folder."""
    try:
        folder = path.lstat()
        manifest = (path / MANIFEST).lstat()
        steps = (path / "steps").lstat()
    except OSError:
        return None
    if not (
        stat.S_ISDIR(folder.st_mode)
        and stat.S_ISREG(manifest.st_mode)
        and stat.S_ISDIR(steps.st_mode)
    ):
        return None
    return tuple(v for st in (manifest, steps) for v in (st.st_ino, st.st_size, st.st_mtime_ns))


def unreadable(name: str, reason: str) -> AnalysedRunInfo:
    return AnalysedRunInfo(id=safe_text(name), readable=False, reason=reason)


def clear_stale(folder: Path) -> None:
    """Remove the spill folders of reading processes that are gone."""
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return
    for entry in entries:
        if entry.name.isdigit() and not alive(int(entry.name)):
            shutil.rmtree(entry.path, ignore_errors=True)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
