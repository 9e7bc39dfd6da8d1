"""Response models of the analysed-run routes (``GET /v1/analysed-runs...``), the one
definition of their bodies: rows of a ``gmts analyze-run`` dataset (gmts_core.run_dataset),
with each method's columns gathered into one mapping per row."""

from __future__ import annotations

from pydantic import BaseModel, Field

from app.schemas.numbers import Num


class AnalysedRunInfo(BaseModel):
    id: str = Field(description="The analysed run's folder name inside its run root.")
    readable: bool = Field(True, description="False: the dataset cannot be read (see reason).")
    reason: str | None = Field(None, description="Why it cannot be read (paths relative).")
    state: str = Field("ready", description="ready, or indexing while first read.")
    version: int | None = Field(None, description="The dataset schema's version.")
    methods: list[str] = Field(default_factory=list)
    num_steps: int = 0
    first_step: int | None = None
    last_step: int | None = None
    num_tokens: int = Field(0, description="Answer tokens over every written step.")
    skipped_steps: dict[str, str] = Field(
        default_factory=dict,
        description="Step summaries left out, and why (at most 20 named).",
    )


class AnalysedRunsResponse(BaseModel):
    runs: list[AnalysedRunInfo]


class StepSummaryOut(BaseModel):
    step: int
    num_groups: int
    num_answers: int
    num_tokens: int
    reward_mean: Num
    entropy_mean: Num
    zero_signal_share: Num
    overlap: Num = Field(description="Jaccard index of the first two methods' selections.")
    coverage: dict[str, Num] = Field(description="Per method: share of sum(gamma) it keeps.")
    wasted: dict[str, Num] = Field(description="Per method: share of its picks with gamma 0.")


class AnalysedStepsResponse(BaseModel):
    run: AnalysedRunInfo
    steps: list[StepSummaryOut]


class GroupRowOut(BaseModel):
    group: int
    prompt: str
    answers: int
    reward_mean: Num
    zero_signal: bool
    disagreement: int = Field(description="Tokens selected by some of the methods, not all.")
    mean_length: Num


class AnswerRowOut(BaseModel):
    step: int
    group: int
    answer: int
    prompt: str
    text: str
    reward: Num
    advantage: Num
    length: int
    zero_signal: bool
    entropy_mean: Num
    gamma_sum: Num
    disagreement: int
    selected_count: dict[str, int] | None = Field(
        None, description="Per method: tokens it selects (in a group's answers)."
    )


class TokenRowOut(BaseModel):
    step: int
    group: int
    answer: int
    position: int
    token_id: int
    text: str | None = Field(
        description="The token's text; null where no tokenizer decoded it (a dump's logged "
        "numbers analysed without a model)."
    )
    logprob: Num
    entropy: Num
    grad_norm: Num
    gamma: Num
    entropy_rank: int = Field(description="Rank by entropy within the step (1 = highest).")
    gamma_rank: int | None = Field(
        description="Rank by gamma within the step (1 = highest); null without gamma (a "
        "dump's logged numbers analysed without a model)."
    )
    score: Num = Field(None, description="What a ranking ordered by (rankings only).")
    selected: dict[str, bool]


class PageOut(BaseModel):
    offset: int
    limit: int
    total: int | None = Field(None, description="Rows matching, where it is counted.")


class GroupsResponse(BaseModel):
    page: PageOut
    groups: list[GroupRowOut]


class AnswersResponse(BaseModel):
    page: PageOut
    answers: list[AnswerRowOut]


class TokensResponse(BaseModel):
    page: PageOut
    tokens: list[TokenRowOut]


class ZeroSignalGroupOut(BaseModel):
    step: int
    group: int
    prompt: str
    answers: int
    reward: Num


class ZeroSignalResponse(BaseModel):
    page: PageOut
    groups: list[ZeroSignalGroupOut]
