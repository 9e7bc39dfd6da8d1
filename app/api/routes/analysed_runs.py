"""GET /v1/analysed-runs...: `gmts analyze-run -o` folders under the run roots, queried
without a model: a step's groups, answers and tokens page by page; rankings across the run."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Path, Query

from app.api.deps import ServicesDep
from app.api.routes.common import error_responses
from app.schemas.analysed_runs import (
    AnalysedRunInfo,
    AnalysedRunsResponse,
    AnalysedStepsResponse,
    AnswersResponse,
    GroupsResponse,
    TokensResponse,
    ZeroSignalResponse,
)
from app.services.analysed_runs import ANSWER_ORDER_NAMES, MAX_PAGE, TOKEN_ORDER_NAMES

router = APIRouter(prefix="/analysed-runs", tags=["analysed runs"])

Offset = Annotated[int, Query(ge=0, le=10_000_000)]
Index = Annotated[int, Path(ge=0, le=2**31 - 1)]  # steps, groups, answers: int32 in the files
Limit = Annotated[int, Query(ge=1, le=MAX_PAGE)]
StepFrom = Annotated[int | None, Query(ge=0, le=2**31 - 1, description="First step (inclusive).")]
StepTo = Annotated[int | None, Query(ge=0, le=2**31 - 1, description="Last step (inclusive).")]
AnswerOrder = Literal[ANSWER_ORDER_NAMES]  # type: ignore[valid-type]
TokenOrder = Literal[TOKEN_ORDER_NAMES]  # type: ignore[valid-type]


def _steps(first: int | None, last: int | None) -> tuple[int, int] | None:
    if first is None and last is None:
        return None
    return (first or 0, last if last is not None else 2**31 - 1)


@router.get(
    "",
    response_model=AnalysedRunsResponse,
    summary="List the analysed runs (gmts analyze-run -o folders) under the run roots.",
    responses=error_responses(401),
)
def list_analysed_runs(services: ServicesDep) -> AnalysedRunsResponse:
    return services.analysed_runs.list_runs()


@router.get(
    "/{run_id}",
    response_model=AnalysedRunInfo,
    summary="One analysed run's row: steps, first and last step, tokens (a cheap poll).",
    responses=error_responses(401, 404, 422),
)
def analysed_run(run_id: str, services: ServicesDep) -> AnalysedRunInfo:
    return services.analysed_runs.run(run_id)


@router.get(
    "/{run_id}/steps",
    response_model=AnalysedStepsResponse,
    summary="Every written step's stored numbers: rewards, entropy, coverage, waste, overlap.",
    responses=error_responses(401, 404, 422),
)
def analysed_steps(run_id: str, services: ServicesDep) -> AnalysedStepsResponse:
    return services.analysed_runs.steps(run_id)


@router.get(
    "/{run_id}/steps/{step}/groups",
    response_model=GroupsResponse,
    summary="A page of one step's groups.",
    responses=error_responses(401, 404, 422, 429),
)
def analysed_groups(
    run_id: str, step: Index, services: ServicesDep, offset: Offset = 0, limit: Limit = 50
) -> GroupsResponse:
    return services.analysed_runs.groups(run_id, step, offset, limit)


@router.get(
    "/{run_id}/steps/{step}/groups/{group}/answers",
    response_model=AnswersResponse,
    summary="The answers of one group, with each method's selected count.",
    responses=error_responses(401, 404, 422, 429),
)
def analysed_group_answers(
    run_id: str, step: Index, group: Index, services: ServicesDep
) -> AnswersResponse:
    return services.analysed_runs.group_answers(run_id, step, group)


@router.get(
    "/{run_id}/steps/{step}/groups/{group}/answers/{answer}/tokens",
    response_model=TokensResponse,
    summary="A page of one answer's tokens: statistics, ranks and each method's selection.",
    responses=error_responses(401, 404, 422, 429),
)
def analysed_answer_tokens(
    run_id: str,
    step: Index,
    group: Index,
    answer: Index,
    services: ServicesDep,
    offset: Offset = 0,
    limit: Limit = MAX_PAGE,
) -> TokensResponse:
    return services.analysed_runs.answer_tokens(run_id, step, group, answer, offset, limit)


@router.get(
    "/{run_id}/answers",
    response_model=AnswersResponse,
    summary="Answers across the run, ranked and filtered (text search, zero-signal groups).",
    responses=error_responses(401, 404, 422, 429),
)
def analysed_rank_answers(
    run_id: str,
    services: ServicesDep,
    by: AnswerOrder = "reward",
    descending: bool = True,
    contains: Annotated[str | None, Query(max_length=200)] = None,
    zero_signal: bool | None = None,
    step_from: StepFrom = None,
    step_to: StepTo = None,
    offset: Offset = 0,
    limit: Limit = 50,
    pair: Annotated[
        str | None,
        Query(
            pattern=r"^[a-z][a-z0-9_]{0,47},[a-z][a-z0-9_]{0,47}$",
            description="by=disagreement: the two methods compared, 'entropy,gmts' (default: "
            "the pair stored at analysis; another is counted from every token's selections).",
        ),
    ] = None,
) -> AnswersResponse:
    return services.analysed_runs.rank_answers(
        run_id,
        by,
        descending,
        offset,
        limit,
        contains,
        zero_signal,
        _steps(step_from, step_to),
        (pair.split(",")[0], pair.split(",")[1]) if pair else None,
    )


@router.get(
    "/{run_id}/tokens",
    response_model=TokensResponse,
    summary="The run's tokens with the highest gamma, entropy, g or entropy-gamma rank gap.",
    responses=error_responses(401, 404, 422, 429),
)
def analysed_rank_tokens(
    run_id: str,
    services: ServicesDep,
    by: TokenOrder = "gamma",
    step_from: StepFrom = None,
    step_to: StepTo = None,
    offset: Offset = 0,
    limit: Limit = 50,
) -> TokensResponse:
    return services.analysed_runs.rank_tokens(run_id, by, offset, limit, _steps(step_from, step_to))


@router.get(
    "/{run_id}/zero-signal-groups",
    response_model=ZeroSignalResponse,
    summary="Groups whose answers all got the same reward (nothing to learn), across the run.",
    responses=error_responses(401, 404, 422, 429),
)
def analysed_zero_signal(
    run_id: str,
    services: ServicesDep,
    step_from: StepFrom = None,
    step_to: StepTo = None,
    offset: Offset = 0,
    limit: Limit = 50,
) -> ZeroSignalResponse:
    return services.analysed_runs.zero_signal_groups(
        run_id, offset, limit, _steps(step_from, step_to)
    )
