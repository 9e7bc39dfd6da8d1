"""POST /v1/analyze: per-token entropy, gradient magnitude and selections of one or more groups."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body
from fastapi.responses import Response

from app.api.deps import ServicesDep
from app.api.rendering import json_body, json_bytes
from app.api.routes.common import error_responses
from app.api.routes.examples import ANALYZE_EXAMPLES
from app.schemas.analyze_request import AnalyzeRequest
from app.schemas.analyze_response import AnalyzeResponse

router = APIRouter(tags=["analyze"])

AnalyzeBody = Annotated[AnalyzeRequest, Body(openapi_examples=ANALYZE_EXAMPLES)]


@router.post(
    "/analyze",
    response_model=AnalyzeResponse,
    response_model_exclude_unset=True,
    summary="Analyze a group (prompt + answers) or a batch of groups token by token.",
    responses=error_responses(401, 404, 413, 422, 429, 503),
)
async def analyze(req: AnalyzeBody, services: ServicesDep) -> Response:
    """Single form: `prompt` with `answers` or sampling fields; batch form: `groups`.

    The body is the analysis (`answers[].tokens[]` with entropy, grad_norm, grad_proxy, scores,
    ranks, selected, alternatives; `summary`), plus `notes` such as the zero-signal warning.
    """
    content = await services.analysis.analyze(
        req, lambda body: json_bytes(body, exclude_unset=True)
    )
    return json_body(content)
