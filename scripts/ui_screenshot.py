"""Take the README's screenshot of the Explore tab (docs/explore.png) on the bundled model.

Starts the app on a free 127.0.0.1 port, opens /ui in Debian's Chromium (Playwright), analyzes
the default example prompt, hovers a token selected by GMTS and saves the token view with its
tooltip. Usage: ``.venv/bin/python scripts/ui_screenshot.py [OUT.png]``.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from playwright.sync_api import sync_playwright

from app.core.config import Settings
from app.live_server import CHROMIUM_ARGS, CHROMIUM_PATH, LiveServer
from app.main import create_app

ROOT = Path(__file__).resolve().parents[1]
logger = logging.getLogger("ui_screenshot")


def shoot(url: str, out: Path) -> None:
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM_PATH, args=list(CHROMIUM_ARGS))
        page = browser.new_page(viewport={"width": 1280, "height": 900}, device_scale_factor=1)
        page.set_default_timeout(180_000)
        page.goto(url + "/ui/", wait_until="load")
        page.click("#analyze-btn")
        page.wait_for_selector("#token-view .gmts-view[data-group] .tok")
        page.wait_for_selector("#scatter-plot .js-plotly-plot .point")
        view = page.locator("#token-view")
        view.scroll_into_view_if_needed()
        target = view.locator(".tok.sel-b").nth(2)
        target.hover()
        page.locator("#gmts-tip").wait_for(state="visible")
        box = view.bounding_box()
        assert box is not None
        clip = {"x": 0, "y": box["y"] - 10, "width": 1280, "height": min(box["height"] + 20, 900)}
        out.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(out), clip=clip)
        browser.close()


def main() -> None:
    logging.basicConfig(level=logging.INFO)
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs" / "explore.png"
    with LiveServer(create_app(Settings(ui_enabled=True))) as server:
        shoot(server.url, out)
    logger.info("wrote %s", out)


if __name__ == "__main__":
    main()
