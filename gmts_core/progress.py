"""Progress and cancellation of long computations: stage announcements and cooperative stops.

**Stages.** :func:`gmts_core.analysis.analyze.analyze` and :func:`gmts_core.grpo.step.grpo_step`
take an ``on_stage`` callable, ``on_stage(name, done, total)``: called when a stage begins, with
its name (e.g. "generating answers"), the number of stages already finished and the number of
stages in the job. It runs on the computing thread, between stages, so it should return quickly
(a UI updates a progress line; a CLI prints). The default is a no-op.

**Cancellation.** A caller (the server's job limiter) runs work inside ``cancellable(token)``;
the work calls :func:`checkpoint` at its stage boundaries (between sampling and the forward
pass, before each RL update, between decoding steps) and raises :class:`Cancelled` there once
the token is cancelled, e.g. because the client disconnected or the server is shutting down.
Outside a ``cancellable`` block ``checkpoint`` does nothing, so library users never see it. The
token travels in a context variable, which worker threads started with ``anyio.to_thread``
inherit. Every stage announcement is also a checkpoint.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

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


# --- stages -----------------------------------------------------------------------------------

StageCallback = Callable[[str, int, int], None]  # (stage name, stages done, stages in all)

# stage names, shared by the analysis and the RL step so front ends can explain them
GENERATING = "generating answers"
TOKENIZING = "tokenizing answers"
REWARDS = "scoring rewards"
STATISTICS = "token statistics"
SELECTION = "selection"
UPDATE = "update"
LOGPROB_AFTER = "log-prob after"


def no_stage(name: str, done: int, total: int) -> None:
    """The default ``on_stage``: nobody listens."""


@dataclass
class Stages:
    """Announces a job's stages in order: ``begin(name)`` reports (name, done, total) and counts
    the stage; ``total`` may grow when a later part of the job learns it has more stages."""

    on_stage: StageCallback = no_stage
    total: int = 0
    done: int = 0

    def begin(self, name: str) -> None:
        checkpoint()
        self.total = max(self.total, self.done + 1)
        self.on_stage(name, self.done, self.total)
        self.done += 1


def stages(on_stage: StageCallback | None, total: int) -> Stages:
    """A :class:`Stages` for ``on_stage`` (None: the no-op) and ``total`` stages."""
    return Stages(on_stage or no_stage, total)
