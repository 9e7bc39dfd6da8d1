"""The analysis service: turns an AnalyzeRequest into gmts_core calls, within the limits.

Cheap checks come first (limits, model name, session), so bad input is refused before any
model loads; the heavy part (loading, sampling, the forward pass) runs in a worker thread under
the job limiter. The model is the registry's base model, a policy passed in by the caller, or a
session's policy from a registered :class:`PolicyProvider` (``session_id``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Protocol, TypeVar

from app.core.config import Settings
from app.schemas.analyze_request import DEFAULT_NUM_SAMPLES, AnalyzeRequest, GroupRequest
from app.schemas.analyze_response import AnalyzeResponse
from app.services.catalog import SAMPLING_DEFAULTS
from app.services.errors import SessionNotFoundError
from app.services.jobs import JobLimiter
from app.services.model_registry import ModelRef, ModelRegistry
from app.services.policy import LimitsPolicy
from app.services.responses import analysis_response
from gmts_core.analysis.analyze import (
    AnalysisConfig,
    GroupInput,
    RewardSpec,
    TokenLimit,
    analyze,
)
from gmts_core.errors import InvalidInputError, LimitExceededError
from gmts_core.methods.rewards import check_reference, reward_budget
from gmts_core.methods.selection import default_scope
from gmts_core.model.loading import LoadedModel
from gmts_core.progress import StageCallback
from gmts_core.sampling.answers import SamplingConfig
from gmts_core.stats.tokenization import encode_answer, encode_prompt

logger = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_MAX_NEW_TOKENS: int = SamplingConfig().max_new_tokens  # capped by GMTS_MAX_NEW_TOKENS


class PolicyProvider(Protocol):
    """What the session service offers the analysis: a session's policy, held while in use.

    ``use_policy`` raises SessionNotFoundError for an unknown id; the context manager may hold
    the session's lock so that no RL step changes the policy during the analysis.
    """

    def use_policy(self, session_id: str) -> AbstractContextManager[LoadedModel]: ...


@dataclass
class PreparedAnalysis:
    """A validated request, ready to run: the model to use, the groups and the config."""

    ref: ModelRef | None  # None when a session's policy is used
    session_id: str | None
    groups: list[GroupInput]
    config: AnalysisConfig


class AnalysisService:
    """The analysis core: every front end runs an analysis through :meth:`run`.

    The HTTP routes wrap it in the job queue (:meth:`analyze`), the UI's local backend calls it
    inside the same line, and the CLI calls it directly with its own limits
    (:meth:`LimitsPolicy.cli`). One validation, one limits policy, one tokenization, one
    response model, whoever asks.
    """

    def __init__(
        self,
        settings: Settings,
        models: ModelRegistry,
        jobs: JobLimiter,
        sessions: PolicyProvider | None = None,
    ) -> None:
        self.settings = settings
        self.models = models
        self.jobs = jobs
        self.sessions = sessions
        self.limits = LimitsPolicy.server(settings)

    def run(
        self,
        req: AnalyzeRequest,
        limits: LimitsPolicy | None = None,
        on_stage: StageCallback | None = None,
    ) -> AnalyzeResponse:
        """Validate ``req``, apply ``limits`` (the server's by default), run the analysis on the
        model it names (or its session's policy) and return the response body. Blocking:
        callers on an event loop use :meth:`analyze`. ``on_stage(name, done, total)`` hears
        each stage as it begins."""
        limits = limits or self.limits
        prepared = self.prepare(req, limits)
        with self._model_for(prepared, on_stage) as lm:
            token_limit = TokenLimit(limits.max_total_tokens, "GMTS_MAX_TOTAL_TOKENS")
            with reward_budget(limits.reward_budget_s, "GMTS_REWARD_BUDGET_S"):
                result = analyze(lm, prepared.groups, prepared.config, on_stage, token_limit)
        return analysis_response(result)

    async def analyze(self, req: AnalyzeRequest, render: Callable[[AnalyzeResponse], T]) -> T:
        """:meth:`run` in the job queue, for the HTTP routes, its body turned into the response
        by ``render`` in the same worker thread (formatting a large body is seconds of Python
        that must not run on the event loop). A request that fails its checks gets its error
        at once instead of waiting in the queue."""
        self.prepare(req, self.limits)
        return await self.jobs.run(lambda: render(self.run(req)))

    def prepare(self, req: AnalyzeRequest, limits: LimitsPolicy) -> PreparedAnalysis:
        """Cheap checks and conversion; raises before any model work."""
        group_reqs = req.group_requests()
        check_request_limits(limits, req, group_reqs)
        ref = None
        chat_default = False  # a session's policy: its base model's tokenizer, as given
        if req.session_id is not None:
            if self.sessions is None:
                raise SessionNotFoundError(
                    f"unknown session {req.session_id!r} (no session service on this server)"
                )
        else:
            ref = self.models.resolve(req.model, any_source=limits.any_model_source)
            self.models.ensure_available(ref)
            chat_default = self.models.chat_template_default(ref.name)
        max_new = min(DEFAULT_MAX_NEW_TOKENS, limits.max_new_tokens)
        groups = [group_input(g, req.temperature, max_new) for g in group_reqs]
        config = analysis_config(req, chat_default)
        return PreparedAnalysis(ref, req.session_id, groups, config)

    def _model_for(
        self, prepared: PreparedAnalysis, on_stage: StageCallback | None = None
    ) -> AbstractContextManager[LoadedModel]:
        if prepared.ref is None:
            assert self.sessions is not None and prepared.session_id is not None
            return self.sessions.use_policy(prepared.session_id)
        # a GGUF model's first load converts it (minutes): its lines go out as a stage
        progress = None if on_stage is None else (lambda line: on_stage(line, 0, 1))
        return nullcontext(self.models.load(prepared.ref, progress=progress))


def group_input(g: GroupRequest, temperature: float, max_new_tokens: int) -> GroupInput:
    """The library's input for one group of a request (``max_new_tokens``: the default)."""
    sampling = None
    answer_ids = getattr(g, "answer_ids", None)  # the batch form's groups may carry ids
    if g.answers is None and answer_ids is None:
        sampling = SamplingConfig(
            num_samples=g.num_samples or DEFAULT_NUM_SAMPLES,
            temperature=temperature,
            top_p=SAMPLING_DEFAULTS.top_p if g.top_p is None else g.top_p,
            max_new_tokens=g.max_new_tokens or max_new_tokens,
            seed=g.seed or SAMPLING_DEFAULTS.seed,
        )
    reward = RewardSpec(g.reward.kind, g.reward.reference) if g.reward else None
    return GroupInput(g.prompt, g.answers, sampling, reward, g.rewards, answer_ids)


def analysis_config(req: AnalyzeRequest, chat_template_default: bool = False) -> AnalysisConfig:
    """The algorithm knobs of a request (``chat_template_default``: the model's, used when the
    request leaves ``chat_template`` out)."""
    return AnalysisConfig(
        temperature=req.temperature,
        advantage=req.advantage,
        loss_aggregation=req.loss_aggregation,
        ratio=req.selection.ratio,
        scope=req.selection.scope or default_scope(req.selection.methods),
        methods=tuple(req.selection.methods),
        budget_over=req.selection.budget_over,
        top_alternatives=req.top_alternatives,
        seed=req.seed or 0,
        chat_template=chat_template_default if req.chat_template is None else req.chat_template,
        answer_special_tokens=req.answer_special_tokens,
    )


def _limit(
    what: str, value: int, limit: int, setting: str, label: str = "this server's limit"
) -> None:
    if value > limit:
        raise LimitExceededError(f"{what} is {value}; {label} is {limit} (GMTS_{setting.upper()})")


def _num_answers(g: GroupRequest) -> int:
    ids = getattr(g, "answer_ids", None)
    if ids is not None:
        return len(ids)
    return len(g.answers) if g.answers is not None else g.num_samples or DEFAULT_NUM_SAMPLES


def check_request_limits(s: LimitsPolicy, req: AnalyzeRequest, groups: list[GroupRequest]) -> None:
    """Size limits that need no tokenizer: groups, answers, characters, new tokens."""
    _limit("the number of groups", len(groups), s.max_groups, "max_groups", s.label)
    num_answers = sum(_num_answers(g) for g in groups)
    _limit("the number of answers", num_answers, s.max_answers, "max_answers", s.label)
    _limit(
        "top_alternatives",
        req.top_alternatives,
        s.max_top_alternatives,
        "max_top_alternatives",
        s.label,
    )
    for i, g in enumerate(groups):
        _limit(
            f"prompt {i} length (characters)",
            len(g.prompt),
            s.max_prompt_chars,
            "max_prompt_chars",
            s.label,
        )
        for a in g.answers or []:
            _limit(
                f"an answer of group {i} (characters)",
                len(a),
                s.max_answer_chars,
                "max_answer_chars",
                s.label,
            )
        if g.answers is None and getattr(g, "answer_ids", None) is None:
            new = g.max_new_tokens or min(DEFAULT_MAX_NEW_TOKENS, s.max_new_tokens)
            _limit("max_new_tokens", new, s.max_new_tokens, "max_new_tokens", s.label)
    for i, g in enumerate(groups):
        if g.reward is not None and g.rewards is None:
            try:
                check_reference(g.reward.kind, g.reward.reference)
            except InvalidInputError as exc:
                where = "reward.reference" if len(groups) == 1 else f"groups[{i}].reward.reference"
                raise InvalidInputError(f"{where}: {exc}") from None
    sampled = sum(
        (g.num_samples or DEFAULT_NUM_SAMPLES)
        * (g.max_new_tokens or min(DEFAULT_MAX_NEW_TOKENS, s.max_new_tokens))
        for g in groups
        if g.answers is None and getattr(g, "answer_ids", None) is None
    )
    _limit(
        "the number of tokens to sample", sampled, s.max_total_tokens, "max_total_tokens", s.label
    )


def check_token_limits(s: Settings, lm: LoadedModel, prepared: PreparedAnalysis) -> None:
    """The total tokens of all sequences (prompt + answer, sampled at most max_new_tokens), for
    callers that analyse outside :meth:`AnalysisService.run` (a run's step,
    :mod:`app.services.runs`); the core checks on the analysis's own tokenization instead."""
    chat = prepared.config.chat_template
    total = 0
    for g in prepared.groups:
        prompt_len = len(encode_prompt(lm.tokenizer, g.prompt, chat))
        if g.answer_ids is not None:
            total += sum(prompt_len + len(a) for a in g.answer_ids)
        elif g.answers is not None:
            special = prepared.config.answer_special_tokens
            lens = [len(encode_answer(lm.tokenizer, a, special)) for a in g.answers]
            total += sum(prompt_len + n for n in lens)
        else:
            assert g.sampling is not None
            total += g.sampling.num_samples * (prompt_len + g.sampling.max_new_tokens)
    _limit(
        "the number of tokens (prompts + answers)", total, s.max_total_tokens, "max_total_tokens"
    )
