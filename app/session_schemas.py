"""Request and response models of the live-RL session routes (``/v1/sessions``).

Every RL knob is optional in a request: a session is created with the defaults of
:class:`gmts_core.rl.RLConfig` plus the knobs given, and a step request may override any knob
for its steps only. Registry names (selection method, advantage, aggregation, reward rule) are
checked here, so a typo is a 422 listing the valid names.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gmts_core.advantages import ADVANTAGES
from gmts_core.aggregation import AGGREGATIONS
from gmts_core.rewards import get_reward
from gmts_core.rl import RLConfig, RLPrompt
from gmts_core.selection import METHODS

_STRICT = ConfigDict(extra="forbid", allow_inf_nan=False)
MAX_SEED = 2**32 - 1


class RLKnobs(BaseModel):
    """The knobs of a GRPO step; any left out keep the session's (or the default) value."""

    model_config = _STRICT

    method: str | None = Field(None, description="Selection method of the training mask.")
    ratio: float | None = Field(None, gt=0, le=1, description="Share of tokens selected.")
    scope: Literal["batch", "group", "answer"] | None = None
    group_size: int | None = Field(None, ge=2, le=64, description="Answers per prompt (G).")
    prompts_per_step: int | None = Field(None, ge=1, le=64, description="Demo prompts per step.")
    learning_rate: float | None = Field(None, ge=0, le=1)
    inner_steps: int | None = Field(None, ge=1, le=16, description="Updates per batch.")
    warmup_steps: int | None = Field(
        None, ge=0, le=10_000, description="Linear learning-rate warmup over the first steps."
    )
    epsilon_low: float | None = Field(None, ge=0, le=1)
    epsilon_high: float | None = Field(None, ge=0, le=10)
    beta: float | None = Field(None, ge=0, le=100, description="KL weight (k3 estimator).")
    max_grad_norm: float | None = Field(None, gt=0, le=1e6)
    weight_decay: float | None = Field(None, ge=0, le=1)
    temperature: float | None = Field(None, gt=0, le=10)
    top_p: float | None = Field(None, gt=0, le=1)
    max_new_tokens: int | None = Field(None, ge=1, le=4096)
    advantage: str | None = None
    loss_aggregation: str | None = None
    measure_logprob_after: bool | None = Field(
        None,
        description="Also return each token's log-prob after the update (one more forward "
        "pass per step; off unless asked, on in the UI's Train tab).",
    )

    @field_validator("method")
    @classmethod
    def _known_method(cls, v: str | None) -> str | None:
        if v is not None:
            METHODS.get(v)
        return v

    @field_validator("advantage")
    @classmethod
    def _known_advantage(cls, v: str | None) -> str | None:
        if v is not None:
            ADVANTAGES.get(v)
        return v

    @field_validator("loss_aggregation")
    @classmethod
    def _known_aggregation(cls, v: str | None) -> str | None:
        if v is not None:
            AGGREGATIONS.get(v)
        return v

    def knobs(self) -> dict[str, Any]:
        names = set(RLKnobs.model_fields)
        return {k: v for k, v in self.model_dump(include=names).items() if v is not None}

    def apply(self, config: RLConfig) -> RLConfig:
        """``config`` with the knobs given here."""
        return dataclasses.replace(config, **self.knobs())


class SessionCreateRequest(RLKnobs):
    """Body of ``POST /v1/sessions``: the model, the policy kind, a seed and RL defaults."""

    model: str | None = Field(None, max_length=256, description="Alias or folder.")
    policy: Literal["auto", "full", "lora"] | None = Field(
        None, description="full copy, LoRA adapter, or auto (by model size; server default)."
    )
    lora_rank: int = Field(8, ge=1, le=256)
    seed: int = Field(0, ge=0, le=MAX_SEED, description="Step n uses seed (seed, n).")

    model_config = ConfigDict(
        **_STRICT,
        json_schema_extra={
            "examples": [{"model": "tiny-arith", "method": "gmts", "ratio": 0.2, "seed": 0}]
        },
    )


class PromptIn(BaseModel):
    """A training prompt with its reference answer and reward rule."""

    model_config = _STRICT

    prompt: str = Field(min_length=1)
    reference: str = Field(min_length=1, max_length=512)
    reward_kind: str = Field("numeric", max_length=64)

    @field_validator("reward_kind")
    @classmethod
    def _known_reward(cls, v: str) -> str:
        get_reward(v)
        return v

    def to_core(self) -> RLPrompt:
        return RLPrompt(self.prompt, self.reference, self.reward_kind)


class SessionStepRequest(RLKnobs):
    """Body of ``POST /v1/sessions/{id}/step``: how many steps, on which prompts, which knobs."""

    steps: int = Field(1, ge=1, description="GRPO steps to run (limit: GMTS_MAX_SESSION_STEPS).")
    prompts: list[PromptIn] | None = Field(
        None, min_length=1, description="Prompts with references; omit to draw demo-task batches."
    )
    include_tokens: bool = Field(
        True, description="Return the last step's batch with per-token log-prob changes."
    )

    model_config = ConfigDict(
        **_STRICT,
        json_schema_extra={
            "examples": [
                {"steps": 2, "method": "gmts", "ratio": 0.2, "learning_rate": 0.001},
                {
                    "steps": 1,
                    "method": "entropy",
                    "prompts": [{"prompt": "Q: 47+38=?\nA:", "reference": "85"}],
                },
            ]
        },
    )


class SessionEvalRequest(BaseModel):
    """Body of ``POST /v1/sessions/{id}/evaluate``: held-out accuracy on the demo task."""

    model_config = _STRICT

    num_problems: int = Field(100, ge=1, le=2000)
    temperature: float = Field(1.0, ge=0, le=10, description="0: greedy decoding.")
    samples_per_problem: int = Field(1, ge=1, le=16)
    seed: int = Field(0, ge=0, le=MAX_SEED)


class StepMetricsOut(BaseModel):
    """One step's numbers (see gmts_core.rl_records.StepMetrics)."""

    step: int
    method: str
    ratio: float
    learning_rate: float
    loss: float | None
    policy_loss: float | None
    kl: float | None
    grad_norm: float | None
    clip_low_fraction: float | None
    clip_high_fraction: float | None
    selected_fraction: float | None
    gradient_coverage: float | None
    reward_mean: float | None
    reward_std: float | None
    num_prompts: int
    num_answers: int
    num_tokens: int
    num_zero_signal_groups: int
    wasted_share: dict[str, float | None]
    selected_logprob_change: float | None
    unselected_logprob_change: float | None
    seconds: float | None


class TokenChangeOut(BaseModel):
    position: int
    id: int
    text: str
    selected: bool
    logprob_before: float | None
    logprob_after: float | None
    logprob_change: float | None


class AnswerChangeOut(BaseModel):
    group: int
    index: int
    prompt: str
    text: str
    reward: float
    advantage: float
    tokens: list[TokenChangeOut]


class EvaluationOut(BaseModel):
    step: int
    accuracy: float
    num_problems: int
    num_answers: int
    temperature: float


class SessionOut(BaseModel):
    """A session's settings and history (``GET /v1/sessions/{id}``)."""

    session_id: str
    model: str
    policy_kind: Literal["full", "lora"]
    trainable_parameters: int
    seed: int
    settings: dict[str, Any]
    steps_done: int
    history: list[StepMetricsOut]
    evaluations: list[EvaluationOut]


class StepOut(BaseModel):
    """The steps just run and, if asked, the last step's batch with log-prob changes."""

    session_id: str
    steps_done: int
    steps: list[StepMetricsOut]
    last_batch: list[AnswerChangeOut] | None = None
