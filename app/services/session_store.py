"""Many live-RL sessions on one server: time-to-live, an LRU cap, one caller at a time.

:class:`SessionStore` expires sessions unused for ``ttl_s`` seconds (``GMTS_SESSION_TTL_S``), keeps
at most ``max_sessions`` (``GMTS_MAX_SESSIONS``) holding at most ``max_bytes`` together
(``GMTS_SESSION_MEMORY_MB``, see :meth:`Session.memory_bytes`; the least recently used idle one
is evicted) and
lets one caller at a time use a session (a per-session lock; a second caller gets
:class:`SessionBusyError`). The clock is injectable, so tests move time instead of sleeping.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from app.services.errors import LimitExceededError, SessionBusyError, SessionNotFoundError
from gmts_core.config import RLConfig
from gmts_core.experiments.sessions import Session
from gmts_core.grpo.policy import PolicySettings, TrainablePolicy
from gmts_core.modeling import LoadedModel

logger = logging.getLogger(__name__)


class SessionStore:
    """Thread-safe sessions with a time-to-live and a least-recently-used cap."""

    def __init__(
        self,
        ttl_s: float = 1800.0,
        max_sessions: int = 4,
        clock: Callable[[], float] = time.monotonic,
        max_bytes: float | None = None,
    ) -> None:
        self.ttl_s = ttl_s
        self.max_sessions = max_sessions
        self.max_bytes = max_bytes
        self.evicted = 0  # sessions evicted to make room (not expired, not deleted)
        self._clock = clock
        self._sessions: OrderedDict[str, Session] = OrderedDict()  # least recently used first
        self._gone: OrderedDict[str, str] = OrderedDict()  # id -> why it is gone
        self._lock = threading.Lock()

    def create(
        self,
        base: LoadedModel,
        config: RLConfig | None = None,
        policy: PolicySettings | None = None,
        seed: int = 0,
    ) -> Session:
        """A new session with its own policy copy of ``base`` (made outside the store lock)."""
        config = config or RLConfig()
        config.validate()
        with self._lock:
            self._purge_locked()
            self._make_room_locked()
        now = self._clock()
        session = Session(
            secrets.token_urlsafe(12), TrainablePolicy(base, policy), config, seed, now, now
        )
        with self._lock:
            self._make_room_locked(session.memory_bytes())
            self._sessions[session.id] = session
        logger.info("created session %s on %s (%s)", session.id, base.name, session.policy.kind)
        return session

    def _used_bytes_locked(self) -> int:
        return sum(s.memory_bytes() for s in self._sessions.values())

    def _full_locked(self, incoming: int) -> bool:
        if len(self._sessions) >= self.max_sessions:
            return True
        if self.max_bytes is None or not self._sessions:
            return False
        return self._used_bytes_locked() + incoming > self.max_bytes

    def _make_room_locked(self, incoming: int = 0) -> None:
        while self._full_locked(incoming):
            idle = [sid for sid, s in self._sessions.items() if not s.lock.locked()]
            if not idle:
                raise LimitExceededError(
                    f"all {len(self._sessions)} sessions are busy; try again shortly"
                )
            mb = "" if self.max_bytes is None else f", {self.max_bytes / 2**20:g} MB"
            self._forget_locked(idle[0], f"was evicted (at most {self.max_sessions} sessions{mb})")
            self.evicted += 1

    def _forget_locked(self, session_id: str, why: str) -> None:
        self._sessions.pop(session_id, None)
        self._gone[session_id] = why
        while len(self._gone) > 1024:
            self._gone.popitem(last=False)
        logger.info("session %s %s", session_id, why)

    def _purge_locked(self) -> None:
        now = self._clock()
        for sid, s in list(self._sessions.items()):
            if now - s.last_used > self.ttl_s and not s.lock.locked():
                self._forget_locked(sid, f"expired after {self.ttl_s:g} s without use")

    def purge_expired(self) -> None:
        with self._lock:
            self._purge_locked()

    def get(self, session_id: str) -> Session:
        """The session (marked as just used), or SessionNotFoundError saying why not."""
        with self._lock:
            self._purge_locked()
            session = self._sessions.get(session_id)
            if session is None:
                why = self._gone.get(session_id, "does not exist")
                raise SessionNotFoundError(f"session {session_id!r} {why}; create a new one")
            session.last_used = self._clock()
            self._sessions.move_to_end(session_id)
            return session

    @contextmanager
    def use(self, session_id: str, wait_s: float = 0.0) -> Iterator[Session]:
        """Hold the session for one operation; another holder means SessionBusyError."""
        session = self.get(session_id)
        acquired = (
            session.lock.acquire(timeout=wait_s) if wait_s > 0 else session.lock.acquire(False)
        )
        if not acquired:
            raise SessionBusyError(f"session {session_id!r} is running a step; wait for it")
        try:
            yield session
        finally:
            session.last_used = self._clock()
            session.lock.release()

    def delete(self, session_id: str) -> None:
        self.get(session_id)  # raises if unknown
        with self._lock:
            self._forget_locked(session_id, "was deleted")

    def ids(self) -> list[str]:
        with self._lock:
            self._purge_locked()
            return list(self._sessions)

    def __len__(self) -> int:
        return len(self.ids())
