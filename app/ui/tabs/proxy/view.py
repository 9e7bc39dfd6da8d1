"""The "How good is the proxy?" tab: each selection score against exact per-token gradients.

It takes the group shown in Explore (its answers and rewards, as given numbers), sends it to
``POST /v1/gradcheck`` through the backend (the full-parameter gradient norm of every token's
own loss term, :mod:`gmts_core.experiments.gradcheck`) and shows, per method, the true norm against
the score on log-log axes, and the fidelity table: rank correlation with the true norms, the true
gradient mass each 20% selection keeps, and whether it keeps the direction of the update.
"""

from __future__ import annotations

import math
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from app.palette import NEUTRAL, method_color
from app.services.catalog import ANALYSIS_DEFAULTS
from app.ui.render import Json, fmt, groups_of
from app.ui.tables import card_table
from gmts_core.errors import InvalidInputError

SCATTER_COLUMNS = 2  # two panels a row: each ~150 px wide on a phone
PANEL_HEIGHT_PX = 260
FIDELITY_HEADERS = [
    "method", "Spearman (all tokens)", "Spearman (median in answer)", "true norm kept",
    "squared norm kept", "cosine to full gradient", "norm ratio",
]  # fmt: skip


def gradcheck_request(
    result: Json | None, group_index: int, max_tokens: int, precision: str = "float32"
) -> Json:
    """The ``/v1/gradcheck`` body of one group of an Explore result: its answers, its rewards
    as explicit numbers, and the analysis settings it was made with."""
    if not result:
        raise InvalidInputError("Analyze a group in the Explore tab first.")
    groups = groups_of(result)
    g = groups[min(max(int(group_index or 0), 0), len(groups) - 1)]
    answers = [a.get("text", "") for a in g.get("answers", [])]
    empty = [str(a.get("index", i)) for i, a in enumerate(g.get("answers", [])) if not answers[i]]
    if not answers or empty:
        raise InvalidInputError(
            f"answer(s) {', '.join(empty)} are empty; the check needs every answer's tokens"
            if empty
            else "the group has no answers"
        )
    s = result.get("settings") or {}
    return {
        "model": result.get("model"),
        "prompt": g.get("prompt", ""),
        "answers": answers,
        "rewards": [float(a.get("reward", 0.0)) for a in g.get("answers", [])],
        "temperature": s.get("temperature", ANALYSIS_DEFAULTS.temperature),
        "advantage": s.get("advantage", ANALYSIS_DEFAULTS.advantage),
        "loss_aggregation": s.get("loss_aggregation", ANALYSIS_DEFAULTS.loss_aggregation),
        "selection": {
            "ratio": s.get("ratio", ANALYSIS_DEFAULTS.ratio),
            "scope": s.get("scope", ANALYSIS_DEFAULTS.scope),
            "methods": s.get("methods") or ["entropy", "gmts"],
        },
        "top_alternatives": 0,
        "max_tokens": int(max_tokens),
        "precision": precision,
    }


def _tokens(body: Json) -> list[Json]:
    return [t for g in groups_of(body) for a in g.get("answers", []) for t in a.get("tokens", [])]


def _positive(x: Any) -> bool:
    return isinstance(x, int | float) and math.isfinite(x) and x > 0


def scatter_methods(body: Json) -> list[str]:
    """Methods worth a scatter: all but ``all`` (its score is the constant 1)."""
    return [m for m in (body.get("fidelity") or {}).get("spearman", {}) if m != "all"]


def proxy_scatter(body: Json) -> go.Figure:
    """True gradient norm (x) vs each method's score (y), log-log; selected tokens ringed.

    Tokens whose true norm or score is 0 (zero-advantage answers) cannot sit on log axes and
    are left out; the subplot title says how many are shown. Laid out to read at a phone's
    width (390 px) as well: two panels a row, each title on three short lines, the axis titles
    once per column and row, the legend (two entries) in a margin of its own below them.
    """
    methods = scatter_methods(body)
    fid = body.get("fidelity") or {}
    tokens = _tokens(body)
    cols = max(1, min(SCATTER_COLUMNS, len(methods)))
    rows = max(1, math.ceil(len(methods) / cols))
    titles = []
    for m in methods:
        shown = sum(
            _positive(t.get("true_grad_norm")) and _positive(t["scores"].get(m)) for t in tokens
        )
        rho = (fid.get("spearman", {}).get(m) or {}).get("batch")
        titles.append(f"<b>{m}</b><br>ρ = {fmt(rho, 3)}<br>{shown} of {len(tokens)} tokens")
    height = PANEL_HEIGHT_PX * rows + 160
    fig = make_subplots(
        rows=rows,
        cols=cols,
        subplot_titles=titles or None,
        shared_xaxes=True,  # one x (the same tokens' true norms): its labels on the last row
        horizontal_spacing=0.12,
        vertical_spacing=min(0.3, 80 / height) if rows > 1 else 0.0,
    )
    for i, m in enumerate(methods):
        _add_method(fig, tokens, m, i // cols + 1, i % cols + 1, first=i == 0)
    fig.update_annotations(font_size=11)  # the subplot titles
    # labels at powers of ten only (a log axis also labels 2 and 5: clutter at 150 px), at
    # most ~4 across a panel, level
    norms = [t["true_grad_norm"] for t in tokens if _positive(t.get("true_grad_norm"))]
    decades = math.log10(max(norms) / min(norms)) if norms else 1.0
    fig.update_xaxes(type="log", dtick=max(1, math.ceil(decades / 3)), tickangle=0)
    fig.update_yaxes(type="log", dtick=1)
    for c in range(1, cols + 1):
        fig.update_xaxes(title_text="true gradient norm", title_standoff=4, row=rows, col=c)
    for r in range(1, rows + 1):
        fig.update_yaxes(title_text="score", title_standoff=2, row=r, col=1)
    fig.update_layout(
        template="plotly_white",
        height=height,
        margin=dict(l=60, r=16, t=150, b=100),
        legend=dict(orientation="h", yref="container", y=0, yanchor="bottom", x=0),
        title=dict(
            text="Score vs exact per-token gradient norm<br>(log-log)",
            font_size=15,
            yref="container",
            y=1,
            yanchor="top",
            pad=dict(t=34),  # below the label Gradio draws over the chart's top left
        ),
    )
    return fig


def _add_method(
    fig: go.Figure, tokens: list[Json], m: str, row: int, col: int, first: bool
) -> None:
    for selected, color in ((False, NEUTRAL), (True, method_color(m))):
        pts = [
            t
            for t in tokens
            if bool(t["selected"].get(m)) == selected
            and _positive(t.get("true_grad_norm"))
            and _positive(t["scores"].get(m))
        ]
        fig.add_trace(
            go.Scatter(
                x=[t["true_grad_norm"] for t in pts],
                y=[t["scores"][m] for t in pts],
                mode="markers",
                # the panel's title names the method: two legend entries say the rest
                name="selected (◆, the method's colour)" if selected else "not selected",
                legendgroup="selected" if selected else "not selected",
                showlegend=first,
                marker=dict(
                    color=color,
                    size=7 if selected else 6,
                    symbol="diamond" if selected else "circle",
                    opacity=0.85,
                ),
                text=[f"pos {t.get('position')}: {t.get('text', '')!r}" for t in pts],
                hovertemplate="%{text}<br>true %{x:.3g}<br>score %{y:.3g}<extra>" + m + "</extra>",
            ),
            row=row,
            col=col,
        )


def fidelity_rows(fid: Json) -> list[list[str]]:
    """One row per method: how its score ranks the true norms and what its selection keeps."""
    rows = []
    for m, rho in (fid.get("spearman") or {}).items():
        rows.append(
            [
                m,
                fmt((rho or {}).get("batch"), 3),
                fmt((rho or {}).get("within_answer_median"), 3),
                fmt(fid.get("true_grad_coverage", {}).get(m), 3),
                fmt(fid.get("true_grad_sq_coverage", {}).get(m), 3),
                fmt(fid.get("cosine_to_full", {}).get(m), 3),
                fmt(fid.get("norm_ratio_to_full", {}).get(m), 3),
            ]
        )
    return rows


def fidelity_markdown(body: Json) -> str:
    """The headline numbers and the notes of a gradcheck."""
    fid = body.get("fidelity") or {}
    s = body.get("summary") or {}
    head = fid.get("spearman_head") or {}
    lines = [
        f"{fid.get('num_tokens')} answer tokens · {fid.get('num_parameters', 0):,} parameters · "
        f"k = {s.get('k')} ({s.get('scope')}) · {fid.get('precision')} · "
        f"{fmt(fid.get('seconds'), 3)} s · ‖full gradient‖ = {fmt(fid.get('full_grad_norm'))}",
        f"Head-only norm γ·‖h‖ vs true norm: Spearman {fmt(head.get('batch'), 3)} "
        f"(median in answer {fmt(head.get('within_answer_median'), 3)}).",
    ]
    lines += [f"- {n}" for n in [*fid.get("notes", []), *body.get("notes", [])]]
    return "\n\n".join(lines[:2]) + ("\n\n" + "\n".join(lines[2:]) if lines[2:] else "")


def fidelity_html(fid: Json) -> str:
    """The fidelity table as HTML: a card per method on a phone (:func:`card_table`)."""
    return card_table(FIDELITY_HEADERS, fidelity_rows(fid), "fidelity of each method's score")


def proxy_view(body: Json) -> list[Any]:
    """Markdown, fidelity table (HTML) and scatter for a gradcheck response."""
    fid = body.get("fidelity") or {}
    return [fidelity_markdown(body), fidelity_html(fid), proxy_scatter(body)]
