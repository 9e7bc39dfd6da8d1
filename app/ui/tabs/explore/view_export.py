"""A self-contained HTML report of the current Explore view, to send a colleague.

One file that opens alone, offline: a line saying where it came from, the token view (shades,
selection marks, hover/focus tooltips and the pinned detail panel), the summary, "why they
differ", the batch's budget chart (several groups) and the group's four charts, with the
renderer's CSS and JS and plotly.js inlined. Everything shown is rendered by the same functions
as the live page, so the text is escaped the same way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from app.ui.charts import group_figures, summary_html, summary_rows
from app.ui.downloads import standalone_page, write_download
from app.ui.render import groups_of, render_result
from app.ui.tabs.explore.batch import budget_chart
from app.ui.why_differ import why_differ_html


def group_label(index: int, count: int) -> str:
    """Which group the page shows, numbered as the live page numbers them (from 0): "group 2 of
    groups 0–3" (never "group 3 of 4" for the last of four)."""
    return "its one group" if count == 1 else f"group {index} of groups 0–{count - 1}"


def view_html(
    result: dict[str, Any], methods: tuple[str, str], color_by: str = "entropy", group: int = 0
) -> str:
    """The whole page as a string."""
    groups = groups_of(result)
    gi = min(max(group, 0), len(groups) - 1)
    summary = result.get("summary") or groups[gi].get("summary") or {}
    source = (
        f"model {result.get('model', '?')} · methods {methods[0]} vs {methods[1]} · shade "
        f"{color_by} · {group_label(gi, len(groups))} — exported from GMTS Explorer"
    )
    figures = list(group_figures(result, methods, gi).values())
    if len(groups) > 1:
        figures.insert(0, budget_chart(result, methods))
    body = (
        f"<div id='token-view'>{render_result(result, methods, color_by, gi)}</div>"
        f"<div id='summary-table'>{summary_html(summary_rows(summary, methods))}</div>"
        f"{why_differ_html(result, methods)}"
    )
    return standalone_page("GMTS Explorer view", source, body, figures)


def write_view_html(
    result: dict[str, Any],
    methods: tuple[str, str],
    color_by: str = "entropy",
    group: int = 0,
    folder: Path | None = None,
) -> Path:
    """Write :func:`view_html` to a file named by its content; returns the path."""
    return write_download(view_html(result, methods, color_by, group), "view", "html", folder)
