"""Typed errors of the service layer (the web layer maps them to HTTP, like gmts_core's)."""

from __future__ import annotations

from gmts_core.errors import GMTSError


class QueueFullError(GMTSError):
    """Too many heavy jobs are running or waiting; retry after ``retry_after_s`` seconds."""

    code = "queue_full"

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class SessionNotFoundError(GMTSError, LookupError):
    """A ``session_id`` names no live session (never created, expired or deleted)."""

    code = "unknown_session"


class RunNotFoundError(GMTSError, LookupError):
    """A run id names no run under the allowed run roots (GMTS_RUN_ROOTS)."""

    code = "unknown_run"
