"""Take the documentation's screenshots on the bundled model: docs/explore.png and every tab at
1366x900 (a laptop) and 390x844 (a phone) in docs/ui/.

Starts the app on a free 127.0.0.1 port, opens /ui in Debian's Chromium (Playwright), analyzes
the default example prompt, hovers a token selected by GMTS and saves the token view with its
tooltip (docs/explore.png). Then, at each size, it shows each tab as a person meets it: Explore
and Learn on the example group, Train after two small steps, Compare with the default compare
run (docs/compare/compare.json) loaded, Proxy check after one run, Runs on step 1 of the small
trainer log shipped with the tests (tests/data/runs/logged, the server's run root).
Usage: ``.venv/bin/python scripts/ui_screenshot.py [OUT.png]``.
"""

from __future__ import annotations

import logging
import re
import sys
from pathlib import Path
from typing import Any

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
        page.wait_for_selector("#json-download", state="visible")  # the run, not the example
        page.wait_for_timeout(1500)  # the page's smooth scroll to the results ends
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


RUN_ROOT = ROOT / "tests" / "data" / "runs" / "logged"
RUN_LABEL = "logged (gmts_trainer_log, 2 steps)"
SIZES = {"desktop": (1366, 900), "phone": (390, 844)}
TRAIN_SMALL = {"train-g": 4, "train-prompts": 2, "train-steps": 2, "train-eval": 20}


def _number(page: Any, elem_id: str, value: int) -> None:
    box = page.locator(f"#{elem_id} input[type=number]")
    box.fill(str(value))
    box.press("Enter")


def _tab(page: Any, name: str) -> None:
    """Open tab ``name``; on a phone the last tabs sit in Gradio's "More tabs" menu."""
    tab = page.get_by_role("tab", name=name)
    if tab.count() == 0 or not tab.first.is_visible():
        page.locator('button[aria-label="More tabs"]').click()
        page.evaluate(  # the menu's item is the last button of that name (others measure)
            "(name) => Array.from(document.querySelectorAll('button'))"
            ".filter(b => b.textContent.trim() === name).pop().click()",
            name,
        )
    else:
        tab.first.click()


def shoot_tabs(url: str, folder: Path) -> list[Path]:
    """Each tab at each size, full page, as ``{tab}-{size}.png``."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM_PATH, args=list(CHROMIUM_ARGS))
        for size, (w, h) in SIZES.items():
            page = browser.new_page(viewport={"width": w, "height": h}, device_scale_factor=1)
            page.set_default_timeout(300_000)
            page.goto(url + "/ui/", wait_until="load")
            page.wait_for_selector("#scatter-plot .js-plotly-plot .point")

            def save(tab: str, page: Any = page, size: str = size) -> None:
                path = folder / f"{tab}-{size}.png"
                page.screenshot(path=str(path), full_page=True)
                written.append(path)

            save("explore")
            _tab(page, "Learn")
            page.wait_for_selector("#learn-view .lesson")
            save("learn")
            _tab(page, "Train")
            for elem_id, value in TRAIN_SMALL.items():
                _number(page, elem_id, value)
            page.click("#train-run-btn")
            page.wait_for_selector("#train-session:has-text('steps done 2')")
            page.wait_for_selector("#train-batch .answer")
            save("train")
            _tab(page, "Compare")
            compare = ROOT / "docs" / "compare" / "compare.json"
            page.locator("#compare-upload input[type=file]").set_input_files(str(compare))
            page.wait_for_selector("#compare-json", state="visible")
            save("compare")
            _tab(page, "Proxy check")
            page.click("#proxy-run-btn")
            page.wait_for_selector("#proxy-scatter .js-plotly-plot .point")
            save("proxy-check")
            _tab(page, "Runs")
            page.locator("#run-pick input").click()
            page.get_by_role("option", name=RUN_LABEL).click()
            steps = page.locator("#run-steps .virtual-row > [role=gridcell]:first-child")
            steps.filter(has_text=re.compile(r"^\s*1\s*$")).first.click()
            page.wait_for_selector("#run-step-view .gmts-view .tok.sel-a")
            # the metrics over steps, computed in the background, are charted
            page.wait_for_selector("#run-metrics-status:has-text('steps analysed')")
            page.wait_for_selector("#run-coverage-plot .js-plotly-plot .point")
            save("runs")
            page.close()
        browser.close()
    return written


def main() -> None:
    logging.basicConfig(level=logging.INFO)
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs" / "explore.png"
    settings = Settings(ui_enabled=True, run_roots=[RUN_ROOT.parent])
    with LiveServer(create_app(settings)) as server:
        shoot(server.url, out)
        logger.info("wrote %s", out)
        for path in shoot_tabs(server.url, out.parent / "ui"):
            logger.info("wrote %s", path)


if __name__ == "__main__":
    main()
