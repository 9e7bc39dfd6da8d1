"""Request and response models of the HTTP API v1, with OpenAPI examples: analyze, models,
health and capabilities here; ``app.schemas.gradcheck`` and ``app.schemas.sessions`` beside.

Requests are strict (unknown fields and NaN/Infinity are rejected) and registry names
(reward rules, advantage estimators, loss aggregations, selection methods) are checked here, so a
typo is a 422 that names the field and lists the valid values before any model work starts.
Responses are built from the library's typed results by ``app.services.bodies``.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from app.schemas.knobs import config_field
from app.schemas.methods import MethodOut
from app.schemas.strict import NoBoolNumbers
from gmts_core.bounds import MAX_ABS_REWARD, MAX_SEED
from gmts_core.config import DEFAULT_METHODS, AnalysisConfig
from gmts_core.methods.advantages import ADVANTAGES
from gmts_core.methods.aggregation import AGGREGATIONS
from gmts_core.methods.rewards import get_reward
from gmts_core.methods.selection import METHODS

_STRICT = ConfigDict(extra="forbid", allow_inf_nan=False)
DEFAULT_NUM_SAMPLES = 8

NonEmptyText = Annotated[str, Field(min_length=1)]
Reward = Annotated[float, Field(ge=-MAX_ABS_REWARD, le=MAX_ABS_REWARD)]


# --- requests --------------------------------------------------------------------------------


class RewardRule(NoBoolNumbers):
    """A verifiable reward rule and its reference answer."""

    model_config = ConfigDict(
        **_STRICT, json_schema_extra={"examples": [{"kind": "numeric", "reference": "85"}]}
    )

    kind: str = Field(description="numeric | exact | regex | math", max_length=64)
    reference: str | int | float = Field(description="The reference answer (or regex pattern).")

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, v: str) -> str:
        get_reward(v)  # raises UnknownNameError (a ValueError) listing the valid rules
        return v


class SelectionOptions(NoBoolNumbers):
    """Which selection methods to compare, at which ratio, over which scope."""

    model_config = _STRICT

    ratio: float = config_field(AnalysisConfig, "ratio")
    scope: Literal["batch", "group", "answer"] | None = config_field(
        AnalysisConfig,
        "scope",
        None,
        note="Default: batch, or group when the only method is gmts_paper (the paper's top 20% "
        "per group).",
    )
    methods: list[str] = config_field(
        AnalysisConfig,
        "methods",
        note=f"GET /v1/methods lists every one with its citation; default: "
        f"{', '.join(DEFAULT_METHODS)}.",
        default_factory=lambda: list(DEFAULT_METHODS),
        min_length=1,
        max_length=32,
    )

    @field_validator("methods")
    @classmethod
    def _known_methods(cls, v: list[str]) -> list[str]:
        for name in v:
            METHODS.get(name)
        return list(dict.fromkeys(v))  # keep order, drop repeats


class SamplingFields(NoBoolNumbers):
    """Sampling settings, used when no answers are given."""

    model_config = _STRICT

    num_samples: int | None = Field(None, ge=1, le=1024, description="Group size G (default 8).")
    top_p: float | None = Field(None, gt=0, le=1, description="Nucleus sampling (default 1).")
    max_new_tokens: int | None = Field(
        None, ge=1, le=65_536, description="Longest sampled answer (default 64)."
    )
    seed: int | None = Field(None, ge=0, le=MAX_SEED, description="Sampling seed (default 0).")


class GroupRequest(SamplingFields):
    """One prompt with its answers (given or sampled) and how to reward them."""

    prompt: str = Field(min_length=1, description="The prompt text.")
    answers: list[NonEmptyText] | None = Field(
        None, min_length=1, description="Given answers; omit to sample num_samples answers."
    )
    answer_ids: list[Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1)]] | None = (
        Field(
            None,
            min_length=1,
            description="Given answers as token ids (e.g. a trainer's completion_ids): analysed "
            "as given, so the analysed tokens are the trained ones; the reward rule reads (and "
            "the response shows) their decoded text.",
        )
    )
    reward: RewardRule | None = Field(None, description="A reward rule with its reference.")
    rewards: list[Reward] | None = Field(
        None, min_length=1, description="Explicit rewards, one per answer (|r| <= 1e9)."
    )

    @model_validator(mode="after")
    def _answers_or_sampling(self) -> GroupRequest:
        given = self.answers if self.answer_ids is None else self.answer_ids
        if self.answers is not None and self.answer_ids is not None:
            if len(self.answers) != len(self.answer_ids):
                raise ValueError(
                    f"{len(self.answers)} answers for {len(self.answer_ids)} answer_ids"
                )
        _check_group(given, self.num_samples, self.reward, self.rewards, None)
        return self


def _check_group(
    answers: list[str] | list[list[int]] | None,
    num_samples: int | None,
    reward: RewardRule | None,
    rewards: list[float] | None,
    default_samples: int | None,
) -> None:
    """Consistency of one group's fields (the messages say what to fix).

    ``default_samples`` is the group size when num_samples is not given (None: not known yet,
    as for a batch group that inherits the top-level num_samples).
    """
    if answers is not None and num_samples is not None:
        raise ValueError("give either answers or num_samples, not both")
    if reward is not None and rewards is not None:
        raise ValueError("give either reward (a rule) or rewards (numbers), not both")
    if rewards is not None:
        n = len(answers) if answers is not None else num_samples or default_samples
        if n is not None and n != len(rewards):
            raise ValueError(f"rewards has {len(rewards)} values for {n} answers")


class AnalyzeRequest(SamplingFields):
    """Body of ``POST /v1/analyze``: one group (``prompt``...) or a batch (``groups``)."""

    model: str | None = Field(
        None, max_length=256, description="Alias or folder (default: the server's)."
    )
    prompt: str | None = Field(None, min_length=1, description="Single form: the prompt.")
    answers: list[NonEmptyText] | None = Field(None, min_length=1)
    rewards: list[Reward] | None = Field(
        None, min_length=1, description="Explicit rewards, one per answer (|r| <= 1e9)."
    )
    reward: RewardRule | None = Field(
        None, description="Reward rule; in the batch form, the default for groups without one."
    )
    groups: list[GroupRequest] | None = Field(
        None, min_length=1, description="Batch form: several groups analyzed in one call."
    )
    temperature: float = config_field(AnalysisConfig, "temperature")
    advantage: str = config_field(AnalysisConfig, "advantage")
    loss_aggregation: str = config_field(AnalysisConfig, "loss_aggregation")
    selection: SelectionOptions = Field(default_factory=SelectionOptions)
    top_alternatives: int = config_field(AnalysisConfig, "top_alternatives")
    chat_template: bool = config_field(AnalysisConfig, "chat_template")
    answer_special_tokens: bool = config_field(AnalysisConfig, "answer_special_tokens")
    session_id: str | None = Field(
        None, min_length=1, max_length=128, description="Analyze with this RL session's policy."
    )

    @field_validator("advantage")
    @classmethod
    def _known_advantage(cls, v: str) -> str:
        ADVANTAGES.get(v)
        return v

    @field_validator("loss_aggregation")
    @classmethod
    def _known_aggregation(cls, v: str) -> str:
        AGGREGATIONS.get(v)
        return v

    @model_validator(mode="after")
    def _one_form(self) -> AnalyzeRequest:
        if (self.prompt is None) == (self.groups is None):
            raise ValueError("give either prompt (one group) or groups (a batch), not both")
        if self.groups is not None and (self.answers is not None or self.rewards is not None):
            raise ValueError("in the batch form, answers and rewards go inside each group")
        default_samples = self.num_samples or DEFAULT_NUM_SAMPLES
        if self.prompt is not None:
            _check_group(self.answers, self.num_samples, self.reward, self.rewards, default_samples)
        for i, g in enumerate(self.groups or []):
            where = f"groups[{i}]: "
            given = g.answers is not None or g.answer_ids is not None
            n = g.num_samples or (None if given else default_samples)
            if g.rewards is not None and not given and n != len(g.rewards):
                raise ValueError(f"{where}rewards has {len(g.rewards)} values for {n} answers")
        items: list[GroupRequest | AnalyzeRequest] = [*self.groups] if self.groups else [self]
        for i, item in enumerate(items):
            if item.reward is None and item.rewards is None and self.reward is None:
                where = f"groups[{i}]" if self.groups is not None else "the request"
                raise ValueError(f"{where} needs a reward rule (reward) or explicit rewards")
        return self

    def group_requests(self) -> list[GroupRequest]:
        """The groups to analyze; sampling fields and the reward rule fall back to top level."""
        if self.prompt is not None:
            single = self.model_dump(include={"prompt", "answers", "reward", "rewards"})
            single.update(self.model_dump(include=set(SamplingFields.model_fields)))
            return [_inherit(GroupRequest.model_validate(single), self)]
        return [_inherit(g, self) for g in self.groups or []]

    model_config = ConfigDict(
        **_STRICT,
        json_schema_extra={
            "examples": [
                {
                    "model": "tiny-arith",
                    "prompt": "Q: 47+38=?\nA:",
                    "num_samples": 8,
                    "max_new_tokens": 40,
                    "seed": 0,
                    "reward": {"kind": "numeric", "reference": "85"},
                    "selection": {"ratio": 0.2, "scope": "batch", "methods": ["entropy", "gmts"]},
                }
            ]
        },
    )


def _inherit(group: GroupRequest, top: AnalyzeRequest) -> GroupRequest:
    updates: dict[str, Any] = {}
    for name in SamplingFields.model_fields:
        if getattr(group, name) is None and getattr(top, name) is not None:
            updates[name] = getattr(top, name)
    if group.answers is not None:
        updates.pop("num_samples", None)
    if group.reward is None and group.rewards is None and top.reward is not None:
        updates["reward"] = top.reward
    return group.model_copy(update=updates) if updates else group


# --- responses -------------------------------------------------------------------------------


def _finite_or_none(value: Any) -> Any:
    return None if isinstance(value, float) and not math.isfinite(value) else value


# JSON cannot carry NaN or infinity: a non-finite number in a response is null
Num = Annotated[float | None, BeforeValidator(_finite_or_none)]


class Alternative(BaseModel):
    id: int
    text: str
    prob: float


class TokenOut(BaseModel):
    position: int
    id: int
    text: str
    logprob: Num
    prob: Num
    entropy: Num = Field(description="Shannon entropy of the next-token distribution (nats).")
    grad_norm: Num = Field(
        description="L2 norm of d log pi_y / d z (exact, up to float32 rounding of the logits)."
    )
    grad_proxy: Num = Field(
        description="w_i |coef| grad_norm: the exact L2 norm of the GRPO loss gradient at this "
        "token's logits if the token is trained (= |A_i| w_i grad_norm on-policy without KL)."
    )
    ratio: Num = Field(
        1.0,
        description="pi_theta / pi_old (1 here: the analysed policy sampled "
        "or scores the answers).",
    )
    clipped: bool = Field(False, description="Whether the clipped objective is flat here.")
    coef: Num = Field(
        None,
        description="The effective coefficient omega_t = r I A_i + "
        "beta (pi_ref / pi_theta - 1); d loss / d log pi = -w_i omega_t.",
    )
    scores: dict[str, Num]
    ranks: dict[str, int]
    selected: dict[str, bool]
    alternatives: list[Alternative]
    grad_head: Num = Field(None, description="gamma * ||h_t||: this token's LM-head gradient norm.")
    true_grad_norm: Num = Field(
        None, description="/v1/gradcheck only: exact full-parameter gradient norm of its loss term."
    )
    head_grad_norm: Num = Field(
        None, description="/v1/gradcheck only: the output-projection part of that gradient."
    )


class RewardDetail(BaseModel):
    reward: float
    rule: str
    extracted: str | None
    reference: str | None
    verdict: str


class AnswerOut(BaseModel):
    index: int
    text: str
    reward: float
    reward_detail: RewardDetail
    advantage: float
    weight: float
    length: int
    finished: bool
    tokenization: str = Field(
        "sampled",
        description="How the answer's tokens were obtained: sampled (the generated ids), ids "
        "(given token ids: the trained tokens), or text (given text tokenized on its own, "
        "without special tokens, appended to the prompt's ids as trainers append generated "
        "ids; a text may re-tokenize differently from the ids a model generated).",
    )
    selected_count: dict[str, int]
    tokens: list[TokenOut]


class Spearman(BaseModel):
    batch: Num
    within_answer_median: Num


class Overlap(BaseModel):
    count: int
    jaccard: float


class Summary(BaseModel):
    model_config = ConfigDict(extra="allow")

    num_tokens: int
    num_answers: int
    num_groups: int
    ratio: float
    scope: str
    k: int
    zero_signal: bool = Field(description="True when every advantage is 0: no learning signal.")
    num_zero_signal_groups: int
    selected_count: dict[str, int]
    gradient_coverage: dict[str, float]
    wasted_share: dict[str, float]
    budget_share: dict[str, list[float]]
    overlap: dict[str, Overlap]
    spearman_entropy_grad: Spearman


class GroupSummary(BaseModel):
    model_config = ConfigDict(extra="allow")

    num_tokens: int
    zero_signal: bool
    reward_mean: float
    selected_count: dict[str, int]
    gradient_coverage: dict[str, float]
    spearman_entropy_grad: Spearman


class GroupOut(BaseModel):
    index: int
    prompt: str
    answers: list[AnswerOut]
    summary: GroupSummary


class AnalysisSettingsOut(BaseModel):
    temperature: float
    advantage: str
    loss_aggregation: str
    ratio: float
    scope: str
    methods: list[str]


class AnalyzeResponse(BaseModel):
    """An analysis (single form: ``prompt`` and ``answers``; batch form: ``groups``) plus human
    ``notes`` (e.g. the zero-signal warning)."""

    model: str
    summary: Summary
    settings: AnalysisSettingsOut
    prompt: str | None = Field(None, description="Single form only.")
    answers: list[AnswerOut] | None = Field(None, description="Single form only.")
    groups: list[GroupOut] | None = Field(None, description="Batch form only.")
    notes: list[str] = Field(default_factory=list)


class ModelInfo(BaseModel):
    alias: str
    source: str
    kind: Literal["alias", "folder", "hub"]
    default: bool
    loaded: bool
    available: bool
    parameters: int | None
    vocab_size: int | None
    device: str | None
    dtype: str | None
    architecture: str | None


class ModelsResponse(BaseModel):
    default: str
    models: list[ModelInfo]


class Health(BaseModel):
    status: Literal["ok"]


class Readiness(BaseModel):
    status: Literal["ready", "not_ready"]
    default_model: str
    loaded: bool
    loadable: bool
    message: str | None = None
    jobs_running: int
    jobs_waiting: int


class ErrorDetail(BaseModel):
    code: str = Field(examples=["validation_error"])
    message: str = Field(examples=["body.selection.ratio: Input should be less than or equal to 1"])
    details: list[dict[str, Any]] | None = None
    request_id: str | None = Field(
        None, description="On a 500: the request's id, also in the X-Request-ID header."
    )


class ErrorBody(BaseModel):
    """Every error response: ``{"error": {"code": ..., "message": ...}}``."""

    error: ErrorDetail


class CapabilitiesResponse(BaseModel):
    """Body of ``GET /v1/capabilities``: what this server offers, so a remote UI lists the
    server's own methods, reward rules and limits rather than its local ones."""

    methods: list[MethodOut]
    default_methods: list[str]
    reward_rules: list[str]
    advantages: list[str]
    loss_aggregations: list[str]
    scopes: list[str]
    limits: dict[str, int] = Field(description="This server's GMTS_* request limits, by name.")
