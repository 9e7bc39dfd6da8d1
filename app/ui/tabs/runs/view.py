"""The Runs tab's Gradio-free parts: run choices, the steps table, charts over steps, and a
step's view (summary, "why they differ" and every group's tokens).

Runs are the folders and JSONL files under the server's run roots (``GMTS_RUN_ROOTS``). The
reward chart comes from ``GET /v1/runs/{id}`` (numbers the files hold); coverage, overlap and
wasted share over steps from ``GET /v1/runs/{id}/metrics``, which the server computes in the
background once the run is opened (polled, with progress). A step's groups are a
GMTSGRPOTrainer token log's applied mask against GMTS's, or an analysis computed on demand
with the chosen model (a heavy job, queued like any analysis).
"""

import logging
import re
from html import escape
from typing import Any

import pandas as pd
import plotly.graph_objects as go

from app.palette import OKABE_ITO
from app.reports.run_charts import (
    LAYOUT,
    TRAINER_NAMES,
    integer_steps,
    per_method_figure,
    reward_figure,
    trainer_figure,
)
from app.schemas.runs import RunsResponse
from app.ui.downloads import standalone_page
from app.ui.render import placeholder, rank_pool, render_group
from app.ui.why_differ import why_differ_html

logger = logging.getLogger(__name__)
Json = dict[str, Any]
STEP_COLUMNS = ["step", "groups", "answers", "reward mean", "zero-signal share"]


def run_choices(runs: RunsResponse) -> list[tuple[str, str]]:
    """Dropdown choices of the readable runs: ``id (format, N steps)`` -> id."""
    return [(f"{r.id} ({r.format}, {r.num_steps} steps)", r.id) for r in runs.runs if r.readable]


_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!<>|~&])")


def md_text(text: str) -> str:
    """``text`` shown literally in Markdown: every character Markdown (or the HTML it
    allows) would read escaped with a backslash, once (the renderer escapes nothing more)."""
    return _MD_SPECIAL.sub(r"\\\1", text.replace("\n", " "))


def md_code(text: str) -> str:
    """``text`` as a Markdown code span, shown literally whatever backticks it holds."""
    fence = "`" * (max((len(m) for m in re.findall("`+", text)), default=0) + 1)
    return f"{fence} {text.replace(chr(10), ' ')} {fence}"


def unreadable_note(runs: RunsResponse) -> str:
    """The runs listed but not readable, each with its reason (Markdown; empty if none)."""
    bad = [r for r in runs.runs if not r.readable]
    lines = [f"- {md_code(r.id)}: {md_text(str(r.reason))}" for r in bad[:20]]
    if len(bad) > 20:
        lines.append(f"- ... and {len(bad) - 20} more")
    if runs.truncated:
        lines.append("- the run root holds more entries than GMTS_RUN_MAX_FOLDER_ENTRIES")
    return ("**Not readable:**\n" + "\n".join(lines)) if lines else ""


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
        cover.update_layout(title="Gradient coverage: being computed")
    return reward_figure(rows), cover


def trainer_metrics_figure(overview: Json, reports: list[Json] | None = None) -> go.Figure | None:
    """What the trainer itself logged (reward, entropy) over steps, next to what GMTS computed:
    the reward it read from the rollouts and the mean entropy of the steps analysed so far
    (``reports``: the background metrics' rows; default the overview's own); None when the
    run's folder holds no trainer log."""
    metrics = overview.get("trainer_metrics")
    if not metrics or not metrics.get("steps"):
        return None
    rows = overview.get("overview", [])
    return trainer_figure(metrics, rows, overview.get("reports") if reports is None else reports)


def trainer_metrics_note(overview: Json) -> str:
    """Where the trainer's own metrics came from, or why there are none (Markdown)."""
    if overview.get("trainer_metrics_error"):
        return f"**Trainer's log not read:** {escape(str(overview['trainer_metrics_error']))}"
    metrics = overview.get("trainer_metrics")
    if not metrics:
        return (
            "No trainer metrics log in this run's folder (TRL: `trainer_state.json`, written by "
            "`trainer.save_state()` or in `checkpoint-N/`; verl: `trainer.logger=[console,file]` "
            "with `VERL_FILE_LOGGER_ROOT` set to the run's folder)."
        )
    who = TRAINER_NAMES.get(str(metrics["format"]), str(metrics["format"]))
    shown = ", ".join(f"{k} = `{escape(v)}`" for k, v in metrics["keys"].items())
    thinned = (
        f" (every step of {metrics['num_steps']:,} thinned to {len(metrics['steps']):,})"
        if metrics["num_steps"] > len(metrics["steps"])
        else ""
    )
    return f"What {who} itself logged, from `{escape(str(metrics['source']))}`{thinned}: {shown}."


def metrics_status(metrics: Json | None) -> str:
    """The background analysis' progress in words."""
    if not metrics:
        return ""
    done, total = metrics["steps_done"], metrics["steps_total"]
    if metrics["running"]:
        text = f"Metrics over steps: computing, {done} of {total} steps done."
    else:
        text = f"Metrics over steps: {done} of {total} steps analysed."
    if metrics.get("error"):
        text += f" ({escape(str(metrics['error']))})"
    return text


def metrics_figures(metrics: Json | None) -> tuple[go.Figure, go.Figure, go.Figure]:
    """Gradient coverage, wasted share and overlap (Jaccard per pair) over the analysed steps."""
    reports = (metrics or {}).get("reports", [])
    suffix = "" if metrics is None or not metrics["running"] else " (computing...)"
    cover = per_method_figure(reports, "gradient_coverage", "Gradient coverage" + suffix)
    waste = per_method_figure(reports, "wasted_share", "Wasted share" + suffix)
    pairs = list(reports[0]["overlap"]) if reports else []
    overlap = go.Figure()
    for i, pair in enumerate(pairs):
        overlap.add_trace(
            go.Scatter(
                x=[r["step"] for r in reports],
                y=[r["overlap"].get(pair) for r in reports],
                name=pair.replace("|", " & "),
                mode="lines+markers",
                line=dict(color=OKABE_ITO[(i + 4) % len(OKABE_ITO)]),
            )
        )
    overlap.update_layout(title="Overlap (Jaccard)" + suffix, yaxis_range=[-0.02, 1.02], **LAYOUT)
    integer_steps(overlap, max([1, *(int(r["step"]) for r in reports)]))
    return cover, waste, overlap


def step_methods(view: Json) -> tuple[str, str]:
    """The two selections marked: the applied mask vs GMTS, else entropy vs GMTS."""
    if view["mode"] == "logged":
        return ("applied", "gmts")
    if view["mode"] == "dump":  # the selections the dump's own numbers suffice for
        return ("entropy", "gmts_entropy")
    methods = view["analysis"]["settings"]["methods"]
    a = "entropy" if "entropy" in methods else methods[0]
    b = "gmts" if "gmts" in methods else methods[-1]
    return (a, b)


def step_groups(view: Json) -> list[Json]:
    """The step's groups, whatever form the analysis came in: a step with one prompt (a TRL
    run with one prompt per step) is an analysis in single form, its answers at top level."""
    if view["mode"] in ("logged", "dump"):
        return list(view["logged"] or [])
    analysis = view["analysis"]
    if analysis.get("groups"):
        return list(analysis["groups"])
    return [
        {
            "index": 0,
            "prompt": analysis.get("prompt") or "",
            "answers": analysis.get("answers") or [],
            "summary": analysis.get("summary") or {},
        }
    ]


def step_html(view: Json | None, color_by: str = "entropy") -> str:
    """Every group of the step in the token renderer, shaded by ``color_by`` (a key of
    ``app.ui.render.COLOR_BY``: entropy, or the train/inference mismatch)."""
    if not view:
        return placeholder("Pick a run, then click a step in the table.")
    methods = step_methods(view)
    groups = step_groups(view)
    if not groups:
        return placeholder("This step has no groups.")
    # the ranks count over the pool the analysis' scope ranks in (logged steps carry no ranks)
    analysis = view.get("analysis") or {}
    return "".join(render_group(g, methods, color_by, pool=rank_pool(analysis, g)) for g in groups)


def step_differences(view: Json | None) -> str:
    """The "why they differ" view of the step's two marked methods (analysed steps)."""
    if not view:
        return ""
    a, b = step_methods(view)
    found = view.get("differences") if view["mode"] == "logged" else None
    for diff in found or (view.get("analysis") or {}).get("differences") or []:
        if {diff["method_a"], diff["method_b"]} == {a, b}:
            # the one "why they differ" renderer (Explore's), over this step's groups
            result = {"groups": step_groups(view), "differences": [diff]}
            return why_differ_html(result, (a, b), element_id="run-why-differ")
    return ""


def step_summary(view: Json | None) -> str:
    if not view:
        return ""
    r = view["report"]
    a, b = step_methods(view)
    what = {
        "logged": f"the mask **the trainer applied** (method "
        f"`{escape(str(r['extra'].get('method')))}`) vs GMTS at the same ratio",
        "dump": f"`{a}` (H) vs `{b}` (|A|·w·H) from **the numbers the trainer's dump logged**, "
        "no model (g and γ need it: pick recomputed numbers for `gmts`)",
    }.get(view["mode"], f"`{a}` vs `{b}`, analysed now with the chosen model")
    cov = ", ".join(f"{m} {v:.3f}" for m, v in r["gradient_coverage"].items() if v is not None)
    waste = ", ".join(f"{m} {v:.3f}" for m, v in r["wasted_share"].items() if v is not None)
    return (
        f"**Step {view['step']}** of `{escape(view['run'])}` ({view['format']}): "
        f"{r['num_groups']} groups, {r['num_answers']} answers, {r['num_tokens']} tokens; "
        f"zero-signal share {r['zero_signal_share']:.2f}. Marked: {what}.  \n"
        f"Gradient coverage: {cov or '— (needs the model)'}.  \n"
        f"Wasted share: {waste or '— (needs the model)'}." + numbers_note(r)
    )


def numbers_note(report: Json) -> str:
    """Which numbers are the trainer's (logged) and which GMTS's (recomputed), how far apart
    they are where both exist, the untrained tokens and the train/inference mismatch."""
    numbers = report.get("numbers") or {}
    lines = []
    for kind in ("logged", "recomputed"):
        names = [f"`{escape(n)}`" for n, k in numbers.items() if k == kind]
        if names:
            lines.append(f"{kind.capitalize()}: {', '.join(names)}.")
    gaps = report.get("logged_vs_recomputed") or {}
    if gaps:
        shown = ", ".join(f"{escape(n)} {v:.3g}" for n, v in gaps.items() if v is not None)
        lines.append(f"Logged vs recomputed, mean |difference| over trained tokens: {shown}.")
    if report.get("untrained_tokens"):
        lines.append(
            f"{report['untrained_tokens']} tokens not trained (loss mask 0 in the dump): greyed, "
            "never selected, counted nowhere."
        )
    m = report.get("mismatch")
    if m and m.get("share_above") is not None:
        per = ", ".join(
            f"{escape(k)} {v:.0%}" for k, v in m["selected_share_above"].items() if v is not None
        )
        lines.append(
            f"Train/inference mismatch (trainer side {escape(str(m['trainer_side']))}): "
            f"{m['share_above']:.0%} of trained tokens have |Δ log p| > {m['threshold']:g} nats "
            f"(mean |Δ| {m['mean_abs_logprob_diff']:.3g}); of each selection: {per or '—'}."
        )
    return "".join(f"  \n{line}" for line in lines)


def _markdown_line(text: str) -> str:
    """The few Markdown marks these notes use (bold, code, hard breaks) as HTML; the notes
    escape every value they quote, so the text is HTML-safe already."""
    text = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", text)
    text = re.sub(r"`([^`]+)`", r"<code>\1</code>", text)
    return text.replace("  \n", "<br>")


def run_summary(run_id: str, overview: Json) -> str:
    """The run in words: its steps, its reward from first to last, its zero-signal share."""
    rows = overview.get("overview") or []
    if not rows:
        return f"Run `{escape(run_id)}`: no steps summarised."
    first, last = rows[0], rows[-1]
    zero = [r["zero_signal_share"] for r in rows if r.get("zero_signal_share") is not None]
    reward = (
        f"mean reward {first['reward_mean']:.3f} at step {first['step']} and "
        f"{last['reward_mean']:.3f} at step {last['step']}"
        if first.get("reward_mean") is not None and last.get("reward_mean") is not None
        else "no rewards in the files"
    )
    share = f"; on average {sum(zero) / len(zero):.0%} of groups zero-signal" if zero else ""
    return (
        f"Run `{escape(run_id)}`: {len(rows)} steps summarised ({first['step']}–{last['step']}), "
        f"{reward}{share}."
    )


def report_page(run_id: str, overview: Json | None, view: Json | None) -> str:
    """The Runs tab as one self-contained HTML page: the run and the shown step in words,
    "why they differ", the step's tokens (hover and pin as in the tab) and the run's charts
    (reward, what the trainer logged, gradient coverage per method)."""
    overview = overview or {}
    figures: list[go.Figure] = []
    if overview.get("overview"):
        reward, cover = overview_figures(overview)
        figures += [reward] + ([cover] if overview.get("reports") else [])
    if (trainer := trainer_metrics_figure(overview)) is not None:
        figures.insert(1, trainer)
    words = [run_summary(run_id, overview), trainer_metrics_note(overview)]
    if view:
        words.append(step_summary(view))
    body = (
        "".join(f"<p>{_markdown_line(w)}</p>" for w in words if w)
        + step_differences(view)
        + f"<div id='run-step-view'>{step_html(view)}</div>"
    )
    step = f" · step {view['step']} ({view['mode']})" if view else ""
    source = f"run {run_id}{step} — exported from GMTS Explorer's Runs tab"
    return standalone_page(f"GMTS run {run_id}", source, body, figures)
