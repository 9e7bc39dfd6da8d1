"""The Train tab's charts from a session's history: reward and held-out accuracy (with earlier
runs faded behind), the losses, and each method's wasted share, on whole-number step axes in
the one palette of :mod:`app.ui.palette`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go

from app.ui.charts import LAYOUT
from app.ui.palette import method_color
from app.ui.render import Json
from app.ui.tabs.train import earlier_runs as train_runs

WASTED_FIRST = ("entropy", "gmts")  # the comparison the wasted-share chart is about

LOSS_COLOR, PART_COLOR = "#333333", "#777777"  # losses are not methods: greys, told by dash


def integer_steps(fig: go.Figure, last_step: int) -> None:
    """Step axes with whole-number ticks only (no 0.5 between two steps)."""
    dtick = max(1, -(-last_step // 10))  # about ten ticks at most
    fig.update_xaxes(tickformat="d", tick0=0, dtick=dtick, rangemode="tozero")


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
    """Training reward (batch mean ± std) per step and held-out accuracy at each evaluation;
    ``earlier`` runs (see :mod:`app.ui.tabs.train.earlier_runs`) faded after the current one's
    two lines."""
    fig = _figure(
        "Training reward and held-out accuracy",
        "reward / accuracy",
        _last_step(history, evaluations),
    )
    steps = [h["step"] for h in history]
    method = history[-1].get("method", "gmts") if history else "gmts"
    color = method_color(method)  # the method's colour, as on every tab
    _line(
        fig,
        steps,
        [h.get("reward_mean") for h in history],
        f"training reward, {method} (batch mean)",
        color,
        error_y=dict(array=[h.get("reward_std") or 0.0 for h in history], thickness=1),
    )
    _line(
        fig,
        [e["step"] for e in evaluations],
        [e.get("accuracy") for e in evaluations],
        f"held-out accuracy, {method}",
        color,
        line_dash="dash",
        marker_symbol="diamond",
    )
    train_runs.add_overlays(fig, list(earlier))
    values = [v for t in fig.data for v in t.y if v is not None]
    if all(0.0 <= v <= 1.0 for v in values):  # 0/1 rewards and accuracies: a fixed scale
        fig.update_yaxes(range=[-0.03, 1.03])
    return fig


def loss_figure(history: list[Json]) -> go.Figure:
    """Total loss, policy loss and the KL to the starting policy per step."""
    fig = _figure("Loss", "loss", _last_step(history))
    steps = [h["step"] for h in history]
    loss, policy = [h.get("loss") for h in history], [h.get("policy_loss") for h in history]
    if loss == policy:  # β = 0: one line, not two drawn on top of each other
        _line(fig, steps, loss, "loss (= policy loss, β = 0)", LOSS_COLOR)
    else:
        _line(fig, steps, loss, "loss (policy + β·KL)", LOSS_COLOR)
        _line(fig, steps, policy, "policy loss", PART_COLOR, line_dash="dash")
    _line(fig, steps, [h.get("kl") for h in history], "KL to start (k3)", PART_COLOR,
          line_dash="dot")  # fmt: skip
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
