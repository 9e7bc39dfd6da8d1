"""A self-contained HTML report of the current Explore view, to send a colleague.

One file that opens alone, offline: a line saying where it came from, the token view (shades,
selection marks, hover/focus tooltips and the pinned detail panel), the summary, "why they
differ", the batch's budget chart (several groups) and the group's four charts, with the
renderer's CSS and JS and plotly.js inlined. Everything shown is rendered by the same functions
as the live page, so the text is escaped the same way.
"""

from __future__ import annotations

import hashlib
from html import escape
from pathlib import Path
from typing import Any

import plotly.io as pio

from app.ui.assets import STATIC_DIR
from app.ui.charts import group_figures, summary_html, summary_rows
from app.ui.render import groups_of, render_result
from app.ui.tabs.explore.batch import budget_chart
from app.ui.tabs.explore.export import export_dir, prune
from app.ui.why_differ import why_differ_html


def view_html(
    result: dict[str, Any], methods: tuple[str, str], color_by: str = "entropy", group: int = 0
) -> str:
    """The whole page as a string."""
    css = "".join(
        (STATIC_DIR / name).read_text(encoding="utf-8") for name in ("gmts.css", "gmts-page.css")
    )
    js = (STATIC_DIR / "gmts.js").read_text(encoding="utf-8")
    groups = groups_of(result)
    gi = min(max(group, 0), len(groups) - 1)
    summary = result.get("summary") or groups[gi].get("summary") or {}
    source = (
        f"model {result.get('model', '?')} · methods {methods[0]} vs {methods[1]} · shade "
        f"{color_by} · group {gi} of {len(groups)} — exported from GMTS Explorer"
    )
    figures = list(group_figures(result, methods, gi).values())
    if len(groups) > 1:
        figures.insert(0, budget_chart(result, methods))
    charts = "".join(
        "<div class='chart'>"
        + pio.to_html(fig, full_html=False, include_plotlyjs="inline" if i == 0 else False)
        + "</div>"
        for i, fig in enumerate(figures)
    )
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>GMTS Explorer view</title><style>body{{font-family:system-ui,sans-serif;"
        f"margin:1.5em;max-width:1100px}}.source{{color:#555;font-size:13px}}{css}</style>"
        "</head><body>"
        f"<p class='source'>{escape(source)}</p>"
        f"<div id='token-view'>{render_result(result, methods, color_by, gi)}</div>"
        f"<div id='summary-table'>{summary_html(summary_rows(summary, methods))}</div>"
        f"{why_differ_html(result, methods)}"
        f"<div id='charts'>{charts}</div>"
        f"<script>{js}</script></body></html>"
    )


def write_view_html(
    result: dict[str, Any],
    methods: tuple[str, str],
    color_by: str = "entropy",
    group: int = 0,
    folder: Path | None = None,
) -> Path:
    """Write :func:`view_html` to a file named by its content; returns the path."""
    folder = folder or export_dir()
    prune(folder)
    text = view_html(result, methods, color_by, group)
    tag = hashlib.sha256(text.encode()).hexdigest()[:12]
    path = folder / f"gmts-analysis-{tag}-view.html"
    path.write_text(text, encoding="utf-8")
    return path
