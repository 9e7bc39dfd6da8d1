"""A run folder written by TRL's own ``GRPOTrainer`` (CPU, the bundled tiny model, a few steps).

TRL (>= 0.20, here 1.16) writes ``OUTPUT_DIR/completions/completions_{step:05d}.parquet`` itself
when ``log_completions=True`` (``GRPOTrainer.log``: step, prompt, completion, one column per
reward function, advantage), whatever ``report_to`` says: that file output is what the Runs tab
reads, no callback of ours in between; ``trainer.save_state()`` writes
``OUTPUT_DIR/trainer_state.json``, TRL's own per-step metrics (reward, entropy...), which the
Runs tab charts. One prompt per step (batch = num_generations), as small real runs do.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

PROMPTS = ["Q: 47+38=?\nA:", "Q: 12+9=?\nA:", "Q: 7+8=?\nA:", "Q: 30+25=?\nA:"]


def digit_reward(completions: list[str], **_: Any) -> list[float]:
    """A reward that varies across answers (so advantages are non-zero): digits it holds."""
    return [float(sum(ch.isdigit() for ch in c) % 3) for c in completions]


def write_trl_run(out: Path, steps: int = 3) -> Path:
    """Train ``steps`` GRPO steps with TRL's GRPOTrainer into ``out``; returns ``out``."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from gmts_core.demo import DEMO_MODEL_DIR

    config = GRPOConfig(
        output_dir=str(out),
        max_completion_length=12,
        num_generations=4,
        per_device_train_batch_size=4,
        max_steps=steps,
        learning_rate=1e-3,
        report_to="none",
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        save_strategy="no",
        logging_steps=1,
        log_completions=True,
        seed=0,
    )
    trainer = GRPOTrainer(
        model=str(DEMO_MODEL_DIR),
        reward_funcs=digit_reward,
        args=config,
        train_dataset=Dataset.from_list([{"prompt": p} for p in PROMPTS * steps]),
    )
    trainer.train()
    trainer.save_state()  # trainer_state.json: what TRL logged per step (the Runs tab charts it)
    return out
