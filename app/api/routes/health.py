"""Liveness and readiness probes (never behind the API key, never loading a model)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from app.api.deps import ServicesDep
from app.schemas.server import Health, Readiness
from gmts_core.errors import ModelNotFoundError

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=Health, summary="Liveness: the process answers.")
async def healthz() -> Health:
    return Health(status="ok")


@router.get(
    "/readyz",
    response_model=Readiness,
    summary="Readiness: the default model is loaded or loadable.",
    responses={503: {"model": Readiness, "description": "The default model is unavailable."}},
)
async def readyz(services: ServicesDep) -> JSONResponse:
    models = services.models
    name = services.settings.default_model
    loaded = loadable = False
    message = None
    try:
        ref = models.resolve(name)
        loaded = models.is_loaded(ref)
        models.ensure_available(ref)
        loadable = True
    except ModelNotFoundError as exc:
        message = str(exc)
    body = Readiness(
        status="ready" if loadable else "not_ready",
        default_model=name,
        loaded=loaded,
        loadable=loadable,
        message=message,
        jobs_running=services.jobs.running,
        jobs_waiting=services.jobs.waiting,
        estimated_wait_s=services.jobs.estimate_wait_s(services.jobs.next_place),
    )
    return JSONResponse(body.model_dump(), status_code=200 if loadable else 503)
