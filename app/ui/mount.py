"""Mounting the Gradio explorer UI at ``/ui`` on the FastAPI app.

``mount_ui(app, settings, services)`` builds the Blocks against the local service layer, or
against a remote GMTS server when ``settings.api_url`` is set, and serves the renderer's
CSS/JS, and puts the default example into the page's first HTML (:mod:`app.ui.first_view`).
The assets ship inside the package (``app/ui/static``: in the source tree a link to the
top-level ``static/``, in a wheel the files themselves), found through importlib.resources.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable
from typing import Any

import gradio as gr
from fastapi import FastAPI
from fastapi.responses import FileResponse

from app.core.config import Settings
from app.services.container import Services
from app.ui.asset_cache import cache_assets
from app.ui.assets import FAVICON, STATIC_DIR
from app.ui.blocks import INTRO, build_blocks
from app.ui.client import DEFAULT_QUEUE_WAIT_S, Backend
from app.ui.first_view import FirstViewMiddleware, first_view_html, plotly_chunk
from app.ui.local_backend import LocalBackend
from app.ui.remote_backend import RemoteBackend
from app.ui.tabs.explore import example
from app.ui.tabs.explore.tab import example_note

logger = logging.getLogger(__name__)

UI_PATH = "/ui"


def ui_head() -> str:
    """The ``<head>`` addition: the tooltip script and the rules for what it appends to the
    body (the pinned panel as a bottom sheet on narrow screens), inlined so they work behind
    any root path and outside the Gradio container's scoped stylesheet."""
    js = (STATIC_DIR / "gmts.js").read_text(encoding="utf-8")
    css = (STATIC_DIR / "gmts-page.css").read_text(encoding="utf-8")
    return f"<style>{css}</style><script>{js}</script>"


def api_key_login(api_key: str | None) -> Callable[[str, str], bool] | None:
    """When the server has an API key, the UI asks for it as a password (any user name)."""
    if not api_key:
        return None

    def check(_username: str, password: str) -> bool:
        return hmac.compare_digest(password.encode(), api_key.encode())

    return check


def mount_ui(app: FastAPI, settings: Settings, services: Services, path: str = UI_PATH) -> FastAPI:
    """Mount the explorer at ``path`` (default ``/ui``); returns the app."""
    backend = make_backend(settings, services)
    blocks = build_blocks(backend, settings)
    # uploaded files (and other temporary files) are deleted once GMTS_UI_UPLOAD_TTL_S old
    ttl = max(1, int(getattr(settings, "ui_upload_ttl_s", 600)))
    blocks.delete_cache = (max(1, ttl // 4), ttl)
    logger.info("mounting the UI at %s (%s backend)", path, backend.label)
    _add_favicon(app)
    if not settings.api_key_value:  # behind a login the first HTML is the login page's
        default = example.load_example()
        note = example_note(default).replace("**", "") if default else ""  # plain text there
        view = first_view_html(default, INTRO, note, plotly_chunk())
        app.add_middleware(FirstViewMiddleware, path=path, fragment=view)
    mounted = gr.mount_gradio_app(
        app,
        blocks,
        path=path,
        auth=api_key_login(settings.api_key_value),
        auth_message="This server requires its API key (GMTS_API_KEY) as the password.",
        css_paths=[STATIC_DIR / "gmts.css"],
        head=ui_head(),
        ssr_mode=False,
        footer_links=[],
        max_file_size=getattr(settings, "ui_upload_max_bytes", None),
    )
    cache_assets(mounted, path)  # Gradio's scripts from memory, compressed once
    return mounted


def _add_favicon(app: FastAPI) -> None:
    """``/favicon.ico`` at the root, where browsers ask for it (a 404 would fill the logs)."""

    def favicon() -> FileResponse:
        return FileResponse(FAVICON, media_type="image/x-icon")

    app.add_api_route("/favicon.ico", favicon, methods=["GET"], include_in_schema=False)


__all__ = ["UI_PATH", "api_key_login", "mount_ui", "ui_head"]


def make_backend(settings: Any, services: Services) -> Backend:
    """The remote backend when ``settings.api_url`` is set, else the local service layer."""
    url = getattr(settings, "api_url", None)
    if url:
        key = getattr(settings, "api_key_value", None)
        wait_s = float(getattr(settings, "ui_queue_wait_s", DEFAULT_QUEUE_WAIT_S))
        return RemoteBackend(url, key, wait_s=wait_s)
    return LocalBackend(services)
