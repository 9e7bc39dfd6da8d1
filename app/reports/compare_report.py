"""Plotly figures and a self-contained HTML page for a :class:`~gmts_core.compare.CompareResult`.

Each curve is the mean over seeds with a shaded band of +-1 std. The page embeds plotly.js, so
it opens offline.
"""

from __future__ import annotations

import html
from typing import Any

import plotly.graph_objects as go
import plotly.io as pio
from plotly.colors import qualitative

from gmts_core.compare import CompareResult


def _color(i: int) -> str:
    return qualitative.Plotly[i % len(qualitative.Plotly)]


def _rgba(hex_color: str, alpha: float) -> str:
    r, g, b = (int(hex_color[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


def _band(fig: go.Figure, x: list[int], rows: list[dict[str, float]], name: str, i: int) -> None:
    """A mean line with a +-std band, in colour ``i``."""
    mean = [r["mean"] for r in rows]
    upper = [r["mean"] + r["std"] for r in rows]
    lower = [r["mean"] - r["std"] for r in rows]
    fig.add_trace(
        go.Scatter(
            x=x + x[::-1],
            y=upper + lower[::-1],
            fill="toself",
            fillcolor=_rgba(_color(i), 0.15),
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
            line={"color": _color(i)},
            legendgroup=name,
        )
    )


def _figure(title: str, y_title: str) -> go.Figure:
    fig = go.Figure()
    fig.update_layout(
        title=title,
        xaxis_title="step",
        yaxis_title=y_title,
        template="plotly_white",
        height=380,
        margin={"l": 60, "r": 20, "t": 50, "b": 50},
    )
    return fig


def compare_figures(result: CompareResult) -> dict[str, go.Figure]:
    """``accuracy``, ``reward``, ``wasted_share`` and ``loss`` figures, one line per method."""
    steps = list(range(1, result.config.steps + 1))
    figs = {
        "accuracy": _figure("Held-out accuracy (mean ± std over seeds)", "accuracy"),
        "reward": _figure("Training reward (mean ± std over seeds)", "mean reward"),
        "wasted_share": _figure(
            "Wasted share: selected tokens with zero gradient (each run's own selection)",
            "wasted share",
        ),
        "loss": _figure("Loss", "loss"),
    }
    for i, m in enumerate(result.config.methods):
        acc = result.accuracy_curve(m)
        _band(figs["accuracy"], [int(r["step"]) for r in acc], acc, m, i)
        _band(figs["reward"], steps, result.curve(m, "reward"), m, i)
        _band(figs["wasted_share"], steps, result.wasted_curve(m), m, i)
        _band(figs["loss"], steps, result.curve(m, "loss"), m, i)
    return figs


def _fmt(cell: dict[str, float], digits: int = 3) -> str:
    return f"{cell['mean']:.{digits}f} ± {cell['std']:.{digits}f}"


def table_rows(result: CompareResult) -> list[list[str]]:
    """The final table as strings: method, final accuracy, gain, reward, wasted share."""
    return [
        [
            row["method"],
            _fmt(row["final_accuracy"]),
            _fmt(row["gain"]),
            _fmt(row["train_reward_last5"]),
            f"{_fmt(row['wasted_share_first'], 2)} → {_fmt(row['wasted_share_last'], 2)}",
        ]
        for row in result.table()
    ]


TABLE_HEADER = [
    "method",
    "final held-out accuracy",
    "gain over start",
    "train reward (last 5 steps)",
    "wasted share (first → last step)",
]


def table_markdown(result: CompareResult) -> str:
    """The final table in Markdown (for the README)."""
    lines = ["| " + " | ".join(TABLE_HEADER) + " |", "|" + "---|" * len(TABLE_HEADER)]
    lines += ["| " + " | ".join(r) + " |" for r in table_rows(result)]
    return "\n".join(lines)


def _table_html(result: CompareResult) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in TABLE_HEADER)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>"
        for row in table_rows(result)
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _settings_html(result: CompareResult) -> str:
    c = result.config
    items: dict[str, Any] = {
        "model": result.model,
        "ratio": c.ratio,
        "steps": c.steps,
        "seeds": c.seeds,
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


def compare_html(result: CompareResult) -> str:
    """A self-contained HTML page: settings, the final table and every curve (plotly inline)."""
    figs = compare_figures(result)
    charts = [
        pio.to_html(fig, full_html=False, include_plotlyjs=("inline" if i == 0 else False))
        for i, fig in enumerate(figs.values())
    ]
    style = (
        "body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:4px 10px}"
        "td:not(:first-child){text-align:right;font-variant-numeric:tabular-nums}"
    )
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'>"
        f"<title>gmts compare</title><style>{style}</style></head><body>"
        "<h1>Selection methods compared by training</h1>"
        f"{_settings_html(result)}{_table_html(result)}{''.join(charts)}</body></html>"
    )
