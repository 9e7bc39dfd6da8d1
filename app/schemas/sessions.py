"""Request and response models of the live-RL session routes (``/v1/sessions``).

Every RL knob is optional in a request: a session is created with the defaults of
:class:`gmts_core.config.RLConfig` plus the knobs given, and a step request may override any knob
for its steps only. Registry names (selection method, advantage, aggregation, reward rule) are
checked here, so a typo is a 422 listing the valid names.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from app.schemas.from_dataclass import fields_from
from app.schemas.knobs import config_field
from app.schemas.numbers import Num
from app.schemas.request_base import (
    StrictBool,
    StrictRequest,
    check_ratio,
    registry_enum,
    schema_rules,
)
from gmts_core.bounds import MAX_SEED, MIN_TEMPERATURE
from gmts_core.config import RLConfig
from gmts_core.grpo.records import AnswerChange, StepMetrics, TokenChange
from gmts_core.grpo.rollout import RLPrompt
from gmts_core.methods.advantages import ADVANTAGES
from gmts_core.methods.aggregation import AGGREGATIONS
from gmts_core.methods.rewards import get_reward, list_rewards
from gmts_core.methods.selection import METHODS

_STRICT = ConfigDict(extra="forbid", allow_inf_nan=False)


def knob_field(name: str, **extra: Any) -> Any:
    """An optional request field for the RLConfig knob ``name``: its help and bounds as
    documented once in :mod:`gmts_core.config`."""
    return config_field(RLConfig, name, None, **extra)


def _if_both(a: str, a_value: Any, b: str, b_schema: dict[str, Any]) -> dict[str, Any]:
    """JSON Schema: not (``a`` == ``a_value`` and ``b`` matching ``b_schema``)."""
    return {"not": {"required": [a, b], "properties": {a: {"const": a_value}, b: b_schema}}}


# reselect re-selects before every inner update after the first: with one update it does nothing
KNOB_RULES = (_if_both("reselect", True, "inner_steps", {"const": 1}),)


class RLKnobs(StrictRequest):
    """The knobs of a GRPO step; any left out keep the session's (or the default) value."""

    model_config = _STRICT

    method: str | None = knob_field("method", json_schema_extra=registry_enum(METHODS.names))
    ratio: float | None = knob_field("ratio")
    scope: Literal["batch", "group", "answer"] | None = knob_field("scope")
    group_size: int | None = knob_field("group_size")
    prompts_per_step: int | None = knob_field("prompts_per_step")
    learning_rate: float | None = knob_field("learning_rate")
    inner_steps: int | None = knob_field("inner_steps")
    warmup_steps: int | None = knob_field("warmup_steps")
    decay_steps: int | None = knob_field("decay_steps")
    epsilon_low: float | None = knob_field("epsilon_low")
    epsilon_high: float | None = knob_field("epsilon_high")
    beta: float | None = knob_field("beta")
    max_grad_norm: float | None = knob_field("max_grad_norm")
    weight_decay: float | None = knob_field("weight_decay")
    temperature: float | None = knob_field("temperature")
    top_p: float | None = knob_field("top_p")
    max_new_tokens: int | None = knob_field("max_new_tokens")
    advantage: str | None = knob_field(
        "advantage", json_schema_extra=registry_enum(ADVANTAGES.names)
    )
    loss_aggregation: str | None = knob_field(
        "loss_aggregation", json_schema_extra=registry_enum(AGGREGATIONS.names)
    )
    reselect: StrictBool | None = knob_field("reselect")
    measure_logprob_after: StrictBool | None = knob_field("measure_logprob_after")
    logprob_after_prompts: int | None = knob_field("logprob_after_prompts")

    @field_validator("ratio")
    @classmethod
    def _selects_something(cls, v: float | None) -> float | None:
        return check_ratio(v)

    @model_validator(mode="after")
    def _meaningful_knobs(self) -> RLKnobs:
        if self.reselect and self.inner_steps == 1:
            raise ValueError(
                "reselect and inner_steps: reselect re-selects the tokens before every inner "
                "update after the first, and inner_steps 1 has none; use inner_steps >= 2"
            )
        return self

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
        knobs = self.knobs()
        if "method" in knobs and "scope" not in knobs:  # gmts_paper selects within each group
            knobs["scope"] = METHODS.get(knobs["method"]).default_scope
        default_beta = METHODS.get(knobs["method"]).default_beta if "method" in knobs else None
        if default_beta is not None and "beta" not in knobs:  # gmts_paper: Framework1's 0.001
            knobs["beta"] = default_beta
        return dataclasses.replace(config, **knobs)


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
        json_schema_extra=schema_rules(
            extra=[*KNOB_RULES, _if_both("policy", "full", "lora_rank", {})],
            examples=[{"model": "tiny-arith", "method": "gmts", "ratio": 0.2, "seed": 0}],
        ),
    )

    @model_validator(mode="after")
    def _rank_with_lora(self) -> SessionCreateRequest:
        if self.policy == "full" and "lora_rank" in self.model_fields_set:
            raise ValueError(
                "policy and lora_rank: lora_rank sizes a LoRA adapter, and policy full trains "
                "a full copy; leave lora_rank out or use policy lora (or auto)"
            )
        return self


class PromptIn(StrictRequest):
    """A training prompt with its reference answer and reward rule."""

    model_config = _STRICT

    prompt: str = Field(min_length=1)
    reference: str = Field(min_length=1, max_length=512)
    reward_kind: str = Field(
        "numeric", max_length=64, json_schema_extra=registry_enum(list_rewards)
    )

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
    include_tokens: StrictBool = Field(
        True, description="Return the last step's batch with per-token log-prob changes."
    )

    model_config = ConfigDict(
        **_STRICT,
        json_schema_extra=schema_rules(
            extra=KNOB_RULES,
            examples=[
                {"steps": 2, "method": "gmts", "ratio": 0.2, "learning_rate": 0.001},
                {
                    "steps": 1,
                    "method": "entropy",
                    "prompts": [{"prompt": "Q: 47+38=?\nA:", "reference": "85"}],
                },
            ],
        ),
    )


class SessionEvalRequest(StrictRequest):
    """Body of ``POST /v1/sessions/{id}/evaluate``: held-out accuracy on the demo task."""

    # greedy decoding gives every sample of a problem the same answer
    model_config = ConfigDict(
        **_STRICT,
        json_schema_extra=schema_rules(
            extra=[_if_both("temperature", 0, "samples_per_problem", {"minimum": 2})]
        ),
    )

    num_problems: int = Field(100, ge=1, le=2000)
    temperature: float = Field(
        1.0,
        ge=0,
        le=10,
        description=f"0: greedy decoding; otherwise at least {MIN_TEMPERATURE:g}.",
        # the gap (0, MIN_TEMPERATURE) the validator below refuses, in the schema as well
        json_schema_extra={
            "not": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": MIN_TEMPERATURE}
        },
    )
    samples_per_problem: int = Field(1, ge=1, le=16)
    seed: int = Field(0, ge=0, le=MAX_SEED)

    @field_validator("temperature")
    @classmethod
    def _greedy_or_floor(cls, v: float) -> float:
        if 0 < v < MIN_TEMPERATURE:
            raise ValueError(f"use 0 (greedy) or a temperature of at least {MIN_TEMPERATURE:g}")
        return v

    @model_validator(mode="after")
    def _samples_differ(self) -> SessionEvalRequest:
        if self.temperature == 0 and self.samples_per_problem > 1:
            raise ValueError(
                "temperature and samples_per_problem: greedy decoding (temperature 0) gives "
                "every sample the same answer; use samples_per_problem 1 or a temperature > 0"
            )
        return self


@fields_from(StepMetrics)
class StepMetricsOut(BaseModel):
    """One step's numbers (the fields of gmts_core.grpo.records.StepMetrics)."""

    model_config = ConfigDict(from_attributes=True)


@fields_from(TokenChange, logprob_change=Num)
class TokenChangeOut(BaseModel):
    """One answer token's log-prob before and after the step (gmts_core's TokenChange)."""

    model_config = ConfigDict(from_attributes=True)


@fields_from(AnswerChange, tokens=list[TokenChangeOut])
class AnswerChangeOut(BaseModel):
    """One answer of the batch with its tokens' log-prob changes (gmts_core's AnswerChange)."""

    model_config = ConfigDict(from_attributes=True)


class EvaluationOut(BaseModel):
    step: int
    accuracy: Num
    num_problems: int
    num_answers: int
    temperature: Num
    # each problem's mean reward, in the held-out set's fixed order: two evaluations of one
    # session pair up problem by problem (the Train tab's gain interval)
    per_problem: list[Num] = Field(default_factory=list)


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
