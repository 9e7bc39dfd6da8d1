"""The Runs tab: pick a training run, see its steps charted, click a step to see its groups.

Runs are the folders and JSONL files under the server's run roots (``GMTS_RUN_ROOTS``). The
charts come from ``GET /v1/runs/{id}`` (numbers the files hold, plus the analysis rows known);
clicking a row of the steps table (or previous/next) shows that step's groups in the token
renderer: for a GMTSGRPOTrainer token log the mask the trainer applied ("applied") against
GMTS's, for other formats an analysis computed on demand with the chosen model (a heavy job,
queued like any analysis). The functions above ``build_runs_tab`` are Gradio-free.
"""

import logging
from html import escape
from typing import Any

import pandas as pd
import plotly.graph_objects as go

from app.reports.run_charts import per_method_figure, reward_figure
from app.ui.render import placeholder, render_group

logger = logging.getLogger(__name__)
Json = dict[str, Any]
STEP_COLUMNS = ["step", "groups", "answers", "reward mean", "zero-signal share"]


def run_choices(runs: Json) -> list[tuple[str, str]]:
    """Dropdown choices: ``id (format, N steps)`` -> id."""
    return [(f"{r['id']} ({r['format']}, {r['num_steps']} steps)", r["id"]) for r in runs["runs"]]


def steps_table(overview: Json) -> pd.DataFrame:
    """One row per summarised step: sizes, reward, zero-signal share, coverage where known."""
    reports = {r["step"]: r for r in overview.get("reports", [])}
    methods = list(next(iter(reports.values()))["gradient_coverage"]) if reports else []
    rows = []
    for o in overview["overview"]:
        rep = reports.get(o["step"])
        row = [o["step"], o["num_groups"], o["num_answers"], _r(o["reward_mean"])]
        row.append(_r(o["zero_signal_share"]))
        row += [_r(rep["gradient_coverage"].get(m)) if rep else None for m in methods]
        rows.append(row)
    return pd.DataFrame(rows, columns=STEP_COLUMNS + [f"coverage {m}" for m in methods])


def _r(v: float | None) -> float | None:
    return None if v is None else round(float(v), 4)


def overview_figures(overview: Json) -> tuple[go.Figure, go.Figure]:
    """Reward and zero-signal share over steps; gradient coverage per method over steps."""
    rows = overview["overview"]
    reports = overview.get("reports", [])
    cover = per_method_figure(reports, "gradient_coverage", "Gradient coverage per method")
    if not reports:
        cover.update_layout(title="Gradient coverage: click steps to analyse them")
    return reward_figure(rows), cover


def step_methods(view: Json) -> tuple[str, str]:
    """The two selections marked: the applied mask vs GMTS, else entropy vs GMTS."""
    if view["mode"] == "logged":
        return ("applied", "gmts")
    methods = view["analysis"]["settings"]["methods"]
    a = "entropy" if "entropy" in methods else methods[0]
    b = "gmts" if "gmts" in methods else methods[-1]
    return (a, b)


def step_groups(view: Json) -> list[Json]:
    if view["mode"] == "logged":
        return list(view["logged"] or [])
    return list(view["analysis"]["groups"] or [])


def step_html(view: Json | None) -> str:
    """Every group of the step in the token renderer."""
    if not view:
        return placeholder("Pick a run, then click a step in the table.")
    methods = step_methods(view)
    return "".join(render_group(g, methods) for g in step_groups(view))


def step_summary(view: Json | None) -> str:
    if not view:
        return ""
    r = view["report"]
    a, b = step_methods(view)
    what = (
        f"the mask **the trainer applied** (method `{escape(str(r['extra'].get('method')))}`) vs "
        "GMTS at the same ratio"
        if view["mode"] == "logged"
        else f"`{a}` vs `{b}`, analysed now with the chosen model"
    )
    cov = ", ".join(f"{m} {v:.3f}" for m, v in r["gradient_coverage"].items() if v is not None)
    waste = ", ".join(f"{m} {v:.3f}" for m, v in r["wasted_share"].items() if v is not None)
    return (
        f"**Step {view['step']}** of `{escape(view['run'])}` ({view['format']}): "
        f"{r['num_groups']} groups, {r['num_answers']} answers, {r['num_tokens']} tokens; "
        f"zero-signal share {r['zero_signal_share']:.2f}. Marked: {what}.  \n"
        f"Gradient coverage: {cov}.  \nWasted share: {waste}."
    )
