"""The files a browser session uploaded, removed when that session ends.

Gradio stores an upload (``POST {ui}/gradio_api/upload``) in its upload folder before any event
names it, and the upload request carries no session: such a file is bounded by size and count
per client (:mod:`app.api.client_limits`) and deleted once ``GMTS_UI_UPLOAD_TTL_S`` old (the
Blocks' ``delete_cache``). Once an event handler receives an upload, the file belongs to the
handler's session: :meth:`SessionUploads.track` records it, and :meth:`SessionUploads.release`,
registered as the Blocks' ``unload`` event (run when the page's heartbeat connection closes:
the tab closed or reloaded), deletes that session's files at once instead of at the TTL.
Only files inside Gradio's upload folder are ever deleted, and never one another open session
also uploaded (Gradio stores the same content once).
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import gradio as gr
from gradio.utils import get_upload_folder

logger = logging.getLogger(__name__)

MAX_SESSIONS = 10_000  # sessions tracked at once (Gradio's own session capacity); oldest go


class SessionUploads:
    """Per browser session (Gradio's ``session_hash``), the uploaded files its events used."""

    def __init__(self, upload_folder: str | Path | None = None) -> None:
        self.folder = Path(upload_folder or get_upload_folder()).resolve()
        self._lock = threading.Lock()
        self._files: dict[str, set[Path]] = {}

    def track(self, request: gr.Request | None, path: str | Path | None) -> None:
        """Remember that ``request``'s session uploaded ``path`` (ignored outside the upload
        folder, or without a session)."""
        session = getattr(request, "session_hash", None)
        file = self._inside(path)
        if not session or file is None:
            return
        evicted: set[Path] = set()
        with self._lock:
            self._files.setdefault(session, set()).add(file)
            if len(self._files) > MAX_SESSIONS:  # the oldest session's files go now
                evicted = self._files.pop(next(iter(self._files)))
                for other in self._files.values():
                    evicted -= other
        self._remove(evicted)

    def release(self, request: gr.Request) -> None:
        """The ``unload`` handler: delete the files ``request``'s session uploaded."""
        session = getattr(request, "session_hash", None)
        with self._lock:
            files = self._files.pop(session, set()) if session else set()
            for other in self._files.values():  # the same content uploaded by an open session
                files -= other
        self._remove(files)

    def _inside(self, path: str | Path | None) -> Path | None:
        if not path:
            return None
        try:
            file = Path(path).resolve()
        except (OSError, RuntimeError):
            return None
        return file if file.is_relative_to(self.folder) and file != self.folder else None

    def _remove(self, files: set[Path]) -> None:
        for file in files:
            try:
                file.unlink(missing_ok=True)
                if file.parent != self.folder:  # Gradio's folder of this one upload, if empty
                    file.parent.rmdir()
            except OSError:  # the folder holds another file, or is already gone
                pass
        if files:
            logger.info("removed %d uploaded file(s) of a closed UI session", len(files))


__all__ = ["SessionUploads"]
