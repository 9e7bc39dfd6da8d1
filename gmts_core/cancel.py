"""Cooperative cancellation: long computations stop at stage boundaries when asked.

A caller (the server's job limiter) runs work inside ``cancellable(token)``; the work calls
:func:`checkpoint` at its stage boundaries (between sampling and the forward pass, before each
RL update, between decoding steps) and raises :class:`Cancelled` there once the token is
cancelled, e.g. because the client disconnected or the server is shutting down. Outside a
``cancellable`` block ``checkpoint`` does nothing, so library users never see it. The token
travels in a context variable, which worker threads started with ``anyio.to_thread`` inherit.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from gmts_core.errors import GMTSError


class Cancelled(GMTSError):
    """The work was cancelled (``reason`` says why) and stopped at a stage boundary."""

    code = "cancelled"

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class CancelToken:
    """A thread-safe flag with a reason; ``cancel`` may be called from any thread."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.reason = ""

    def cancel(self, reason: str) -> None:
        if not self._event.is_set():
            self.reason = reason
            self._event.set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def raise_if_cancelled(self) -> None:
        if self._event.is_set():
            raise Cancelled(self.reason)


_TOKEN: contextvars.ContextVar[CancelToken | None] = contextvars.ContextVar(
    "gmts_cancel_token", default=None
)


def current_token() -> CancelToken | None:
    return _TOKEN.get()


@contextmanager
def cancellable(token: CancelToken | None) -> Iterator[CancelToken | None]:
    """Make ``checkpoint`` inside this block watch ``token`` (None: never cancelled)."""
    reset = _TOKEN.set(token)
    try:
        yield token
    finally:
        _TOKEN.reset(reset)


def checkpoint() -> None:
    """Raise :class:`Cancelled` if the current work was cancelled; otherwise return at once."""
    token = _TOKEN.get()
    if token is not None:
        token.raise_if_cancelled()
