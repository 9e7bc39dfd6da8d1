"""The FastAPI application factory.

``create_app(settings)`` wires settings, services, middleware, error handlers and routes. It
loads no model: models load lazily on first use, in a worker thread under the job limiter. The
services live on ``app.state.services`` (models, jobs, analysis, sessions) for the UI and the
session service. Run it with ``gmts serve`` or ``uvicorn --factory app.main:create_app``.
"""

from __future__ import annotations

import logging

import torch
from fastapi import APIRouter, Depends, FastAPI
from fastapi.middleware.cors import CORSMiddleware

from app.api.deps import require_api_key
from app.api.errors import install_error_handlers
from app.api.limits import BodySizeLimitMiddleware
from app.api.routes import analyze, export, gradcheck, health, models, runs, sessions
from app.core.config import Settings
from app.services.container import build_services
from app.services.sessions import SessionService

logger = logging.getLogger(__name__)

API_DESCRIPTION = """
See which answer tokens drive learning in RL with verifiable rewards: per-token entropy,
the exact gradient magnitude of the GRPO loss at the logits (`grad_proxy`), and the selections
of entropy-based (80/20) and gradient-magnitude-based (GMTS) token selection.

Errors are JSON `{"error": {"code": ..., "message": ...}}`. When `GMTS_API_KEY` is set, every
`/v1` route needs `Authorization: Bearer <key>`.
"""

UI_PATH = "/ui"


def create_app(settings: Settings | None = None) -> FastAPI:
    """A new app with its own services; ``settings`` default to the GMTS_* environment."""
    settings = settings or Settings()
    if settings.torch_threads:
        torch.set_num_threads(settings.torch_threads)
    app = FastAPI(
        title="GMTS Explorer API",
        version="1.0.0",
        description=API_DESCRIPTION,
    )
    app.state.settings = settings
    app.state.services = build_services(settings)
    services = app.state.services
    services.register_sessions(SessionService(settings, services.models, services.jobs))
    install_error_handlers(app)
    _add_middleware(app, settings)
    app.include_router(health.router)
    # the bearer check (and its OpenAPI security scheme) only exists when a key is configured
    auth = [Depends(require_api_key)] if settings.api_key is not None else []
    v1 = APIRouter(prefix="/v1", dependencies=auth)
    for module in (models, analyze, export, gradcheck, sessions, runs):
        v1.include_router(module.router)
    app.include_router(v1)
    if settings.ui_enabled:
        from app.ui import mount_ui  # imports gradio: only when the UI is wanted

        mount_ui(app, settings, app.state.services, path=UI_PATH)
    return app


def _add_middleware(app: FastAPI, settings: Settings) -> None:
    app.add_middleware(
        BodySizeLimitMiddleware, max_bytes=settings.max_body_bytes, exempt_prefixes=(UI_PATH,)
    )
    if settings.cors_origins:  # closed unless configured
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origins,
            allow_methods=["GET", "POST", "DELETE"],
            allow_headers=["Authorization", "Content-Type"],
        )
    if settings.api_key is None and settings.host not in ("127.0.0.1", "localhost", "::1"):
        logger.warning("serving on %s without GMTS_API_KEY: /v1 is open", settings.host)
