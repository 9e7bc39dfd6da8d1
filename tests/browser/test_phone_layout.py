"""Every tab at a phone's size (390x844, touch) in a real Chromium, checked by geometry: the
page and nothing in it scrolls sideways (a table wider than its column is a card list instead),
no text reaches past the screen's edges, and no two texts of a chart overlap. The first screen
holds Analyze, both spotlight cards and the start of "Why they differ", and the intro says
"Tap", not "Hover"."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError
from playwright.sync_api import expect

from app.ui.blocks import TABS as UI_TABS
from tests.app.api_helpers import LiveServer
from tests.patience import PATIENCE_MS

pytestmark = pytest.mark.browser


PHONE = {"width": 390, "height": 844}
TABS = tuple(t.title for t in UI_TABS)  # every tab of the UI, a new one included

# what does not fit in `root` at this width: a list of [problem, where, numbers...]
MISFITS_JS = """(root) => {
  const vw = window.innerWidth, out = [];
  const name = e => e.tagName.toLowerCase() + (e.id ? '#' + e.id : '')
    + (typeof e.className === 'string' && e.className ? '.' + e.className.split(' ')[0] : '');
  const where = e => { const p = []; for (let x = e; x && p.length < 4; x = x.parentElement)
    p.push(name(x)); return p.reverse().join(' > '); };
  const shown = e => { const r = e.getBoundingClientRect(), s = getComputedStyle(e);
    return r.width > 0 && r.height > 0 && s.visibility !== 'hidden' && s.display !== 'none'; };
  const doc = document.documentElement;
  if (doc.scrollWidth > vw + 1) out.push(['page scrolls sideways', '', doc.scrollWidth]);
  for (const e of root.querySelectorAll('*')) {
    if (!shown(e) || e.closest('.js-plotly-plot, textarea, pre, code')) continue;
    const o = getComputedStyle(e).overflowX;
    if ((o === 'auto' || o === 'scroll') && e.scrollWidth > e.clientWidth + 1)
      out.push(['scrolls sideways', where(e), e.scrollWidth, e.clientWidth]);
    const text = [...e.childNodes].some(n => n.nodeType === 3 && n.textContent.trim());
    const r = e.getBoundingClientRect();
    if (text && (r.left < -0.5 || r.right > vw + 0.5))
      out.push(['text past the edge', where(e), Math.round(r.left), Math.round(r.right)]);
  }
  for (const plot of root.querySelectorAll('.js-plotly-plot')) {
    const box = plot.getBoundingClientRect();
    const texts = [...plot.querySelectorAll('svg text')].filter(t => {
      const r = t.getBoundingClientRect();
      return t.textContent.trim() && r.width > 0 && getComputedStyle(t).display !== 'none'
        && getComputedStyle(t).visibility !== 'hidden' && +getComputedStyle(t).opacity !== 0;
    }).map(t => [t, t.getBoundingClientRect()]);
    for (const [t, r] of texts)
      if (r.left < box.left - 0.5 || r.right > box.right + 0.5)
        out.push(['chart text cut', where(plot) + ' ' + t.textContent, Math.round(r.left),
                  Math.round(r.right)]);
    for (let i = 0; i < texts.length; i++) for (let j = i + 1; j < texts.length; j++) {
      const [a, ra] = texts[i], [b, rb] = texts[j];
      if (a.contains(b) || b.contains(a)) continue;
      const w = Math.min(ra.right, rb.right) - Math.max(ra.left, rb.left);
      const h = Math.min(ra.bottom, rb.bottom) - Math.max(ra.top, rb.top);
      if (w > 1 && h > 1)
        out.push(['chart texts overlap', where(plot), a.textContent, b.textContent]);
    }
  }
  return out;
}"""


def phone_page(chromium: Any, url: str, touch: bool = True) -> Any:
    context = chromium.new_context(viewport=PHONE, is_mobile=touch, has_touch=touch)
    page = context.new_page()
    page.set_default_timeout(PATIENCE_MS)
    page.goto(url + "/ui/", wait_until="load")
    page.wait_for_selector("#token-view .tok.sel-b")  # Gradio has taken over from the first view
    page.wait_for_selector("#gmts-first-view", state="detached")
    return page


def open_tab(page: Any, tab: str) -> Any:
    button = page.get_by_role("tab", name=tab)
    if button.first.is_visible():
        button.first.click()
    else:  # a phone's tab bar may keep it in its overflow menu ("More tabs")
        page.get_by_role("button", name="More tabs").click()
        page.locator(".overflow-dropdown button", has_text=tab).click()
    panel = page.locator("[role=tabpanel]:visible").first
    panel.wait_for()
    return panel


def misfits(panel: Any) -> list[Any]:
    return list(panel.evaluate(MISFITS_JS))


def settled_misfits(page: Any, panel: Any) -> list[Any]:
    """What does not fit once Plotly's and Gradio's layout passes have settled: waits (an
    event, polled) until nothing misfits, and after PATIENCE_MS reports what still does, so a
    slow layout on a loaded machine is waited for and a real misfit still fails."""
    try:
        page.wait_for_function(
            f"(root) => ({MISFITS_JS})(root).length === 0",
            arg=panel.element_handle(),
            polling=250,
            timeout=PATIENCE_MS,
        )
    except PlaywrightTimeoutError:
        pass
    return misfits(panel)


def test_every_tab_fits_a_phone(chromium: Any, ui_server: LiveServer, artifacts: Path) -> None:
    """One page, every tab in turn (a page load per tab would cost the suite minutes)."""
    page = phone_page(chromium, ui_server.url)
    found = {}
    for tab in TABS:
        panel = open_tab(page, tab)
        if tab == "Explore":  # its charts are drawn a moment after the tokens
            page.wait_for_selector("#scatter-plot .js-plotly-plot .main-svg")
        if tab == "Proxy check":  # the chart and table of a check of Explore's group
            page.click("#proxy-run-btn")
            page.wait_for_selector("#proxy-scatter .js-plotly-plot .scatterlayer .point")
            page.wait_for_selector("#proxy-table tbody tr")
        found[tab] = settled_misfits(page, panel)
        page.screenshot(path=str(artifacts / f"phone-{tab.replace(' ', '-').lower()}.png"))
    assert all(v == [] for v in found.values()), "\n".join(f"{t}: {v}" for t, v in found.items())
    page.context.close()


def test_first_screen_on_a_phone(chromium: Any, ui_server: LiveServer) -> None:
    page = phone_page(chromium, ui_server.url)
    bottoms = page.evaluate(
        "sels => sels.map(s => document.querySelector(s).getBoundingClientRect().bottom)",
        ["#analyze-btn", ".spot-wasted", ".spot-signal", "#why-differ-view h4"],
    )
    assert bottoms[1] > 0 and max(bottoms) <= PHONE["height"], bottoms  # all of them, unscrolled
    # the rendered text (use_inner_text): both words are in the page, CSS shows one of them
    intro = page.locator("#intro")
    expect(intro).to_contain_text("Tap a token", use_inner_text=True)
    expect(intro).not_to_contain_text("Hover a token", use_inner_text=True)
    page.context.close()
    desktop = phone_page(chromium, ui_server.url, touch=False)  # a mouse: "Hover"
    expect(desktop.locator("#intro")).to_contain_text("Hover a token", use_inner_text=True)
    desktop.context.close()
