"""Charts of a training-run report over steps (pure: report rows in, plotly figures out),
and the self-contained HTML summary ``gmts analyze-run`` writes next to ``report.json``.

Every number comes from the report rows (``StepReport.to_dict()``); the figures only arrange
them. Methods take their colours from :mod:`app.palette` (one colour per method everywhere:
the Runs tab, the Explore tab and this page); other series take Okabe-Ito colours from it too.
"""

from __future__ import annotations

import html
from typing import Any

import plotly.graph_objects as go
import plotly.io as pio
from plotly.subplots import make_subplots

from app.palette import OKABE_ITO, method_color

Row = dict[str, Any]
LAYOUT = dict(
    template="plotly_white",
    margin=dict(l=55, r=20, t=50, b=100),
    # under the axis title, so a long legend never prints over the chart's title
    legend=dict(orientation="h", yanchor="top", y=-0.22, x=0),
    height=380,
    xaxis_title="training step",
)


def integer_steps(fig: go.Figure, last_step: int) -> None:
    """Step axes with whole-number ticks only (no 1.5 between two steps)."""
    dtick = max(1, -(-last_step // 10))  # about ten ticks at most
    fig.update_xaxes(tickformat="d", tick0=0, dtick=dtick)


def _layout(fig: go.Figure, rows: list[Row], **kw: Any) -> go.Figure:
    fig.update_layout(**{**LAYOUT, **kw})
    integer_steps(fig, max([1, *(int(r["step"]) for r in rows)]))
    return fig


def _methods(rows: list[Row]) -> list[str]:
    return list(rows[0]["gradient_coverage"]) if rows else []


def reward_figure(rows: list[Row]) -> go.Figure:
    """Mean reward per step with a ±1 std band, and the share of zero-signal groups."""
    steps = [r["step"] for r in rows]
    fig = go.Figure()
    if any(r.get("reward_mean") is not None for r in rows):
        fig.add_trace(
            go.Scatter(
                x=steps,
                y=[r["reward_mean"] for r in rows],
                error_y=dict(array=[r["reward_std"] or 0 for r in rows], visible=True),
                name="reward mean (± std)",
                mode="lines+markers",
                line=dict(color=OKABE_ITO[4]),
            )
        )
    fig.add_trace(
        go.Bar(
            x=steps,
            y=[r["zero_signal_share"] for r in rows],
            name="zero-signal share of groups",
            marker_color=OKABE_ITO[5],
            opacity=0.45,
        )
    )
    return _layout(fig, rows, title="Reward and zero-signal groups")


def per_method_figure(rows: list[Row], key: str, title: str) -> go.Figure:
    """One line per selection method of ``row[key][method]`` over steps."""
    methods = _methods(rows)
    fig = go.Figure()
    for m in methods:
        fig.add_trace(
            go.Scatter(
                x=[r["step"] for r in rows],
                y=[r[key].get(m) for r in rows],
                name=m,
                mode="lines+markers",
                line=dict(color=method_color(m)),
            )
        )
    return _layout(fig, rows, title=title, yaxis_range=[-0.02, 1.02])


def agreement_figure(rows: list[Row]) -> go.Figure:
    """Spearman(entropy, gradient proxy) over the batch and within answers, and the Jaccard
    overlap of entropy and GMTS selection where both were asked."""
    steps = [r["step"] for r in rows]
    fig = go.Figure()
    for key, name, color in (
        ("spearman_batch", "Spearman(H, γ) over the step", OKABE_ITO[0]),
        ("spearman_within_answer_median", "Spearman(H, γ) within answers (median)", OKABE_ITO[2]),
    ):
        fig.add_trace(
            go.Scatter(x=steps, y=[r.get(key) for r in rows], name=name, line=dict(color=color))
        )
    pair = next((p for p in (rows[0]["overlap"] if rows else {}) if p == "entropy|gmts"), None)
    if pair:
        fig.add_trace(
            go.Scatter(
                x=steps,
                y=[r["overlap"][pair] for r in rows],
                name="Jaccard(entropy, GMTS selections)",
                line=dict(color=OKABE_ITO[6], dash="dot"),
            )
        )
    return _layout(fig, rows, title="Entropy vs gradient: agreement", yaxis_range=[-1.02, 1.02])


def length_figure(rows: list[Row]) -> go.Figure:
    fig = go.Figure(
        go.Scatter(
            x=[r["step"] for r in rows],
            y=[r["mean_answer_length"] for r in rows],
            mode="lines+markers",
            line=dict(color=OKABE_ITO[7]),
            name="mean answer length (tokens)",
        )
    )
    return _layout(fig, rows, title="Mean answer length (tokens)")


TRAINER_NAMES = {"trl_trainer_state": "TRL", "verl_file_logger": "verl"}


def trainer_figure(metrics: Row, rows: list[Row], reports: list[Row] | None = None) -> go.Figure:
    """What the trainer itself measured over steps (``metrics``: a ``TrainerMetrics`` as a
    dict): its logged reward and entropy (right axis, nats), next to what GMTS computed: the
    reward mean read from the run's rollouts (``rows``: step overviews with ``reward_mean``)
    and the mean token entropy of the steps it analysed (``reports``: step reports with
    ``entropy_mean``; a trainer log's are its own logged entropies)."""
    who = TRAINER_NAMES.get(str(metrics.get("format")), "trainer")
    series, keys, steps = metrics.get("series") or {}, metrics.get("keys") or {}, metrics["steps"]
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    if "reward" in series:
        fig.add_trace(
            go.Scatter(
                x=steps,
                y=series["reward"],
                name=f"reward ({who} log: {keys['reward']})",
                mode="lines+markers",
                line=dict(color=OKABE_ITO[4]),
            ),
            secondary_y=False,
        )
    gmts = [r for r in rows if r.get("reward_mean") is not None]
    if gmts:
        fig.add_trace(
            go.Scatter(
                x=[r["step"] for r in gmts],
                y=[r["reward_mean"] for r in gmts],
                name="reward mean (GMTS, from the rollouts)",
                mode="markers",
                marker=dict(color=OKABE_ITO[4], symbol="circle-open", size=11),
            ),
            secondary_y=False,
        )
    if "entropy" in series:
        fig.add_trace(
            go.Scatter(
                x=steps,
                y=series["entropy"],
                name=f"entropy ({who} log: {keys['entropy']})",
                mode="lines+markers",
                line=dict(color=OKABE_ITO[0], dash="dash"),
            ),
            secondary_y=True,
        )
    analysed = [r for r in reports or [] if r.get("entropy_mean") is not None]
    if analysed:
        recomputed = analysed[0].get("mode") != "logged"
        fig.add_trace(
            go.Scatter(
                x=[r["step"] for r in analysed],
                y=[r["entropy_mean"] for r in analysed],
                name="entropy mean (GMTS, recomputed with the model)"
                if recomputed
                else "entropy mean (GMTS trainer log)",
                mode="markers",
                marker=dict(color=OKABE_ITO[0], symbol="diamond-open", size=11),
            ),
            secondary_y=True,
        )
    fig.update_layout(**{**LAYOUT, "title": f"What {who} itself measured: reward and entropy"})
    fig.update_yaxes(title_text="reward", secondary_y=False)
    fig.update_yaxes(title_text="entropy (nats)", secondary_y=True, rangemode="tozero")
    integer_steps(fig, max([1, *steps, *(int(r["step"]) for r in gmts + analysed)]))
    return fig


def run_figures(rows: list[Row]) -> list[go.Figure]:
    return [
        reward_figure(rows),
        per_method_figure(rows, "gradient_coverage", "Gradient coverage per method"),
        per_method_figure(rows, "wasted_share", "Wasted share per method (selected, γ = 0)"),
        agreement_figure(rows),
        length_figure(rows),
    ]


def _table(rows: list[Row]) -> str:
    methods = _methods(rows)
    head = ["step", "groups", "answers", "reward mean", "zero-signal"] + [
        f"coverage {m}" for m in methods
    ]
    lines = ["<tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr>"]
    for r in rows:
        cells = [r["step"], r["num_groups"], r["num_answers"], fmt(r["reward_mean"])]
        cells += [fmt(r["zero_signal_share"])] + [fmt(r["gradient_coverage"][m]) for m in methods]
        lines.append("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in cells) + "</tr>")
    return "<table>" + "".join(lines) + "</table>"


def fmt(v: Any) -> str:
    return "–" if v is None else f"{v:.3f}" if isinstance(v, float) else str(v)


def _trainer_note(report: dict[str, Any]) -> str:
    """Where the trainer's own metrics came from, or why they could not be read (HTML)."""
    if report.get("trainer_metrics_error"):
        why = html.escape(str(report["trainer_metrics_error"]))
        return f"<p>The trainer's metrics log was not read: {why}</p>"
    metrics = report.get("trainer_metrics")
    if not metrics:
        return ""
    source = html.escape(str(metrics["source"]))
    return f"<p>What the trainer itself logged: <code>{source}</code></p>"


def run_report_html(report: dict[str, Any]) -> str:
    """A self-contained HTML page (plotly.js inlined once) summarising a run report."""
    rows = report["rows"]
    parts = []
    figures = run_figures(rows)
    if report.get("trainer_metrics"):  # what the trainer logged, next to what GMTS computed
        figures.insert(1, trainer_figure(report["trainer_metrics"], rows, rows))
    for i, fig in enumerate(figures):
        parts.append(
            pio.to_html(fig, full_html=False, include_plotlyjs="inline" if i == 0 else False)
        )
    meta = ", ".join(
        f"{k}: {html.escape(str(report.get(k)))}"
        for k in ("format", "mode", "model", "ratio", "scope", "advantage")
    )
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>GMTS run report: {html.escape(str(report['run']))}</title>"
        "<style>body{font-family:sans-serif;max-width:1100px;margin:auto}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px}</style>"
        f"</head><body><h1>Run report</h1><p><code>{html.escape(str(report['run']))}</code></p>"
        f"<p>{meta}; {len(rows)} steps</p>{_trainer_note(report)}"
        + "".join(parts)
        + _table(rows)
        + "</body></html>"
    )
