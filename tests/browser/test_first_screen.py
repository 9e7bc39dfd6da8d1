"""The first screen in a real Chromium: the page opens on an analysed example group.

"Highlighted tokens within 3 s of load without a click" is checked as the structural property
that makes it hold on any machine: the tokens are part of the page's first render (no request
to the queue, i.e. no model run, happens before they show), they sit on the first screen at
1366x900, and Analyze is on the first screen at both sizes. So is the disagreement: the
spotlight's two answers with their sentences, and the start of "Why they differ". The time from
navigation to the first highlighted token is recorded in test-artifacts/first-screen.json,
never asserted (tests assert no wall-clock times). On the same page, predict-then-reveal runs in
Explore and then in Learn (tests/browser/predict_reveal.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.app.api_helpers import LiveServer
from tests.browser.predict_reveal import predict_then_reveal
from tests.patience import PATIENCE_MS

pytestmark = pytest.mark.browser

# time (ms since navigation) at which the first token selected by a method appears
WATCH_JS = """
window.__gmtsQueueCalls = 0;
const origFetch = window.fetch;
window.fetch = function (...args) {
  const url = String(args[0] && args[0].url || args[0]);
  if (url.includes('/queue/join') || url.includes('/run/')) window.__gmtsQueueCalls += 1;
  return origFetch.apply(this, args);
};
new MutationObserver((_, obs) => {
  if (document.querySelector('#token-view .tok.sel-b')) {
    window.__gmtsFirstTokenMs = performance.now();
    window.__gmtsQueueCallsAtFirstToken = window.__gmtsQueueCalls;
    obs.disconnect();
  }
}).observe(document, {childList: true, subtree: true});
"""


def open_page(chromium: Any, url: str, width: int, height: int) -> Any:
    context = chromium.new_context(viewport={"width": width, "height": height})
    context.add_init_script(WATCH_JS)
    page = context.new_page()
    page.set_default_timeout(PATIENCE_MS)
    page.goto(url + "/ui/", wait_until="load")
    return page


def in_first_screen(page: Any, selector: str) -> bool:
    box = page.locator(selector).first.bounding_box()
    height = page.viewport_size["height"]
    return box is not None and 0 <= box["y"] and box["y"] + box["height"] <= height


@pytest.mark.parametrize(("width", "height"), [(1366, 900), (390, 844)])
def test_page_opens_on_a_highlighted_example(
    chromium: Any, ui_server: LiveServer, artifacts: Path, width: int, height: int
) -> None:
    page = open_page(chromium, ui_server.url, width, height)
    page.wait_for_selector("#token-view .tok.sel-b")
    # the example came with the page: no model run was asked for before it showed
    assert page.evaluate("window.__gmtsQueueCallsAtFirstToken") == 0
    first = page.locator("#token-view .tok.sel-b").first
    expect(first).to_be_visible()  # drawn (a box on the page), not only present in the DOM
    view = page.locator("#token-view")
    expect(view.locator(".tok").first).to_be_attached()
    expect(view.locator(".tok.sel-a").first).to_be_attached()  # entropy's selection, marked
    expect(page.locator("#notes")).to_contain_text("Example", use_inner_text=True)
    page.wait_for_selector("#scatter-plot .js-plotly-plot .point")  # charts drawn as well
    assert in_first_screen(page, "#analyze-btn"), "Analyze must be on the first screen"
    # the disagreement, without a click: entropy's picks in a zero-signal group and tokens
    # only GMTS picks, each under its sentence, and "Why they differ" beside them
    for card in ("#spotlight .spot-wasted", "#spotlight .spot-signal"):
        assert in_first_screen(page, f"{card} .spot-sentence"), card
    assert in_first_screen(page, "#spotlight .spot-wasted .tok.tok-wasted.sel-a")
    assert in_first_screen(page, "#spotlight .spot-signal .tok.sel-b:not(.sel-a)")
    wasted = page.locator("#spotlight .spot-wasted .spot-sentence")
    expect(wasted).to_contain_text("nothing can be learned", use_inner_text=True)
    expect(wasted).to_contain_text("% of its picks here", use_inner_text=True)
    expect(page.locator("#spotlight .spot-signal .spot-sentence")).to_contain_text(
        "gmts picks", use_inner_text=True
    )
    why = page.locator("#why-differ-view .why-differ h4").bounding_box()
    spot = page.locator("#spotlight").bounding_box()
    assert why is not None and spot is not None
    if width >= 1000:  # beside the spotlight, on the first screen
        assert why["y"] < height and why["x"] > spot["x"] + spot["width"] - 1, (why, spot)
    else:  # right under it (a phone's first screen holds Analyze and the two answers)
        assert 0 <= why["y"] - (spot["y"] + spot["height"]) < 60, (why, spot)
    record = artifacts / "first-screen.json"
    data = json.loads(record.read_text()) if record.exists() else {}
    data[f"{width}x{height}"] = {
        "first_highlighted_token_ms": page.evaluate("window.__gmtsFirstTokenMs")
    }
    record.write_text(json.dumps(data, indent=1))
    # the pinned panel works on the example too (its numbers and ranks come with the page)
    first.click()
    expect(page.locator("#gmts-pin")).to_contain_text("rank of", use_inner_text=True)
    page.keyboard.press("Escape")
    predict_then_reveal(page, "#token-view .predict-scope")
    # Learn: the group it explains, opened with the picks hidden (the same bar and script);
    # its "why they differ" view, hidden while predicting, shown with the score
    page.get_by_role("tab", name="Learn").first.click()
    learn = "#learn-view .learn-predict .predict-scope"
    page.locator(learn).wait_for()
    expect(page.locator(f"{learn} .predict-reasons")).to_be_hidden()
    predict_then_reveal(page, learn, opened=True)
    expect(page.locator("#learn-why-differ")).to_be_visible()
    # a token of its reasons in another group: Learn (and Explore) go to that group and show it
    shown = page.locator("#learn-view .gmts-view").get_attribute("data-group")
    chip = page.locator(f'#learn-why-differ .why-tok:not([data-group="{shown}"])').first
    chip.evaluate("b => b.closest('details').open = true")
    g, answer, pos = (chip.get_attribute(f"data-{k}") for k in ("group", "answer", "pos"))
    chip.click()
    token = (
        f'#learn-view .gmts-view[data-group="{g}"] .tok[data-answer="{answer}"][data-pos="{pos}"]'
    )
    page.wait_for_function(
        f"() => !!document.querySelector('{token}')?.classList.contains('linked')"
    )
    expect(page.locator(f'#token-view .gmts-view[data-group="{g}"]')).to_have_count(1)
    box = page.locator(f"{learn} .predict-bar").bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= width, box
    page.context.close()


def test_results_scroll_into_view_after_analyze(chromium: Any, ui_server: LiveServer) -> None:
    page = open_page(chromium, ui_server.url, 390, 844)
    page.wait_for_selector("#token-view .tok")
    page.fill("#prompt textarea", "Q: 47+38=?\nA:")
    page.locator("#reference").locator("textarea, input").first.fill("85")
    page.click("#analyze-btn")
    page.wait_for_selector("#json-download", state="visible")
    expect(page.locator("#token-view .prompt-text")).to_contain_text("47+38", use_inner_text=True)
    # the new result replaced it
    expect(page.locator("#notes")).not_to_contain_text("Example", use_inner_text=True)
    # the results were brought into view: the notes above the tokens reach the top of the screen
    page.wait_for_function(
        "() => { const n = document.getElementById('notes');"
        " return !!n && Math.abs(n.getBoundingClientRect().top) < 40; }"
    )
    page.context.close()
