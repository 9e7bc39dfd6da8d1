"""Live-RL sessions: a private trainable policy each, and a thread-safe store of them.

A :class:`Session` owns a :class:`~gmts_core.policy.TrainablePolicy` (the base model is never
touched), its AdamW state, default RL settings and the history of its steps. Step ``n`` of a
session always uses the seed ``(session seed, n)``, so after ``reset()`` the same steps
replay exactly. The :class:`SessionStore` expires sessions unused for ``ttl_s`` seconds, keeps
at most ``max_sessions`` sessions holding at most ``max_bytes`` together (see
:meth:`Session.memory_bytes`; the least recently used idle one is evicted), and lets one caller at a
time use a session (a per-session lock; a second caller gets :class:`SessionBusyError`).
"""

from __future__ import annotations

import dataclasses
import logging
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from gmts_core.cancel import checkpoint
from gmts_core.errors import GMTSError, LimitExceededError
from gmts_core.evaluation import EvalResult, demo_batch, evaluate_accuracy, heldout_problems
from gmts_core.modeling import LoadedModel
from gmts_core.policy import PolicySettings, TrainablePolicy
from gmts_core.rl import RLConfig, RLPrompt, grpo_step, make_optimizer
from gmts_core.rl_records import StepMetrics, StepResult

logger = logging.getLogger(__name__)


class SessionNotFoundError(GMTSError, LookupError):
    """No session has this id (never created, deleted, expired or evicted)."""

    code = "session_not_found"


class SessionBusyError(GMTSError, RuntimeError):
    """The session is running a step for another caller; one step at a time."""

    code = "session_busy"


def step_seed(session_seed: int, step: int) -> int:
    """The seed of a session's step ``step`` (sampling, demo batch, random selection)."""
    return session_seed * 1_000_003 + step


@dataclass
class Session:
    """One user's private policy, optimizer, settings and step history."""

    id: str
    policy: TrainablePolicy
    config: RLConfig
    seed: int = 0
    created_at: float = 0.0
    last_used: float = 0.0
    history: list[StepMetrics] = field(default_factory=list)
    evaluations: list[dict[str, Any]] = field(default_factory=list)
    last_result: StepResult | None = None
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        self.config.validate()
        self.optimizer = make_optimizer(self.policy, self.config)

    @property
    def steps_done(self) -> int:
        return len(self.history)

    def memory_bytes(self) -> int:
        """What this session holds: its trainable weights, their start copy (for reset), their
        gradients and AdamW's two moments, i.e. 5 x the trainable parameters' bytes. A full
        copy of the 0.17M-parameter demo model is about 3.4 MB; a LoRA adapter counts only
        its adapter weights (the base model is shared)."""
        per_copy = sum(p.numel() * p.element_size() for p in self.policy.trainable_parameters())
        return 5 * per_copy

    def step(
        self,
        prompts: Sequence[RLPrompt] | None = None,
        num_steps: int = 1,
        config: RLConfig | None = None,
        progress: Callable[[int, StepResult], None] | None = None,
    ) -> list[StepResult]:
        """Run ``num_steps`` GRPO steps; without ``prompts`` each draws a demo-task batch.

        The caller holds ``lock`` (see :meth:`SessionStore.use`). ``config`` overrides the
        session's settings for these steps only.
        """
        cfg = config or self.config
        cfg.validate()
        results = []
        for _ in range(num_steps):
            checkpoint()  # a cancelled job stops between steps
            n = self.steps_done
            seed = step_seed(self.seed, n)
            batch = list(prompts) if prompts else demo_batch(cfg.prompts_per_step, seed)
            result = grpo_step(self.policy, self.optimizer, batch, cfg, seed, step=n + 1)
            self.history.append(result.metrics)
            self.last_result = result
            results.append(result)
            if progress is not None:
                progress(len(results), result)
        return results

    def evaluate(self, num_problems: int = 200, **kwargs: Any) -> EvalResult:
        """Held-out accuracy of the policy now; recorded with the current step number."""
        kwargs.setdefault("temperature", self.config.temperature)
        kwargs.setdefault("max_new_tokens", self.config.max_new_tokens)
        result = evaluate_accuracy(
            self.policy.model, self.policy.tokenizer, heldout_problems(num_problems), **kwargs
        )
        self.evaluations.append({"step": self.steps_done, **result.to_dict()})
        return result

    def reset(self) -> None:
        """Back to the start: weights bit-identical, fresh optimizer, empty history."""
        self.policy.reset()
        self.optimizer = make_optimizer(self.policy, self.config)
        self.history.clear()
        self.evaluations.clear()
        self.last_result = None

    def info(self) -> dict[str, Any]:
        """Settings and step history (the body of ``GET /v1/sessions/{id}``)."""
        return {
            "session_id": self.id,
            "model": self.policy.base.name,
            "policy_kind": self.policy.kind,
            "trainable_parameters": self.policy.num_trainable,
            "seed": self.seed,
            "settings": dataclasses.asdict(self.config),
            "steps_done": self.steps_done,
            "history": [m.to_dict() for m in self.history],
            "evaluations": list(self.evaluations),
        }


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
