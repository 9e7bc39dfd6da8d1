"""The Train tab's charts from a session's history: reward and held-out accuracy (with earlier
runs faded behind), the losses, and each method's wasted share, on whole-number step axes in
the one palette of :mod:`app.palette`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go

from app.palette import method_color
from app.reports.run_charts import integer_steps
from app.services.train_gain import evaluation_gain
from app.ui.charts import LAYOUT
from app.ui.render import Json
from app.ui.tabs.train import earlier_runs as train_runs
from app.ui.tabs.train.earlier_runs import SMOOTH, moving_average

WASTED_FIRST = ("entropy", "gmts")  # the comparison the wasted-share chart is about

LOSS_COLOR, PART_COLOR = "#333333", "#777777"  # losses are not methods: greys, told by dash


def _figure(title: str, y_title: str, last_step: int = 1) -> go.Figure:
    fig = go.Figure()
    fig.update_layout(title=title, xaxis_title="step", yaxis_title=y_title, **LAYOUT)
    integer_steps(fig, last_step)
    return fig


def _last_step(history: list[Json], evaluations: Sequence[Json] = ()) -> int:
    return max([1, *(h["step"] for h in history), *(e["step"] for e in evaluations)])


def _line(fig: go.Figure, x: list[Any], y: list[Any], name: str, color: str, **kw: Any) -> None:
    fig.add_trace(
        go.Scatter(x=x, y=y, name=name, mode="lines+markers", line=dict(color=color), **kw)
    )


def reward_figure(
    history: list[Json], evaluations: list[Json], earlier: Sequence[Json] = ()
) -> go.Figure:
    """Held-out accuracy at each evaluation (points: measured, not interpolated) and the
    training reward per step (a moving average over ``SMOOTH`` steps, the raw batch means as
    faint points); ``earlier`` runs (see :mod:`app.ui.tabs.train.earlier_runs`) faded after the
    current one's traces."""
    fig = _figure(
        "Held-out accuracy (points) and training reward (moving average)",
        "accuracy / reward",
        _last_step(history, evaluations),
    )
    steps = [h["step"] for h in history]
    method = history[-1].get("method", "gmts") if history else "gmts"
    color = method_color(method)  # the method's colour, as on every tab
    raw = [h.get("reward_mean") for h in history]
    fig.add_trace(
        go.Scatter(
            x=[e["step"] for e in evaluations],
            y=[e.get("accuracy") for e in evaluations],
            name=f"held-out accuracy, {method}",
            mode="markers",
            marker=dict(color=color, size=11, symbol="diamond", line=dict(width=1, color="#000")),
        )
    )
    fig.add_trace(
        go.Scatter(
            x=steps,
            y=moving_average(raw),
            name=f"training reward, {method} ({SMOOTH}-step average)",
            mode="lines",
            line=dict(color=color, width=2),
        )
    )
    fig.add_trace(
        go.Scatter(
            x=steps,
            y=raw,
            name="training reward per step (batch mean)",
            mode="markers",
            marker=dict(color=color, size=5, opacity=0.3),
        )
    )
    add_baseline_and_gain(fig, evaluations, color, _last_step(history, evaluations))
    train_runs.add_overlays(fig, list(earlier))
    values = [v for t in fig.data for v in t.y if v is not None]
    if all(0.0 <= v <= 1.0 for v in values):  # 0/1 rewards and accuracies: a fixed scale
        fig.update_yaxes(range=[-0.03, 1.03])
    return fig


def gain_label(evaluations: Sequence[Json]) -> str | None:
    """ "gain +12.5 points [+6.0, +19.0]<br>(95%, this run: ...)" from the first to the last
    evaluation, paired over their problems (``app.services.train_gain``): an interval for this
    run's weights on these problems, not for the recipe (another seed moves it more); None
    without two evaluations of the same problems."""
    g = evaluation_gain(evaluations)
    if g is None:
        return None
    return (  # two lines, so the label fits a phone's chart
        f"gain {100 * g.gain:+.1f} points [{100 * g.low:+.1f}, {100 * g.high:+.1f}]<br>"
        f"(95%, this run: paired over {g.num_problems} problems)"
    )


def add_baseline_and_gain(
    fig: go.Figure, evaluations: Sequence[Json], color: str, last_step: int
) -> None:
    """The starting held-out accuracy as a dashed line across the run, and the gain since the
    start with its paired interval as a label by the last point."""
    if not evaluations or evaluations[0].get("accuracy") is None:
        return
    start = evaluations[0]["accuracy"]
    fig.add_trace(
        go.Scatter(
            x=[0, last_step], y=[start, start], mode="lines",
            name=f"start: held-out accuracy {start:.3f}",
            line=dict(color="#555555", dash="dash", width=1.5), hoverinfo="name",
        )
    )  # fmt: skip
    label = gain_label(evaluations)
    if label is not None:
        last = evaluations[-1]
        fig.add_annotation(
            x=last["step"], y=last["accuracy"], text=label, showarrow=True, arrowhead=2,
            ax=0, ay=-36, xanchor="right", bgcolor="rgba(255,255,255,0.85)",
            bordercolor=color, font=dict(size=12), name="gain",
        )  # fmt: skip


def loss_figure(history: list[Json]) -> go.Figure:
    """Total loss, policy loss and the KL to the starting policy per step; the KL on its own
    axis (right), so one outlying step of it (k3 can reach tens) does not flatten the losses."""
    fig = _figure("Loss (left) and KL to start (right axis)", "loss", _last_step(history))
    steps = [h["step"] for h in history]
    loss, policy = [h.get("loss") for h in history], [h.get("policy_loss") for h in history]
    if loss == policy:  # β = 0: one line, not two drawn on top of each other
        _line(fig, steps, loss, "loss (= policy loss, β = 0)", LOSS_COLOR)
    else:
        _line(fig, steps, loss, "loss (policy + β·KL)", LOSS_COLOR)
        _line(fig, steps, policy, "policy loss", PART_COLOR, line_dash="dash")
    _line(fig, steps, [h.get("kl") for h in history], "KL to start (k3)", PART_COLOR,
          line_dash="dot", yaxis="y2")  # fmt: skip
    fig.update_layout(
        yaxis2=dict(title="KL to start", overlaying="y", side="right", showgrid=False)
    )
    return fig


def wasted_methods(history: list[Json]) -> list[str]:
    """Methods with a wasted share in the history: entropy and gmts first."""
    seen = dict.fromkeys(m for h in history for m in (h.get("wasted_share") or {}))
    return [m for m in WASTED_FIRST if m in seen] + [m for m in seen if m not in WASTED_FIRST]


def wasted_figure(history: list[Json]) -> go.Figure:
    """Per step, the share of each method's selection that lands on zero-gradient tokens."""
    fig = _figure(
        "Wasted share: selected tokens with zero gradient (zero-signal groups)",
        "share",
        _last_step(history),
    )
    steps = [h["step"] for h in history]
    for m in wasted_methods(history):
        ys = [(h.get("wasted_share") or {}).get(m) for h in history]
        _line(fig, steps, ys, m, method_color(m))
    fig.update_yaxes(range=[-0.02, 1.02])
    return fig
