"""The server-rendered first view in a real Chromium: highlighted tokens before Gradio boots.

The first HTML response already holds the default example's marked tokens; with JavaScript off
(nothing of Gradio runs) they are on the first screen; with Gradio's scripts blocked their
details still come on a hover, keyboard focus, Enter and a tap, at 1366 px and 390 px
(``gmts.js`` is inline in the first view, before its tokens); with everything on, the first
view hands over to Gradio's token view (a focused token stays focused there) and is gone, and
Explore shows the server-drawn scatter until Plotly's chart takes its place. Times are recorded
by ``benchmarks/ui_first_result.py``, never asserted here.
"""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from app.ui.first_view import FIRST_VIEW_ID
from tests.app.api_helpers import LiveServer
from tests.browser.conftest import exactly
from tests.patience import PATIENCE_MS

pytestmark = pytest.mark.browser

VIEW = f"#{FIRST_VIEW_ID}"


def _page(chromium: Any, **context: Any) -> Any:
    page = chromium.new_context(viewport={"width": 1366, "height": 768}, **context).new_page()
    page.set_default_timeout(PATIENCE_MS)
    return page


def test_first_html_response_holds_highlighted_tokens(chromium: Any, ui_server: LiveServer) -> None:
    page = _page(chromium)
    response = page.goto(ui_server.url + "/ui/", wait_until="commit")
    html = response.text()  # the bytes of the first response, before any script ran
    body = html[html.index("<body") :]
    view = body[body.index(f'id="{FIRST_VIEW_ID}"') :]
    assert 'class="tok' in view and "sel-b" in view and "data-tip=" in view
    assert view.index("sel-b") < view.index("<gradio-app")  # before Gradio's element
    assert 'data-charts="PlotlyPlot-' in view[:300]  # the chart module it imports at hand-over
    # the example's scatter, drawn by the server, with its points
    assert view.index('class="gmts-sketch"') < view.index("<circle") < view.index("<gradio-app")
    page.context.close()


def test_tokens_are_on_screen_without_javascript(chromium: Any, ui_server: LiveServer) -> None:
    page = _page(chromium, java_script_enabled=False)
    page.goto(ui_server.url + "/ui/", wait_until="load")
    token = page.locator(f"{VIEW} .tok.sel-b").first
    expect(token).to_be_visible()
    box = token.bounding_box()
    assert box is not None and 0 <= box["y"] <= 768 - box["height"]  # on the first screen
    expect(page.locator(f"{VIEW} .tok.mark-a, {VIEW} .tok.mark-both").first).to_be_attached()
    expect(page.locator("#token-view")).to_have_count(0)  # Gradio has drawn nothing
    page.context.close()


@pytest.mark.parametrize("width,height", [(1366, 768), (390, 844)])
def test_first_view_tokens_answer_hover_focus_and_tap_before_gradio_boots(
    chromium: Any, ui_server: LiveServer, width: int, height: int
) -> None:
    """With Gradio's scripts blocked (nothing of Gradio runs), a highlighted token of the first
    view shows its details, the tooltip Gradio's token view shows (its ``data-tip``: statistics,
    both methods' ranks, why it was picked or not), on a hover and on keyboard focus, and its
    pinned panel on Enter and on a tap, over the view (at 1366 px and on a phone)."""
    phone = width < 900
    page = _page_sized(chromium, width, height, has_touch=phone, is_mobile=phone)
    page.route("**/assets/index-*.js", lambda route: route.abort())  # Gradio never boots
    page.goto(ui_server.url + "/ui/", wait_until="load")
    tokens = page.locator(f"{VIEW} .tok.sel-b")
    token, other = tokens.first, tokens.nth(1)
    details = token.get_attribute("data-tip")
    assert details and "rank" in details and "selected" in details  # ranks and the verdict
    tip = page.locator("#gmts-tip")
    if not phone:
        token.hover()
        tip.wait_for(state="visible")
        expect(tip).to_have_text(exactly(details), use_inner_text=True)
        _assert_on_top(page, "#gmts-tip")
        page.mouse.move(0, 0)
        tip.wait_for(state="hidden")
    other.focus()  # keyboard: the focused token's details
    tip.wait_for(state="visible")
    other_details = other.get_attribute("data-tip")  # drawn by the server: there at once
    assert other_details
    expect(tip).to_have_text(exactly(other_details), use_inner_text=True)
    page.keyboard.press("Enter")  # its pinned panel: the same lines of numbers and ranks
    pin = page.locator("#gmts-pin")
    pin.wait_for(state="visible")
    lines = other_details.split("\n")
    expect(page.locator("#gmts-pin .pin-title")).to_have_text(
        exactly(lines[0]), use_inner_text=True
    )
    expect(page.locator("#gmts-pin .pin-ranks")).to_have_text(
        exactly("\n".join(lines[4:-1])), use_inner_text=True
    )
    page.keyboard.press("Escape")
    pin.wait_for(state="hidden")
    if phone:
        token.tap()  # touch: the pinned panel, a bottom sheet across the screen
        pin.wait_for(state="visible")
        expect(page.locator("#gmts-pin .pin-title")).to_have_text(
            exactly(details.split("\n")[0]), use_inner_text=True
        )
        box = pin.bounding_box()
        assert box is not None and box["width"] == width and box["y"] + box["height"] <= height
        _assert_on_top(page, "#gmts-pin")
    page.context.close()


def _page_sized(chromium: Any, width: int, height: int, **context: Any) -> Any:
    page = chromium.new_context(viewport={"width": width, "height": height}, **context).new_page()
    page.set_default_timeout(PATIENCE_MS)
    return page


def _assert_on_top(page: Any, selector: str) -> None:
    """The element is what the screen shows at its centre (over the first view)."""
    assert page.evaluate(
        """sel => { const el = document.querySelector(sel); const r = el.getBoundingClientRect();
        el.style.pointerEvents = 'auto';  // the tooltip lets the pointer through: test it here
        const hit = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
        el.style.pointerEvents = ''; return el.contains(hit); }""",
        selector,
    )


# in the page before its scripts: the order in which the example's charts are first drawn,
# and whether Explore showed the server-drawn scatter (displayed, with points) before Plotly's
DRAWN_ORDER = """
window.__gmtsDrawn = [];
new MutationObserver(() => {
  if (!window.__gmtsDrawn.length && document.querySelector('#scatter-sketch .gmts-sketch circle')
      ?.getClientRects().length) window.__gmtsSketchFirst = true;
  for (const id of ['#scatter-plot', '#distributions-plot', '#positions-plot',
                    '#advantages-plot', '#budget-plot']) {
    if (!window.__gmtsDrawn.includes(id)
        && document.querySelector(id + ' .js-plotly-plot .main-svg')) window.__gmtsDrawn.push(id);
  }
}).observe(document, {childList: true, subtree: true});
"""


def test_gradio_takes_over_and_the_first_view_goes(chromium: Any, ui_server: LiveServer) -> None:
    page = _page(chromium)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.add_init_script(DRAWN_ORDER)
    page.goto(ui_server.url + "/ui/", wait_until="commit")
    # a token focused in the first view (its details shown) is focused in Gradio's view after
    first = page.locator(f"{VIEW} .predict-scope .tok.sel-b")
    focused = first.first.get_attribute("data-tip")
    first.first.focus()
    page.wait_for_selector("#token-view .tok.sel-b")
    page.wait_for_selector(VIEW, state="detached")
    assert page.evaluate("document.activeElement.closest('#token-view') !== null")
    assert page.evaluate("document.activeElement.getAttribute('data-tip')") == focused
    assert focused
    expect(page.locator("#gmts-tip")).to_have_text(exactly(focused), use_inner_text=True)
    # the same example in both: the interactive view shows the tokens the first view showed
    expect(page.locator("#token-view .tok.sel-b").first).to_be_attached()
    expect(page.locator("#notes")).to_contain_text("Example", use_inner_text=True)
    # the scatter (in the config) is drawn first, then the charts the page-load event sends
    # once it is drawn; all from one Plotly module: the first view's early import and Gradio's
    # are the same request
    page.wait_for_selector("#scatter-plot .js-plotly-plot .point")
    later = [f"#{c}-plot" for c in ("distributions", "positions", "advantages", "budget")]
    assert page.evaluate("window.__gmtsDrawn.indexOf('#scatter-plot')") == 0
    for chart in later:
        page.wait_for_selector(f"{chart} .js-plotly-plot .main-svg")
    assert sorted(page.evaluate("window.__gmtsDrawn")) == sorted(["#scatter-plot", *later])
    # Explore showed the sketch until Plotly drew; now Plotly's chart has its place
    assert page.evaluate("window.__gmtsSketchFirst") is True
    expect(page.locator("#scatter-sketch")).to_be_hidden()
    box = page.locator("#scatter-plot").bounding_box()
    assert box is not None and box["height"] > 400, box
    chunks = page.evaluate(
        "performance.getEntriesByType('resource').map(e => e.name)"
        ".filter(n => n.includes('/assets/PlotlyPlot-'))"
    )
    assert len(chunks) == 1, chunks
    assert errors == []
    page.context.close()


def test_the_hand_over_imports_the_charts_module(chromium: Any) -> None:
    """The first view imports the chunk it names (``data-charts``, resolved against Gradio's
    entry script) once Gradio's token view shows, not before; here on a page of its own."""
    from app.ui.first_view import first_view_html
    from app.ui.tabs.explore import example

    origin = "http://gmts.test"
    fragment = first_view_html(example.load_example(), "intro", "note", "PlotlyPlot-x1.js")
    html = (
        f"<html><head></head><body>{fragment}"
        '<script type="module" src="./assets/index-x0.js"></script><gradio-app></gradio-app>'
        "</body></html>"
    )
    asked: list[str] = []
    bodies = {
        "/ui/": ("text/html", html),
        "/ui/assets/index-x0.js": ("text/javascript", "export {};"),
        "/ui/assets/PlotlyPlot-x1.js": (
            "text/javascript",
            "window.__charts = (window.__charts || 0) + 1; export default {};",
        ),
    }

    def serve(route: Any) -> None:
        path = route.request.url[len(origin) :]
        asked.append(path)
        kind, body = bodies.get(path, ("text/plain", ""))
        route.fulfill(status=200 if path in bodies else 404, content_type=kind, body=body)

    page = _page(chromium)
    page.route(f"{origin}/**", serve)
    page.goto(f"{origin}/ui/", wait_until="load")
    assert page.evaluate("window.__charts") is None  # nothing imported before the hand-over
    page.evaluate(
        "document.querySelector('gradio-app').innerHTML ="
        ' \'<div id="token-view"><span class="tok sel-b">x</span></div>\''
    )
    page.wait_for_function("window.__charts === 1")
    page.wait_for_selector(VIEW, state="detached")
    assert asked.count("/ui/assets/PlotlyPlot-x1.js") == 1
    page.context.close()
