"""A server-drawn SVG of a Plotly scatter: the example's chart readable before Plotly has loaded.

Gradio's Plotly chunk is 4.6 MB of script; on a 2-core machine its evaluation and first draw
take seconds after the page arrives. :func:`scatter_svg` draws the same figure's points (the
figure Explore sends to its ``gr.Plot``: every marker trace, its colours, its open markers for
the selections, its title and axis titles, a linear y axis as Plotly's default) as plain inline
SVG, computed once when the UI is built. The first view (:mod:`app.ui.first_view`) and the
Explore tab (``#scatter-sketch``, above the Plot) show it until Plotly's chart is drawn; then it
goes for good (:data:`SKETCH_LATCH`).

Horizontal positions are percentages of the plot's width (it follows its column, as Plotly's
responsive chart does; the y axis's labels have an SVG of their own, of fixed width, left of it)
and vertical ones pixels of a fixed height, so a marker stays round at every width. It is a
picture: no hover, no click, no log button.
"""

from __future__ import annotations

import math
from html import escape
from typing import Any

SKETCH_ID = "scatter-sketch"
SKETCH_CLASS = "gmts-sketch"
HEIGHT = 360  # px of the drawing; with its title, legend and note about Plotly's 460
TOP, BOTTOM = 10, 52  # px above the plot area and below it (ticks, axis title)
AXIS_WIDTH = 64  # px of the y axis's own SVG, left of the plot's (tick labels, axis title)
LEFT, RIGHT = 1.0, 2.0  # % of the plot SVG's width left and right of the plot area
NOTE = "Static preview: the interactive chart replaces it once loaded."

# the sketch's js_on_load in Explore (a statement: Gradio runs it as the component mounts):
# the sketch leaves once Plotly has drawn the scatter, or once the person changes
# anything in the tab (a run, another method or group: the sketch would show the old data)
SKETCH_LATCH = (
    "(() => { const box = document.getElementById('" + SKETCH_ID + "'); if (!box) return;"
    " const tab = document.getElementById('tab-explore') || document.body;"
    " const gone = () => { box.classList.add('gmts-sketch-gone'); watch.disconnect();"
    " tab.removeEventListener('input', gone, true);"
    " tab.removeEventListener('click', user, true); };"
    " const user = e => { if (e.target.closest('button, input, select, [role=option]')) gone(); };"
    " const drawn = () => document.querySelector('#scatter-plot .js-plotly-plot .main-svg');"
    " const watch = new MutationObserver(() => { if (drawn()) gone(); });"
    " tab.addEventListener('input', gone, true); tab.addEventListener('click', user, true);"
    " if (drawn()) gone();"
    " else watch.observe(document.body, {childList: true, subtree: true}); })();"
)


def _num(v: Any) -> float | None:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def nice_ticks(lo: float, hi: float, count: int = 6) -> list[float]:
    """About ``count`` round tick values (1, 2 or 5 times a power of ten apart) within
    [``lo``, ``hi``]."""
    if not hi > lo:
        return [lo]
    raw = (hi - lo) / max(count - 1, 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.ceil(lo / step - 1e-9)
    return [round(k * step, 12) for k in range(first, math.floor(hi / step + 1e-9) + 1)]


def _label(v: float) -> str:
    return f"{v:.3g}"


def _range(values: list[float]) -> tuple[float, float]:
    """The axis range: the data's, padded by 6% each side (Plotly pads markers similarly)."""
    lo, hi = min(values), max(values)
    if hi <= lo:
        lo, hi = lo - 1.0, hi + 1.0
    pad = (hi - lo) * 0.06
    return lo - pad, hi + pad


def _marker(cx: float, cy: float, marker: dict[str, Any]) -> str:
    """One marker at ``cx`` % of the width, ``cy`` px: filled circle, open circle or open
    square as Plotly draws ``symbol``s circle, circle-open and square-open (others: circle)."""
    color = escape(str(marker.get("color") or "#444"))
    size = float(marker.get("size") or 6)
    symbol = str(marker.get("symbol") or "circle")
    width = float((marker.get("line") or {}).get("width") or 1)
    if symbol == "square-open":
        h = size / 2
        return (
            f'<svg x="{cx:.2f}%" y="{cy:.1f}" overflow="visible"><rect x="{-h:g}" y="{-h:g}" '
            f'width="{size:g}" height="{size:g}" fill="none" stroke="{color}" '
            f'stroke-width="{width:g}"/></svg>'
        )
    if symbol.endswith("-open"):
        return (
            f'<circle cx="{cx:.2f}%" cy="{cy:.1f}" r="{size / 2:g}" fill="none" '
            f'stroke="{color}" stroke-width="{width:g}"/>'
        )
    opacity = marker.get("opacity")
    fill_opacity = f' fill-opacity="{float(opacity):g}"' if opacity is not None else ""
    return f'<circle cx="{cx:.2f}%" cy="{cy:.1f}" r="{size / 2:g}" fill="{color}"{fill_opacity}/>'


def _title(layout: dict[str, Any], key: str | None = None) -> str:
    part = layout.get(key, {}) if key else layout
    title = part.get("title") if isinstance(part, dict) else None
    text = title.get("text") if isinstance(title, dict) else title
    return str(text or "")


def scatter_svg(figure: dict[str, Any]) -> str:
    """The marker traces of a Plotly figure (``fig.to_plotly_json()``) as an inline SVG with a
    legend under it, in a ``div.gmts-sketch`` (empty when no trace has a finite point)."""
    traces = [
        t for t in figure.get("data", []) if t.get("type", "scatter") == "scatter"
        and "markers" in str(t.get("mode", "markers"))
    ]  # fmt: skip
    points = [
        [(x, y) for x, y in zip(map(_num, t.get("x") or []), map(_num, t.get("y") or []),
                                strict=False)  # Plotly draws the shorter's length
         if x is not None and y is not None]
        for t in traces
    ]  # fmt: skip
    every = [p for ps in points for p in ps]
    if not every:
        return ""
    (x0, x1), (y0, y1) = _range([x for x, _ in every]), _range([y for _, y in every])
    plot_h = HEIGHT - TOP - BOTTOM

    def px(x: float) -> float:
        return LEFT + (x - x0) / (x1 - x0) * (100 - LEFT - RIGHT)

    def py(y: float) -> float:
        return TOP + (y1 - y) / (y1 - y0) * plot_h

    layout = figure.get("layout", {})
    svg = (
        f'<svg height="{HEIGHT}" font-family="Arial, sans-serif" font-size="11" fill="currentColor"'
    )
    axis = [
        f'{svg} width="{AXIS_WIDTH}" aria-hidden="true" style="flex: none">',
        f'<text transform="rotate(-90)" x="{-(TOP + plot_h / 2):.0f}" y="14" '
        f'text-anchor="middle" font-size="12">{escape(_title(layout, "yaxis"))}</text>',
    ]
    parts = [
        f'{svg} width="100%" role="img" style="flex: 1 1 0; min-width: 0">',
        f"<title>{escape(_title(layout))}</title>",
        f'<rect x="{LEFT}%" y="{TOP}" width="{100 - LEFT - RIGHT}%" height="{plot_h}" '
        'fill="none" stroke="#ccc"/>',
    ]
    for v in nice_ticks(y0, y1):
        y = py(v)
        parts.append(
            f'<line x1="{LEFT}%" x2="{100 - RIGHT}%" y1="{y:.1f}" y2="{y:.1f}" stroke="#eee"/>'
        )
        axis.append(
            f'<text x="{AXIS_WIDTH - 4}" y="{y + 4:.1f}" text-anchor="end">{_label(v)}</text>'
        )
    for v in nice_ticks(x0, x1):
        x = px(v)
        parts.append(
            f'<line x1="{x:.2f}%" x2="{x:.2f}%" y1="{TOP}" y2="{TOP + plot_h}" stroke="#eee"/>'
            f'<text x="{x:.2f}%" y="{TOP + plot_h + 15}" text-anchor="middle">{_label(v)}</text>'
        )
    parts.append(
        f'<text x="{(LEFT + 100 - RIGHT) / 2}%" y="{HEIGHT - 8}" text-anchor="middle" '
        f'font-size="12">{escape(_title(layout, "xaxis"))}</text>'
    )
    axis.append("</svg>")
    for trace, ps in zip(traces, points, strict=True):
        marker = trace.get("marker") or {}
        parts.extend(_marker(px(x), py(y), marker) for x, y in ps)
    parts.append("</svg>")
    legend = "".join(
        f'<span><svg width="14" height="14" overflow="visible">'
        f"{_marker(50, 7, {**(t.get('marker') or {}), 'size': 9})}</svg> "
        f"{escape(str(t.get('name', '')))}</span>"
        for t in traces
    )
    return (
        f'<div class="{SKETCH_CLASS}"><style>'
        f".{SKETCH_CLASS} .sketch-legend {{ display: flex; flex-wrap: wrap; gap: 2px 12px;"
        " font: 12px Arial, sans-serif; margin: 2px 0 0 4px; }"
        f" .{SKETCH_CLASS} .sketch-title {{ font: 15px Arial, sans-serif; margin: 8px 0 4px"
        f" {AXIS_WIDTH}px; }}"
        f" .{SKETCH_CLASS} .sketch-legend > span {{ display: inline-flex; align-items: center;"
        " gap: 4px; }"
        f" .{SKETCH_CLASS} .sketch-note {{ font: 12px Arial, sans-serif; opacity: 0.7;"
        " margin: 4px 0 0 4px; }"
        " .gmts-sketch-gone { display: none !important; }"
        # in Explore the Plot's block under the sketch keeps its width (Plotly sizes the chart
        # to it) but takes no height until the sketch goes: the chart then takes its place
        f" #scatter-box:has(> #{SKETCH_ID}:not(.gmts-sketch-gone)) #scatter-plot"
        " { visibility: hidden; height: 0; min-height: 0; padding: 0; border: 0;"
        " overflow: hidden; }</style>"
        f'<p class="sketch-title">{escape(_title(layout))}</p>'
        f'<div style="display: flex">{"".join(axis)}{"".join(parts)}</div>'
        f'<div class="sketch-legend">{legend}</div>'
        f'<p class="sketch-note">{escape(NOTE)}</p></div>'
    )
