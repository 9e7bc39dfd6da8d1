"""The session service: live-RL sessions for the API and the UI, within the server's limits.

It wraps :class:`app.services.session_store.SessionStore` (TTL ``GMTS_SESSION_TTL_S``, at most
``GMTS_MAX_SESSIONS``). Each operation has one synchronous core (:meth:`SessionService.create`,
``step``, ``reset``, ``evaluate``: the checks, then the heavy work of copying the model, GRPO
steps or evaluation) that the routes run in worker threads under the shared job limiter (the
``*_queued`` methods) and the UI's local backend runs inside the same job queue. It is the
analysis service's :class:`~app.services.analysis.PolicyProvider`, so ``POST /v1/analyze``
with ``session_id`` analyzes with that session's policy.

Sessions survive a restart when ``GMTS_SESSION_STATE_DIR`` is set (the default): each one is
saved after it is created and after every step, reset and evaluation; a restarted server
restores a saved session on its first use (in a job slot: it loads the model). Deleting a
session whose step is running cancels that step: it stops at its next stage boundary and its
request ends with a 404 saying the session was deleted.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from app.core.config import Settings
from app.schemas.sessions import (
    EvaluationOut,
    SessionCreateRequest,
    SessionEvalRequest,
    SessionOut,
    SessionStepRequest,
    StepOut,
)
from app.services.errors import SessionNotFoundError
from app.services.jobs import JobLimiter
from app.services.model_registry import ModelRegistry
from app.services.responses import evaluation_out, session_out, step_out
from app.services.session_store import SessionStore
from gmts_core.config import RLConfig
from gmts_core.errors import InvalidInputError, LimitExceededError, ModelNotFoundError
from gmts_core.experiments.evaluation import TASK_BATCHES
from gmts_core.experiments.session_state import CorruptSessionError, load_session
from gmts_core.experiments.sessions import Session
from gmts_core.grpo.policy import PolicySettings
from gmts_core.grpo.records import StepResult
from gmts_core.methods.rewards import check_reference, reward_budget
from gmts_core.model.loading import LoadedModel
from gmts_core.progress import Cancelled, CancelToken, StageCallback, current_token
from gmts_core.stats.tokenization import encode_prompt

logger = logging.getLogger(__name__)

T = TypeVar("T")

DELETED = "the session was deleted"


def check_step_limits(s: Settings, config: RLConfig, num_prompts: int | None = None) -> None:
    """This server's per-step limits on a GRPO step (a session's, or each step of a compare run):
    prompts per step (GMTS_MAX_STEP_PROMPTS), answers per step (GMTS_MAX_STEP_ANSWERS),
    max_new_tokens (GMTS_MAX_NEW_TOKENS)."""
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


class SessionService:
    """Create, step, inspect, reset and delete sessions; lend policies to the analysis."""

    def __init__(
        self,
        settings: Settings,
        models: ModelRegistry,
        jobs: JobLimiter,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.models = models
        self.jobs = jobs
        self.store = SessionStore(
            ttl_s=settings.session_ttl_s,
            max_sessions=settings.max_sessions,
            clock=clock,
            max_bytes=settings.session_memory_mb * 2**20,
            state_dir=settings.session_state_dir,
            per_client=settings.max_sessions_per_client,
            retry_after_s=settings.retry_after_s,
        )
        self._running: dict[str, CancelToken] = {}  # session id -> its running step's token
        self._restore_lock = threading.Lock()

    # --- checks (cheap, before any model work) ---

    def _check_config(self, config: RLConfig, num_prompts: int | None) -> None:
        check_step_limits(self.settings, config, num_prompts)

    def _check_prompts(self, req: SessionStepRequest) -> None:
        """Text limits and reward references of given prompts: before any model work."""
        s = self.settings
        for i, p in enumerate(req.prompts or []):
            if len(p.prompt) > s.max_prompt_chars:
                raise LimitExceededError(
                    f"prompts[{i}] is {len(p.prompt)} characters; this server's limit is "
                    f"{s.max_prompt_chars} (GMTS_MAX_PROMPT_CHARS)"
                )
            try:
                check_reference(p.reward_kind, p.reference)
            except InvalidInputError as exc:
                raise InvalidInputError(f"prompts[{i}].reference: {exc}") from None

    def _check_step_tokens(
        self, session: Session, req: SessionStepRequest, config: RLConfig
    ) -> None:
        """Prompt + sampled tokens of one step within GMTS_MAX_TOTAL_TOKENS (tokenizer only)."""
        if not req.prompts:
            return
        tok = session.policy.tokenizer
        total = sum(
            config.group_size
            * (len(encode_prompt(tok, p.prompt, config.chat_template)) + config.max_new_tokens)
            for p in req.prompts
        )
        limit = self.settings.max_total_tokens
        if total > limit:
            raise LimitExceededError(
                f"one step would process {total} tokens (prompts + sampled answers); this "
                f"server's limit is {limit} (GMTS_MAX_TOTAL_TOKENS)"
            )

    def model_defaults(self, name: str | None) -> tuple[str, dict[str, Any]]:
        """A session's task on the model ``name`` and its RL defaults there: a packaged model's
        (smollm2-135m: word problems, its chat template, a small batch), else the demo task's."""
        try:
            ref = self.models.resolve(name)
        except ModelNotFoundError:
            return "arith", {}
        packaged = self.models.packaged.get(ref.name)
        if packaged is None or ref.name in self.settings.model_aliases:
            return "arith", {}
        knobs: dict[str, Any] = dict(packaged.rl_defaults)
        knobs["chat_template"] = self.models.chat_template_default(ref.name)
        return packaged.task, knobs

    def _initial_config(self, req: SessionCreateRequest) -> RLConfig:
        """The request's knobs over the model's defaults, within this server's limits."""
        s = self.settings
        _, knobs = self.model_defaults(req.model)
        tokens = min(int(knobs.pop("max_new_tokens", RLConfig.max_new_tokens)), s.max_new_tokens)
        config = req.apply(RLConfig(max_new_tokens=tokens, **knobs))
        if req.prompts_per_step is None:  # as many demo prompts as the answer limit allows
            fit = max(1, min(s.max_step_prompts, s.max_step_answers // config.group_size))
            config = dataclasses.replace(config, prompts_per_step=min(config.prompts_per_step, fit))
        return config

    def get(self, session_id: str) -> Session:
        """The session, restored from the state folder first if it is saved only (blocking)."""
        if self.store.dormant(session_id) is not None:
            self._restore(session_id)
        return self.store.get(session_id)

    def _restore(self, session_id: str) -> None:
        """Rebuild a saved session on its model (heavy: loads the model, copies the policy)."""
        with self._restore_lock:
            saved = self.store.dormant(session_id)
            if saved is None:  # restored by another caller meanwhile
                return
            lm = self.models.load(self.models.resolve(str(saved.extra.get("model"))))
            try:
                session = load_session(saved, lm)
            except CorruptSessionError as exc:
                raise self.store.quarantine(session_id, str(exc)) from None
            task = saved.extra.get("task", "arith")
            session.task = task if task in TASK_BATCHES else "arith"
            self.store.restored(session)

    async def _restored(self, session_id: str) -> None:
        """Restore a saved session in a job slot, off the event loop."""
        if self.store.dormant(session_id) is not None:
            await self.jobs.run(lambda: self._restore(session_id))

    def _save(self, session: Session) -> None:
        extra = {
            "model": session.policy.base.name,
            "owner": self.store.owner(session.id),
            "task": session.task,
        }
        self.store.save(session, extra)

    # --- the cores: checks, then the work, in the caller's thread ---
    # Blocking and heavy: the routes run them in the job queue (the async entry points below),
    # the UI's local backend inside ``jobs.run_blocking``. A saved session is restored first
    # (:meth:`get`), in the caller's job slot.

    def _check_create(self, req: SessionCreateRequest) -> None:
        self._check_config(self._initial_config(req), None)
        self.models.ensure_available(self.models.resolve(req.model))

    def create(self, req: SessionCreateRequest, client: str = "") -> SessionOut:
        """Check ``req`` against the limits, load the model and copy it into a new session of
        ``client`` (saved at once); the body of a create request."""
        self._check_create(req)
        policy = PolicySettings(
            kind=req.policy or self.settings.session_policy,
            lora_threshold=self.settings.session_lora_threshold,
            lora_rank=req.lora_rank,
            seed=req.seed,
        )
        lm = self.models.load(self.models.resolve(req.model))
        session = self.store.create(lm, self._initial_config(req), policy, req.seed, client)
        session.task = self.model_defaults(req.model)[0]
        self._save(session)
        return session_out(session)

    def _prepare_step(self, session_id: str, req: SessionStepRequest) -> RLConfig:
        """The step's config, after the checks that need no tokenizer (restores the session)."""
        if req.steps > self.settings.max_session_steps:
            raise LimitExceededError(
                f"steps is {req.steps}; this server's limit is {self.settings.max_session_steps} "
                "per request (GMTS_MAX_SESSION_STEPS)"
            )
        self._check_prompts(req)
        config = req.apply(self.get(session_id).config)
        self._check_config(config, len(req.prompts) if req.prompts else None)
        return config

    def step(
        self,
        session_id: str,
        req: SessionStepRequest,
        on_stage: StageCallback | None = None,
    ) -> StepOut:
        """Check ``req`` (limits, references, then tokens), run the steps and return the body of
        a step request; ``on_stage(name, done, total)`` hears each stage of a step. The session
        is saved after every step (a restart continues from there)."""
        config = self._prepare_step(session_id, req)
        prompts = [p.to_core() for p in req.prompts] if req.prompts else None
        with self.store.use(session_id) as session:
            self._check_step_tokens(session, req, config)

            def saved(done: int, result: StepResult) -> None:
                self._save(session)

            token = current_token()
            if token is not None:
                self._running[session_id] = token
            # the budget is per step: a request of n steps computes n batches of rewards
            budget = self.settings.reward_budget_s * req.steps
            try:
                with reward_budget(budget, "GMTS_REWARD_BUDGET_S per step"):
                    results = session.step(prompts, req.steps, config, saved, on_stage)
            except Cancelled as exc:
                if exc.reason == DELETED:
                    raise SessionNotFoundError(
                        f"session {session_id!r} was deleted while its step ran; the step "
                        f"stopped after {len(session.history)} steps in all"
                    ) from None
                raise
            finally:
                self._running.pop(session_id, None)
            return step_out(session, results, req.include_tokens)

    def _locked(self, session_id: str, fn: Callable[[Session], T]) -> T:
        """``fn(session)`` holding the session; its state is saved afterwards."""
        with self.store.use(session_id) as session:
            value = fn(session)
            self._save(session)
            return value

    def reset(self, session_id: str) -> SessionOut:
        """Back to the starting weights, a fresh optimizer and an empty history (saved)."""
        self.get(session_id)
        return self._locked(session_id, _reset)

    def _check_evaluate(self, session_id: str, req: SessionEvalRequest) -> None:
        self.get(session_id)
        answers = req.num_problems * req.samples_per_problem
        limit = self.settings.max_eval_answers
        if answers > limit:
            raise LimitExceededError(
                f"{req.num_problems} problems x {req.samples_per_problem} samples = {answers} "
                f"answers; this server's limit is {limit} (GMTS_MAX_EVAL_ANSWERS)"
            )

    def evaluate(self, session_id: str, req: SessionEvalRequest) -> EvaluationOut:
        """Check ``req`` against the limits, evaluate the session's policy on held-out demo
        problems (recorded in its history, saved) and return the evaluation."""
        self._check_evaluate(session_id, req)
        with reward_budget(self.settings.reward_budget_s, "GMTS_REWARD_BUDGET_S"):
            return self._locked(session_id, _evaluator(req))

    # --- async entry points for the routes: a saved session is restored in a job slot of its
    # own, the cheap checks answer at once, then the core runs in the job queue ---

    async def create_queued(self, req: SessionCreateRequest, client: str = "") -> SessionOut:
        self._check_create(req)
        return await self.jobs.run(lambda: self.create(req, client))

    async def step_queued(self, session_id: str, req: SessionStepRequest) -> StepOut:
        await self._restored(session_id)
        self._prepare_step(session_id, req)
        return await self.jobs.run(lambda: self.step(session_id, req))

    async def reset_queued(self, session_id: str) -> SessionOut:
        await self._restored(session_id)
        self.get(session_id)
        return await self.jobs.run(lambda: self.reset(session_id))

    async def evaluate_queued(self, session_id: str, req: SessionEvalRequest) -> EvaluationOut:
        await self._restored(session_id)
        self._check_evaluate(session_id, req)
        return await self.jobs.run(lambda: self.evaluate(session_id, req))

    def info(self, session_id: str) -> SessionOut:
        """Settings and history; answers even while a step runs (history is append-only)."""
        return session_out(self.get(session_id))

    def delete(self, session_id: str) -> None:
        """Forget the session and its saved state; a running step stops at its next stage
        boundary (its request ends with a 404 saying so)."""
        self.store.delete(session_id)
        token = self._running.get(session_id)
        if token is not None:
            token.cancel(DELETED)

    # --- PolicyProvider for the analysis service ---

    @contextmanager
    def use_policy(self, session_id: str) -> Iterator[LoadedModel]:
        """The session's policy, held (no step runs) for the duration of the analysis."""
        self.get(session_id)  # restores a saved session
        with self.store.use(session_id) as session:
            name = f"{session.policy.base.name} (session {session_id})"
            # the coefficient's KL term: the session's beta against its starting policy
            yield session.policy.as_loaded(name, beta=session.config.beta)


def _reset(session: Session) -> SessionOut:
    session.reset()
    return session_out(session)


def _evaluator(req: SessionEvalRequest) -> Callable[[Session], EvaluationOut]:
    def run(session: Session) -> EvaluationOut:
        session.evaluate(
            req.num_problems,
            temperature=req.temperature,
            samples_per_problem=req.samples_per_problem,
            seed=req.seed,
        )
        return evaluation_out(session.evaluations[-1])

    return run
