"""A real TRL ``GRPOTrainer`` run whose reward function logs a number of its own through
``log_extra`` (TRL's ``_log_completion_extra``): its completions parquet, written by TRL itself,
reads back with TRL's rewards (the step's mean equals the ``reward`` TRL logged) and TRL's
advantages, the logged number kept apart, not added to the reward."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer

from gmts_core.demo import DEMO_MODEL_DIR
from gmts_core.runs import open_run
from gmts_core.runs.trl_rewards import RECOVERED

PROMPTS = [f"Q: {a}+{b}=?\nA:" for a, b in [(47, 38), (23, 14), (52, 37)]]


def digit_reward(completions: list[str], log_extra: Any = None, **_: Any) -> list[float]:
    """A reward that varies within groups, and a logged count that is no reward."""
    if log_extra is not None:
        log_extra("num_digits", [sum(ch.isdigit() for ch in c) * 7 + 3 for c in completions])
    return [float(sum(map(ord, c)) % 3) for c in completions]


@pytest.mark.skipif(not (DEMO_MODEL_DIR / "config.json").is_file(), reason="no demo model")
def test_a_real_run_with_a_logged_number_reads_back_trls_rewards(tmp_path: Path) -> None:
    config = GRPOConfig(
        output_dir=str(tmp_path),
        max_steps=2,
        per_device_train_batch_size=12,
        num_generations=4,
        max_completion_length=12,
        learning_rate=1e-5,
        log_completions=True,
        logging_steps=1,
        report_to="none",
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        save_strategy="no",
        seed=0,
    )
    trainer = GRPOTrainer(
        model=str(DEMO_MODEL_DIR),
        reward_funcs=digit_reward,
        args=config,
        train_dataset=Dataset.from_list([{"prompt": p} for p in PROMPTS * 4]),
    )
    trainer.train()
    logged = {e["step"]: e["reward"] for e in trainer.state.log_history if "reward" in e}
    run = open_run(tmp_path)
    assert run.steps == [1, 2]
    for step in run.iter_steps():
        df = pd.read_parquet(tmp_path / "completions" / f"completions_{step.step:05d}.parquet")
        assert "num_digits" in df.columns  # TRL wrote the logged number next to the reward
        rewards = [r for g in step.groups for r in g.rewards or []]
        advantages = [a for g in step.groups for a in g.advantages or []]
        assert sorted(rewards) == sorted(df["digit_reward"].tolist())
        assert sorted(advantages) == sorted(df["advantage"].tolist())
        assert sum(rewards) / len(rewards) == pytest.approx(logged[step.step], abs=1e-6)
        assert all("num_digits" in g.extra for g in step.groups)
        if any(len(set(g.rewards or [])) > 1 for g in step.groups):
            assert any(RECOVERED in n or "recovered" in n for n in step.notes), step.notes
