"""Bounded concurrency for heavy jobs (model loading, sampling, forward passes).

At most ``max_concurrent`` jobs run at once and at most ``max_queued`` more wait; a job beyond
that is refused at once with QueueFullError (HTTP 429 with ``Retry-After``) instead of piling
up. Jobs run in worker threads, so the event loop stays free: ``/healthz`` answers while an
analysis runs. The limiter uses thread primitives only, so it works from any event loop (the
API's, Gradio's) and from plain threads.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import anyio.to_thread

from app.services.errors import QueueFullError

logger = logging.getLogger(__name__)

T = TypeVar("T")


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

    @property
    def running(self) -> int:
        return self._running

    @property
    def waiting(self) -> int:
        return self._admitted - self._running

    @contextmanager
    def _admission(self) -> Iterator[None]:
        with self._lock:
            if self._admitted >= self.max_concurrent + self.max_queued:
                raise QueueFullError(
                    f"the server is busy ({self._running} jobs running, {self.waiting} waiting);"
                    f" retry in {self.retry_after_s} s",
                    self.retry_after_s,
                )
            self._admitted += 1
        try:
            yield
        finally:
            with self._lock:
                self._admitted -= 1

    def _run_in_slot(self, fn: Callable[[], T]) -> T:
        with self._slots:
            with self._lock:
                self._running += 1
            try:
                return fn()
            finally:
                with self._lock:
                    self._running -= 1

    async def run(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` in a worker thread once a slot is free (raises QueueFullError if full)."""
        with self._admission():
            return await anyio.to_thread.run_sync(self._run_in_slot, fn)

    def run_blocking(self, fn: Callable[[], T]) -> T:
        """The same limits for callers already on a worker thread (e.g. sync UI handlers)."""
        with self._admission():
            return self._run_in_slot(fn)
