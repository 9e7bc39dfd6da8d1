"""Honest waiting in a real Chromium: an Analyze queued behind another job says its place in
line while it waits, then the stages of its analysis as they begin.

The job ahead is held in the server's own job queue until the test has seen the waiting line,
so the order is driven by events, not timing. Every text the progress overlay shows is
recorded in the page (a MutationObserver), since a stage may be on screen only briefly."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.main import create_app
from tests.app.api_helpers import LiveServer
from tests.browser.conftest import ui_settings
from tests.patience import PATIENCE_MS, PATIENCE_S

pytestmark = pytest.mark.browser

STAGES = ["generating answers", "scoring rewards", "token statistics", "selection"]
PATTERN = (  # the lines LiveStatus shows while waiting and running
    r"waiting: \d+(st|nd|rd|th) in the queue|"
    r"(generating answers|scoring rewards|token statistics|selection) \(\d of \d\)"
)
RECORD = """(source) => {
  window.__said = [];
  const pattern = new RegExp(source, "g");
  const look = () => {
    for (const m of document.body.innerText.matchAll(pattern)) {
      // each line once, when it first shows: several outputs' overlays may show the same
      // stages a moment apart, which would otherwise read as a stage coming back
      if (!window.__said.includes(m[0])) window.__said.push(m[0]);
    }
  };
  new MutationObserver(look).observe(
    document.body, {subtree: true, childList: true, characterData: true});
}"""


@pytest.fixture(scope="module")
def server_and_app(browser_model_root: Path) -> Iterator[tuple[LiveServer, Any]]:
    app = create_app(ui_settings(browser_model_root))
    with LiveServer(app) as server:
        yield server, app


def test_a_queued_analyze_says_its_place_then_its_stages(
    chromium: Any, server_and_app: tuple[LiveServer, Any]
) -> None:
    server, app = server_and_app
    jobs = app.state.services.jobs
    page = chromium.new_context(viewport={"width": 1366, "height": 768}).new_page()
    page.set_default_timeout(PATIENCE_MS)
    page.goto(server.url + "/ui/", wait_until="load")
    page.wait_for_selector("#token-view .tok")

    holding, release = threading.Event(), threading.Event()

    def job_ahead() -> None:  # another tab's job holding the only slot
        holding.set()
        release.wait(PATIENCE_S)

    ahead = threading.Thread(target=lambda: jobs.run_blocking(job_ahead), daemon=True)
    ahead.start()
    try:
        assert holding.wait(PATIENCE_S)
        page.evaluate(RECORD, PATTERN)
        page.click("#analyze-btn")
        page.get_by_text("waiting: 1st in the queue").first.wait_for(state="visible")
    finally:
        release.set()
        ahead.join(PATIENCE_S)
    page.wait_for_selector("#json-download", state="visible")
    said: list[str] = page.evaluate("window.__said")
    assert said[0] == "waiting: 1st in the queue", said
    stages = [s for s in said if "(" in s]
    assert stages, f"no stage was shown: {said}"
    names = [re.sub(r" \(\d of \d\)$", "", s) for s in stages]
    assert names == sorted(names, key=STAGES.index), said  # in the order they run
    assert all(s.endswith("of 4)") for s in stages)
    page.context.close()
