"""The session service: live-RL sessions for the API and the UI, within the server's limits.

It wraps :class:`gmts_core.sessions.SessionStore` (TTL ``GMTS_SESSION_TTL_S``, at most
``GMTS_MAX_SESSIONS``), runs the heavy work (copying the model, GRPO steps, evaluation) in
worker threads under the shared job limiter, and is the analysis service's
:class:`~app.services.analysis.PolicyProvider`, so ``POST /v1/analyze`` with ``session_id``
analyzes with that session's policy.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from app.core.config import Settings
from app.services.errors import QueueFullError, SessionNotFoundError
from app.services.jobs import JobLimiter
from app.services.model_registry import ModelRegistry
from app.session_schemas import SessionCreateRequest, SessionEvalRequest, SessionStepRequest
from gmts_core import sessions as core
from gmts_core.errors import LimitExceededError
from gmts_core.modeling import LoadedModel
from gmts_core.policy import PolicySettings
from gmts_core.rl import RLConfig
from gmts_core.rl_records import StepResult
from gmts_core.sessions import Session, SessionStore

logger = logging.getLogger(__name__)

T = TypeVar("T")


class SessionBusyError(QueueFullError):
    """The session is running a step (one at a time); retry shortly (HTTP 429)."""

    code = "session_busy"


@contextmanager
def _app_errors() -> Iterator[None]:
    """gmts_core's session errors as the service errors the web layer maps to HTTP."""
    try:
        yield
    except core.SessionNotFoundError as exc:
        raise SessionNotFoundError(str(exc)) from None
    except core.SessionBusyError as exc:
        raise SessionBusyError(str(exc), retry_after_s=2) from None


def step_body(session: Session, results: list[StepResult], include_tokens: bool) -> dict[str, Any]:
    """The JSON body of a step request."""
    last = results[-1] if results and include_tokens else None
    return {
        "session_id": session.id,
        "steps_done": session.steps_done,
        "steps": [r.metrics.to_dict() for r in results],
        "last_batch": [a.to_dict() for a in last.answers] if last else None,
    }


class SessionService:
    """Create, step, inspect, reset and delete sessions; lend policies to the analysis."""

    def __init__(self, settings: Settings, models: ModelRegistry, jobs: JobLimiter) -> None:
        self.settings = settings
        self.models = models
        self.jobs = jobs
        self.store = SessionStore(ttl_s=settings.session_ttl_s, max_sessions=settings.max_sessions)

    # --- checks (cheap, before any model work) ---

    def _check_config(self, config: RLConfig, num_prompts: int | None) -> None:
        s = self.settings
        config.validate()
        prompts = num_prompts if num_prompts is not None else config.prompts_per_step
        if prompts > s.max_step_prompts:
            raise LimitExceededError(
                f"{prompts} prompts per step; this server's limit is {s.max_step_prompts} "
                "(GMTS_MAX_STEP_PROMPTS)"
            )
        if prompts * config.group_size > s.max_step_answers:
            raise LimitExceededError(
                f"{prompts} prompts x {config.group_size} answers per step; this server's "
                f"limit is {s.max_step_answers} answers (GMTS_MAX_STEP_ANSWERS)"
            )
        if config.max_new_tokens > s.max_new_tokens:
            raise LimitExceededError(
                f"max_new_tokens is {config.max_new_tokens}; this server's limit is "
                f"{s.max_new_tokens} (GMTS_MAX_NEW_TOKENS)"
            )

    def _initial_config(self, req: SessionCreateRequest) -> RLConfig:
        """The request's knobs over defaults that fit this server's limits."""
        s = self.settings
        config = req.apply(RLConfig(max_new_tokens=min(RLConfig.max_new_tokens, s.max_new_tokens)))
        if req.prompts_per_step is None:  # as many demo prompts as the answer limit allows
            fit = max(1, min(s.max_step_prompts, s.max_step_answers // config.group_size))
            config = dataclasses.replace(config, prompts_per_step=min(config.prompts_per_step, fit))
        return config

    def get(self, session_id: str) -> Session:
        with _app_errors():
            return self.store.get(session_id)

    # --- blocking operations (worker threads; the UI may call them directly) ---

    def _check_create(self, req: SessionCreateRequest) -> None:
        self._check_config(self._initial_config(req), None)
        self.models.ensure_available(self.models.resolve(req.model))

    def _create(self, req: SessionCreateRequest) -> Session:
        """Load the model and copy it into a new session (heavy: inside a job slot)."""
        policy = PolicySettings(
            kind=req.policy or self.settings.session_policy,
            lora_threshold=self.settings.session_lora_threshold,
            lora_rank=req.lora_rank,
            seed=req.seed,
        )
        lm = self.models.load(self.models.resolve(req.model))
        return self.store.create(lm, self._initial_config(req), policy, req.seed)

    def create_blocking(self, req: SessionCreateRequest) -> Session:
        self._check_create(req)
        return self.jobs.run_blocking(lambda: self._create(req))

    def _prepare_step(self, session_id: str, req: SessionStepRequest) -> RLConfig:
        if req.steps > self.settings.max_session_steps:
            raise LimitExceededError(
                f"steps is {req.steps}; this server's limit is {self.settings.max_session_steps} "
                "per request (GMTS_MAX_SESSION_STEPS)"
            )
        config = req.apply(self.get(session_id).config)
        self._check_config(config, len(req.prompts) if req.prompts else None)
        return config

    def _run_steps(
        self,
        session_id: str,
        req: SessionStepRequest,
        config: RLConfig,
        progress: Callable[[int, StepResult], None] | None = None,
    ) -> dict[str, Any]:
        prompts = [p.to_core() for p in req.prompts] if req.prompts else None
        with _app_errors(), self.store.use(session_id) as session:
            results = session.step(prompts, req.steps, config, progress)
            return step_body(session, results, req.include_tokens)

    def step_blocking(
        self,
        session_id: str,
        req: SessionStepRequest,
        progress: Callable[[int, StepResult], None] | None = None,
    ) -> dict[str, Any]:
        """Run the steps (``progress(done, result)`` after each); the body of a step request."""
        config = self._prepare_step(session_id, req)
        return self.jobs.run_blocking(lambda: self._run_steps(session_id, req, config, progress))

    def _locked(self, session_id: str, fn: Callable[[Session], T]) -> T:
        with _app_errors(), self.store.use(session_id) as session:
            return fn(session)

    def reset_blocking(self, session_id: str) -> dict[str, Any]:
        self.get(session_id)
        return self.jobs.run_blocking(lambda: self._locked(session_id, _reset))

    def evaluate_blocking(self, session_id: str, req: SessionEvalRequest) -> dict[str, Any]:
        self.get(session_id)
        return self.jobs.run_blocking(lambda: self._locked(session_id, _evaluator(req)))

    # --- async entry points for the routes ---

    async def create(self, req: SessionCreateRequest) -> dict[str, Any]:
        self._check_create(req)
        session = await self.jobs.run(lambda: self._create(req))
        return session.info()

    async def step(self, session_id: str, req: SessionStepRequest) -> dict[str, Any]:
        config = self._prepare_step(session_id, req)
        return await self.jobs.run(lambda: self._run_steps(session_id, req, config))

    async def reset(self, session_id: str) -> dict[str, Any]:
        self.get(session_id)
        return await self.jobs.run(lambda: self._locked(session_id, _reset))

    async def evaluate(self, session_id: str, req: SessionEvalRequest) -> dict[str, Any]:
        self.get(session_id)
        return await self.jobs.run(lambda: self._locked(session_id, _evaluator(req)))

    def info(self, session_id: str) -> dict[str, Any]:
        """Settings and history; answers even while a step runs (history is append-only)."""
        return self.get(session_id).info()

    def delete(self, session_id: str) -> None:
        with _app_errors():
            self.store.delete(session_id)

    # --- PolicyProvider for the analysis service ---

    @contextmanager
    def use_policy(self, session_id: str) -> Iterator[LoadedModel]:
        """The session's policy, held (no step runs) for the duration of the analysis."""
        with _app_errors(), self.store.use(session_id) as session:
            yield session.policy.as_loaded(f"{session.policy.base.name} (session {session_id})")


def _reset(session: Session) -> dict[str, Any]:
    session.reset()
    return session.info()


def _evaluator(req: SessionEvalRequest) -> Callable[[Session], dict[str, Any]]:
    def run(session: Session) -> dict[str, Any]:
        result = session.evaluate(
            req.num_problems,
            temperature=req.temperature,
            samples_per_problem=req.samples_per_problem,
            seed=req.seed,
        )
        return {"step": session.steps_done, **result.to_dict()}

    return run
