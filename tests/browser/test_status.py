"""Honest status in a real Chromium: results of a failed run are marked out of date (and the
mark goes with the next good run), and a number typed out of range is clamped and said to be
(a slider's box and a number box)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.app.api_helpers import LiveServer
from tests.patience import PATIENCE_MS

pytestmark = pytest.mark.browser


# two looks that broke unseen: bold capitals drawn from a fallback typeface (a theme's bold file
# without them: a capital as wide as in monospace), and a scroll box's edge shadow repeated
# across it (grey stripes)
LOOKS_JS = """async () => {
  const family = getComputedStyle(document.querySelector('#analyze-btn')).fontFamily;
  const c = document.createElement('canvas').getContext('2d'), fallback = [];
  for (const w of [600, 700]) {
    await document.fonts.load(`${w} 20px ${family}`, 'AEMRSW');
    for (const ch of 'AEMRSW') {
      c.font = `${w} 20px ${family.split(',')[0]}, monospace`; const x = c.measureText(ch).width;
      c.font = `${w} 20px monospace`; const y = c.measureText(ch).width;
      if (Math.abs(x - y) < 0.01) fallback.push(w + ' ' + ch);
    }
  }
  const stripes = [...document.querySelectorAll('*')].filter(e => {
    const s = getComputedStyle(e);
    const layers = s.backgroundRepeat.split(',');
    return s.backgroundImage.includes('gradient(') && layers.length > 1
      && layers.some(r => r.trim() !== 'no-repeat');
  }).map(e => e.className);
  return {bold_capitals_fall_back: fallback, repeating_shadows: stripes};
}"""


def test_failed_run_marks_results_stale_and_clamps_are_said(
    chromium: Any, ui_server: LiveServer
) -> None:
    page = chromium.new_context(viewport={"width": 1366, "height": 768}).new_page()
    page.set_default_timeout(PATIENCE_MS)
    page.goto(ui_server.url + "/ui/", wait_until="load")
    page.wait_for_selector("#token-view .tok")
    results = page.locator("#explore-results")
    expect(results).not_to_have_class(re.compile("stale"))
    assert page.evaluate(LOOKS_JS) == {"bold_capitals_fall_back": [], "repeating_shadows": []}

    page.locator("#reference").locator("textarea, input").first.fill("")
    page.click("#analyze-btn")
    page.get_by_text("needs a reference answer").first.wait_for(state="visible")
    page.wait_for_selector("#explore-results.stale")  # the example is now out of date

    page.locator("#reference").locator("textarea, input").first.fill("92")
    page.get_by_text("Paste answers instead of sampling").click()
    page.fill("#answers textarea", " 4+8=12 carry 1, 2+6+1=9, answer 92\n answer 82")
    page.click("#analyze-btn")
    page.wait_for_selector("#json-download", state="visible")
    page.wait_for_selector("#explore-results:not(.stale)")

    box = page.locator("#group-size input[type=number]")
    box.fill("100")
    box.press("Enter")
    # one check: the note removes itself after a few seconds, so it is read as it shows
    page.wait_for_function(
        "() => (document.getElementById('gmts-clamp')?.innerText || '')"
        ".includes('above the maximum 32')"
    )
    # a number box (not a slider): the page clamps the value it sends, and says so
    page.get_by_role("tab", name="Train").first.click()
    lr = page.locator("#train-lr input[type=number]")
    lr.fill("1")
    lr.press("Enter")
    page.wait_for_function(
        "() => (document.getElementById('gmts-clamp')?.innerText || '')"
        ".includes('Learning rate: 1 is above the maximum 0.0003; using 0.0003')"
    )
    expect(lr).to_have_value("0.0003")  # 0.0003 as the page writes it (JavaScript's String)
    page.context.close()
