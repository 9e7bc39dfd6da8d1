"""The request of ``POST /v1/analyze`` (single or batch form), and of everything that takes an
analyze request (gradcheck, export).

Requests are strict (unknown fields and NaN/Infinity are rejected) and registry names
(reward rules, advantage estimators, loss aggregations, selection methods) are checked here, so a
typo is a 422 that names the field and lists the valid values before any model work starts.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from app.schemas.knobs import config_field
from app.schemas.request_base import (
    MAX_LIST_ITEMS,
    StrictBool,
    StrictRequest,
    check_ratio,
    refuse_together,
    registry_enum,
    schema_rules,
)
from gmts_core.bounds import MAX_ABS_REWARD
from gmts_core.config import DEFAULT_METHODS, AnalysisConfig
from gmts_core.knobs import knob_default
from gmts_core.methods.advantages import ADVANTAGES
from gmts_core.methods.aggregation import AGGREGATIONS
from gmts_core.methods.rewards import get_reward, list_rewards
from gmts_core.methods.selection import METHODS
from gmts_core.sampling.answers import SamplingConfig

_STRICT = ConfigDict(extra="forbid", allow_inf_nan=False)

DEFAULT_NUM_SAMPLES: int = knob_default(SamplingConfig, "num_samples")


def sampling_field(name: str, note: str = "Default: {default}.") -> Any:
    """An optional request field for the SamplingConfig knob ``name`` (left out: the batch's
    value, else the knob's default, which ``note`` states)."""
    default = knob_default(SamplingConfig, name)
    return config_field(SamplingConfig, name, None, note=note.format(default=default))


NonEmptyText = Annotated[str, Field(min_length=1)]
Reward = Annotated[float, Field(ge=-MAX_ABS_REWARD, le=MAX_ABS_REWARD)]


# --- requests --------------------------------------------------------------------------------


class RewardRule(StrictRequest):
    """A verifiable reward rule and its reference answer."""

    model_config = ConfigDict(
        **_STRICT, json_schema_extra={"examples": [{"kind": "numeric", "reference": "85"}]}
    )

    kind: str = Field(
        description="numeric | final_number | exact | regex | math",
        max_length=64,
        json_schema_extra=registry_enum(list_rewards),
    )
    reference: str | int | float = Field(description="The reference answer (or regex pattern).")

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, v: str) -> str:
        get_reward(v)  # raises UnknownNameError (a ValueError) listing the valid rules
        return v


class SelectionOptions(StrictRequest):
    """Which selection methods to compare, at which ratio, over which scope."""

    model_config = _STRICT

    ratio: float = config_field(AnalysisConfig, "ratio")
    scope: Literal["batch", "group", "answer"] | None = config_field(
        AnalysisConfig,
        "scope",
        None,
        note="Default: batch, or group when the only method is gmts_paper or gmts_paper_verl "
        "(the paper selects per group).",
    )
    methods: list[str] = config_field(
        AnalysisConfig,
        "methods",
        note=f"GET /v1/methods lists every one with its citation; default: "
        f"{', '.join(DEFAULT_METHODS)}.",
        default_factory=lambda: list(DEFAULT_METHODS),
        min_length=1,
        max_length=32,
        json_schema_extra=registry_enum(METHODS.names),
    )

    budget_over: Literal["trained", "content", "all"] = config_field(AnalysisConfig, "budget_over")

    @field_validator("ratio")
    @classmethod
    def _selects_something(cls, v: float) -> float:
        check_ratio(v)
        return v

    @field_validator("methods")
    @classmethod
    def _known_methods(cls, v: list[str]) -> list[str]:
        for name in v:
            METHODS.get(name)
        return list(dict.fromkeys(v))  # keep order, drop repeats


class SamplingFields(StrictRequest):
    """Sampling settings, used when no answers are given."""

    model_config = _STRICT

    num_samples: int | None = sampling_field("num_samples")
    top_p: float | None = sampling_field("top_p")
    max_new_tokens: int | None = sampling_field(
        "max_new_tokens", "Default: {default}, or GMTS_MAX_NEW_TOKENS when that is lower."
    )
    seed: int | None = sampling_field("seed")


_SAMPLED_ONLY = "it applies only to sampled answers"
# (field, field, why) pairs a group may not hold together; the 422 names both
GROUP_PAIRS: tuple[tuple[str, str, str], ...] = (
    ("answers", "answer_ids", "both would be the group's answers (as text or as token ids)"),
    ("answers", "num_samples", "num_samples is the number of answers to sample"),
    ("answer_ids", "num_samples", "num_samples is the number of answers to sample"),
    ("answers", "top_p", _SAMPLED_ONLY),
    ("answer_ids", "top_p", _SAMPLED_ONLY),
    ("answers", "max_new_tokens", _SAMPLED_ONLY),
    ("answer_ids", "max_new_tokens", _SAMPLED_ONLY),
    ("reward", "rewards", "a rule computes the rewards that rewards would give"),
)


class GroupRequest(SamplingFields):
    """One prompt with its answers (given or sampled) and how to reward them."""

    model_config = ConfigDict(**_STRICT, json_schema_extra=schema_rules(GROUP_PAIRS))

    prompt: str = Field(min_length=1, description="The prompt text.")
    answers: list[NonEmptyText] | None = Field(
        None,
        min_length=1,
        max_length=MAX_LIST_ITEMS,
        description="Given answers; omit to sample num_samples answers.",
    )
    answer_ids: list[Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1)]] | None = (
        Field(
            None,
            min_length=1,
            max_length=MAX_LIST_ITEMS,
            description="Given answers as token ids (e.g. a trainer's completion_ids): analysed "
            "as given, so the analysed tokens are the trained ones; the reward rule reads (and "
            "the response shows) their decoded text. Not together with answers.",
        )
    )
    reward: RewardRule | None = Field(None, description="A reward rule with its reference.")
    rewards: list[Reward] | None = Field(
        None,
        min_length=1,
        max_length=MAX_LIST_ITEMS,
        description="Explicit rewards, one per answer (|r| <= 1e9).",
    )

    @model_validator(mode="after")
    def _answers_or_sampling(self) -> GroupRequest:
        refuse_together(self, GROUP_PAIRS)
        given = self.answers if self.answer_ids is None else self.answer_ids
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
    if rewards is not None:
        n = len(answers) if answers is not None else num_samples or default_samples
        if n is not None and n != len(rewards):
            raise ValueError(f"rewards has {len(rewards)} values for {n} answers")


_BATCH_INSIDE = "in the batch form, it goes inside each group"
# pairs of top-level fields that contradict each other (the single form's are a group's)
REQUEST_PAIRS: tuple[tuple[str, str, str], ...] = (
    *((a, b, why) for a, b, why in GROUP_PAIRS if "answer_ids" not in (a, b)),
    ("groups", "answers", _BATCH_INSIDE),
    ("groups", "rewards", _BATCH_INSIDE),
    ("model", "session_id", "a session analyses with its own policy of its own model"),
)
_SAMPLING = ("num_samples", "top_p", "max_new_tokens")


class AnalyzeRequest(SamplingFields):
    """Body of ``POST /v1/analyze``: one group (``prompt``...) or a batch (``groups``)."""

    model: str | None = Field(
        None, max_length=256, description="Alias or folder (default: the server's)."
    )
    prompt: str | None = Field(None, min_length=1, description="Single form: the prompt.")
    answers: list[NonEmptyText] | None = Field(None, min_length=1, max_length=MAX_LIST_ITEMS)
    rewards: list[Reward] | None = Field(
        None,
        min_length=1,
        max_length=MAX_LIST_ITEMS,
        description="Explicit rewards, one per answer (|r| <= 1e9).",
    )
    reward: RewardRule | None = Field(
        None, description="Reward rule; in the batch form, the default for groups without one."
    )
    groups: list[GroupRequest] | None = Field(
        None,
        min_length=1,
        max_length=MAX_LIST_ITEMS,
        description="Batch form: several groups analyzed in one call.",
    )
    temperature: float = config_field(AnalysisConfig, "temperature")
    advantage: str = config_field(
        AnalysisConfig, "advantage", json_schema_extra=registry_enum(ADVANTAGES.names)
    )
    loss_aggregation: str = config_field(
        AnalysisConfig, "loss_aggregation", json_schema_extra=registry_enum(AGGREGATIONS.names)
    )
    selection: SelectionOptions = Field(default_factory=SelectionOptions)
    top_alternatives: int = config_field(AnalysisConfig, "top_alternatives")
    chat_template: StrictBool | None = config_field(
        AnalysisConfig,
        "chat_template",
        default=None,
        note="Left out: the model's default (on for the packaged instruct models such as "
        "smollm2-135m, off for the others; GET /v1/models lists it).",
    )
    answer_special_tokens: StrictBool = config_field(AnalysisConfig, "answer_special_tokens")
    session_id: str | None = Field(
        None,
        min_length=1,
        max_length=128,
        description="Analyze with this RL session's policy (not together with model).",
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
        refuse_together(self, REQUEST_PAIRS)
        if self.groups is not None and all(
            g.answers is not None or g.answer_ids is not None for g in self.groups
        ):
            for name in _SAMPLING:
                if getattr(self, name) is not None:
                    raise ValueError(
                        f"{name} and groups[].answers: {name} applies only to sampled answers, "
                        "and every group gives its answers"
                    )
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
        json_schema_extra=schema_rules(
            REQUEST_PAIRS,
            forms=("prompt", "groups"),
            examples=[
                {
                    "model": "tiny-arith",
                    "prompt": "Q: 47+38=?\nA:",
                    "num_samples": 8,
                    "max_new_tokens": 40,
                    "seed": 0,
                    "reward": {"kind": "numeric", "reference": "85"},
                    "selection": {"ratio": 0.2, "scope": "batch", "methods": ["entropy", "gmts"]},
                }
            ],
        ),
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
