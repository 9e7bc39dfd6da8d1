"""GET /v1/methods: every selection method with its description, citation and formula."""

from __future__ import annotations

from fastapi import APIRouter

from app.api.routes.common import error_responses
from app.schemas.methods import MethodsResponse
from app.services.catalog import method_infos

router = APIRouter(tags=["methods"])


@router.get(
    "/methods",
    response_model=MethodsResponse,
    summary="List the selection methods: name, one-line description, citation, formula.",
    responses=error_responses(401),
)
def list_methods_route() -> MethodsResponse:
    return MethodsResponse(methods=method_infos())
