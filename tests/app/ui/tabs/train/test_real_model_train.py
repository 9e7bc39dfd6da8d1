"""The Train tab on the real model: picking it sets its small batch (and no held-out
evaluation), another model gets the tab's defaults back, and the note states the measured cost
of a step from ``static/real-model-rl.json`` before anything runs."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from app.ui.tabs.train import real_model
from app.ui.tabs.train.view import TrainForm
from gmts_core.model.packaged import SMOLLM2

COST = {
    "threads": 1, "load_min": 9.2, "load_max": 11.8, "steps": 20, "step_median_s": 41.3,
    "step_cpu_median_s": 17.6, "peak_rss_mb": 1843.0, "eval_s_per_problem": 1.26,
    "reward_first_5": 0.05, "reward_last_5": 0.15, "accuracy_before": 0.0625,
    "accuracy_after": 0.0833, "eval_problems": 48,
}  # fmt: skip


def test_the_real_model_sets_its_small_batch_and_others_the_defaults() -> None:
    assert real_model.model_knobs(SMOLLM2.alias) == {
        "prompts_per_step": 4, "group_size": 4, "max_new_tokens": 64,
        "steps": real_model.REAL_MODEL_STEPS, "eval_problems": 0,
    }  # fmt: skip
    batch = ("prompts_per_step", "group_size", "max_new_tokens")
    assert {k: v for k, v in SMOLLM2.rl_defaults if k in batch} == {
        k: real_model.model_knobs(SMOLLM2.alias)[k] for k in batch
    }  # one source: the session's defaults on the model
    defaults = asdict(TrainForm())
    assert real_model.model_knobs("tiny-arith") == {k: defaults[k] for k in real_model.MODEL_FIELDS}


def test_the_note_states_the_measured_cost_before_a_run(tmp_path: Path) -> None:
    path = tmp_path / "cost.json"
    path.write_text(json.dumps(COST))
    note = real_model.cost_note(SMOLLM2.alias, real_model.load_cost(path))
    wanted = (
        "4 prompts × G = 4 × 64 tokens", "**41 s**", "18 CPU-s", "**1.8 GB**", "load 9–12",
        "0.05 → 0.15", "0.062 → 0.083 on 48 problems", "1.3 s a problem",
    )  # fmt: skip
    for text in wanted:
        assert text in note, (text, note)
    short = {**COST, "steps": 4, "reward_first_5": None, "reward_last_5": None}
    short["accuracy_after"] = None  # a run stopped early: its cost, no trend claimed
    brief = real_model.cost_note(SMOLLM2.alias, short)
    assert "**41 s**" in brief and "median of 4" in brief and "→" not in brief
    assert real_model.cost_note("tiny-arith", COST) == ""
    assert "not been measured" in real_model.cost_note(SMOLLM2.alias, None)
    assert real_model.load_cost(tmp_path / "absent.json") is None
    shipped = real_model.load_cost()
    if shipped is not None:  # the shipped measurement has every figure the note reads
        assert "**" in real_model.cost_note(SMOLLM2.alias, shipped)
