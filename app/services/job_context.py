"""What a job carries from its caller into the job line (:mod:`app.services.jobs`), in context
variables, so the layers in between need not pass it on:

- :data:`JOB_LABEL`: the request id, by which ``GET /v1/queue/{request_id}`` finds the job;
- :data:`JOB_CLIENT`: who asks (the connection's address), for the per-client cap;
- :data:`JOB_TIMING`: the request's seconds waiting in line and working, summed over its jobs
  (the ``X-Queue-Wait-S`` and ``X-Work-S`` headers);
- :func:`wait_in_line`: how a person's caller (the UI) waits for queue space instead of a 429,
  told once that it waits and its place in line whenever it changes."""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

PositionCallback = Callable[[int], None]  # place in line: 1 = next, 0 = running now


@dataclass(frozen=True)
class LinePolicy:
    """How a caller waits: up to ``wait_s`` for queue space, telling the person once
    (``on_wait``) and its place in line whenever it changes (``on_position``)."""

    wait_s: float
    on_wait: Callable[[str], None] | None = None
    on_position: PositionCallback | None = None


_LINE: contextvars.ContextVar[LinePolicy | None] = contextvars.ContextVar(
    "gmts_wait_in_line", default=None
)


@dataclass
class JobTiming:
    """Seconds a request's jobs waited in line and worked (summed over its jobs)."""

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
def wait_in_line(
    wait_s: float,
    on_wait: Callable[[str], None] | None = None,
    on_position: PositionCallback | None = None,
) -> Iterator[None]:
    """Blocking job calls inside wait for queue space (up to ``wait_s``) instead of a 429;
    ``on_wait(message)`` is called once when the caller has to wait, ``on_position(n)`` each
    time its place in line changes (n = 1: next) and with 0 once its job runs."""
    token = _LINE.set(LinePolicy(wait_s, on_wait, on_position))
    try:
        yield
    finally:
        _LINE.reset(token)


def line_policy() -> LinePolicy | None:
    return _LINE.get()
