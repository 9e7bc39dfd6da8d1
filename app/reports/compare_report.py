"""Plotly figures and a self-contained HTML page for a
:class:`~gmts_core.experiments.compare.CompareResult`.

Each curve is the mean over seeds, with a shaded band of +-1 std only when there are several
seeds (one seed has no spread to show). Step axes tick at whole steps. Colours come from
:mod:`app.palette` (one colour per method on every chart, the UI's and the CLI's pages alike);
``color(method) -> "#RRGGBB"`` overrides it. The page embeds plotly.js, so it opens offline.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable
from typing import Any

import plotly.graph_objects as go
import plotly.io as pio

from app.palette import method_color, rgba
from gmts_core.experiments.compare import CompareResult

ColorFn = Callable[[str], str]


def _band(
    fig: go.Figure,
    x: list[int],
    rows: list[dict[str, float]],
    name: str,
    color: str,
    band: bool,
    bounds: tuple[float, float] = (-math.inf, math.inf),
    seeds: int = 1,
) -> None:
    """A mean line in ``color``, with a +-std band when ``band`` (several seeds), cut to
    ``bounds`` (a share or an accuracy never leaves [0, 1]). Each point says what it is on
    hover: the mean over ``seeds`` seeds at that step (one seed: that run's value).

    The band trace is always there (empty for one seed) so the traces keep one layout: band,
    line, band, line ... in method order.
    """
    low, high = bounds
    mean = [r["mean"] for r in rows]
    upper = [min(high, r["mean"] + r["std"]) for r in rows]
    lower = [max(low, r["mean"] - r["std"]) for r in rows]
    fig.add_trace(
        go.Scatter(
            x=x + x[::-1] if band else [],
            y=upper + lower[::-1] if band else [],
            fill="toself",
            fillcolor=rgba(color, 0.15),
            line={"width": 0},
            hoverinfo="skip",
            showlegend=False,
            legendgroup=name,
        )
    )
    fig.add_trace(
        go.Scatter(
            x=x,
            y=mean,
            name=name,
            mode="lines+markers",
            line={"color": color},
            legendgroup=name,
            hovertemplate=f"{html.escape(name)}: {_what(seeds)}<br>step %{{x}}: %{{y:.3f}}"
            "<extra></extra>",
        )
    )


def _what(seeds: int) -> str:
    return f"mean of {seeds} seeds" if seeds > 1 else "one seed's run"


def _figure(title: str, y_title: str, steps: int) -> go.Figure:
    fig = go.Figure()
    fig.update_layout(
        title=title,
        xaxis_title="step",
        yaxis_title=y_title,
        template="plotly_white",
        height=380,
        margin={"l": 60, "r": 20, "t": 50, "b": 50},
    )
    fig.update_xaxes(tickformat="d", tick0=0, dtick=max(1, -(-steps // 10)))
    return fig


def compare_figures(result: CompareResult, color: ColorFn | None = None) -> dict[str, go.Figure]:
    """``accuracy``, ``reward``, ``wasted_share`` and ``loss`` figures, one line per method."""
    n = result.config.steps
    steps = list(range(1, n + 1))
    # the band is the seeds' spread at each step, not an interval: the final table has those
    spread = " (mean; band ± 1 std over seeds)" if result.config.seeds > 1 else " (one seed)"
    figs = {
        "accuracy": _figure(f"Held-out accuracy{spread}", "accuracy", n),
        "reward": _figure(f"Training reward{spread}", "mean reward", n),
        "wasted_share": _figure(
            "Wasted share: selected tokens with zero gradient (each run's own selection)",
            "wasted share",
            n,
        ),
        "loss": _figure("Loss", "loss", n),
    }
    band = result.config.seeds > 1
    for m in result.config.methods:
        c = (color or method_color)(m)
        acc = result.accuracy_curve(m)
        unit = (0.0, 1.0)
        s = result.config.seeds
        _band(figs["accuracy"], [int(r["step"]) for r in acc], acc, m, c, band, unit, s)
        _band(figs["reward"], steps, result.curve(m, "reward"), m, c, band, seeds=s)
        _band(figs["wasted_share"], steps, result.wasted_curve(m), m, c, band, unit, s)
        _band(figs["loss"], steps, result.curve(m, "loss"), m, c, band, seeds=s)
    return figs


def fmt(cell: dict[str, float], digits: int = 3, spread: bool = True) -> str:
    """Mean ± std over seeds; the mean alone for one seed (a std of 0 would claim a spread)."""
    mean = f"{cell['mean']:.{digits}f}"
    return f"{mean} ± {cell['std']:.{digits}f}" if spread else mean


def fmt_interval(cell: dict[str, Any] | None, digits: int = 3, signed: bool = False) -> str:
    """Mean [95% interval]; the mean alone where the interval is undefined."""
    if cell is None:
        return "—"
    sign = "+" if signed else ""
    mean = f"{cell['mean']:{sign}.{digits}f}"
    if cell.get("ci_low") is None or cell.get("ci_high") is None:
        return mean
    return f"{mean} [{cell['ci_low']:{sign}.{digits}f}, {cell['ci_high']:{sign}.{digits}f}]"


def paired_cell(row: dict[str, Any]) -> str:
    """The paired difference to the reference method and its verdict."""
    if row["paired_difference"] is None:
        return "(reference)"
    if row["within_noise"] is None:  # seeds only, or one seed: no verdict
        why = "seeds only" if row["interval_over"] == "seeds" else "one seed: no verdict"
        return f"{fmt_interval(row['paired_difference'], signed=True)} ({why})"
    verdict = "within noise" if row["within_noise"] else "differs"
    return f"{fmt_interval(row['paired_difference'], signed=True)} {verdict}"


def wasted_cell(row: dict[str, Any]) -> str:
    """The wasted-share chart's line of the method: its mean over steps and its peak."""
    w = row["wasted_share"]
    return f"{w['mean']:.2f} (peak {w['peak']:.2f} at step {w['peak_step']})"


def table_rows(result: CompareResult) -> list[list[str]]:
    """The final table as strings: method, final accuracy and gain with 95% intervals, the
    paired difference to the reference method (within noise or not), reward, wasted share."""
    sd = result.config.seeds > 1
    return [
        [
            row["method"],
            fmt_interval(row["final_accuracy"]),
            fmt_interval(row["gain"], signed=True),
            paired_cell(row),
            fmt(row["train_reward_last5"], spread=sd),
            wasted_cell(row),
        ]
        for row in result.table()
    ]


def table_header(result: CompareResult) -> list[str]:
    """The table's column names (the paired column names the reference method)."""
    return [*TABLE_HEADER[:3], f"vs {result.reference_method()} (paired)", *TABLE_HEADER[4:]]


TABLE_HEADER = [
    "method",
    "final held-out accuracy [95% CI]",
    "gain over start [95% CI]",
    "vs reference (paired, 95% CI)",
    "train reward (last 5 steps)",
    "wasted share (mean over steps; peak)",
]
INTERVALS_NOTE = {
    "seeds and problems": "95% intervals: t intervals over seeds and held-out problems (seed "
    "and problem variance, studentised seed part; paired differences on the same seeds and "
    "problems)",
    "one seed": "95% intervals over held-out problems only: one seed shows no seed-to-seed "
    "variance, so they cover this run's weights, not the methods, and give no verdict",
    "seeds": "95% intervals: t intervals over seeds only (this file has no per-problem results)",
}


def intervals_note(result: CompareResult) -> str:
    """What the table's intervals are computed over."""
    if not result.has_per_problem():
        return INTERVALS_NOTE["seeds"]
    return INTERVALS_NOTE["one seed" if result.config.seeds < 2 else "seeds and problems"]


def table_markdown(result: CompareResult) -> str:
    """The final table in Markdown (table.md, as the benchmarks page shows it)."""
    header = table_header(result)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in table_rows(result)]
    lines += ["", intervals_note(result) + ".", ""] + [f"- {c}" for c in result.conclusions()]
    return "\n".join(lines)


def table_html(result: CompareResult, color: ColorFn | None = None) -> str:
    """The final table as HTML, one renderer for the UI and the report page: each method's name
    carries its colour; every cell names its column (``data-label``), so that on a narrow screen
    the stylesheet (``.compare-table`` in static/gmts.css, :data:`TABLE_CSS` in the page) shows
    each method as a card of labelled lines instead of a table cut to its first columns."""
    color = color or method_color
    header = table_header(result)
    head = "".join(f"<th scope='col'>{html.escape(h)}</th>" for h in header)
    rows = []
    for row in table_rows(result):
        swatch = f"<span class='swatch' style='background:{html.escape(color(row[0]))}'></span>"
        cells = [f"<th scope='row' data-label='{html.escape(header[0])}'>{swatch}"
                 f"{html.escape(row[0])}</th>"]  # fmt: skip
        cells += [
            f"<td data-label='{html.escape(h)}'>{html.escape(c)}</td>"
            for h, c in zip(header[1:], row[1:], strict=True)
        ]
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return (
        f"<table class='compare-table'><thead><tr>{head}</tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


# The table's layout (also in static/gmts.css for the UI): a table on wide screens, one card per
# method on a phone, every value under its column's name.
TABLE_CSS = (
    ".compare-table{border-collapse:collapse;font-variant-numeric:tabular-nums}"
    ".compare-table th,.compare-table td{border:1px solid #ccc;padding:4px 10px;text-align:left}"
    ".compare-table .swatch{display:inline-block;width:10px;height:10px;border-radius:2px;"
    "margin-right:6px}"
    "@media (max-width:640px){.compare-table thead{display:none}"
    ".compare-table,.compare-table tbody,.compare-table tr,.compare-table th,.compare-table td"
    "{display:block;width:auto}"
    ".compare-table tr{border:1px solid #ccc;border-radius:6px;margin:0 0 8px;padding:4px 0}"
    ".compare-table th,.compare-table td{border:0 !important;padding:2px 10px}"
    ".compare-table{border:0 !important}"
    ".compare-table td::before{content:attr(data-label);display:block;font-size:12px;"
    "color:#555}}"
)


def _settings_html(result: CompareResult) -> str:
    c = result.config
    items: dict[str, Any] = {
        "model": result.model,
        "ratio": c.ratio,
        "steps": c.steps,
        "seeds": c.seeds,
        "task mix": c.task_mix,
        "group size G": c.rl.group_size,
        "prompts per step": c.rl.prompts_per_step,
        "learning rate": c.rl.learning_rate,
        "inner steps": c.rl.inner_steps,
        "held-out problems": c.eval_problems,
        "start accuracy": f"{result.start_accuracy:.3f}",
        "wall time": f"{result.seconds:.0f} s",
    }
    return (
        "<p class='settings'>"
        + " · ".join(f"<b>{html.escape(k)}</b> {html.escape(str(v))}" for k, v in items.items())
        + "</p>"
    )


def _conclusions_html(result: CompareResult) -> str:
    items = "".join(f"<li>{html.escape(c)}</li>" for c in result.conclusions())
    return f"<ul class='conclusions'>{items}</ul>" if items else ""


def compare_html(result: CompareResult, color: ColorFn | None = None) -> str:
    """A self-contained HTML page: settings, the final table and every curve (plotly inline)."""
    figs = compare_figures(result, color)
    charts = [
        pio.to_html(fig, full_html=False, include_plotlyjs=("inline" if i == 0 else False))
        for i, fig in enumerate(figs.values())
    ]
    style = "body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px}" + TABLE_CSS
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width,initial-scale=1'>"
        f"<title>gmts compare</title><style>{style}</style></head><body>"
        "<h1>Selection methods compared by training</h1>"
        f"{_settings_html(result)}{_conclusions_html(result)}{table_html(result, color)}"
        f"<p class='note'>{html.escape(intervals_note(result))}.</p>{''.join(charts)}</body></html>"
    )
