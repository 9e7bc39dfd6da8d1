"""Response models of the training-run routes (``GET /v1/runs``...), the one definition of
their bodies. Each maps once from a typed library result (``gmts_core.runs``)."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, Field

from app.schemas.analyze_response import AnalyzeResponse, DifferencesOut
from app.schemas.from_dataclass import fields_from
from app.schemas.numbers import Num
from gmts_core.methods.selection import METHODS
from gmts_core.runs.analysis import StepOverview, StepReport
from gmts_core.runs.trainer_metrics import TrainerMetrics

# the runs routes' `methods` parameter: a comma-separated list of registered selection methods
METHOD_NAMES = METHODS.names()
_NAME = "(" + "|".join(re.escape(n) for n in METHOD_NAMES) + ")"
METHODS_PATTERN = rf"^\s*{_NAME}\s*(,\s*{_NAME}\s*)*$"


class RunInfo(BaseModel):
    id: str = Field(
        description="The run's folder or file name inside its run root (a name that is not "
        "UTF-8 is shown with \\x escapes, and cannot be opened until renamed)."
    )
    readable: bool = Field(True, description="False: the run is listed but cannot be opened.")
    state: Literal["ready", "indexing", "unreadable"] = Field(
        "ready",
        description="ready: indexed; indexing: being indexed in the background (list again); "
        "unreadable: cannot be opened (reason says why).",
    )
    reason: str | None = Field(None, description="Why the run cannot be opened (readable false).")
    format: str | None = Field(description="The detected dump format (trl, verl, roll, ...).")
    logged: bool = Field(description="A GMTSGRPOTrainer token log: shows the applied mask.")
    num_steps: int | None
    first_step: int | None
    last_step: int | None


class RunsResponse(BaseModel):
    runs: list[RunInfo]
    formats: list[str] = Field(description="Every format the server can read.")
    ignored: int = Field(0, description="Entries of the run roots that are not runs.")
    truncated: bool = Field(
        False,
        description="A run root holds more entries than GMTS_RUN_MAX_FOLDER_ENTRIES: only that "
        "many were looked at.",
    )


@fields_from(StepOverview)
class StepOverviewOut(BaseModel):
    """A step's numbers from its file alone (no model)."""


@fields_from(StepReport, mode=Literal["analysis", "logged"], extra=dict[str, str | None])
class StepReportOut(BaseModel):
    """One step's analysis row (``StepReport``): recomputed with a model, or as logged."""


@fields_from(TrainerMetrics)
class TrainerMetricsOut(BaseModel):
    """What the trainer itself measured per step, from its own log in the run's folder (TRL's
    trainer_state.json log_history, verl's file-logger JSONL): the standard series (reward,
    reward_std, entropy, response_length, zero_std_share, loss, grad_norm, kl, clip_ratio,
    learning_rate; those the log holds) under ``series``, aligned with ``steps`` (at most
    2,000, evenly spaced), each under the trainer's own name in ``keys``."""


class RunOverviewResponse(BaseModel):
    run: RunInfo
    steps: list[int] = Field(description="Every step of the run.")
    overview: list[StepOverviewOut] = Field(description="Up to GMTS_RUN_OVERVIEW_STEPS steps.")
    reports: list[StepReportOut] = Field(
        description="Per-step analysis rows known so far (every step of a trainer log; steps "
        "analysed on demand otherwise)."
    )
    trainer_metrics: TrainerMetricsOut | None = Field(
        None, description="The trainer's own per-step metrics (None: the run holds no log)."
    )
    trainer_metrics_error: str | None = Field(
        None, description="Why the trainer's metrics log in the run could not be read."
    )
    unreadable_steps: dict[int, str] = Field(
        default_factory=dict,
        description="Steps of the overview that could not be read, and why (the others are "
        "shown; opening one of these answers 422 with the same reason).",
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
    selected: dict[str, bool] = Field(
        description="applied (the trained mask), entropy, gmts; in dump mode entropy and "
        "gmts_entropy, computed from the logged numbers."
    )
    trained: bool = Field(True, description="The trainer's loss counted it (its loss mask is 1).")
    logged: dict[str, Num] | None = Field(
        None, description="Dump mode: the dump's numbers for this token (see TokenOut.logged)."
    )


class LoggedAnswer(BaseModel):
    index: int
    text: str
    advantage: Num = Field(description="None: the dump logs no advantage for it.")
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
    mode: Literal["analysis", "logged", "dump"] = Field(
        description="analysis: recomputed with the model; logged: a GMTSGRPOTrainer token log; "
        "dump: the numbers a trainer's per-token dump logged, no model (numbers=logged)."
    )
    previous: int | None
    next: int | None
    report: StepReportOut
    analysis: AnalyzeResponse | None = Field(None, description="Analysis mode: the groups.")
    logged: list[LoggedGroup] | None = Field(None, description="Logged and dump modes: the groups.")
    differences: list[DifferencesOut] | None = Field(
        None,
        description="Logged mode: why the logged selections (applied, entropy, gmts) differ, "
        "every pair, from the log's own numbers (analysis mode: in `analysis.differences`).",
    )
    notes: list[str] = Field(
        default_factory=list,
        description="What the reader could not tell from the step's file, or how it read it "
        "(e.g. which TRL columns are the rewards, and whether the file can tell).",
    )


class RunMetricsResponse(BaseModel):
    """Per-step analysis rows of a run, computed in the background (polled for progress)."""

    run: str
    steps_total: int = Field(description="Steps analysed for the charts (evenly spaced).")
    steps_done: int
    running: bool = Field(description="The background analysis is still going.")
    error: str | None = Field(None, description="Why the background analysis stopped early.")
    reports: list[StepReportOut] = Field(description="One row per analysed step, by step.")
