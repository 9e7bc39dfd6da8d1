"""GET /v1/runs...: training runs under GMTS_RUN_ROOTS, their steps, one step's groups."""

from __future__ import annotations

from typing import Annotated, Literal, cast

from fastapi import APIRouter, Query

from app.api.deps import ServicesDep
from app.api.routes.common import error_responses
from app.schemas.request_base import MIN_RATIO
from app.schemas.runs import (
    METHOD_NAMES,
    METHODS_PATTERN,
    RunMetricsResponse,
    RunOverviewResponse,
    RunsResponse,
    RunStepResponse,
)
from app.services.catalog import ANALYSIS_DEFAULTS, analysis_knob
from app.services.runs import StepOptions
from gmts_core.config import DEFAULT_METHODS

Scope = Literal["batch", "group", "answer"]
router = APIRouter(tags=["runs"])

MethodsQuery = Annotated[
    str,
    Query(
        max_length=512,
        # in the schema only: the service refuses the same names with a message listing them
        json_schema_extra={"pattern": METHODS_PATTERN},
        description="Comma-separated, each one of: " + ", ".join(METHOD_NAMES) + ".",
    ),
]


@router.get(
    "/runs",
    response_model=RunsResponse,
    summary="List the training runs under the allowed run roots, with their format and steps.",
    responses=error_responses(401),
)
def list_runs(services: ServicesDep) -> RunsResponse:
    return services.runs.list_runs()


@router.get(
    "/runs/{run_id}",
    response_model=RunOverviewResponse,
    summary="A run's steps: model-free numbers per step, and the analysis rows known so far.",
    responses=error_responses(401, 404, 413, 422, 429),
)
async def run_overview(run_id: str, services: ServicesDep) -> RunOverviewResponse:
    return await services.runs.overview_queued(run_id)


@router.get(
    "/runs/{run_id}/metrics",
    response_model=RunMetricsResponse,
    summary="A run's analysis rows over steps, computed in the background: poll for progress.",
    responses=error_responses(401, 404, 413, 422),
)
def run_metrics(
    run_id: str,
    services: ServicesDep,
    model: Annotated[str | None, Query(max_length=256)] = None,
    ratio: Annotated[float, Query(ge=MIN_RATIO, le=1)] = ANALYSIS_DEFAULTS.ratio,
    methods: MethodsQuery = ",".join(DEFAULT_METHODS),
    reward: Annotated[
        str | None, Query(max_length=64, description="Rule for groups without rewards.")
    ] = None,
    numbers: NumbersQuery = "recomputed",
    budget_over: BudgetQuery = "trained",
) -> RunMetricsResponse:
    options = _options(model, ratio, "batch", methods, reward, numbers, budget_over)
    return services.run_metrics.get(run_id, options)


NumbersQuery = Annotated[
    Literal["recomputed", "logged"],
    Query(
        description="recomputed: the model's forward pass (the dump's own per-token numbers "
        "beside them, as TokenOut.logged); logged: the numbers the trainer's dump logged, no "
        "forward pass (mode dump: entropy and gmts_entropy selections; the model's tokenizer "
        "only turns token ids into text). 422 for a dump that logs no per-token numbers."
    ),
]


BudgetQuery = Annotated[
    Literal["trained", "content", "all"],
    Query(description=analysis_knob("budget_over")[0]),
]


def _options(
    model: str | None,
    ratio: float,
    scope: str,
    methods: str,
    reward: str | None,
    numbers: str = "recomputed",
    budget_over: str = "trained",
) -> StepOptions:
    return StepOptions(
        model=model,
        ratio=ratio,
        scope=scope,
        methods=tuple(m.strip() for m in methods.split(",") if m.strip()),
        reward_kind=reward,
        numbers=numbers,
        budget_over=budget_over,
    )


@router.get(
    "/runs/{run_id}/steps/{step}",
    response_model=RunStepResponse,
    summary="One step's groups: the mask a trainer log applied, or an analysis on demand.",
    responses=error_responses(401, 404, 413, 422, 429),
)
async def run_step(
    run_id: str,
    step: int,
    services: ServicesDep,
    model: Annotated[str | None, Query(max_length=256)] = None,
    ratio: Annotated[float, Query(ge=MIN_RATIO, le=1)] = ANALYSIS_DEFAULTS.ratio,
    scope: Annotated[Scope, Query()] = cast(Scope, ANALYSIS_DEFAULTS.scope),
    methods: MethodsQuery = ",".join(DEFAULT_METHODS),
    reward: Annotated[
        str | None, Query(max_length=64, description="Rule for groups without rewards.")
    ] = None,
    numbers: NumbersQuery = "recomputed",
    budget_over: BudgetQuery = "trained",
) -> RunStepResponse:
    options = _options(model, ratio, scope, methods, reward, numbers, budget_over)
    return await services.runs.step_view_queued(run_id, step, options)
