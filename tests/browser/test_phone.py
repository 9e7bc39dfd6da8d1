"""A phone (390x844) in a real Chromium: the summary readable, legends clear of the axis
titles, Analyze on the first screen, no sideways page scroll."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.app.api_helpers import LiveServer
from tests.patience import PATIENCE_MS

pytestmark = pytest.mark.browser

# every summary label and value: inside the viewport horizontally, or inside an element that
# scrolls sideways (then it can be reached); returns the ones that are neither
OUTSIDE_JS = """() => {
  const scrolls = el => {
    for (let p = el.parentElement; p; p = p.parentElement) {
      const o = getComputedStyle(p).overflowX;
      if ((o === 'auto' || o === 'scroll') && p.scrollWidth > p.clientWidth) return true;
    }
    return false;
  };
  const cells = Array.from(document.querySelectorAll('#summary-table dt, #summary-table dd'));
  return [cells.length, cells.filter(c => {
    const r = c.getBoundingClientRect();
    return !(r.left >= 0 && r.right <= window.innerWidth + 0.5) && !scrolls(c);
  }).map(c => c.textContent)];
}"""
OVERLAPS_JS = """(sel) => {
  const box = e => e && e.getBoundingClientRect();
  const legend = box(document.querySelector(sel + ' .legend'));
  const title = box(document.querySelector(sel + ' .g-xtitle'));
  if (!legend || !title) return null;
  return !(legend.bottom <= title.top || legend.top >= title.bottom ||
           legend.right <= title.left || legend.left >= title.right);
}"""


def test_phone_summary_legends_and_analyze(
    chromium: Any, ui_server: LiveServer, artifacts: Path
) -> None:
    page = chromium.new_context(viewport={"width": 390, "height": 844}).new_page()
    page.set_default_timeout(PATIENCE_MS)
    page.goto(ui_server.url + "/ui/", wait_until="load")
    page.wait_for_selector("#summary-table dd")
    box = page.locator("#analyze-btn").bounding_box()
    assert box is not None and box["y"] + box["height"] <= 844  # no long scroll to Analyze
    count, outside = page.evaluate(OUTSIDE_JS)
    assert count >= 10 and outside == []
    for plot in ("scatter", "distributions", "positions", "advantages"):
        page.wait_for_selector(f"#{plot}-plot .js-plotly-plot .main-svg")
        assert page.evaluate(OVERLAPS_JS, f"#{plot}-plot") in (False, None), plot
    width = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert width[0] <= width[1] + 1, width
    page.locator("#summary-table").scroll_into_view_if_needed()
    page.screenshot(path=str(artifacts / "ui-summary-390px.png"))
    page.context.close()
