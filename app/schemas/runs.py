"""Response models of the training-run routes (``GET /v1/runs``...), the one definition of
their bodies. Each maps once from a typed library result (``gmts_core.runs``)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from app.schemas import AnalyzeResponse

Num = float | None


class RunInfo(BaseModel):
    id: str = Field(description="The run's folder or file name inside its run root.")
    format: str = Field(description="The detected dump format (trl, verl, roll, areal, ...).")
    logged: bool = Field(description="A GMTSGRPOTrainer token log: shows the applied mask.")
    num_steps: int
    first_step: int
    last_step: int


class RunsResponse(BaseModel):
    runs: list[RunInfo]
    formats: list[str] = Field(description="Every format the server can read.")


class StepOverviewOut(BaseModel):
    """A step's numbers from its file alone (no model)."""

    step: int
    num_groups: int
    num_answers: int
    reward_mean: Num
    reward_std: Num
    zero_signal_share: Num
    mean_answer_chars: float


class StepReportOut(BaseModel):
    """One step's analysis row (``StepReport``): recomputed with a model, or as logged."""

    step: int
    source: str
    num_groups: int
    num_answers: int
    num_tokens: int
    reward_mean: Num
    reward_std: Num
    zero_signal_share: float
    mean_answer_length: float
    selected_count: dict[str, int]
    gradient_coverage: dict[str, Num]
    wasted_share: dict[str, Num]
    overlap: dict[str, Num]
    spearman_batch: Num
    spearman_within_answer_median: Num
    mode: Literal["analysis", "logged"]
    extra: dict[str, str | None] = Field(default_factory=dict)


class RunOverviewResponse(BaseModel):
    run: RunInfo
    steps: list[int] = Field(description="Every step of the run.")
    overview: list[StepOverviewOut] = Field(description="Up to GMTS_RUN_OVERVIEW_STEPS steps.")
    reports: list[StepReportOut] = Field(
        description="Per-step analysis rows known so far (every step of a trainer log; steps "
        "analysed on demand otherwise)."
    )


class LoggedToken(BaseModel):
    position: int
    id: int
    text: str
    entropy: Num
    logprob: Num
    grad_norm: Num
    grad_proxy: Num
    omega: Num = None
    selected: dict[str, bool] = Field(description="applied (the trained mask), entropy, gmts.")


class LoggedAnswer(BaseModel):
    index: int
    text: str
    advantage: float
    length: int
    selected_count: dict[str, int]
    tokens: list[LoggedToken]


class LoggedGroup(BaseModel):
    index: int
    prompt: str
    answers: list[LoggedAnswer]


class RunStepResponse(BaseModel):
    run: str
    step: int
    format: str
    mode: Literal["analysis", "logged"]
    previous: int | None
    next: int | None
    report: StepReportOut
    analysis: AnalyzeResponse | None = Field(None, description="Analysis mode: the groups.")
    logged: list[LoggedGroup] | None = Field(None, description="Logged mode: the groups.")
