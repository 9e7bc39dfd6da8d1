"""The service layer's errors, each a :class:`~gmts_core.errors.GMTSError`.

The library's own typed errors (``InvalidInputError``, ``LimitExceededError``, ...) and
``Cancelled`` are defined in ``gmts_core.errors`` and ``gmts_core.progress``, and every module
imports them from there (one path for each name). The web layer maps them all to HTTP statuses
(``app.api.errors``), the UI to ``gr.Error`` and the CLI to an exit code.
"""

from __future__ import annotations

from gmts_core.errors import GMTSError


class QueueFullError(GMTSError):
    """Too many heavy jobs are running or waiting; retry after ``retry_after_s`` seconds."""

    code = "queue_full"

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class SessionNotFoundError(GMTSError, LookupError):
    """A ``session_id`` names no live session (never created, expired, evicted or deleted)."""

    code = "unknown_session"


class RunNotFoundError(GMTSError, LookupError):
    """A run id names no run under the allowed run roots (GMTS_RUN_ROOTS)."""

    code = "unknown_run"


class JobNotFoundError(GMTSError, LookupError):
    """No job of that request id is waiting or running (``GET /v1/queue/{request_id}``)."""

    code = "unknown_job"


class SessionBusyError(QueueFullError):
    """The session is running a step (one at a time); retry shortly (HTTP 429)."""

    code = "session_busy"

    def __init__(self, message: str, retry_after_s: int = 2) -> None:
        super().__init__(message, retry_after_s)


__all__ = [
    "JobNotFoundError",
    "QueueFullError",
    "RunNotFoundError",
    "SessionBusyError",
    "SessionNotFoundError",
]
