"""What this server offers: GET /v1/models (the models it may serve, which are loaded),
GET /v1/capabilities (selection methods, reward rules, estimators, aggregations, scopes and
request limits) and GET /v1/methods (every selection method with its description, citation and
formula)."""

from __future__ import annotations

from fastapi import APIRouter

from app.api.deps import ServicesDep
from app.api.routes.common import error_responses
from app.schemas.methods import MethodsResponse
from app.schemas.server import CapabilitiesResponse, ModelInfo, ModelsResponse
from app.services.catalog import capabilities, method_infos

router = APIRouter()


@router.get(
    "/models",
    tags=["models"],
    response_model=ModelsResponse,
    summary="List the models: alias, source, loaded, parameters, vocab size, device, dtype.",
    responses=error_responses(401),
)
def list_models(services: ServicesDep) -> ModelsResponse:
    entries = [ModelInfo(**m) for m in services.models.list_models()]
    return ModelsResponse(default=services.settings.default_model, models=entries)


@router.get(
    "/capabilities",
    tags=["models"],
    response_model=CapabilitiesResponse,
    summary="What this server offers: selection methods (with descriptions), reward rules, "
    "advantage estimators, loss aggregations, scopes and request limits.",
    responses=error_responses(401),
)
def get_capabilities(services: ServicesDep) -> CapabilitiesResponse:
    return capabilities(services.settings)


@router.get(
    "/methods",
    tags=["methods"],
    response_model=MethodsResponse,
    summary="List the selection methods: name, one-line description, citation, formula.",
    responses=error_responses(401),
)
def list_methods_route() -> MethodsResponse:
    return MethodsResponse(methods=method_infos())
