"""The Train tab on the real model: its small batch, and what a step costs, said before it runs.

Picking ``smollm2-135m`` sets the knobs to its session defaults (4 prompts x G = 4 x 64 tokens,
:data:`app.services.catalog.REAL_MODEL_RL_DEFAULTS`), a few steps and no held-out evaluation
(each held-out problem is a full generation on a 135 M-parameter model), and the note under the
model says what one step cost when measured: ``static/real-model-rl.json``, written by
``scripts/measure_smollm2_rl.py --summary``. Any other model gets the tab's defaults back.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from app.services.catalog import REAL_MODEL, REAL_MODEL_RL_DEFAULTS
from app.ui.assets import STATIC_DIR
from app.ui.tabs.train.view import TrainForm

COST_PATH = STATIC_DIR / "real-model-rl.json"
MODEL_FIELDS = ("prompts_per_step", "group_size", "max_new_tokens", "steps", "eval_problems")
"""The knobs a model choice sets (in this order)."""
REAL_MODEL_STEPS = 4


def load_cost(path: Path = COST_PATH) -> dict[str, Any] | None:
    """The measured cost of the real model's steps, or None when it was not measured."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def model_knobs(model: str | None) -> dict[str, int]:
    """The ``MODEL_FIELDS`` values for ``model``: the real model's small batch, else the tab's
    defaults."""
    if model == REAL_MODEL:
        values = {**REAL_MODEL_RL_DEFAULTS, "steps": REAL_MODEL_STEPS, "eval_problems": 0}
    else:
        values = asdict(TrainForm())
    return {name: int(values[name]) for name in MODEL_FIELDS}


def cost_note(model: str | None, cost: dict[str, Any] | None) -> str:
    """What a step on ``model`` costs, from the measurement (empty for any other model)."""
    if model != REAL_MODEL:
        return ""
    d = REAL_MODEL_RL_DEFAULTS
    batch = (
        f"{d['prompts_per_step']} prompts × G = {d['group_size']} × {d['max_new_tokens']} tokens"
    )
    head = f"**{REAL_MODEL}**, a 135 M-parameter model: {batch} per step, on word problems."
    if not cost:
        return head + " What a step costs here has not been measured."
    text = (
        f"{head} Measured ({cost['threads']} torch thread, a shared 2-core machine at load "
        f"{cost['load_min']:.0f}–{cost['load_max']:.0f}): one step "
        f"**{cost['step_median_s']:.0f} s** "
        f"(median of {cost['steps']}; {cost['step_cpu_median_s']:.0f} CPU-s), peak memory "
        f"**{cost['peak_rss_mb'] / 1024:.1f} GB**; held-out accuracy takes "
        f"{cost['eval_s_per_problem']:.1f} s a problem, so it is off here."
    )
    if cost.get("reward_first_5") is not None and cost.get("reward_last_5") is not None:
        text += (
            f" Over {cost['steps']} steps the training reward went "
            f"{cost['reward_first_5']:.2f} → {cost['reward_last_5']:.2f} (mean of the first "
            "and last 5 steps)"
        )
        if cost.get("accuracy_after") is not None:
            text += (
                f" and held-out accuracy {cost['accuracy_before']:.3f} → "
                f"{cost['accuracy_after']:.3f} on {cost['eval_problems']} problems"
            )
        # one seed's run: the figures, never a verdict (the docs give its interval)
        text += ": one run, not shown to differ from noise (docs/demo-model.md)."
    return text
