"""Bounded concurrency for heavy jobs (model loading, sampling, forward passes, RL steps).

At most ``max_concurrent`` jobs run at once and at most ``max_queued`` more wait; a job beyond
that is refused at once with QueueFullError (HTTP 429 with ``Retry-After``) instead of piling
up. Jobs run in worker threads, so the event loop stays free: ``/healthz`` answers while an
analysis runs. The limiter uses thread primitives only, so it works from any event loop (the
API's, Gradio's) and from plain threads.

Every job carries a :class:`~gmts_core.cancel.CancelToken`: the HTTP layer cancels it when the
client disconnects (see ``app.api.limits``), and an awaiting task that is itself cancelled
(server shutdown past its grace period) cancels it too. A waiting job whose token is cancelled
leaves the queue without running; a running one stops at its next stage boundary
(``gmts_core.cancel.checkpoint``). ``cancel_all`` cancels every job (shutdown).

People do not get a 429: a caller on a worker thread (the UI) can wrap its calls in
:func:`wait_in_line`, and ``run_blocking`` then waits for queue space (up to ``wait_s``,
telling the person once through ``on_wait``) instead of refusing.
"""

from __future__ import annotations

import contextvars
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TypeVar

import anyio.to_thread

from app.services.errors import QueueFullError
from gmts_core.cancel import Cancelled, CancelToken, cancellable, current_token

logger = logging.getLogger(__name__)

T = TypeVar("T")

QUEUE_POLL_S = 0.05  # how often a waiting job looks at its token
LINE_POLL_S = 0.2  # how often a caller waiting in line looks for queue space


@dataclass(frozen=True)
class LinePolicy:
    wait_s: float
    on_wait: Callable[[str], None] | None = None


_LINE: contextvars.ContextVar[LinePolicy | None] = contextvars.ContextVar(
    "gmts_wait_in_line", default=None
)


@contextmanager
def wait_in_line(wait_s: float, on_wait: Callable[[str], None] | None = None) -> Iterator[None]:
    """Blocking job calls inside wait for queue space (up to ``wait_s``) instead of a 429;
    ``on_wait(message)`` is called once when the caller has to wait."""
    token = _LINE.set(LinePolicy(wait_s, on_wait))
    try:
        yield
    finally:
        _LINE.reset(token)


def line_policy() -> LinePolicy | None:
    return _LINE.get()


class JobLimiter:
    """N heavy jobs at once plus a bounded queue; refuses the rest."""

    def __init__(self, max_concurrent: int = 1, max_queued: int = 8, retry_after_s: int = 5):
        self.max_concurrent = max_concurrent
        self.max_queued = max_queued
        self.retry_after_s = retry_after_s
        self._slots = threading.BoundedSemaphore(max_concurrent)
        self._lock = threading.Lock()
        self._admitted = 0  # running + waiting
        self._running = 0
        self._tokens: set[CancelToken] = set()
        self.dropped = 0  # jobs cancelled while waiting (never ran)
        self.stopped = 0  # jobs cancelled while running (stopped at a stage boundary)

    @property
    def running(self) -> int:
        return self._running

    @property
    def waiting(self) -> int:
        return max(self._admitted - self._running, 0)

    def cancel_all(self, reason: str) -> None:
        """Cancel every admitted job (waiting ones leave the queue, running ones stop)."""
        with self._lock:
            tokens = list(self._tokens)
        for token in tokens:
            token.cancel(reason)

    def _admit(self, token: CancelToken) -> None:
        with self._lock:
            if self._admitted >= self.max_concurrent + self.max_queued:
                raise QueueFullError(
                    f"the server is busy ({self._running} jobs running, {self.waiting} waiting);"
                    f" retry in {self.retry_after_s} s",
                    self.retry_after_s,
                )
            self._admitted += 1
            self._tokens.add(token)

    def _admit_waiting(self, token: CancelToken, policy: LinePolicy) -> None:
        """Admit, waiting in line (a worker thread) up to ``policy.wait_s`` for queue space."""
        deadline = time.monotonic() + policy.wait_s
        told = False
        while True:
            try:
                self._admit(token)
                return
            except QueueFullError:
                if time.monotonic() >= deadline or token.cancelled:
                    raise
            if not told and policy.on_wait is not None:
                policy.on_wait(
                    f"The server is busy ({self._admitted} requests ahead of yours): your "
                    "request waits in line and runs as soon as a place frees up."
                )
                told = True
            time.sleep(LINE_POLL_S)

    @contextmanager
    def _admission(self, token: CancelToken, policy: LinePolicy | None = None) -> Iterator[None]:
        if policy is not None and policy.wait_s > 0:
            self._admit_waiting(token, policy)
        else:
            self._admit(token)
        try:
            yield
        finally:
            with self._lock:
                self._admitted -= 1
                self._tokens.discard(token)

    def _acquire(self, token: CancelToken) -> None:
        """Wait for a slot; a cancelled token leaves the queue (Cancelled)."""
        while not self._slots.acquire(timeout=QUEUE_POLL_S):
            if token.cancelled:
                with self._lock:
                    self.dropped += 1
                raise Cancelled(token.reason)
        if token.cancelled:
            self._slots.release()
            with self._lock:
                self.dropped += 1
            raise Cancelled(token.reason)

    def _run_in_slot(self, fn: Callable[[], T], token: CancelToken) -> T:
        self._acquire(token)
        try:
            with self._lock:
                self._running += 1
            with cancellable(token):
                return fn()
        except Cancelled:
            with self._lock:
                self.stopped += 1
            raise
        finally:
            with self._lock:
                self._running -= 1
            self._slots.release()

    async def run(self, fn: Callable[[], T], token: CancelToken | None = None) -> T:
        """Run ``fn`` in a worker thread once a slot is free (raises QueueFullError if full).

        ``token`` defaults to the request's (set by the HTTP layer) or a new one.
        """
        token = token or current_token() or CancelToken()
        with self._admission(token):
            try:
                return await anyio.to_thread.run_sync(
                    self._run_in_slot, fn, token, abandon_on_cancel=True
                )
            except BaseException as exc:  # the awaiting task was cancelled: stop the work too
                if not isinstance(exc, Exception):
                    token.cancel("the request was cancelled")
                raise

    def run_blocking(self, fn: Callable[[], T], token: CancelToken | None = None) -> T:
        """The same limits for callers already on a worker thread (e.g. sync UI handlers)."""
        token = token or current_token() or CancelToken()
        with self._admission(token, line_policy()):
            return self._run_in_slot(fn, token)
