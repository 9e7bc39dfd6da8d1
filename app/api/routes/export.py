"""POST /v1/analyze/export: the same analysis as a CSV (one row per token) or JSON download."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Body, Query
from fastapi.responses import Response

from app.api.deps import ServicesDep
from app.api.rendering import json_dict
from app.api.routes.common import error_responses
from app.api.routes.examples import ANALYZE_EXAMPLES
from app.schemas.analyze_request import AnalyzeRequest
from app.services.export import MEDIA_TYPES, export_text

router = APIRouter(tags=["analyze"])


@router.post(
    "/analyze/export",
    summary="Run an analysis and download it as CSV or JSON.",
    response_class=Response,
    responses={
        200: {
            "description": "A file download (Content-Disposition: attachment).",
            "content": {"text/csv": {"schema": {"type": "string"}}, "application/json": {}},
        },
        **error_responses(401, 404, 413, 422, 429, 503),
    },
)
async def export_analysis(
    req: Annotated[AnalyzeRequest, Body(openapi_examples=ANALYZE_EXAMPLES)],
    services: ServicesDep,
    fmt: Annotated[Literal["csv", "json"], Query(alias="format")] = "csv",
) -> Response:
    """CSV: one row per answer token with every per-token field, group and answer index,
    reward and advantage. JSON: exactly the body of POST /v1/analyze."""
    # the body as a dict built element by element: one whole-body dump holds the interpreter
    text = await services.analysis.analyze(req, lambda body: export_text(json_dict(body), fmt))
    return Response(
        text,
        media_type=MEDIA_TYPES[fmt],
        headers={"Content-Disposition": f'attachment; filename="gmts-analysis.{fmt}"'},
    )
