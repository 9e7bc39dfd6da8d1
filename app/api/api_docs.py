"""The interactive API docs at ``/docs``, served from local files (no CDN: works offline).

FastAPI's own ``/docs`` page loads Swagger UI from a CDN; this one serves the same Swagger UI
from the ``swagger-ui-bundle-v2`` package under ``/docs-assets``. ReDoc, which FastAPI would
also load from a CDN, is left out.
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles
from swagger_ui_bundle import swagger_ui_path

ASSETS = "/docs-assets"


def install_api_docs(app: FastAPI) -> None:
    """``/docs`` (Swagger UI) and its assets, on an app created with ``docs_url=None``."""
    app.mount(ASSETS, StaticFiles(directory=swagger_ui_path), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    def swagger_ui(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "").rstrip("/")
        return get_swagger_ui_html(
            openapi_url=f"{root}{app.openapi_url}",
            title=f"{app.title} - docs",
            oauth2_redirect_url=f"{root}/docs/oauth2-redirect",
            swagger_js_url=f"{root}{ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{root}{ASSETS}/favicon-32x32.png",
        )

    @app.get("/docs/oauth2-redirect", include_in_schema=False)
    def swagger_ui_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()
