"""The page shows the point, in a real Chromium at 1366x900 and 390x844: it opens on a
disagreement with "why they differ" open (a token of it shown, in its group's view when
another group holds it), the pinned panel overlaps neither the tooltip nor
the summary, every text node has a contrast of at least 4.5:1 (computed in the page), and the
token area is one Tab stop whose tokens the arrow keys walk."""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.app.api_helpers import LiveServer
from tests.browser.conftest import exactly
from tests.patience import PATIENCE_MS

pytestmark = pytest.mark.browser

SIZES = [(1366, 900), (390, 844)]

# Every visible HTML text node: its colour against the background it is drawn on (the element's
# and its ancestors' background colours composited, alpha included); WCAG relative luminance.
CONTRAST_JS = """
() => {
  const parse = (c) => { const m = c.match(/rgba?\\(([^)]+)\\)/); if (!m) return null;
    const v = m[1].split(/[ ,\\/]+/).filter(Boolean).map(Number);
    return [v[0], v[1], v[2], v.length > 3 ? v[3] : 1]; };
  const over = (top, under) => { const a = top[3];
    return [0, 1, 2].map(i => top[i] * a + under[i] * (1 - a)).concat([1]); };
  const lum = (c) => { const f = (v) => { v /= 255;
    return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
    return 0.2126 * f(c[0]) + 0.7152 * f(c[1]) + 0.0722 * f(c[2]); };
  const background = (el) => { const layers = [];
    for (let e = el; e && e.nodeType === 1; e = e.parentElement) {
      const b = parse(getComputedStyle(e).backgroundColor); if (b && b[3] > 0) layers.push(b);
      if (b && b[3] >= 1) break; }
    let c = [255, 255, 255, 1]; for (const l of layers.reverse()) c = over(l, c); return c; };
  const bad = []; let checked = 0;
  const walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let n = walk.nextNode(); n; n = walk.nextNode()) {
    const text = n.textContent.trim(); const el = n.parentElement;
    if (!text || !el || el.closest('svg, script, style, noscript')) continue;
    const r = el.getBoundingClientRect(); const s = getComputedStyle(el);
    if (r.width === 0 || r.height === 0 || s.visibility === 'hidden') continue;
    if (!el.checkVisibility({opacityProperty: true, visibilityProperty: true})) continue;
    let fg = parse(s.color); if (!fg) continue;
    const bg = background(el); fg = over(fg, bg);
    const [l1, l2] = [lum(fg), lum(bg)].sort((a, b) => b - a);
    const ratio = (l1 + 0.05) / (l2 + 0.05); checked += 1;
    if (ratio < 4.5) bad.push({text: text.slice(0, 40), ratio: +ratio.toFixed(2),
      color: s.color, cls: el.className && String(el.className).slice(0, 60)});
  }
  return {checked, bad: bad.slice(0, 15), count: bad.length};
}
"""


SETTLED_JS = """() => document.getAnimations().every(a =>
  a.playState !== 'running' || a.effect?.getTiming().iterations === Infinity)"""


def open_page(chromium: Any, url: str, width: int, height: int) -> Any:
    page = chromium.new_context(viewport={"width": width, "height": height}).new_page()
    page.set_default_timeout(PATIENCE_MS)
    page.goto(url + "/ui/", wait_until="load")
    page.wait_for_selector("#token-view .tok")
    # the server-drawn first view is replaced by Gradio's: measure the page after the swap
    page.wait_for_selector("#gmts-first-view", state="detached")
    page.locator("#spotlight .tok").first.wait_for(state="visible")
    return page


def boxes_overlap(a: dict[str, float] | None, b: dict[str, float] | None) -> bool:
    if a is None or b is None:
        return False
    return not (
        a["x"] + a["width"] <= b["x"]
        or b["x"] + b["width"] <= a["x"]
        or a["y"] + a["height"] <= b["y"]
        or b["y"] + b["height"] <= a["y"]
    )


@pytest.mark.parametrize(("width", "height"), SIZES)
def test_opening_view_shows_a_disagreement_and_why(
    chromium: Any, ui_server: LiveServer, width: int, height: int
) -> None:
    page = open_page(chromium, ui_server.url, width, height)
    only_one = page.locator("#token-view .tok.mark-a, #token-view .tok.mark-b")
    expect(only_one.first).to_be_attached()  # a token selected by only one method
    why = page.locator("#why-differ")
    expect(why).to_be_visible()
    expect(why).to_contain_text("Why they differ: entropy vs gmts", use_inner_text=True)
    cell = page.locator('#why-differ tr[data-reason="zero_advantage"] td.num').first.inner_text()
    assert int(cell.split()[0]) > 0, cell  # the count (its share of the budget under it)
    # the summary's wasted share of entropy is not zero
    rows = page.locator("#summary-table .summary-row")
    wasted = [r for r in rows.all_inner_texts() if r.startswith("entropy: wasted share")]
    assert wasted and not wasted[0].rstrip().endswith(" 0.0%"), wasted
    # the first screen holds tokens (the spotlight's two answers, above the token view)
    first = page.locator("#spotlight .tok").first.bounding_box()
    assert first is not None and first["y"] + first["height"] <= height, first
    # a token button of the why view pins its token (those in the group on screen)
    shown = page.locator("#token-view .gmts-view").get_attribute("data-group")
    chip = page.locator(f'#why-differ .why-tok[data-group="{shown}"]').first
    chip.evaluate("b => b.closest('details').open = true")
    chip.click()
    page.locator("#gmts-pin").wait_for(state="visible")
    page.keyboard.press("Escape")
    go_to_another_group(page, shown)
    page.context.close()


def go_to_another_group(page: Any, shown: str) -> None:
    """A token button of a group not on screen goes there: the drill-down picks that group, the
    token view shows it, and the token is highlighted (linked) and pinned."""
    chip = page.locator(f'#why-differ .why-tok:not([data-group="{shown}"])').first
    chip.evaluate("b => b.closest('details').open = true")
    g, answer, pos = (chip.get_attribute(f"data-{k}") for k in ("group", "answer", "pos"))
    chip.click()
    view = f'#token-view .gmts-view[data-group="{g}"]'
    token = f'{view} .tok[data-answer="{answer}"][data-pos="{pos}"]'
    page.wait_for_function(
        f"() => !!document.querySelector('{token}')?.classList.contains('linked')"
    )
    expect(page.locator(token)).to_be_visible()
    page.locator("#gmts-pin").wait_for(state="visible")
    expect(page.locator(".tok.pinned")).to_have_count(1)
    expect(page.locator("#group-select input")).to_have_value(
        re.compile("^" + re.escape(f"group {g}:"))
    )
    # no "choose it" message
    expect(page.locator("#why-differ .why-note")).to_have_text(exactly(""), use_inner_text=True)


@pytest.mark.parametrize(("width", "height"), SIZES)
def test_pinned_panel_overlaps_neither_tooltip_nor_summary(
    chromium: Any, ui_server: LiveServer, width: int, height: int
) -> None:
    page = open_page(chromium, ui_server.url, width, height)
    settings = page.locator("#explore-settings-col")
    settings_width = settings.bounding_box()["width"]
    toks = page.locator("#token-view .tok[data-detail]")
    for i in (0, toks.count() // 2, toks.count() - 1):
        tok = toks.nth(i)
        tok.scroll_into_view_if_needed()
        tok.click()
        panel = page.locator("#gmts-pin")
        panel.wait_for(state="visible")
        tok.hover()  # hovering the pinned token must not bring the tooltip back over it
        tip = page.locator("#gmts-tip")
        tip_box = tip.bounding_box() if tip.is_visible() else None
        assert not boxes_overlap(panel.bounding_box(), tip_box)
        summary = page.locator("#summary-table .summary-box")
        if width >= 900:  # beside the results: it covers no summary
            assert not boxes_overlap(panel.bounding_box(), summary.bounding_box())
            # and the form's settings column above keeps its width (no reflow to a word a line)
            assert settings.bounding_box()["width"] == settings_width
        else:  # a bottom sheet: the pinned token stays above it (the summary may not)
            assert not boxes_overlap(panel.bounding_box(), tok.bounding_box())
        text = panel.inner_text()
        sampled = [line for line in text.splitlines() if line.endswith("sampled")]
        assert len(sampled) == 1, text  # the sampled token listed once
        box = panel.bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= width
        page.keyboard.press("Escape")
        expect(panel).to_be_hidden()
    page.context.close()


@pytest.mark.parametrize(("width", "height"), SIZES)
def test_text_contrast_everywhere(
    chromium: Any, ui_server: LiveServer, width: int, height: int
) -> None:
    page = open_page(chromium, ui_server.url, width, height)
    problems = {}
    # the tabs on the tab bar at this width (a phone's bar shows the first three; the others
    # sit in its overflow menu)
    names = page.locator("button[role=tab]:visible").all_inner_texts()
    for tab in names:
        button = page.get_by_role("tab", name=tab).first
        button.click()
        # the tab's panel is shown and its transitions have ended (a colour mid-fade is not
        # the colour read): events, not a clock, so a loaded machine waits as long as it needs
        page.wait_for_function(
            "(b) => b.getAttribute('aria-selected') === 'true'", arg=button.element_handle()
        )
        page.wait_for_function(SETTLED_JS)
        result = page.evaluate(CONTRAST_JS)
        assert result["checked"] > 10
        if result["count"]:
            problems[tab] = result
    assert not problems, problems
    page.context.close()


def test_token_area_is_one_tab_stop_with_arrow_keys(chromium: Any, ui_server: LiveServer) -> None:
    page = open_page(chromium, ui_server.url, 1366, 900)
    page.locator("#notes").click()
    for _ in range(80):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.classList.contains('tok')"):
            break
    pos = "[document.activeElement.dataset.answer, document.activeElement.dataset.pos]"
    assert page.evaluate(pos) == ["0", "0"]  # the first token is the area's one stop
    page.locator("#gmts-tip").wait_for(state="visible")  # keyboard focus shows the tooltip
    page.keyboard.press("ArrowRight")
    assert page.evaluate(pos) == ["0", "1"]
    page.keyboard.press("ArrowLeft")
    page.keyboard.press("ArrowDown")  # the next answer
    assert page.evaluate(pos) == ["1", "0"]
    page.keyboard.press("Enter")
    page.locator("#gmts-pin").wait_for(state="visible")
    page.keyboard.press("Escape")
    expect(page.locator("#gmts-pin")).to_be_hidden()
    # one Tab leaves the token area
    page.keyboard.press("Tab")
    assert not page.evaluate("document.activeElement.classList.contains('tok')")
    expect(page.locator('#token-view .tok[tabindex="0"]')).to_have_count(1)
    page.context.close()


@pytest.mark.parametrize(("width", "height"), SIZES)
def test_method_pickers_show_names_and_list_descriptions(
    chromium: Any, ui_server: LiveServer, width: int, height: int
) -> None:
    page = open_page(chromium, ui_server.url, width, height)
    box = page.locator("#method-b input")
    page.wait_for_function("() => document.querySelector('#method-b input')?.value === 'gmts'")
    expect(page.locator("#method-a input")).to_have_value("entropy")
    # the whole label on hover
    expect(box).to_have_attribute("title", re.compile("^" + re.escape("gmts: GMTS")))
    box.click()  # the open list keeps the descriptions
    option = page.get_by_role("option", name="gmts_paper: GMTS paper, Framework1 code", exact=False)
    option.first.click()
    page.wait_for_function(
        "() => document.querySelector('#method-b input')?.value === 'gmts_paper'"
    )
    page.context.close()
