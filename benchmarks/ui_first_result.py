"""Time to the first result in the UI, in a real Chromium against a real server.

Starts the app (API + Gradio UI at /ui, the bundled demo model) on a uvicorn server on
127.0.0.1 in this process (``app.live_server.LiveServer``) and drives Debian's Chromium
(``/usr/bin/chromium``, offline flags) through Playwright. Each repeat uses a fresh browser
context (no cache, no cookies):

* **first highlighted token**: from navigation start to the first token selected by method B
  being in the page and painted (the task after the next animation frame once it appeared),
  with no click. The page opens on the shipped example group
  (``static/default-example-result.json``, the default example's batch), which the server
  renders into the first HTML (``#gmts-first-view``, :mod:`app.ui.first_view`) before Gradio
  boots.
* **interactive token** (since 2026-12-07; before, it was Gradio's token view, now **controls
  ready**): from navigation start to a hovered highlighted token's details painted: the tooltip
  (``#gmts-tip``, drawn by ``gmts.js``) visible with the ``data-tip`` of the very token under
  the pointer (its statistics, both methods' ranks, why it was or was not picked: the text
  Gradio's token view shows, rendered by the same code). Once the first token is painted the
  pointer is moved onto a highlighted token (while the first view is up, where its first
  highlighted token was painted; once it has gone, onto the first one in Gradio's view) and off
  again, repeatedly, until its details are painted; each move is a real mouse event through
  Chromium's input pipeline, which the page answers only when its main thread is free.
  Reported with it: whether the details came from the first view, and the **longest
  main-thread task** from the first token painted to controls ready (Chromium's long-task
  timing): the most a hover, key or tap waits for its answer while Gradio boots.
* **controls ready**: to Gradio's own token view (``#token-view .tok.sel-b``) in the page: its
  form, tabs and buttons work from then on.
* **charts**: from navigation start to the example's scatter drawn with its points, timed as
  the first token is: the server-drawn SVG of it (``.gmts-sketch circle`` displayed: in the
  first view, then in Explore until Plotly draws; :mod:`app.ui.sketch`) or Plotly's, whichever
  is first; **Plotly's scatter**: to Plotly's own (``#scatter-plot .js-plotly-plot .point``;
  polled after the tokens, so an upper bound), the interactive chart; **all charts**: to the
  last of the example's five Plotly charts drawn (scatter, distributions, positions,
  advantages, budget). Also reported: the first contentful paint, the size of the page and of
  the Gradio config it carries, and of the token view's HTML.
* **warm Analyze** of the default group (the form as the page opens, G = 8, seed 0), after one
  warm-up Analyze: the server time is Gradio's own per-event process time (the queue's
  ``process_time_per_fn``: pre-processing, the handler, post-processing; read in-process after
  each run), and the browser time is from the click (a capturing listener in the page notes
  it) to the first animation frame that shows the new result's tokens.

Targets: first highlighted token <= 0.3 s, interactive token <= 0.8 s and the charts
<= 1.5 s on an idle 2-core machine (issue 48; the first token was 1.5 s in issue 30, 3 s in issue
19); warm Analyze <= 1 s of server time (issue 18); click to tokens <= 2x the server time (the
median of the per-run ratios; issue 35). The page is warm when Analyze is clicked: its example's
charts are drawn. A new result's tokens come in the Analyze event and its charts in the event
after it, so the browser paints the tokens before it draws a chart.

    .venv/bin/python benchmarks/ui_first_result.py [--repeats 5] [--width 1366 --height 768]
        [--threads 2] [--json] [--old-page | --old-charts | --with-old-charts]

``--old-charts`` serves the page as before the charts' changes of issue 48 (Gradio rendering the
page and compressing every asset on every request, the scatter in the page-load event with the
other charts and the Learn card, computed per page, Plotly loaded only when a chart's value
came, no server-drawn scatter), to compare: its "charts" are Plotly's scatter.
``--with-old-charts`` serves both, from two servers in this process, fresh pages alternating,
and reports the ratios of their medians: one window for both, which sequential runs on a
shared machine are not.

Times depend on the machine's load: run under ``flock /tmp/bench.lock`` on a shared machine
and quote the load average (printed) with the figures.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
import urllib.request
from typing import Any

from _common import ServerClock, emit, machine, median

from app.core.config import Settings
from app.live_server import CHROMIUM_ARGS, CHROMIUM_PATH, LiveServer
from app.main import create_app
from app.ui import first_view

TARGET_CLICK_RATIO = 2.0

# in every page, before any of its scripts: note when the first token selected by method B is
# about to be painted (server-rendered first view or Gradio's view), and when Gradio's shows it
WATCH_JS = """
new MutationObserver((_, obs) => {
  if (window.__gmtsSeen === undefined
      && document.querySelector('#gmts-first-view .tok.sel-b, #token-view .tok.sel-b')) {
    window.__gmtsSeen = true;
    // the task after the next frame: that frame, which held the token, has been painted
    requestAnimationFrame(() => setTimeout(() => {
      // where that token is on the screen (for the first hover: a user aims at what is painted)
      const tok = document.querySelector('#gmts-first-view .tok.sel-b, #token-view .tok.sel-b');
      if (!tok) { window.__gmtsSeen = undefined; return; }  // replaced meanwhile: the next one
      window.__gmtsFirstTokenMs = performance.now();
      const r = tok.getBoundingClientRect();
      window.__gmtsFirstTokenAt = [r.left + r.width / 2, r.top + r.height / 2];
    }, 0));
  }
  if (window.__gmtsLiveTokenMs === undefined && document.querySelector('#token-view .tok.sel-b')) {
    window.__gmtsLiveTokenMs = performance.now();
  }
  // the example's scatter drawn with its points: the server-drawn SVG (first view, or Explore
  // until Plotly draws; displayed), or Plotly's; timed like the first token
  if (window.__gmtsChartSeen === undefined && (
      Array.from(document.querySelectorAll('.gmts-sketch circle')).some(
        c => c.getClientRects().length > 0)
      || document.querySelector('#scatter-plot .js-plotly-plot .point'))) {
    window.__gmtsChartSeen = true;
    requestAnimationFrame(() => setTimeout(() => {
      window.__gmtsChartMs = performance.now();
    }, 0));
  }
  // a token's details shown: the tooltip (gmts.js, in the first view or Gradio's page) visible
  // with the data-tip of the highlighted token the pointer (or focus) is on; timed like the first
  // token. gmts.js sets its text, then shows it, in one task: this callback sees both
  const tip = document.getElementById('gmts-tip');
  if (window.__gmtsDetailsSeen === undefined && tip && tip.classList.contains('visible')
      && window.__gmtsOver && window.__gmtsOver.matches('.tok.sel-b')
      && tip.textContent === window.__gmtsOver.getAttribute('data-tip')) {
    window.__gmtsDetailsSeen = window.__gmtsOver.closest('#gmts-first-view') ? 'first view'
      : 'gradio';
    requestAnimationFrame(() => setTimeout(() => {
      window.__gmtsDetailsMs = performance.now();
    }, 0));
  }
  if (window.__gmtsLiveTokenMs !== undefined && window.__gmtsChartSeen !== undefined
      && window.__gmtsDetailsSeen !== undefined) {
    obs.disconnect();
  }
}).observe(document, {childList: true, subtree: true});
// the main thread's long tasks (> 50 ms): an input event (a hover) waits for the one it comes in
window.__gmtsLongTasks = [];
new PerformanceObserver(list => {
  for (const e of list.getEntries()) window.__gmtsLongTasks.push([e.startTime, e.duration]);
}).observe({type: 'longtask', buffered: true});
// the token the pointer last entered (or the focus), before the page's own listeners see it
for (const type of ['mouseover', 'focusin']) {
  document.addEventListener(type, e => {
    window.__gmtsOver = e.target.closest ? e.target.closest('.tok') : null;
  }, true);
}
"""
# the example's five Plotly charts, each drawn
ALL_CHARTS_JS = (
    "['scatter', 'distributions', 'positions', 'advantages', 'budget'].every(k =>"
    " document.querySelector('#' + k + '-plot .js-plotly-plot .main-svg'))"
)
# what the interactive token's hover aims at: a highlighted token of the first view, or of
# Gradio's view once the first view has gone
HOVERED = "#gmts-first-view:not(.gmts-fv-gone) .tok.sel-b, #token-view .tok.sel-b"
TARGET_FIRST_TOKEN_S = 0.3
TARGET_INTERACTIVE_S = 0.8
TARGET_CHARTS_S = 1.5
TIMEOUT_MS = 900_000  # a loaded machine: a bound for a hang, not a measure


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=int, default=5, help="fresh pages per measurement")
    p.add_argument("--width", type=int, default=1366)
    p.add_argument("--height", type=int, default=768)
    p.add_argument("--threads", type=int, default=2, help="torch threads of the server")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--old-page",
        action="store_true",
        help="the page as before issue 48 (Gradio's config and stylesheet in <head>, before "
        "the first view), to compare",
    )
    p.add_argument(
        "--old-charts",
        action="store_true",
        help="the charts and assets as before their changes of issue 48, to compare",
    )
    p.add_argument(
        "--with-old-charts",
        action="store_true",
        help="also a second server in this process serving the page as --old-charts does, "
        "fresh pages alternating between the two (one window for both): both pages' figures "
        "and the ratios of their medians (new / old)",
    )
    args = p.parse_args()
    if args.with_old_charts and (args.old_charts or args.old_page):
        p.error("--with-old-charts compares the new page with the old: not with --old-*")
    return args


def old_charts() -> None:
    """Undo the charts' changes of issue 48 in the app :func:`main` builds (see the docstring)."""
    from app.ui import mount
    from app.ui.tabs.explore import tab

    mount.plotly_chunk = lambda: None  # no import of Plotly's chunk at the hand-over
    tab.example_sketch = lambda figure: ""  # no server-drawn scatter (first view, Explore)
    mount.cache_assets = lambda app, path: False  # Gradio renders the page, compresses every
    # asset, every time
    tab.DEFERRED_CHARTS = (3, 4, 5, 6, 9)  # the scatter too in the page-load event ...
    tab.DEFERRED = tab.DEFERRED_CHARTS + tab.DEFERRED_LEARN
    tab.ExampleViews.handler = lambda self, positions: tab.deferred_views(positions)  # ... per page


def open_page(browser: Any, url: str, args: argparse.Namespace) -> Any:
    context = browser.new_context(viewport={"width": args.width, "height": args.height})
    context.add_init_script(WATCH_JS)
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    page.goto(url + "/ui/", wait_until="commit")
    return page


def hover_until_details(page: Any, at: list[float] | None) -> None:
    """Hover a highlighted token as a user would, again and again, until its details are shown:
    while the first view is up, the pointer moves to ``at``, where its first highlighted token was
    painted (a user aims at what is on the screen); once it has gone, to the centre of the first
    highlighted token on the page (Playwright's ``hover``, without its wait for two still
    animation frames, which a busy page gives late). When no tooltip came, the pointer moves
    off the token (so the next try enters it anew) and tries again. A pointer that lands on
    anything else shows no details of a highlighted token, so a try counts only when it is on
    one."""
    from playwright.sync_api import Error as PlaywrightError

    state = "({seen: window.__gmtsDetailsSeen !== undefined, view: !!document.querySelector("
    state += "'#gmts-first-view:not(.gmts-fv-gone)')})"
    view = True
    deadline = time.monotonic() + TIMEOUT_MS / 1e3
    while True:
        if time.monotonic() > deadline:
            raise RuntimeError("no hover on a highlighted token showed its details")
        try:
            if at and view:
                page.mouse.move(*at)
            else:
                page.hover(HOVERED, timeout=TIMEOUT_MS, force=True)
        except PlaywrightError:  # the first view went while the pointer was on its way
            continue
        now = page.evaluate(state)
        if now["seen"]:
            break
        view = now["view"]
        page.mouse.move(0, 0)
    page.mouse.move(0, 0)  # off the token: the rest of the page loads with no tooltip up


def first_result(browser: Any, url: str, args: argparse.Namespace) -> dict[str, Any]:
    """One fresh page: navigation start to the first highlighted token, to its details on a
    hover, to Gradio's token view, and to the charts."""
    page = open_page(browser, url, args)
    # from the first token painted on (nothing to hover before it), where it was painted
    at = page.wait_for_function("window.__gmtsFirstTokenAt").json_value()
    hover_until_details(page, at)
    page.wait_for_function(
        "window.__gmtsDetailsMs !== undefined && window.__gmtsLiveTokenMs !== undefined"
        " && window.__gmtsChartMs !== undefined"
    )
    page.wait_for_selector("#scatter-plot .js-plotly-plot .point")
    plotly_ms = page.evaluate("performance.now()")
    page.wait_for_function(ALL_CHARTS_JS, polling="raf")
    all_charts_ms = page.evaluate("performance.now()")
    timing = page.evaluate(
        "(() => { const n = performance.getEntriesByType('navigation')[0];"
        " const p = performance.getEntriesByName('first-contentful-paint')[0];"
        " return {dom: n.domContentLoadedEventEnd, load: n.loadEventEnd,"
        " fcp: p ? p.startTime : null}; })()"
    )
    out = {
        "first_token_s": page.evaluate("window.__gmtsFirstTokenMs") / 1e3,
        "interactive_token_s": page.evaluate("window.__gmtsDetailsMs") / 1e3,
        "controls_ready_s": page.evaluate("window.__gmtsLiveTokenMs") / 1e3,
        "first_contentful_paint_s": (timing["fcp"] or 0.0) / 1e3,
        "charts_by_s": page.evaluate("window.__gmtsChartMs") / 1e3,  # sketch or Plotly's
        "plotly_scatter_s": plotly_ms / 1e3,  # an upper bound: polled after the tokens
        "all_charts_by_s": all_charts_ms / 1e3,  # likewise, polled after Plotly's scatter
        "dom_content_loaded_s": timing["dom"] / 1e3,
        "load_event_s": timing["load"] / 1e3,
    }
    # the longest main-thread task from the first token painted to Gradio's token view: the
    # most a hover (or a key, a tap) waits for its details while Gradio boots
    first_ms, live_ms = out["first_token_s"] * 1e3, out["controls_ready_s"] * 1e3
    tasks = page.evaluate("window.__gmtsLongTasks")
    out["longest_task_after_first_token_s"] = (
        max([d for t, d in tasks if t + d > first_ms and t < live_ms], default=0.0) / 1e3
    )
    out["details_from_first_view"] = page.evaluate("window.__gmtsDetailsSeen") == "first view"
    page.context.close()
    return out


def warm_analyze(browser: Any, url: str, args: argparse.Namespace, clock: ServerClock) -> Any:
    """One fresh page: click Analyze on the default form; browser and server seconds."""
    page = open_page(browser, url, args)
    page.wait_for_selector("#token-view .tok.sel-b")
    page.wait_for_selector("#scatter-plot .js-plotly-plot .point")  # the page has drawn it all
    before = clock.read()
    # the click's time in the page (a capturing listener), not before Playwright's own checks
    page.evaluate(
        "() => document.addEventListener('click', e => {"
        " if (e.target.closest('#analyze-btn')) window.__gmtsClickMs = performance.now(); },"
        " true)"
    )
    page.click("#analyze-btn")
    # the new result replaces the example: its note goes and highlighted tokens are shown
    shown = page.wait_for_function(
        "() => !(document.getElementById('notes')?.innerText ?? 'Example').includes('Example')"
        " && document.querySelector('#token-view .tok.sel-b') !== null"
        " && performance.now() - window.__gmtsClickMs",
        polling="raf",
    )
    browser_s = float(shown.json_value()) / 1e3
    server_s = clock.wait_next(before)
    page.context.close()
    return {"server_s": server_s, "click_to_highlight_s": browser_s, "ratio": browser_s / server_s}


def payload_sizes(url: str) -> dict[str, int]:
    """Bytes of the page (which carries the Gradio config), of the config on its own, and of
    the token view's HTML in it (UTF-8)."""
    import json

    page = urllib.request.urlopen(url + "/ui/").read()
    raw = urllib.request.urlopen(url + "/ui/config").read()
    props = [c.get("props", {}) for c in json.loads(raw)["components"]]
    token_view = next((p.get("value") or "" for p in props if p.get("elem_id") == "token-view"), "")
    return {
        "page_bytes": len(page),
        "config_bytes": len(raw),
        "token_view_bytes": len(token_view.encode()),
    }


TIMES = (
    "first_token_s", "interactive_token_s", "controls_ready_s", "longest_task_after_first_token_s",
    "first_contentful_paint_s",
    "charts_by_s", "plotly_scatter_s", "all_charts_by_s", "dom_content_loaded_s", "load_event_s",
)  # fmt: skip


def stats(values: list[float]) -> dict[str, float]:
    return {"median": round(median(values), 3), "min": round(min(values), 3),
            "max": round(max(values), 3)}  # fmt: skip


def main() -> int:
    args = parse_args()
    from playwright.sync_api import sync_playwright

    if args.old_page:  # the middleware looks the function up when it serves the page
        first_view.rewrite_page = lambda page, fragment: first_view.inject_after_body(
            page, fragment
        )

    if args.old_charts:
        old_charts()
    app = create_app(Settings(ui_enabled=True, torch_threads=args.threads))
    clock = ServerClock(app)
    old_app = None
    if args.with_old_charts:  # built after the new one: its handlers are made as it is built
        old_charts()
        old_app = create_app(Settings(ui_enabled=True, torch_threads=args.threads))
    olds: list[dict[str, Any]] = []
    with (
        LiveServer(app) as server,
        LiveServer(old_app) if old_app is not None else contextlib.nullcontext() as old_server,
        sync_playwright() as p,
    ):
        browser = p.chromium.launch(executable_path=CHROMIUM_PATH, args=list(CHROMIUM_ARGS))
        sizes = payload_sizes(server.url)
        first_result(browser, server.url, args)  # warm the server's page path and Chromium
        if old_server is not None:
            first_result(browser, old_server.url, args)
        firsts = []
        for _ in range(args.repeats):  # alternating: the same window for both pages
            firsts.append(first_result(browser, server.url, args))
            if old_server is not None:
                olds.append(first_result(browser, old_server.url, args))
        warm_analyze(browser, server.url, args, clock)  # warm-up: loads the model
        analyses = [warm_analyze(browser, server.url, args, clock) for _ in range(args.repeats)]
        browser.close()
    first = {k: stats([f[k] for f in firsts]) for k in TIMES}
    analyze = {k: stats([a[k] for a in analyses]) for k in analyses[0]}
    report = {
        "benchmark": "ui_first_result",
        "viewport": [args.width, args.height],
        "repeats": args.repeats,
        "old_page": args.old_page,
        "old_charts": args.old_charts,
        "first_result": first,
        "warm_analyze": analyze,
        "sizes": sizes,
        "targets": {
            "first_token_s": TARGET_FIRST_TOKEN_S,
            "interactive_token_s": TARGET_INTERACTIVE_S,
            "charts_by_s": TARGET_CHARTS_S,
            "analyze_server_s": 1.0,
            "click_to_tokens_over_server": TARGET_CLICK_RATIO,
        },
        "met": {
            "first_token": first["first_token_s"]["median"] <= TARGET_FIRST_TOKEN_S,
            "interactive_token": first["interactive_token_s"]["median"] <= TARGET_INTERACTIVE_S,
            "charts": first["charts_by_s"]["median"] <= TARGET_CHARTS_S,
            "analyze_server": analyze["server_s"]["median"] <= 1.0,
            "click_ratio": analyze["ratio"]["median"] <= TARGET_CLICK_RATIO,
        },
        "details_from_first_view": sum(bool(f["details_from_first_view"]) for f in firsts),
        "runs": {"first_result": firsts, "warm_analyze": analyses, "old_charts": olds},
        "machine": machine(),
    }

    def fmt(s: dict[str, float]) -> str:
        return f"{s['median']:.2f} s [{s['min']:.2f}-{s['max']:.2f}]"

    lines = [
        f"UI first result, {args.width}x{args.height}, {args.repeats} fresh pages each "
        f"(median [range]); load average {report['machine']['load_average_1m']}",
        "  page {:.0f} kB, Gradio config {:.0f} kB, token view {:.0f} kB".format(
            *(sizes[k] / 1e3 for k in ("page_bytes", "config_bytes", "token_view_bytes"))
        ),
        f"  navigation -> first highlighted token: {fmt(first['first_token_s'])} "
        f"(target <= {TARGET_FIRST_TOKEN_S} s); first contentful paint "
        f"{fmt(first['first_contentful_paint_s'])}",
        f"  navigation -> a hovered highlighted token shows its details (interactive token): "
        f"{fmt(first['interactive_token_s'])} (target <= {TARGET_INTERACTIVE_S} s; from the "
        f"first view in {report['details_from_first_view']} of {args.repeats} pages)",
        f"  navigation -> Gradio's token view (controls ready): {fmt(first['controls_ready_s'])}",
        f"  navigation -> DOMContentLoaded: {fmt(first['dom_content_loaded_s'])}; "
        f"charts (a drawn scatter) by {fmt(first['charts_by_s'])} "
        f"(target <= {TARGET_CHARTS_S} s); Plotly's scatter by "
        f"{fmt(first['plotly_scatter_s'])}; all five Plotly charts by "
        f"{fmt(first['all_charts_by_s'])}",
        f"  warm Analyze, server time: {fmt(analyze['server_s'])} (target <= 1 s)",
        f"  warm Analyze, click -> highlighted result: {fmt(analyze['click_to_highlight_s'])}",
        f"  warm Analyze, click -> tokens / server time: {analyze['ratio']['median']:.2f} "
        f"[{analyze['ratio']['min']:.2f}-{analyze['ratio']['max']:.2f}] "
        f"(target <= {TARGET_CLICK_RATIO})",
    ]
    if olds:
        old = {k: stats([f[k] for f in olds]) for k in TIMES}
        ratio = {
            k: round(first[k]["median"] / old[k]["median"], 3) for k in old if old[k]["median"]
        }
        report["with_old_charts"] = {"first_result": old, "ratio_new_to_old": ratio}
        lines.append(
            "  the old page (--old-charts), interleaved: first token "
            f"{fmt(old['first_token_s'])}, interactive {fmt(old['interactive_token_s'])}, "
            f"controls ready {fmt(old['controls_ready_s'])}, charts {fmt(old['charts_by_s'])}"
        )
        lines.append(
            "  new / old (medians): "
            + ", ".join(f"{k} {ratio[k]:.2f}" for k in ("first_token_s", "interactive_token_s",
                                                        "controls_ready_s", "charts_by_s",
                                                        "plotly_scatter_s"))
        )  # fmt: skip
    emit(report, args.json, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
