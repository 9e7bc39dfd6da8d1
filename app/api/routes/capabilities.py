"""GET /v1/capabilities: selection methods, reward rules, estimators and limits of this server."""

from __future__ import annotations

from fastapi import APIRouter

from app.api.deps import ServicesDep
from app.api.routes.common import error_responses
from app.schemas.server import CapabilitiesResponse
from app.services.catalog import capabilities

router = APIRouter(tags=["models"])


@router.get(
    "/capabilities",
    response_model=CapabilitiesResponse,
    summary="What this server offers: selection methods (with descriptions), reward rules, "
    "advantage estimators, loss aggregations, scopes and request limits.",
    responses=error_responses(401),
)
def get_capabilities(services: ServicesDep) -> CapabilitiesResponse:
    return capabilities(services.settings)
