"""Linked views in a real Chromium: a chart point shows its token, a token pins its details
(kept until closed), and the HTML export works offline. The keyboard walk of the token area
(one Tab stop, arrow keys, Enter pins) is in tests/browser/test_point.py."""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.app.api_helpers import LiveServer
from tests.patience import PATIENCE_MS

pytestmark = pytest.mark.browser

TOP_POINT_JS = """() => {
  const data = document.querySelector('#scatter-plot .js-plotly-plot').data;
  let best = null;
  data.forEach((t, ti) => (t.customdata ? t.y : []).forEach((y, pi) => {
    if (best === null || y > best[3]) best = [ti, pi, t.customdata[pi], y];
  }));
  return best.slice(0, 3);
}"""


def open_page(chromium: Any, url: str, width: int = 1366, height: int = 768) -> Any:
    page = chromium.new_context(viewport={"width": width, "height": height}).new_page()
    page.set_default_timeout(PATIENCE_MS)
    page.goto(url + "/ui/", wait_until="load")
    page.wait_for_selector("#token-view .tok")  # the example group, already there
    return page


def test_click_on_a_chart_point_shows_its_token(chromium: Any, ui_server: LiveServer) -> None:
    page = open_page(chromium, ui_server.url)
    page.locator("#scatter-plot").scroll_into_view_if_needed()
    page.wait_for_function(  # the click handler is attached once plotly has drawn the chart
        "() => { const d = document.querySelector('#scatter-plot .js-plotly-plot');"
        " return !!d && d.__gmtsLinked === true; }"
    )
    # the token with the largest gradient proxy: a point no other point hides
    ti, pi, wanted = page.evaluate(TOP_POINT_JS)
    point = page.locator("#scatter-plot .scatterlayer .trace").nth(ti).locator(".point").nth(pi)
    point.scroll_into_view_if_needed()
    box = point.bounding_box()
    assert box is not None
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.mouse.down()
    page.mouse.up()
    linked = page.locator("#token-view .tok.linked.pinned")
    linked.wait_for(state="visible")
    answer, pos = wanted
    expect(linked).to_have_attribute("data-answer", str(int(answer)))
    expect(linked).to_have_attribute("data-pos", str(int(pos)))
    expect(page.locator("#gmts-pin")).to_be_visible()
    page.context.close()


def test_click_on_a_token_pins_its_details_until_closed(
    chromium: Any, ui_server: LiveServer
) -> None:
    page = open_page(chromium, ui_server.url)
    tok = page.locator("#token-view .tok.sel-b").first
    tok.click()
    panel = page.locator("#gmts-pin")
    panel.wait_for(state="visible")
    text = panel.inner_text()
    n = page.locator("#token-view .tok").count()
    # the default example is a batch ranked as one (batch scope): the pool holds this group's
    # tokens and the other groups'
    pool = re.search(r"rank of (\d+) tokens in the batch", text)
    assert pool and int(pool.group(1)) >= n and "(it keeps the top " in text
    assert "gmts: #" in text and "entropy: #" in text
    bars = panel.locator(".pin-bar")
    expect(bars.nth(1)).to_be_attached()  # token + alternatives
    expect(bars.first).to_contain_text("sampled", use_inner_text=True)
    page.mouse.move(5, 5)  # hovering elsewhere and clicking outside keep it
    page.locator("#notes").click()
    expect(panel).to_be_visible()
    expect(tok).to_have_class(re.compile(r"^(?!.*pinned.*pinned).*pinned"))  # pinned, once
    panel.locator(".pin-close").click()
    expect(panel).to_be_hidden()
    page.context.close()


def test_exported_view_works_offline(chromium: Any, ui_server: LiveServer, tmp_path: Any) -> None:
    """The HTML export opens from a file: tokens, marks, tooltip and the pinned panel."""
    context = chromium.new_context(viewport={"width": 1366, "height": 768}, accept_downloads=True)
    page = context.new_page()
    page.set_default_timeout(PATIENCE_MS)
    page.goto(ui_server.url + "/ui/", wait_until="load")
    page.get_by_text("Paste answers instead of sampling").click()
    page.fill("#answers textarea", " 4+8=12 carry 1, 2+6+1=9, answer 92\n answer 82")
    page.click("#analyze-btn")
    page.wait_for_selector("#html-download", state="visible")
    with page.expect_download() as info:
        page.click("#html-download")
    saved = tmp_path / "view.html"
    info.value.save_as(saved)
    offline = context.new_page()
    offline.route("**/*", lambda route: route.abort() if not route.request.url.startswith(
        "file:") else route.continue_())  # fmt: skip
    offline.goto(saved.as_uri())
    tokens = offline.locator("#token-view .tok")
    expect(tokens.first).to_be_attached()
    expect(offline.locator(".tok.mark-b, .tok.mark-both").first).to_be_attached()
    tokens.nth(2).hover()
    offline.locator("#gmts-tip").wait_for(state="visible")
    tokens.nth(2).click()
    offline.locator("#gmts-pin").wait_for(state="visible")
    expect(offline.locator("#summary-table dd").nth(9)).to_be_attached()  # 10 or more
    context.close()
