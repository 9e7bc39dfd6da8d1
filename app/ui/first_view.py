"""The first view: the default example in the first HTML the UI sends, before Gradio boots.

Gradio's page is an empty ``<gradio-app>`` element until its scripts have loaded, fetched
nothing more and drawn the layout (seconds on a slow machine), although the example the page
opens on was analysed before the user arrived. :class:`FirstViewMiddleware` puts that example,
rendered by the Explore tab's own first render (:func:`app.ui.tabs.explore.tab.initial_values`:
the same token spans, marks, shades and ``data-tip`` tooltips, drawn by ``gmts.js``, inlined
with it: Gradio adds its copy only when it boots, and the script installs itself once), into the
page's HTML right after ``<body>``: a highlighted token is on screen as soon as the HTML is
parsed. Under the tokens, the example's scatter as a server-drawn SVG (:mod:`app.ui.sketch`),
which Explore also shows until Plotly has drawn the chart.

The first view is interactive as soon as it is painted: ``gmts.js`` (event delegation on the
document) shows a token's tooltip on hover and keyboard focus, and its pinned panel on a click,
tap, Enter or Space, from the token's own ``data-tip`` and ``data-detail``: the same attributes,
rendered by the same code, as in Gradio's token view, so the details are defined once. The view
covers the page (fixed, the page's own background) until Gradio's Explore tab shows its token
view; then a token focused or pinned in it is focused or pinned in Gradio's view, and the view
fades out over it, so the interactive UI takes over without a blank frame, and it is removed.
Its token view is ``#gmts-first-view``, never ``#token-view``, so nothing that reads the live
view sees two.

Gradio writes its config (the components' first values: ~450 kB) and its API description
(~270 kB) into the page's ``<head>`` as two classic scripts, which the browser parses and runs
before it reaches ``<body>``: the first view waited for ~700 kB it does not need. The middleware
moves them, and Gradio's stylesheet (in ``<head>`` it holds back the first paint until it has
arrived), to just after the first view; Gradio's own module script (deferred: it runs after the
whole page is parsed) still finds them. Loading them instead as one deferred script of their
own (the page ~140 kB) was tried: less work on the renderer's main thread before the first
token, but the first token later on the 2-core machine (that script's fetch and off-thread
compile beside the first paint), so they stay inline, after the view.
"""

from __future__ import annotations

import re
from html import escape
from pathlib import Path
from typing import Any

from app.ui.assets import STATIC_DIR
from app.ui.render import Json

FIRST_VIEW_ID = "gmts-first-view"

_STYLE = """
#gmts-first-view { position: fixed; inset: 0; z-index: 1000; overflow: auto;
  background: var(--bg, #fff); color: var(--col, #27272a); padding: 16px 20px;
  font-family: Arial, Helvetica, sans-serif; transition: opacity 0.2s ease-out; }
#gmts-first-view.gmts-fv-gone { opacity: 0; pointer-events: none; }
#gmts-first-view .fv-intro { font-size: 15px; line-height: 1.5; margin: 0 0 10px; }
#gmts-first-view .fv-note { font-size: 14px; color: #444; margin: 0 0 8px; }
#gmts-first-view .fv-loading { font-size: 13px; color: #666; margin: 8px 0 0; }
#gmts-first-view .fv-chart { max-width: 760px; margin: 12px 0 0; }
@media (prefers-color-scheme: dark) {
  #gmts-first-view { background: var(--bg-dark, #0f0f11); color: var(--col-dark, #f4f4f5); }
  #gmts-first-view .fv-note, #gmts-first-view .fv-loading { color: #bbb; }
}
"""

# hands over to Gradio: once its Explore token view holds the example's marked tokens (or,
# should another tab open first, 2 s after its tab list is drawn) the view fades out and goes.
# Then Gradio's Plotly chunk is imported (when the page names it: ``data-charts``): Gradio
# imports it only once a chart's value has come in the page-load event, and its download and
# evaluation (4.6 MB of script) then stood between that event and the first drawn chart.
_HANDOFF = """
(function () {
  var view = document.getElementById("gmts-first-view");
  if (!view) return;
  var gone = false, timer = null;
  function warmCharts() {
    var chunk = view.getAttribute("data-charts");
    var entry = document.querySelector("script[type=module][src*='/assets/index-']");
    if (!chunk || !entry) return;
    // the URL Gradio's own import resolves to: one module, fetched and run once
    import(new URL(chunk, entry.src).href).catch(function () {});
  }
  // the same token in Gradio's view: the same render, so the same place in its list
  function successor(tok) {
    var spot = !!tok.closest(".spotlight");
    var mine = view.querySelectorAll(spot ? ".spotlight .tok" : ".tok:not(.spotlight .tok)");
    var live = document.querySelectorAll(
      spot ? "gradio-app .spotlight .tok" : "gradio-app #token-view .tok");
    return live[Array.prototype.indexOf.call(mine, tok)] || null;
  }
  // a token focused or pinned in the first view stays so in Gradio's (gmts.js shows its
  // tooltip on focus); a tooltip from the pointer goes with the view
  function handOver() {
    var focused = view.contains(document.activeElement) ? document.activeElement : null;
    var pinned = view.querySelector(".tok.pinned");
    var tip = document.getElementById("gmts-tip");
    if (tip && !focused) tip.classList.remove("visible");
    var next = pinned && successor(pinned);
    if (next) next.classList.add("pinned");
    next = focused && focused.matches(".tok") && successor(focused);
    if (next) { next.setAttribute("tabindex", "0"); next.focus({preventScroll: true}); }
  }
  function leave() {
    if (gone) return;
    gone = true;
    handOver();
    view.classList.add("gmts-fv-gone");
    setTimeout(warmCharts, 0);  // after the frame that starts the fade
    setTimeout(function () { view.remove(); }, 250);
  }
  var watch = new MutationObserver(function () {
    if (document.querySelector("gradio-app #token-view .tok.sel-b")) {
      watch.disconnect();
      requestAnimationFrame(leave);
    } else if (!timer && document.querySelector("gradio-app [role=tablist]")) {
      timer = setTimeout(leave, 2000);
    }
  });
  watch.observe(document.documentElement, {childList: true, subtree: true});
})();
"""


def first_view_html(
    example: Json | None, intro: str, note: str, charts_chunk: str | None = None
) -> str:
    """The first view's HTML (empty without an example): ``intro`` and ``note`` as plain text
    (escaped), then the example's token view as the Explore tab first renders it.
    ``charts_chunk``: the file name of Gradio's Plotly chunk (:func:`plotly_chunk`), imported
    as the view hands over."""
    if not example:
        return ""
    from app.ui.tabs.explore import tab  # the tab's own first render

    values = tab.initial_values(example)
    spotlight, tokens = values[12], values[1]  # the disagreement first, as in the tab
    chart = tab.example_sketch(values[3])  # the scatter, drawn here (app.ui.sketch)
    # the app's rules, and those for what gmts.js appends to the body (its tooltip and pinned
    # panel: a bottom sheet on narrow screens), as the page's head has them once Gradio boots
    css = "".join(
        (STATIC_DIR / name).read_text(encoding="utf-8") for name in ("gmts.css", "gmts-page.css")
    )
    tips = (STATIC_DIR / "gmts.js").read_text(encoding="utf-8")  # installs itself once
    charts = f' data-charts="{escape(charts_chunk)}"' if charts_chunk else ""
    return (
        f'<div id="{FIRST_VIEW_ID}" aria-busy="true"{charts}>'
        f"<style>{css}{_STYLE}</style>"
        # before the tokens: they answer a hover, focus or tap from their first paint on (the
        # page may paint them before it has parsed what follows them)
        f"<script>{tips}</script>"
        f'<p class="fv-intro">{_intro_html(intro)}</p>'
        f'<p class="fv-note">{escape(_plain(note))}</p>'
        f"{spotlight}{tokens}"
        '<p class="fv-loading">Loading the interactive explorer…</p>'
        f'<div class="fv-chart">{chart}</div>'
        f"</div><script>{_HANDOFF}</script>"
    )


def plotly_chunk() -> str | None:
    """The file name of the chunk of Gradio's frontend that holds Plotly (``PlotlyPlot-<hash>.js``
    in its assets, loaded by its Plot component), or None unless exactly one is there."""
    import gradio

    assets = Path(gradio.__file__).parent / "templates" / "frontend" / "assets"
    found = sorted(p.name for p in assets.glob("PlotlyPlot-*.js"))
    return found[0] if len(found) == 1 else None


# the only markup the intro's text keeps here: the "Hover"/"Tap" pair (app.ui.blocks.POINT_AT)
_KEPT_TAGS = ('<span class="on-hover">', '<span class="on-touch">', "</span>")


def _intro_html(markdown: str) -> str:
    """The intro as plain, escaped text, but for the spans of :data:`_KEPT_TAGS`."""
    html = escape(_plain(markdown))
    for tag in _KEPT_TAGS:
        html = html.replace(escape(tag), tag)
    return html


def _plain(markdown: str) -> str:
    """Markdown's emphasis and code marks dropped (the first view shows the text itself)."""
    return markdown.replace("**", "").replace("`", "")


def inject_after_body(page: bytes, fragment: bytes) -> bytes:
    """``page`` with ``fragment`` right after its ``<body ...>`` tag (unchanged if none)."""
    start = page.find(b"<body")
    end = page.find(b">", start) if start >= 0 else -1
    if end < 0:
        return page
    return page[: end + 1] + fragment + page[end + 1 :]


# Gradio's template writes these two scripts in <head>, one after the other
_HEAD_DATA = (b"<script>window.gradio_config = ", b"<script>window.gradio_api_info = ")
_STYLESHEET = re.compile(rb'<link rel="stylesheet"[^>]*>')


def defer_head_data(page: bytes) -> tuple[bytes, bytes]:
    """``page`` without the config and API-info scripts and the stylesheet links of its
    ``<head>``, and those (empty when the page has none). The scripts' JSON escapes ``</``, so
    each ends at the first ``</script>`` after its start. A stylesheet in ``<head>`` holds back
    the page's first paint until it arrives; in ``<body>`` it holds back only what follows."""
    head_end = page.find(b"</head>")
    taken: list[bytes] = []
    for marker in _HEAD_DATA:
        start = page.find(marker)
        end = page.find(b"</script>", start) if 0 <= start < head_end else -1
        if end < 0:
            continue
        end += len(b"</script>")
        taken.append(page[start:end])
        page = page[:start] + page[end:]
        head_end -= end - start
    links = _STYLESHEET.findall(page, 0, max(head_end, 0))
    head = _STYLESHEET.sub(b"", page[: max(head_end, 0)])
    return head + page[max(head_end, 0) :], b"".join(links + taken)


def rewrite_page(page: bytes, fragment: bytes) -> bytes:
    """The UI page as sent: ``fragment`` right after ``<body>``, then the stylesheets and
    config scripts taken out of the head (:func:`defer_head_data`)."""
    page, data = defer_head_data(page)
    return inject_after_body(page, fragment + data)


class FirstViewMiddleware:
    """Pure ASGI middleware: the UI page (``GET {path}/``, a 200 ``text/html`` response, not
    content-encoded) gets :func:`first_view_html` after its ``<body>`` tag, and Gradio's
    stylesheet and config after it (:func:`rewrite_page`)."""

    def __init__(self, app: Any, path: str, fragment: str) -> None:
        self.app = app
        self.paths = {path.rstrip("/") or "/", path.rstrip("/") + "/"}
        self.fragment = fragment.encode("utf-8")

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if (
            not self.fragment
            or scope["type"] != "http"
            or scope.get("method") != "GET"
            or scope.get("path") not in self.paths
        ):
            await self.app(scope, receive, send)
            return
        start: dict[str, Any] = {}
        chunks: list[bytes] = []

        async def capture(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                start.update(message)
                return
            if message["type"] != "http.response.body":
                await send(message)
                return
            chunks.append(message.get("body", b""))
            if message.get("more_body"):
                return
            body = b"".join(chunks)
            if _is_plain_html(start):
                body = rewrite_page(body, self.fragment)
            headers = [h for h in start.get("headers", []) if h[0].lower() != b"content-length"]
            headers.append((b"content-length", str(len(body)).encode()))
            await send({**start, "headers": headers})
            await send({"type": "http.response.body", "body": body})

        await self.app(scope, receive, capture)


def _is_plain_html(start: dict[str, Any]) -> bool:
    headers = {k.lower(): v for k, v in start.get("headers", [])}
    return (
        start.get("status") == 200
        and headers.get(b"content-type", b"").startswith(b"text/html")
        and b"content-encoding" not in headers
    )
