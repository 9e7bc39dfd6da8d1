"""Many live-RL sessions on one server: time-to-live, an LRU cap, one caller at a time.

:class:`SessionStore` expires sessions unused for ``ttl_s`` seconds (``GMTS_SESSION_TTL_S``), keeps
at most ``max_sessions`` (``GMTS_MAX_SESSIONS``) holding at most ``max_bytes`` together
(``GMTS_SESSION_MEMORY_MB``, see :meth:`Session.memory_bytes`; the least recently used idle one
is evicted) and
lets one caller at a time use a session (a per-session lock; a second caller gets
:class:`SessionBusyError`). The clock is injectable, so tests move time instead of sleeping.

With a state folder (``GMTS_SESSION_STATE_DIR``), every session is also on disk: saved after
each change (:meth:`SessionStore.save`, see :mod:`gmts_core.experiments.session_state`) and
removed from disk when it expires, is evicted or deleted. On start the store lists the saved
sessions as *dormant* (their ``meta.json`` only); the session service restores a dormant
session (loads its model, rebuilds its policy) on its first use. Dormant sessions count
towards ``max_sessions`` and expire like the others (by the wall-clock age of their last save).

A saved session whose files fail their checks (on start, or when it is restored) is
*quarantined*: its folder is moved to ``<state folder>/.quarantine/`` (kept for a look, never
read again), the reason is logged, and the session's id answers "not found" with that reason.
Entries of the state folder that are no session folder (no ``meta.json``) are left alone.

Fair sharing: each session belongs to the client that created it (its ``owner``, saved with
it). An API client holds at most ``per_client`` sessions (``GMTS_MAX_SESSIONS_PER_CLIENT``; 429
beyond). The server's own front ends (the UI's local backend, the CLI) create sessions with no
owner: those are not capped per client (every browser has its own session, and a classroom
shares one address), only by ``max_sessions``. Making room evicts a client's own least recently
used idle session first, another client's only when that client holds more sessions than this
one will; so no client can push out the sessions of a client holding fewer.
"""

from __future__ import annotations

import logging
import secrets
import shutil
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from app.services.errors import (
    QueueFullError,
    SessionBusyError,
    SessionNotFoundError,
)
from gmts_core.config import RLConfig
from gmts_core.experiments.session_state import (
    META,
    CorruptSessionError,
    SavedSession,
    check_saved,
    save_session,
)
from gmts_core.experiments.sessions import Session
from gmts_core.grpo.policy import PolicySettings, TrainablePolicy
from gmts_core.model.loading import LoadedModel

logger = logging.getLogger(__name__)

QUARANTINE = ".quarantine"  # inside the state folder: damaged sessions moved aside


class SessionCapError(QueueFullError):
    """A client holds its share of sessions, or the others' sessions fill the server (429)."""

    code = "too_many_sessions"


class SessionStore:
    """Thread-safe sessions with a time-to-live and a least-recently-used cap."""

    def __init__(
        self,
        ttl_s: float = 1800.0,
        max_sessions: int = 4,
        clock: Callable[[], float] = time.monotonic,
        max_bytes: float | None = None,
        state_dir: Path | None = None,
        wall_clock: Callable[[], float] = time.time,
        per_client: int | None = None,
        retry_after_s: int = 5,
    ) -> None:
        self.ttl_s = ttl_s
        self.per_client = per_client
        self.retry_after_s = retry_after_s
        self._owner: dict[str, str] = {}  # session id -> the client that created it
        self.max_sessions = max_sessions
        self.max_bytes = max_bytes
        self.state_dir = state_dir
        self.evicted = 0  # sessions evicted to make room (not expired, not deleted)
        self._clock = clock
        self._sessions: OrderedDict[str, Session] = OrderedDict()  # least recently used first
        self._dormant: dict[str, SavedSession] = {}  # saved, not loaded yet
        self._last_used: dict[str, float] = {}  # dormant id -> last use on self._clock
        self._gone: OrderedDict[str, str] = OrderedDict()  # id -> why it is gone
        self._lock = threading.Lock()
        if state_dir is not None:
            self._scan(state_dir, wall_clock())

    # --- the state folder ---

    def _scan(self, state_dir: Path, wall_now: float) -> None:
        """List the saved sessions (most recently saved last), at most ``max_sessions``;
        quarantine the damaged ones."""
        state_dir.mkdir(parents=True, exist_ok=True)
        found = [s for s in map(self._check_entry, sorted(state_dir.iterdir())) if s is not None]
        found.sort(key=lambda s: s.saved_at)
        now = self._clock()
        for saved in found:
            self._dormant[saved.session_id] = saved
            self._owner[saved.session_id] = str(saved.extra.get("owner", ""))
            self._last_used[saved.session_id] = now - max(wall_now - saved.saved_at, 0.0)
        while len(self._dormant) > self.max_sessions:
            oldest = next(iter(self._dormant))
            self._forget_locked(oldest, f"was evicted (at most {self.max_sessions} sessions)")
        if self._dormant:
            logger.info("%d saved sessions in %s", len(self._dormant), state_dir)
        self._purge_locked()

    def _check_entry(self, entry: Path) -> SavedSession | None:
        """The saved session in ``entry``, or None (quarantined when it is a damaged one)."""
        if entry.name == QUARANTINE or entry.is_symlink() or not entry.is_dir():
            return None
        if not (entry / META).exists() and not (entry / META).is_symlink():
            return None  # no session folder (a save never got as far as its meta.json)
        try:
            saved = check_saved(entry)
        except CorruptSessionError as exc:
            self._quarantine_locked(entry.name, str(exc))
            return None
        except Exception as exc:  # whatever else is wrong with it never stops the start
            logger.exception("reading the session state in %s failed", entry)
            self._quarantine_locked(entry.name, f"cannot be read ({type(exc).__name__})")
            return None
        if saved.session_id != entry.name:
            self._quarantine_locked(entry.name, "meta.json names another session")
            return None
        return saved

    def quarantine(self, session_id: str, reason: str) -> SessionNotFoundError:
        """Move a damaged session's folder aside and forget the session; the error to raise."""
        with self._lock:
            self._sessions.pop(session_id, None)
            self._dormant.pop(session_id, None)
            self._last_used.pop(session_id, None)
            self._quarantine_locked(session_id, reason)
            return self._not_found_locked(session_id)

    def _quarantine_locked(self, name: str, reason: str) -> None:
        assert self.state_dir is not None
        target = self.state_dir / QUARANTINE / f"{name}-{time.time_ns()}"
        try:
            target.parent.mkdir(exist_ok=True)
            (self.state_dir / name).rename(target)
            where = f"moved to {target}"
        except OSError as exc:  # still never read again: it is forgotten below
            where = f"could not be moved aside ({exc})"
        logger.error("session state %s is damaged (%s); %s", name, reason, where)
        self._gone[name] = f"was quarantined: its saved state is damaged ({reason})"
        while len(self._gone) > 1024:
            self._gone.popitem(last=False)

    def save(self, session: Session, extra: dict[str, Any] | None = None) -> None:
        """Write the session's state to the state folder (nothing without one), unless it is
        gone (deleted while its step ran)."""
        if self.state_dir is None or session.id not in self._sessions:
            return
        folder = self.state_dir / session.id
        try:
            save_session(session, folder, extra)
        except Exception:  # noqa: BLE001 - OSError, or safetensors' own error for a lost folder
            if session.id in self._sessions:
                raise
            # deleted while it was written: the delete removed the folder under the write
        if session.id not in self._sessions:  # deleted while it was written
            shutil.rmtree(folder, ignore_errors=True)

    def dormant(self, session_id: str) -> SavedSession | None:
        """The saved state of a session not loaded yet (None: loaded, or unknown)."""
        with self._lock:
            self._purge_locked()
            return self._dormant.get(session_id)

    def restored(self, session: Session) -> Session:
        """Put a restored dormant session in place (making room as for a new one)."""
        with self._lock:
            if session.id not in self._dormant:  # deleted or expired meanwhile
                raise self._not_found_locked(session.id)
            session.last_used = self._last_used.get(session.id, self._clock())
            owner = self._owner.get(session.id, "")
            self._make_room_locked(session.memory_bytes(), keep=session.id, owner=owner)
            self._dormant.pop(session.id, None)
            self._last_used.pop(session.id, None)
            self._sessions[session.id] = session
            self._sessions.move_to_end(session.id)
        logger.info("restored session %s (%d steps)", session.id, session.steps_done)
        return session

    def create(
        self,
        base: LoadedModel,
        config: RLConfig | None = None,
        policy: PolicySettings | None = None,
        seed: int = 0,
        owner: str = "",
    ) -> Session:
        """A new session of client ``owner`` with its own policy copy of ``base`` (made outside
        the store lock)."""
        config = config or RLConfig()
        config.validate()
        with self._lock:
            self._purge_locked()
            self._check_share_locked(owner)
            self._make_room_locked(owner=owner)
        now = self._clock()
        session = Session(
            secrets.token_urlsafe(12), TrainablePolicy(base, policy), config, seed, now, now
        )
        with self._lock:
            self._check_share_locked(owner)
            self._make_room_locked(session.memory_bytes(), owner=owner)
            self._sessions[session.id] = session
            self._owner[session.id] = owner
        logger.info("created session %s on %s (%s)", session.id, base.name, session.policy.kind)
        return session

    def owner(self, session_id: str) -> str:
        return self._owner.get(session_id, "")

    def _held_locked(self, owner: str) -> int:
        return sum(1 for sid in [*self._sessions, *self._dormant] if self._owner.get(sid) == owner)

    def _check_share_locked(self, owner: str) -> None:
        if not owner:  # the server's own UI or CLI: bounded by max_sessions only
            return
        if self.per_client is not None and self._held_locked(owner) >= self.per_client:
            raise SessionCapError(
                f"this client holds {self.per_client} sessions, its limit "
                "(GMTS_MAX_SESSIONS_PER_CLIENT); delete one (DELETE /v1/sessions/{id}) first",
                self.retry_after_s,
            )

    def _evictable_locked(self, owner: str, keep: str | None) -> list[str]:
        """The idle sessions a request of ``owner`` may evict, least recently used first: its
        own if it has any, else those of clients holding more sessions than ``owner`` will."""
        # (last use, loaded before dormant on a tie, LRU order of the loaded ones, id)
        idle = [
            (s.last_used, 0, i, sid)
            for i, (sid, s) in enumerate(self._sessions.items())
            if not s.lock.locked() and sid != keep
        ]
        idle += [(t, 1, 0, sid) for sid, t in self._last_used.items() if sid != keep]
        idle.sort()
        own = [sid for *_, sid in idle if self._owner.get(sid, "") == owner]
        if own:
            return own
        mine = self._held_locked(owner) + 1
        return [sid for *_, sid in idle if self._held_locked(self._owner.get(sid, "")) > mine]

    def _used_bytes_locked(self) -> int:
        return sum(s.memory_bytes() for s in self._sessions.values())

    def _full_locked(self, incoming: int, keep: str | None) -> bool:
        count = len(self._sessions) + len(self._dormant) - (keep in self._dormant)
        if count >= self.max_sessions:
            return True
        if self.max_bytes is None or not self._sessions:
            return False
        return self._used_bytes_locked() + incoming > self.max_bytes

    def _make_room_locked(
        self, incoming: int = 0, keep: str | None = None, owner: str = ""
    ) -> None:
        while self._full_locked(incoming, keep):
            candidates = self._evictable_locked(owner, keep)
            if not candidates:
                raise SessionCapError(
                    f"the server holds its {self.max_sessions} sessions (GMTS_MAX_SESSIONS), "
                    "none of them this client's to replace; try again later",
                    self.retry_after_s,
                )
            mb = "" if self.max_bytes is None else f", {self.max_bytes / 2**20:g} MB"
            victim = candidates[0]
            self._forget_locked(victim, f"was evicted (at most {self.max_sessions} sessions{mb})")
            self.evicted += 1

    def _forget_locked(self, session_id: str, why: str) -> None:
        self._owner.pop(session_id, None)
        self._sessions.pop(session_id, None)
        self._dormant.pop(session_id, None)
        self._last_used.pop(session_id, None)
        self._gone[session_id] = why
        while len(self._gone) > 1024:
            self._gone.popitem(last=False)
        if self.state_dir is not None:
            shutil.rmtree(self.state_dir / session_id, ignore_errors=True)
        logger.info("session %s %s", session_id, why)

    def _purge_locked(self) -> None:
        now = self._clock()
        for sid, s in list(self._sessions.items()):
            if now - s.last_used > self.ttl_s and not s.lock.locked():
                self._forget_locked(sid, f"expired after {self.ttl_s:g} s without use")
        for sid, last in list(self._last_used.items()):
            if now - last > self.ttl_s:
                self._forget_locked(sid, f"expired after {self.ttl_s:g} s without use")

    def _not_found_locked(self, session_id: str) -> SessionNotFoundError:
        why = self._gone.get(session_id, "does not exist")
        return SessionNotFoundError(f"session {session_id!r} {why}; create a new one")

    def get(self, session_id: str) -> Session:
        """The session (marked as just used), or SessionNotFoundError saying why not."""
        with self._lock:
            self._purge_locked()
            session = self._sessions.get(session_id)
            if session is None:
                if session_id in self._dormant:
                    raise SessionNotFoundError(
                        f"session {session_id!r} is saved but not restored yet"
                    )
                raise self._not_found_locked(session_id)
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

    def delete(self, session_id: str) -> Session | None:
        """Forget the session (and its saved state); returns it when it was loaded."""
        with self._lock:
            self._purge_locked()
            session = self._sessions.get(session_id)
            if session is None and session_id not in self._dormant:
                raise self._not_found_locked(session_id)
            self._forget_locked(session_id, "was deleted")
            return session

    def ids(self) -> list[str]:
        """Loaded and dormant sessions."""
        with self._lock:
            self._purge_locked()
            return [*self._sessions, *self._dormant]

    def __len__(self) -> int:
        return len(self.ids())
