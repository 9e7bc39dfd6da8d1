"""The FastAPI application factory.

``create_app(settings)`` wires settings, services, middleware, error handlers and routes. It
loads no model: models load lazily on first use, in a worker thread under the job limiter. At
startup (the lifespan, in a worker thread) the library's C kernels are built, or their cached
build checked, and loaded, so that no request compiles them. The services live on
``app.state.services`` (models, jobs, analysis, sessions) for the UI and the session service.
Run it with ``gmts serve`` or ``uvicorn --factory app.main:create_app``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import torch
from fastapi import APIRouter, Depends, FastAPI
from fastapi.middleware.cors import CORSMiddleware

from app.api.api_docs import install_api_docs
from app.api.client_limits import (
    KeyFailureLimitMiddleware,
    LoginRateLimitMiddleware,
    UploadLimitMiddleware,
)
from app.api.deps import reject_unknown_query, require_api_key
from app.api.errors import install_error_handlers
from app.api.hosts import RequestHeadMiddleware
from app.api.limits import BodySizeLimitMiddleware
from app.api.middleware import (
    ApiKeyMiddleware,
    OptionsMiddleware,
    RequestIdMiddleware,
    install_request_id_logging,
)
from app.api.routes import (
    analysed_runs,
    analyze,
    catalog,
    export,
    gradcheck,
    health,
    queue,
    runs,
    sessions,
)
from app.core.config import Settings
from app.services.container import Services, build_services
from app.services.native import prepare_native

logger = logging.getLogger(__name__)

API_DESCRIPTION = """
See which answer tokens drive learning in RL with verifiable rewards: per-token entropy,
the exact gradient magnitude of the GRPO loss at the logits (`grad_proxy`), and the selections
of entropy-based (80/20) and gradient-magnitude-based (GMTS) token selection.

Errors are JSON `{"error": {"code": ..., "message": ...}}`. When `GMTS_API_KEY` is set, every
`/v1` route needs `Authorization: Bearer <key>`.
"""

UI_PATH = "/ui"


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Startup: the C kernels built or checked and loaded off the event loop, before the server
    takes its first request (the compile takes seconds; a request must not pay for it)."""
    await asyncio.to_thread(prepare_native)
    yield
    # shutdown: the analysed-run reading processes stopped, their spill folders removed
    await asyncio.to_thread(app.state.services.analysed_runs.close)


def create_app(settings: Settings | None = None, services: Services | None = None) -> FastAPI:
    """A new app; ``settings`` default to the GMTS_* environment, ``services`` to new ones
    built from them (tests pass services built with an injected clock)."""
    settings = services.settings if services is not None else settings or Settings()
    if settings.torch_threads:
        torch.set_num_threads(settings.torch_threads)
    app = FastAPI(
        title="GMTS Explorer API",
        version="1.0.0",
        description=API_DESCRIPTION,
        docs_url=None,  # served from local assets by install_api_docs (no CDN)
        redoc_url=None,
        lifespan=_lifespan,
    )
    app.state.settings = settings
    app.state.services = services or build_services(settings)
    install_error_handlers(app)
    install_api_docs(app)
    _add_middleware(app, settings)
    app.include_router(health.router)
    # the bearer check (and its OpenAPI security scheme) only exists when a key is configured
    auth = [Depends(require_api_key)] if settings.api_key is not None else []
    v1 = APIRouter(prefix="/v1", dependencies=[*auth, Depends(reject_unknown_query)])
    modules = (
        catalog,
        queue,
        analyze,
        export,
        gradcheck,
        sessions,
        runs,
        analysed_runs,
    )
    for module in modules:
        v1.include_router(module.router)
    app.include_router(v1)
    if settings.ui_enabled:
        from app.ui.mount import mount_ui  # imports gradio: only when the UI is wanted

        mount_ui(app, settings, app.state.services, path=UI_PATH)
    return app


def _add_middleware(app: FastAPI, settings: Settings) -> None:
    """Outermost first: request head (hosts, proxies, header count) -> request id -> CORS ->
    OPTIONS -> wrong-key limit -> API key -> login limit -> UI upload limits -> body size
    (+ duplicate keys, disconnect) -> app."""
    app.add_middleware(
        BodySizeLimitMiddleware, max_bytes=settings.max_body_bytes, exempt_prefixes=(UI_PATH,)
    )
    app.add_middleware(  # the UI's own routes: a larger cap, uploads apart
        BodySizeLimitMiddleware,
        max_bytes=settings.ui_max_body_bytes,
        only_prefixes=(UI_PATH,),
        exempt_prefixes=(f"{UI_PATH}/gradio_api/upload",),
    )
    app.add_middleware(
        UploadLimitMiddleware,
        max_bytes=settings.ui_upload_max_bytes,
        per_window=settings.ui_uploads_per_client,
        window_s=settings.ui_upload_ttl_s,
        prefix=UI_PATH,
    )
    key = settings.api_key_value
    if key is not None:
        app.add_middleware(
            LoginRateLimitMiddleware, per_minute=settings.login_attempts_per_minute, prefix=UI_PATH
        )
        app.add_middleware(ApiKeyMiddleware, api_key=key)
        app.add_middleware(
            KeyFailureLimitMiddleware, per_minute=settings.key_failures_per_minute, api_key=key
        )
    app.add_middleware(OptionsMiddleware, skip_prefixes=(UI_PATH,))
    if settings.cors_origins:  # closed unless configured
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origins,
            allow_methods=["GET", "POST", "DELETE"],
            allow_headers=["Authorization", "Content-Type", "X-Request-ID"],
            expose_headers=["X-Request-ID"],
        )
    app.add_middleware(RequestIdMiddleware)
    app.add_middleware(  # outermost: before anything reads a header or the client address
        RequestHeadMiddleware,
        allowed_hosts=settings.allowed_host_names,
        trusted_proxies=settings.trusted_proxies,
        max_headers=settings.max_headers,
    )
    install_request_id_logging()
    if settings.api_key is None and settings.host not in ("127.0.0.1", "localhost", "::1"):
        logger.warning("serving on %s without GMTS_API_KEY: /v1 is open", settings.host)
