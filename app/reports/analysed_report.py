"""An analysed run's charts, summary in words, token view and self-contained HTML report.

Pure functions of the API's bodies (``GET /v1/analysed-runs/{id}/steps`` and an answer's
``.../tokens``): the Runs tab draws them, and its "Download report" writes them into one HTML
file that opens offline (plotly.js inlined). Methods take their colours from :mod:`app.palette`.
"""

from __future__ import annotations

import html
import math
from typing import Any

import plotly.graph_objects as go
import plotly.io as pio

from app.palette import OKABE_ITO, method_color

Json = dict[str, Any]
# the legend sits below the x axis's tick labels and title (about 50 px together), not on them
LAYOUT = dict(
    template="plotly_white",
    margin=dict(l=55, r=20, t=70, b=120),
    legend=dict(orientation="h", yanchor="top", y=-0.3, x=0),
    height=400,
)


def step_ticks(steps: list[int]) -> dict[str, Any]:
    """Whole-step ticks, at most about 10, each step label once: linear from the first step
    in a whole stride (plotly's automatic ticks put 1.5 between steps 1 and 2, and "d"
    formatting then prints "1, 1, 2, 2")."""
    if not steps:
        return dict(tickmode="auto", tickformat="d")
    span = max(steps) - min(steps)
    return dict(tickmode="linear", tick0=min(steps), dtick=max(1, math.ceil(span / 10)))


def _steps_axis(fig: go.Figure, steps: list[int]) -> go.Figure:
    fig.update_xaxes(title="training step", tickformat="d", **step_ticks(steps))
    return fig


def reward_entropy_figure(body: Json) -> go.Figure:
    """Mean reward and mean entropy per step, and the share of zero-signal groups."""
    rows = body["steps"]
    steps = [r["step"] for r in rows]
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=steps, y=[r["reward_mean"] for r in rows], name="reward mean",
            mode="lines+markers", line=dict(color=OKABE_ITO[4]),
        )
    )  # fmt: skip
    fig.add_trace(
        go.Bar(
            x=steps, y=[r["zero_signal_share"] for r in rows], name="zero-signal groups",
            marker_color=OKABE_ITO[5], opacity=0.4,
        )
    )  # fmt: skip
    fig.add_trace(
        go.Scatter(
            x=steps, y=[r["entropy_mean"] for r in rows], name="entropy mean (nats, right)",
            mode="lines", line=dict(color=OKABE_ITO[6], dash="dot"), yaxis="y2",
        )
    )  # fmt: skip
    fig.update_layout(
        title="Reward, zero-signal groups and entropy",
        yaxis=dict(title="reward / share", rangemode="tozero"),
        yaxis2=dict(title="nats", overlaying="y", side="right", rangemode="tozero"),
        **LAYOUT,
    )
    return _steps_axis(fig, steps)


def selection_figure(body: Json) -> go.Figure:
    """Per method: gradient coverage (solid) and wasted share (dashed); the overlap."""
    rows, methods = body["steps"], body["run"]["methods"]
    steps = [r["step"] for r in rows]
    fig = go.Figure()
    for m in methods:
        color = method_color(m)
        fig.add_trace(
            go.Scatter(
                x=steps, y=[r["coverage"].get(m) for r in rows], name=f"{m}: coverage",
                mode="lines+markers", line=dict(color=color),
            )
        )  # fmt: skip
        fig.add_trace(
            go.Scatter(
                x=steps, y=[r["wasted"].get(m) for r in rows], name=f"{m}: wasted",
                mode="lines", line=dict(color=color, dash="dash"),
            )
        )  # fmt: skip
    if len(methods) > 1:
        fig.add_trace(
            go.Scatter(
                x=steps, y=[r["overlap"] for r in rows], name=f"overlap {methods[0]}–{methods[1]}",
                mode="lines", line=dict(color=OKABE_ITO[7], dash="dot"),
            )
        )  # fmt: skip
    fig.update_layout(title="What each selection keeps and wastes", **LAYOUT)
    fig.update_yaxes(range=[0, 1.02], title="share")
    return _steps_axis(fig, steps)


def _mean(values: list[Any]) -> float | None:
    clean = [v for v in values if isinstance(v, int | float) and math.isfinite(v)]
    return sum(clean) / len(clean) if clean else None


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.0f}%"


def summary_text(body: Json) -> str:
    """The run in a few plain sentences, from the stored numbers."""
    rows, methods = body["steps"], body["run"]["methods"]
    if not rows:
        return "No step of this run has been analysed yet."
    answers = sum(r["num_answers"] for r in rows)
    tokens = sum(r["num_tokens"] for r in rows)
    first, last = rows[0], rows[-1]
    parts = [
        f"{len(rows)} steps analysed (steps {first['step']}–{last['step']}): {answers:,} answers, "
        f"{tokens:,} answer tokens."
    ]
    if first["reward_mean"] is not None and last["reward_mean"] is not None:
        parts.append(
            f"The mean reward went from {first['reward_mean']:.2f} at step {first['step']} to "
            f"{last['reward_mean']:.2f} at step {last['step']}."
        )
    zero = _mean([r["zero_signal_share"] for r in rows])
    parts.append(
        f"On average {_pct(zero)} of the groups had one reward for all their answers, so they "
        "carry no learning signal."
    )
    for m in methods:
        cover = _mean([r["coverage"].get(m) for r in rows])
        waste = _mean([r["wasted"].get(m) for r in rows])
        parts.append(
            f"{m} keeps {_pct(cover)} of the gradient mass on average and spends {_pct(waste)} "
            "of its picks on tokens with no gradient."
        )
    return " ".join(parts)


def _num(value: Any, digits: int = 3) -> str:
    """A number rounded for reading (``—`` where the file holds none)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return f"{value:.{digits}g}"


def marked_pair(methods: list[str]) -> list[str]:
    """The two methods a token view marks (entropy and gmts where both were run, else the
    first two); the others are named in each token's tooltip."""
    if "entropy" in methods and "gmts" in methods:
        return ["entropy", "gmts"]
    return list(methods[:2])


# a token no tokenizer decoded (a dump's logged numbers analysed without a model)
NOT_DECODED = "text not decoded (no model's tokenizer)"


def shown_text(tok: Json) -> str:
    """The token's text, or its id in brackets where the dataset holds no text for it."""
    return f"[id {tok['token_id']}]" if tok.get("text") is None else str(tok["text"])


def token_title(tok: Json, num_tokens: int | None) -> str:
    """A token's tooltip: its numbers rounded, its probability, and ranks labelled with the
    pool they are ranks in."""
    pool = f" of {num_tokens:,} in the step" if num_tokens else " in the step"
    picked = [m for m, on in tok["selected"].items() if on] or ["none"]
    logprob = tok.get("logprob")
    prob = "—" if logprob is None else f"{math.exp(logprob):.1%}"
    rank = tok.get("gamma_rank")
    gamma_rank = "—" if rank is None else f"#{rank:,}{pool}"
    text = NOT_DECODED if tok.get("text") is None else repr(tok["text"])
    return (
        f"{text} (position {tok['position']:,})\n"
        f"probability {prob} (log π {_num(logprob)})\n"
        f"entropy {_num(tok.get('entropy'))} nats: rank #{tok['entropy_rank']:,}{pool}\n"
        f"γ {_num(tok.get('gamma'))}: rank {gamma_rank}\n"
        f"g {_num(tok.get('grad_norm'))}\n"
        f"selected by: {', '.join(picked)}"
    )


def tokens_html(tokens: list[Json], methods: list[str], num_tokens: int | None = None) -> str:
    """An answer's tokens with two marks, as in Explore: the first of :func:`marked_pair`
    underlines a token, the second draws a bar above it (both: both); every method's pick,
    the numbers and the ranks are in the token's tooltip."""
    if not tokens:
        return "<p class='analysed-empty'>Pick an answer to see its tokens.</p>"
    pair = marked_pair(methods)
    edges = ("-3px", "3px")  # below the text for the first, above it for the second
    spans = []
    for tok in tokens:
        picked = [m for m in pair if tok["selected"].get(m)]
        shadows = ", ".join(f"inset 0 {edges[pair.index(m)]} 0 {method_color(m)}" for m in picked)
        style = f"box-shadow: {shadows};" if shadows else ""
        cls = "tok " + " ".join(f"sel-{m}" for m in tok["selected"] if tok["selected"][m])
        title = html.escape(token_title(tok, num_tokens), quote=True)
        spans.append(
            f"<span class='{cls}' style='{style}' title='{title}'>{html.escape(shown_text(tok))}"
            "</span>"
        )
    where = ("underlined", "barred above")
    legend = "; ".join(
        f"<span style='box-shadow: inset 0 {edges[i]} 0 {method_color(m)}'>{where[i]}: "
        f"{html.escape(m)}</span>"
        for i, m in enumerate(pair)
    )
    return (
        f"<div class='analysed-legend'>{legend} (every method's pick: hover or tap a token)</div>"
        f"<div class='analysed-tokens' style='white-space:pre-wrap;line-height:2.2'>"
        f"{''.join(spans)}</div>"
    )


def report_html(body: Json, answer: Json | None, tokens: list[Json]) -> str:
    """One self-contained page: the summary, both charts and the shown answer's tokens."""
    run = body["run"]
    figs = [reward_entropy_figure(body), selection_figure(body)]
    charts = "".join(
        pio.to_html(f, full_html=False, include_plotlyjs=(i == 0)) for i, f in enumerate(figs)
    )
    step_part = ""
    if answer is not None:
        num = next((r["num_tokens"] for r in body["steps"] if r["step"] == answer["step"]), None)
        step_part = (
            f"<h2>Step {answer['step']}, group {answer['group']}, answer {answer['answer']}</h2>"
            f"<p>Prompt: {html.escape(str(answer.get('prompt', '')))}</p>"
            f"<p>Reward {_num(answer.get('reward'))}, advantage {_num(answer.get('advantage'))}</p>"
            + tokens_html(tokens, run["methods"], num)
        )
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'>"
        f"<title>GMTS analysed run {html.escape(run['id'])}</title></head><body>"
        f"<h1>Analysed run {html.escape(run['id'])}</h1>"
        f"<p class='summary'>{html.escape(summary_text(body))}</p>{charts}{step_part}"
        "</body></html>"
    )
