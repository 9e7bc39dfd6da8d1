"""/docs in a real Chromium with every request off the server refused (no network): Swagger UI
loads from the server's own assets and lists the API's operations."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from app.main import create_app
from tests.app.api_helpers import LiveServer
from tests.browser.conftest import ui_settings
from tests.patience import PATIENCE_MS

pytestmark = pytest.mark.browser


def test_api_docs_render_with_the_network_off(chromium: Any, browser_model_root: Path) -> None:
    settings = ui_settings(browser_model_root, ui_enabled=False)
    with LiveServer(create_app(settings)) as server:
        context = chromium.new_context()
        refused: list[str] = []

        def only_the_server(route: Any) -> None:
            if route.request.url.startswith(server.url):
                route.continue_()
            else:
                refused.append(route.request.url)
                route.abort()

        context.route("**/*", only_the_server)
        page = context.new_page()
        page.goto(server.url + "/docs", wait_until="load")
        page.wait_for_selector(".opblock-summary-path", timeout=PATIENCE_MS)
        paths = page.locator(".opblock-summary-path").all_inner_texts()
        assert any("/v1/analyze" in p for p in paths) and any("/v1/runs" in p for p in paths)
        assert refused == []  # nothing asked of a CDN
        context.close()
