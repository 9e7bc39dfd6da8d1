"""What the Train tab keeps and says between runs: faded curves of earlier runs, and warnings.

A run's curves are kept (as plain JSON, in the tab's state) when the person presses Reset or
switches the method, and drawn faded under the current run, so "entropy vs gmts from the same
start" is one chart. Warnings are plain sentences: a learning rate outside the range where the
demo model learns visibly and stably, a collapse of held-out accuracy, a fall of it beyond its
paired interval, and a KL to the start outside the defaults' band; at the end of a run, one
sentence says what its gain's interval supports. Pure: no Gradio.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go

from app.palette import method_color, rgba
from app.services.train_gain import evaluation_gain, runs_difference
from app.ui.limited import lr_warning

Json = dict[str, Any]
MAX_EARLIER = 6  # the oldest faded runs drop off beyond this
COLLAPSE = 0.5  # held-out accuracy below this share of its start value is called a collapse
# KL to the start (k3): the Train tab defaults stayed below 0.03 over 30 steps on seed 0 (measured:
# docs/benchmarks.md, "warnings while a run goes wrong"); the median of the last KL_WINDOW steps
KL_MAX = 0.1
KL_WINDOW = 5


def snapshot(info: Json | None, number: int) -> Json | None:
    """The curves of a session's run so far, or None when it has no step yet."""
    history = (info or {}).get("history") or []
    if not history:
        return None
    evals = (info or {}).get("evaluations") or []
    methods = list(dict.fromkeys(h.get("method", "?") for h in history))
    lrs = sorted({h.get("learning_rate") for h in history if h.get("learning_rate") is not None})
    lr = f", lr {lrs[-1]:.2g}" if lrs else ""
    return {
        "number": number,
        "label": f"run {number}: {'→'.join(methods)}{lr}",
        "method": methods[-1],
        "steps": [h["step"] for h in history],
        "reward": [h.get("reward_mean") for h in history],
        "eval_steps": [e["step"] for e in evals],
        "accuracy": [e.get("accuracy") for e in evals],
        # the last evaluation's per-problem scores, to pair with a later run's (same seed)
        "per_problem": (evals[-1].get("per_problem") or []) if evals else [],
    }


def keep(earlier: list[Json], info: Json | None) -> list[Json]:
    """``earlier`` plus the session's current run (if it has steps), newest last."""
    run = snapshot(info, earlier[-1]["number"] + 1 if earlier else 1)
    return (earlier + [run])[-MAX_EARLIER:] if run else list(earlier)


SMOOTH = 5  # steps in the training reward's moving average


def moving_average(values: Sequence[float | None], window: int = SMOOTH) -> list[float | None]:
    """Trailing mean over the last ``window`` values (fewer at the start; None skipped)."""
    out: list[float | None] = []
    for i in range(len(values)):
        seen = [v for v in values[max(0, i - window + 1) : i + 1] if v is not None]
        out.append(sum(seen) / len(seen) if seen else None)
    return out


def add_overlays(fig: go.Figure, earlier: list[Json]) -> None:
    """Earlier runs on the same chart in their method's colour (entropy's run next to gmts's):
    the reward's moving average dotted, held-out accuracy as hollow points."""
    for run in earlier:
        color = rgba(method_color(run["method"]), 0.6)
        fig.add_trace(
            go.Scatter(
                x=run["steps"], y=moving_average(run["reward"]), mode="lines",
                name=f"{run['label']}: reward ({SMOOTH}-step average)",
                line=dict(color=color, dash="dot"), legendgroup=run["label"],
            )
        )  # fmt: skip
        fig.add_trace(
            go.Scatter(
                x=run["eval_steps"], y=run["accuracy"], mode="markers",
                name=f"{run['label']}: held-out accuracy", legendgroup=run["label"],
                marker=dict(color=color, size=10, symbol="diamond-open", line=dict(width=2)),
            )
        )  # fmt: skip


def collapse_warning(info: Json | None) -> str | None:
    """A plain sentence when held-out accuracy fell below half its value at the start."""
    evals = (info or {}).get("evaluations") or []
    if len(evals) < 2:
        return None
    start, now = evals[0].get("accuracy"), evals[-1].get("accuracy")
    if start is None or now is None or start < 0.1 or now >= COLLAPSE * start:
        return None
    return (
        f"Held-out accuracy collapsed: {start:.2f} → {now:.2f}. The updates are too large for "
        "this model (lower the learning rate, or use more prompts per step), then press Reset."
    )


def _points(x: float) -> str:
    return f"{100 * x:+.1f}".replace("-", "\u2212")


def decline_warning(info: Json | None) -> str | None:
    """A plain sentence as soon as held-out accuracy has fallen since the start by more than
    this run's paired interval allows (its upper end below 0), short of a collapse."""
    evals = (info or {}).get("evaluations") or []
    g = evaluation_gain(evals)
    if g is None or g.high >= 0 or collapse_warning(info) is not None:
        return None
    return (
        f"Held-out accuracy is falling: {_points(g.gain)} points [{_points(g.low)}, "
        f"{_points(g.high)}] since the start (95%, this run: paired over {g.num_problems} "
        "problems), more than the evaluation's noise explains. Lower the learning rate or the "
        "updates per batch, or raise the prompts per step, then press Reset."
    )


def kl_warning(info: Json | None) -> str | None:
    """A plain sentence when the KL to the starting policy leaves the band the defaults stay in
    (the median of the last ``KL_WINDOW`` steps, so one outlying step does not set it off)."""
    history = (info or {}).get("history") or []
    kls = [h["kl"] for h in history[-KL_WINDOW:] if h.get("kl") is not None]
    if len(kls) < KL_WINDOW:
        return None
    kl = statistics.median(kls)
    if kl <= KL_MAX:
        return None
    return (
        f"The policy is moving far from the start: KL to the start {kl:.2f} (median of the "
        f"last {KL_WINDOW} steps), above the {KL_MAX:g} the defaults stay below. Held-out "
        "accuracy usually falls next; lower the learning rate or the updates per batch."
    )


def run_verdict(info: Json | None) -> str | None:
    """The end of a run in one sentence: its gain and what its interval lets one say."""
    g = evaluation_gain((info or {}).get("evaluations") or [])
    if g is None:
        return None
    head = (
        f"This run: {_points(g.gain)} points [{_points(g.low)}, {_points(g.high)}] held-out "
        f"accuracy since the start (95%, paired over {g.num_problems} problems)"
    )
    if g.low > 0:
        said = "a gain beyond the evaluation's noise"
    elif g.high < 0:
        said = "a loss beyond the evaluation's noise"
    else:
        said = "not separable from no change"
    return (
        f"{head}: {said}. The interval covers these weights on these problems, not the recipe: "
        "another seed moves the result by more."
    )


def difference_to_earlier(info: Json | None, earlier: Sequence[Json]) -> str | None:
    """The current run minus the latest earlier run of another method, evaluated at the same
    step on the same problems (same session seed), paired problem by problem, with its
    interval: one seed each, so it is said to be about these two runs, with no verdict."""
    history = (info or {}).get("history") or []
    evals = (info or {}).get("evaluations") or []
    if len(evals) < 2 or not history:
        return None
    method, last = history[-1].get("method"), evals[-1]
    for run in reversed(earlier):
        same_point = run.get("eval_steps") and run["eval_steps"][-1] == last["step"]
        if run.get("method") == method or not same_point:
            continue
        d = runs_difference(run.get("per_problem") or [], last.get("per_problem") or [])
        if d is None:
            continue
        return (
            f"{method} \u2212 {run['method']} ({run['label'].split(':')[0]}) at step "
            f"{last['step']}: {_points(d.gain)} points [{_points(d.low)}, {_points(d.high)}] "
            f"(95%, paired over {d.num_problems} problems). These two runs only, one seed each: "
            "no verdict on the methods (use Compare, with several seeds)."
        )
    return None


def warnings(learning_rate: float | None, info: Json | None) -> list[str]:
    """The warnings for the form's learning rate (None: not known, none said) and a run: a
    collapse, a significant fall of held-out accuracy, a KL outside its band. Shown after
    every step, so they appear while the run goes wrong."""
    lr = lr_warning(learning_rate) if learning_rate is not None else None
    found = (lr, collapse_warning(info), decline_warning(info), kl_warning(info))
    return [w for w in found if w]
