"""Bounded concurrency for heavy jobs (model loading, sampling, forward passes, RL steps).

At most ``max_concurrent`` jobs run at once and at most ``max_queued`` more wait; a job beyond
that is refused at once with QueueFullError (HTTP 429 with ``Retry-After``) instead of piling
up. Jobs run in worker threads, so the event loop stays free: ``/healthz`` answers while an
analysis runs. The limiter uses thread primitives only, so it works from any event loop (the
API's, Gradio's) and from plain threads.

Every job carries a :class:`~gmts_core.progress.CancelToken`: the HTTP layer cancels it when the
client disconnects (see ``app.api.limits``), and an awaiting task that is itself cancelled
(server shutdown past its grace period) cancels it too. A waiting job whose token is cancelled
leaves the queue without running; a running one stops at its next stage boundary
(``gmts_core.progress.checkpoint``). ``cancel_all`` cancels every job (shutdown).

People do not get a 429: a caller on a worker thread (the UI) can wrap its calls in
:func:`wait_in_queue`, and ``run_blocking`` then waits for queue space (up to ``wait_s``,
notifying the person once through ``on_wait``) instead of refusing.

One client (the HTTP layer sets its address in :data:`JOB_CLIENT`) has at most
``max_per_client`` jobs running or waiting (``GMTS_MAX_JOBS_PER_CLIENT``); one more is refused
at once (429) while others still get in, so no client can fill the queue the others wait in.
Callers without a client (the UI's own handlers, background work) are not counted.

The queue is first come, first served. A caller that passes ``on_position`` to
:func:`wait_in_queue` is notified of its place as it changes (2, then 1, then 0 = running): the
wait is event-driven, every job that leaves the queue or a slot wakes the waiters, so the caller
is notified when its place changes rather than when a poll happens to look.

Waiting is reported honestly: every job may carry a label (the HTTP layer sets the request id in
:data:`JOB_LABEL`), :meth:`JobLimiter.status` gives a labelled job's state, place in the queue and
estimated wait (place x the mean duration of recent jobs / slots), and :data:`JOB_TIMING`
collects a request's seconds waiting in the queue and working, which the HTTP layer returns in the
``X-Queue-Wait-S`` and ``X-Work-S`` headers.

What a job carries from its caller travels in context variables, so the layers in between need
not pass it on: :data:`JOB_LABEL` (the request id, by which ``GET /v1/queue/{request_id}``
finds the job), :data:`JOB_CLIENT` (who asks, for the per-client cap), :data:`JOB_TIMING` (the
request's seconds waiting and working) and the :class:`QueuePolicy` :func:`wait_in_queue` sets.
"""

from __future__ import annotations

import contextvars
import logging
import math
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal, TypeVar

import anyio.to_thread

from app.services.errors import QueueFullError
from gmts_core.progress import Cancelled, CancelToken, cancellable, current_token

logger = logging.getLogger(__name__)

T = TypeVar("T")

# --- what a job carries from its caller, in context variables (the layers between pass nothing)

PositionCallback = Callable[[int], None]  # place in the queue: 1 = next, 0 = running now


@dataclass(frozen=True)
class QueuePolicy:
    """How a caller waits: up to ``wait_s`` for queue space, notifying the person once
    (``on_wait``) and its place in the queue whenever it changes (``on_position``)."""

    wait_s: float
    on_wait: Callable[[str], None] | None = None
    on_position: PositionCallback | None = None


_QUEUE_POLICY: contextvars.ContextVar[QueuePolicy | None] = contextvars.ContextVar(
    "gmts_wait_in_queue", default=None
)


@dataclass
class JobTiming:
    """Seconds a request's jobs waited in the queue and worked (summed over its jobs)."""

    queued_s: float = 0.0
    work_s: float = 0.0
    jobs: int = 0


JOB_LABEL: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "gmts_job_label", default=None
)

JOB_CLIENT: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "gmts_job_client", default=None
)  # who asks (the connection's address; a trusted proxy's client): the per-client cap

JOB_TIMING: contextvars.ContextVar[JobTiming | None] = contextvars.ContextVar(
    "gmts_job_timing", default=None
)


@contextmanager
def wait_in_queue(
    wait_s: float,
    on_wait: Callable[[str], None] | None = None,
    on_position: PositionCallback | None = None,
) -> Iterator[None]:
    """Blocking job calls inside wait for queue space (up to ``wait_s``) instead of a 429;
    ``on_wait(message)`` is called once when the caller has to wait, ``on_position(n)`` each
    time its place in the queue changes (n = 1: next) and with 0 once its job runs."""
    token = _QUEUE_POLICY.set(QueuePolicy(wait_s, on_wait, on_position))
    try:
        yield
    finally:
        _QUEUE_POLICY.reset(token)


def queue_policy() -> QueuePolicy | None:
    return _QUEUE_POLICY.get()


# --- the limiter -----------------------------------------------------------------------------

QUEUE_POLL_S = 0.05  # how often a waiting job looks at its cancel token (nothing notifies it)


@dataclass(frozen=True)
class JobStatus:
    """Where a labelled job is: waiting (``place`` 1 = next) or running (place 0)."""

    label: str
    state: Literal["waiting", "running"]
    place: int
    estimated_wait_s: float | None  # None until a job has finished (nothing to go by)


MEAN_WEIGHT = 0.2  # weight of the newest job in the running mean of job durations


JOB_THREAD_NICE = 10  # how much lower a job thread's CPU priority is than the event loop's
_niced = threading.local()


def lower_thread_priority() -> None:
    """Run this (job) thread at a lower CPU priority than the event loop's, once per thread.

    A job's pure-Python parts (building records, formatting a body) and the event loop share
    the interpreter: the loop only runs when the job's thread hands it over, and on a loaded
    machine a handed-over turn waits for a CPU. At a lower priority the job's thread yields
    the CPU to the loop, so ``/healthz`` answers while it runs. Linux only (a thread is a task
    there); elsewhere, or where not permitted, it does nothing.
    """
    if getattr(_niced, "done", False):
        return
    _niced.done = True
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), JOB_THREAD_NICE)
    except (AttributeError, OSError):  # not Linux, or not allowed: run as is
        pass


class JobLimiter:
    """N heavy jobs at once plus a bounded queue; refuses the rest."""

    def __init__(
        self,
        max_concurrent: int = 1,
        max_queued: int = 8,
        retry_after_s: int = 5,
        clock: Callable[[], float] = time.monotonic,
        max_per_client: int | None = None,
    ):
        self.max_concurrent = max_concurrent
        self.max_queued = max_queued
        self.max_per_client = max_per_client  # None: no cap per client
        self.retry_after_s = retry_after_s
        self._clock = clock
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)  # a job left the queue or a slot
        # admitted, waiting for a slot: the queue, first come first served
        self._waiting: deque[CancelToken] = deque()
        self._admitted = 0  # running + waiting
        self._running = 0
        self._tokens: set[CancelToken] = set()
        self._labels: dict[CancelToken, str] = {}
        self._clients: dict[CancelToken, str] = {}
        self._per_client: dict[str, int] = {}  # jobs running or waiting, by client
        self._started: set[CancelToken] = set()  # running now
        self.mean_job_s: float | None = None  # running mean of finished jobs' durations
        self.dropped = 0  # jobs cancelled while waiting (never ran)
        self.stopped = 0  # jobs cancelled while running (stopped at a stage boundary)

    @property
    def running(self) -> int:
        return self._running

    @property
    def waiting(self) -> int:
        return max(self._admitted - self._running, 0)

    @property
    def next_place(self) -> int:
        """The place a job admitted now would take (0: a slot is free)."""
        return max(self._admitted - self.max_concurrent + 1, 0)

    def estimate_wait_s(self, place: int) -> float | None:
        """Seconds until a job at ``place`` (1 = next) gets a slot: place x mean duration /
        slots (None before any job finished)."""
        if self.mean_job_s is None or place <= 0:
            return 0.0 if place <= 0 else None
        seconds = math.ceil(place / self.max_concurrent) * self.mean_job_s
        return max(round(seconds, 1), 0.1)  # a waiting job is never shown "0 s to go"

    def status(self, label: str) -> JobStatus | None:
        """The labelled job's state, place and estimated wait (None: no such job now)."""
        with self._lock:
            token = next((t for t, name in self._labels.items() if name == label), None)
            if token is None:
                return None
            if token in self._started:
                return JobStatus(label, "running", 0, 0.0)
            place = self._place(token) if token in self._waiting else self.waiting
            place = max(place, 1)
        return JobStatus(label, "waiting", place, self.estimate_wait_s(place))

    def cancel_all(self, reason: str) -> None:
        """Cancel every admitted job (waiting ones leave the queue, running ones stop)."""
        with self._lock:
            tokens = list(self._tokens)
        for token in tokens:
            token.cancel(reason)

    def _full(self) -> bool:
        return self._admitted >= self.max_concurrent + self.max_queued

    def _queue_full_error(self) -> QueueFullError:
        return QueueFullError(
            f"the server is busy ({self._running} jobs running, {self.waiting} waiting);"
            f" retry in {self.retry_after_s} s",
            self.retry_after_s,
        )

    def _client_full_error(self) -> QueueFullError | None:
        """The refusal of a job whose client has ``max_per_client`` jobs in already."""
        client = JOB_CLIENT.get()
        if client is None or self.max_per_client is None:
            return None
        held = self._per_client.get(client, 0)
        if held < self.max_per_client:
            return None
        return QueueFullError(
            f"this client has {held} heavy jobs running or waiting, its limit "
            f"(GMTS_MAX_JOBS_PER_CLIENT); retry in {self.retry_after_s} s",
            self.retry_after_s,
        )

    def _admit_locked(self, token: CancelToken) -> None:
        client = JOB_CLIENT.get()
        if client is not None:
            self._clients[token] = client
            self._per_client[client] = self._per_client.get(client, 0) + 1
        self._admitted += 1
        self._tokens.add(token)
        label = JOB_LABEL.get()
        if label is not None:
            self._labels[token] = label
        self._changed.notify_all()  # (the lock is held) whoever watches the counts

    def _admit(self, token: CancelToken) -> None:
        with self._lock:
            refused = self._client_full_error()
            if refused is not None:
                raise refused
            if self._full():
                raise self._queue_full_error()
            self._admit_locked(token)

    def _notify(self, fn: Callable[[T], None], value: T) -> None:
        """Call a person's callback without holding the lock (it may be slow)."""
        self._lock.release()
        try:
            fn(value)
        finally:
            self._lock.acquire()

    def _admit_waiting(self, token: CancelToken, policy: QueuePolicy) -> None:
        """Admit, waiting (a worker thread) up to ``policy.wait_s`` for queue space; woken
        whenever a job leaves the queue."""
        deadline = self._clock() + policy.wait_s
        notified_wait, notified_place = False, 0
        with self._lock:
            refused = self._client_full_error()
            if refused is not None:
                raise refused
            while self._full():
                if self._clock() >= deadline or token.cancelled:
                    raise self._queue_full_error()
                if not notified_wait and policy.on_wait is not None:
                    notified_wait = True
                    self._notify(
                        policy.on_wait,
                        f"The server is busy ({self._admitted} requests ahead of yours): your "
                        "request waits in the queue and runs as soon as a place frees up.",
                    )
                    continue  # the queue may have moved while notifying
                place = self.waiting + 1  # at least: behind every job already in the queue
                if policy.on_position is not None and place != notified_place:
                    notified_place = place
                    self._notify(policy.on_position, place)
                    continue
                self._changed.wait(min(QUEUE_POLL_S, max(deadline - self._clock(), 0.0)))
            self._admit_locked(token)

    @contextmanager
    def _admission(self, token: CancelToken, policy: QueuePolicy | None = None) -> Iterator[None]:
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
                self._labels.pop(token, None)
                client = self._clients.pop(token, None)
                if client is not None:
                    left = self._per_client[client] - 1
                    if left:
                        self._per_client[client] = left
                    else:
                        del self._per_client[client]
                self._changed.notify_all()

    def _place(self, token: CancelToken) -> int:
        """``token``'s place in the queue: 0 when a slot is free for it, else 1 + jobs ahead of it
        that will get a slot first."""
        free = self.max_concurrent - self._running
        return max(self._waiting.index(token) + 1 - free, 0)

    def _acquire(self, token: CancelToken, on_position: PositionCallback | None = None) -> None:
        """Wait in the queue for a slot (first come, first served), notifying ``on_position``
        of each new place; a cancelled token leaves the queue (Cancelled). Holds a slot on
        return."""
        notified = 0
        with self._lock:
            self._waiting.append(token)
            try:
                while True:
                    if token.cancelled:
                        self.dropped += 1
                        raise Cancelled(token.reason)
                    place = self._place(token)
                    if place == 0:
                        self._running += 1
                        break
                    if on_position is not None and place != notified:
                        notified = place
                        self._notify(on_position, place)
                        continue  # the queue may have moved while notifying
                    self._changed.wait(QUEUE_POLL_S)  # woken when a job leaves; the timeout
                    # only bounds how late a cancelled token is noticed
            finally:
                self._waiting.remove(token)
                self._changed.notify_all()  # those behind move up

    def _run_in_slot(
        self, fn: Callable[[], T], token: CancelToken, on_position: PositionCallback | None = None
    ) -> T:
        lower_thread_priority()
        queued_at = self._clock()
        self._acquire(token, on_position)
        started = self._clock()
        with self._lock:
            self._started.add(token)
        try:
            if on_position is not None:
                on_position(0)  # running now
            with cancellable(token):
                return fn()
        except Cancelled:
            with self._lock:
                self.stopped += 1
            raise
        finally:
            ended = self._clock()
            timing = JOB_TIMING.get()
            if timing is not None:
                timing.queued_s += started - queued_at
                timing.work_s += ended - started
                timing.jobs += 1
            with self._lock:
                self._started.discard(token)
                self._running -= 1
                took = ended - started
                self.mean_job_s = (
                    took
                    if self.mean_job_s is None
                    else (1 - MEAN_WEIGHT) * self.mean_job_s + MEAN_WEIGHT * took
                )
                self._changed.notify_all()

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
        policy = queue_policy()
        with self._admission(token, policy):
            return self._run_in_slot(fn, token, policy.on_position if policy else None)
