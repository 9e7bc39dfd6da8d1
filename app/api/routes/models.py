"""GET /v1/models: the models this server may serve, and which are loaded."""

from __future__ import annotations

from fastapi import APIRouter

from app.api.deps import ServicesDep
from app.api.routes.common import error_responses
from app.schemas.server import ModelInfo, ModelsResponse

router = APIRouter(tags=["models"])


@router.get(
    "/models",
    response_model=ModelsResponse,
    summary="List the models: alias, source, loaded, parameters, vocab size, device, dtype.",
    responses=error_responses(401),
)
def list_models(services: ServicesDep) -> ModelsResponse:
    entries = [ModelInfo(**m) for m in services.models.list_models()]
    return ModelsResponse(default=services.settings.default_model, models=entries)
