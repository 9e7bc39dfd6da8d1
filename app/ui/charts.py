"""Plotly figures and summary tables of an analysis (pure: JSON result in, figure out).

Nothing here computes a statistic of its own: every number comes from the analysis result
(``app.services.responses.analysis_json``), the figures only arrange it. Colours come from
:mod:`app.palette` (one colour per method on every tab), and selections are marked by
marker shape as well as colour.
"""

from __future__ import annotations

import math
from html import escape
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from app import palette
from app.palette import answer_color, answer_dash, answer_symbol, method_color
from app.ui.render import Json, groups_of

# legend under the plot, anchored to the bottom of the figure so that however many rows it
# wraps into on a phone it never covers the x-axis title (the margin grows to fit it)
LAYOUT = dict(
    template="plotly_white",
    margin=dict(l=55, r=20, t=50, b=40),
    legend=dict(orientation="h", yref="container", yanchor="bottom", y=0, x=0),
    height=460,
)
TWO_LINE_TITLE_TOP = 76  # the top margin (px) of a chart whose title takes two lines
_AXIS = dict(automargin=True)
# the scatter's y axis: linear (zero-gradient tokens visible) or log (spreads the small ones)
_LOG_BUTTONS = [
    dict(
        type="buttons", direction="right", x=1, xanchor="right", y=1.12, yanchor="bottom",
        showactive=True,
        buttons=[
            dict(label="linear", method="relayout", args=[{"yaxis.type": "linear"}]),
            dict(label="log", method="relayout", args=[{"yaxis.type": "log"}]),
        ],
    )
]  # fmt: skip


def _tokens(group: Json) -> list[tuple[int, Json]]:
    return [(int(a.get("index", 0)), t) for a in group.get("answers", []) for t in a["tokens"]]


def _hover(ai: int, t: Json) -> str:
    return f"answer #{ai} pos {t.get('position')}: {t.get('text', '')!r}"


def scatter_entropy_proxy(group: Json, methods: tuple[str, str]) -> go.Figure:
    """Entropy vs gradient proxy, one point per token, coloured by answer, selections ringed."""
    fig = go.Figure()
    for ans in group.get("answers", []):
        ai, toks = int(ans.get("index", 0)), ans.get("tokens", [])
        fig.add_trace(
            go.Scatter(
                x=[t.get("entropy") for t in toks],
                y=[t.get("grad_proxy") for t in toks],
                mode="markers",
                name=f"answer #{ai} (A={ans.get('advantage', 0):+.2f})",
                marker=dict(color=answer_color(ai), symbol=answer_symbol(ai), size=8, opacity=0.85),
                text=[_hover(ai, t) for t in toks],
                customdata=[[ai, t.get("position")] for t in toks],  # a click finds the token
                hovertemplate="%{text}<br>entropy %{x:.3f}<br>grad_proxy %{y:.3g}"
                "<br>click: show this token<extra></extra>",
            )
        )
    for method, symbol, size in ((methods[0], "circle-open", 15), (methods[1], "square-open", 19)):
        color = method_color(method)
        sel = [(ai, t) for ai, t in _tokens(group) if t.get("selected", {}).get(method)]
        fig.add_trace(
            go.Scatter(
                x=[t.get("entropy") for _, t in sel],
                y=[t.get("grad_proxy") for _, t in sel],
                mode="markers",
                name=f"selected by {method}",
                marker=dict(symbol=symbol, size=size, color=color, line=dict(width=2, color=color)),
                hoverinfo="skip",
            )
        )
    fig.update_layout(
        title="Entropy vs gradient proxy (per token)",
        xaxis_title="entropy H (nats)",
        yaxis_title="gradient proxy |A|·w·g",
        updatemenus=_LOG_BUTTONS,
        **LAYOUT,
    )
    fig.update_xaxes(**_AXIS)
    fig.update_yaxes(**_AXIS)
    return fig


def score_distributions(group: Json, methods: tuple[str, str]) -> go.Figure:
    """Histograms of entropy and gradient proxy: all tokens vs each method's selection, side
    by side in each bin (overlaid bars would blend into a colour no legend names)."""
    # each panel named by its x-axis title (a title above it sat on the top tick at 390 px)
    # one y axis (token counts of 20 bins each), labelled once
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.08, shared_yaxes=True)
    toks = [t for _, t in _tokens(group)]
    subsets = [("all tokens", palette.NEUTRAL, toks)] + [
        (f"selected by {m}", method_color(m), [t for t in toks if t.get("selected", {}).get(m)])
        for m in dict.fromkeys(methods)
    ]
    for col, key in ((1, "entropy"), (2, "grad_proxy")):
        for name, color, subset in subsets:
            fig.add_trace(
                go.Histogram(
                    x=[t.get(key) for t in subset],
                    name=name,
                    marker_color=color,
                    nbinsx=20,
                    legendgroup=name,
                    showlegend=col == 1,
                ),
                row=1,
                col=col,
            )
    fig.update_layout(title="Score distributions", barmode="group", bargap=0.1, **LAYOUT)
    fig.update_yaxes(title_text="tokens", row=1, col=1)
    fig.update_xaxes(title_text="entropy H (nats)", row=1, col=1)
    fig.update_xaxes(title_text="gradient proxy", row=1, col=2)
    # a phone's panel is ~140 px wide: few ticks, the proxy's small numbers in SI (500µ, 1m)
    fig.update_xaxes(nticks=4, row=1, col=1)
    fig.update_xaxes(nticks=3, tickformat="~s", row=1, col=2)
    fig.update_yaxes(ticklabelstandoff=4)  # the two "0"s at the corner apart
    return fig


def position_curves(group: Json, key: str = "entropy") -> go.Figure:
    """A score along the answer positions, one line per answer."""
    fig = go.Figure()
    for ans in group.get("answers", []):
        ai, toks = int(ans.get("index", 0)), ans.get("tokens", [])
        fig.add_trace(
            go.Scatter(
                x=[t.get("position") for t in toks],
                y=[t.get(key) for t in toks],
                mode="lines+markers",
                name=f"answer #{ai}",
                line=dict(color=answer_color(ai), dash=answer_dash(ai)),
                marker=dict(size=5, symbol=answer_symbol(ai)),
                text=[repr(t.get("text", "")) for t in toks],
                customdata=[[ai, t.get("position")] for t in toks],
                hovertemplate="pos %{x} %{text}<br>" + key + " %{y:.3g}<extra></extra>",
            )
        )
    fig.update_layout(
        title=f"{key.capitalize()} along the answer",
        xaxis_title="position in answer",
        yaxis_title=key,
        **LAYOUT,
    )
    fig.update_xaxes(tickformat="d", rangemode="tozero")
    return fig


def advantage_bars(group: Json) -> go.Figure:
    """Advantage of each answer (the factor that scales all its tokens' gradients)."""
    answers = group.get("answers", [])
    adv = [a.get("advantage") or 0.0 for a in answers]
    fig = go.Figure(
        go.Bar(
            x=[f"#{a.get('index', i)} (r={a.get('reward', 0):g})" for i, a in enumerate(answers)],
            y=adv,
            marker_color=[
                palette.POSITIVE if v > 0 else palette.NEGATIVE if v < 0 else palette.NEUTRAL
                for v in adv
            ],
            marker_pattern_shape=["" if v >= 0 else "/" for v in adv],
            hovertemplate="answer %{x}<br>advantage %{y:.3f}<extra></extra>",
        )
    )
    fig.update_layout(
        title="Advantage per answer<br>(hatched: pushed down)",
        xaxis_title="answer (reward)",
        yaxis_title="advantage A",
        **LAYOUT,
    )
    fig.update_layout(margin_t=TWO_LINE_TITLE_TOP)
    return fig


def _pct(x: Any) -> str:
    return "—" if x is None else f"{100 * float(x):.1f}%"


def _num(x: Any) -> str:
    return "—" if x is None else f"{float(x):.3f}"


def summary_rows(summary: Json, methods: tuple[str, str]) -> list[list[str]]:
    """The summary table: coverage, wasted share, overlap and Spearman correlations."""
    a, b = methods
    cov = summary.get("gradient_coverage", {})
    wasted = summary.get("wasted_share", {})
    counts = summary.get("selected_count", {})
    ov = summary.get("overlap", {}).get(f"{a}|{b}") or summary.get("overlap", {}).get(f"{b}|{a}")
    rho = summary.get("spearman_entropy_grad", {})
    rows = [
        ["tokens (N) / k", f"{summary.get('num_tokens', '—')} / {summary.get('k', '—')}"],
        ["selection scope, ratio", f"{summary.get('scope', '—')}, {summary.get('ratio', '—')}"],
    ]
    for m in dict.fromkeys(methods):
        rows.append([f"{m}: selected", str(counts.get(m, "—"))])
        rows.append([f"{m}: gradient coverage", _pct(cov.get(m))])
        if m in wasted:
            rows.append([f"{m}: wasted share", _pct(wasted.get(m))])
    if ov is not None and a != b:
        rows.append([f"overlap {a} ∩ {b}", f"{ov['count']} tokens (Jaccard {ov['jaccard']:.2f})"])
    rows.append(["Spearman(H, grad_proxy) whole group", _num(rho.get("batch"))])
    rows.append(
        ["Spearman(H, grad_proxy) within answers (median)", _num(rho.get("within_answer_median"))]
    )
    return rows


# one-line definitions of the summary's rows, by what the row's label ends with or starts with
SUMMARY_DEFINITIONS = (
    ("tokens (N) / k", "N answer tokens in the analysis; k = ⌈ratio·N⌉ of them can be selected."),
    (
        "selection scope",
        "Where the top ratio is taken: the whole batch, each group or each answer.",
    ),
    (": selected", "How many tokens the method keeps for the update."),
    (
        ": gradient coverage",
        "Share of the total gradient mass Σ w·|A|·g that the selected tokens carry.",
    ),
    (
        ": wasted share",
        "Share of the selected tokens whose gradient is exactly 0 (A = 0): budget spent for "
        "nothing.",
    ),
    ("overlap", "Tokens both methods select; Jaccard = both / either."),
    (
        "Spearman(H, grad_proxy) whole",
        "Rank correlation of entropy and the exact gradient norm over all tokens (1: same order).",
    ),
    (
        "Spearman(H, grad_proxy) within",
        "The same correlation inside each answer (A and w constant there), median over answers.",
    ),
)


def summary_definition(label: str) -> str:
    """The one-line definition of a summary row (empty if none is known)."""
    for key, text in SUMMARY_DEFINITIONS:
        if label.startswith(key) or key in label:
            return text
    return ""


def summary_html(rows: list[list[str]]) -> str:
    """The summary as a two-column list that wraps inside a phone's width (escaped HTML); each
    row's label carries an "i" in a circle (drawn by CSS: the ⓘ glyph is missing from some
    system fonts) whose definition shows on hover, focus or tap."""
    if not rows:
        return ""

    def label(q: str) -> str:
        d = summary_definition(q)
        if not d:
            return escape(q)
        return (
            f'{escape(q)} <span class="info" tabindex="0" role="note" aria-label="{escape(d)}" '
            f'title="{escape(d)}"><span class="info-i" aria-hidden="true">i</span>'
            f'<span class="info-text">{escape(d)}</span></span>'
        )

    items = "".join(
        f'<div class="summary-row"><dt>{label(q)}</dt><dd>{escape(v)}</dd></div>' for q, v in rows
    )
    return f'<div class="summary-box"><h4>Summary</h4><dl class="summary-list">{items}</dl></div>'


def _short(v: Any) -> Any:
    return float(f"{v:.4g}") if isinstance(v, float) and math.isfinite(v) else v


def compact(fig: go.Figure) -> go.Figure:
    """Round the traces' x and y to 4 significant digits (hover labels show 3), in place.

    The Explore charts travel as JSON with the page (the example) and with every result; their
    17-digit floats were most of those bytes, and the browser parses every one of them.
    """
    for trace in fig.data:
        for axis in ("x", "y"):
            values = getattr(trace, axis, None)
            if values is not None and any(isinstance(v, float) for v in values):
                trace[axis] = [_short(v) for v in values]
    return fig


def group_figures(result: Json, methods: tuple[str, str], group_index: int = 0) -> dict[str, Any]:
    """All figures of one group of a result, keyed by name (coordinates ``compact``)."""
    groups = groups_of(result)
    group = groups[min(max(group_index, 0), len(groups) - 1)]
    figures = {
        "scatter": scatter_entropy_proxy(group, methods),
        "distributions": score_distributions(group, methods),
        "positions": position_curves(group, "entropy"),
        "advantages": advantage_bars(group),
    }
    return {name: compact(fig) for name, fig in figures.items()}
