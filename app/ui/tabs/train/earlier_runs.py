"""What the Train tab keeps and says between runs: faded curves of earlier runs, and warnings.

A run's curves are kept (as plain JSON, in the tab's state) when the person presses Reset or
switches the method, and drawn faded under the current run, so "entropy vs gmts from the same
start" is one chart. Warnings are plain sentences: a learning rate outside the range where the
demo model learns visibly and stably, and a collapse of held-out accuracy. Pure: no Gradio.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go

from app.palette import method_color, rgba
from app.ui.limited import lr_warning

Json = dict[str, Any]
MAX_EARLIER = 6  # the oldest faded runs drop off beyond this
COLLAPSE = 0.5  # held-out accuracy below this share of its start value is called a collapse


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


def warnings(learning_rate: float | None, info: Json | None) -> list[str]:
    """The warnings for the form's learning rate (None: not known, none said) and a run."""
    lr = lr_warning(learning_rate) if learning_rate is not None else None
    return [w for w in (lr, collapse_warning(info)) if w]
