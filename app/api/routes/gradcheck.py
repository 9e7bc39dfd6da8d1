"""POST /v1/gradcheck: how good is each selection score? Exact per-token gradients vs scores."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body
from fastapi.responses import Response

from app.api.deps import ServicesDep
from app.api.rendering import json_response
from app.api.routes.common import error_responses
from app.schemas.gradcheck import GradcheckRequest, GradcheckResponse

router = APIRouter(tags=["gradcheck"])


@router.post(
    "/gradcheck",
    response_model=GradcheckResponse,
    response_model_exclude_unset=True,
    summary="Analyze a group, then check every score against exact per-token gradients.",
    responses=error_responses(401, 404, 413, 422, 429, 503),
)
async def gradcheck(req: Annotated[GradcheckRequest, Body()], services: ServicesDep) -> Response:
    """The body of `/v1/analyze`; each token gains `true_grad_norm` (full-parameter gradient norm
    of its own loss term w_i·A_i·log pi) and `head_grad_norm`, and `fidelity` reports per method
    the Spearman correlation with the true norms, the true gradient mass kept and the cosine
    between the selected tokens' gradient and the full one. Small models only (413 otherwise).
    """
    return await json_response(await services.gradcheck.queued(req), exclude_unset=True)
