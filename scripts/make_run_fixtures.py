"""Write the small training-run dumps the tests read (tests/data/runs/), reproducibly.

- ``trl/``: a real TRL ``GRPOTrainer`` run (3 steps, 3 prompts x 4 completions per step) on
  the bundled demo model with ``log_completions=True``: TRL's own parquet writer made it, and
  ``trainer.save_state()`` its ``trainer_state.json`` (the per-step metrics TRL logged:
  reward, reward_std, entropy, clip ratios, completion lengths, ...).
- ``verl/``, ``roll/``, ``areal/``: the same completions written in those trainers' layouts
  and field names (they cannot run here): verl ``{step}.jsonl`` lines with input, output, gts,
  score, step, acc; ROLL's column-oriented ``rollout_dump_data.step_N.jsonl``; AReaL's
  ``rollout/{version}/{task_id}.jsonl`` lines with task_id, sample_idx, prompt, completion,
  reward, seqlen.
- ``run.jsonl``: this project's own rollout JSONL with a ``step`` per line.
- ``logged/``: a ``GMTSGRPOTrainer(log_selection=True)`` run (2 steps): its token log
  ``gmts_selection/`` and TRL's ``completions/``.

Run: ``python scripts/make_run_fixtures.py [OUT]`` (default tests/data/runs). A few minutes on
one CPU core.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer

from gmts_core.demo import DEMO_MODEL_DIR
from gmts_core.integrations.trl import GMTSGRPOTrainer
from gmts_core.methods.rewards import compute_reward
from gmts_core.tasks.arith import generate_problems

STEPS, PROMPTS_PER_STEP, GENERATIONS = 3, 3, 4


def numeric_reward(completions: list[str], reference: list[str], **_: Any) -> list[float]:
    """The demo task's reward: 1 if the completion's final number equals the reference."""
    return [
        compute_reward("numeric", c, r).reward for c, r in zip(completions, reference, strict=True)
    ]


def trl_run(out: Path, steps: int = STEPS, **trainer_kwargs: Any) -> None:
    problems = generate_problems(STEPS * PROMPTS_PER_STEP, seed=1, split="train")
    data = Dataset.from_list([{"prompt": p.prompt, "reference": p.reference} for p in problems])
    config = GRPOConfig(
        output_dir=str(out),
        max_steps=steps,
        per_device_train_batch_size=PROMPTS_PER_STEP * GENERATIONS,
        num_generations=GENERATIONS,
        max_completion_length=32,
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
    torch.manual_seed(0)
    cls = GMTSGRPOTrainer if trainer_kwargs else GRPOTrainer
    trainer = cls(
        model=str(DEMO_MODEL_DIR),
        reward_funcs=numeric_reward,
        args=config,
        train_dataset=data,
        **trainer_kwargs,
    )
    trainer.train()
    trainer.save_state()  # OUTPUT_DIR/trainer_state.json: TRL's own per-step log_history


def rows_by_step(trl_dir: Path) -> dict[int, list[dict[str, Any]]]:
    steps = {}
    for f in sorted((trl_dir / "completions").glob("completions_*.parquet")):
        df = pd.read_parquet(f)
        steps[int(df["step"].iloc[0])] = df.to_dict("records")
    return steps


def reference_of(prompt: str) -> str:
    """The demo task's answer to ``Q: a+b=?`` / ``Q: a-b=?`` (its ground truth)."""
    expr = prompt.removeprefix("Q: ").split("=")[0]
    op = "+" if "+" in expr else "-"
    a, b = (int(v) for v in expr.split(op))
    return str(a + b if op == "+" else a - b)


def write_others(out: Path, steps: dict[int, list[dict[str, Any]]]) -> None:
    (out / "verl").mkdir()
    (out / "roll").mkdir()
    for step, rows in steps.items():
        with (out / "verl" / f"{step}.jsonl").open("w") as f:
            for r in rows:
                entry = {
                    "input": r["prompt"],
                    "output": r["completion"],
                    "gts": reference_of(r["prompt"]),
                    "score": r["numeric_reward"],
                    "step": step,
                    "acc": bool(r["numeric_reward"] > 0),
                }
                f.write(json.dumps(entry) + "\n")
        roll = {
            "global_step": [step] * len(rows),
            "id": [f"q{i // GENERATIONS}" for i in range(len(rows))],
            "prompt": [r["prompt"] for r in rows],
            "ground_truth": [reference_of(r["prompt"]) for r in rows],
            "tag": ["arith"] * len(rows),
            "domain": ["math_rule"] * len(rows),
            "responses": [r["completion"] for r in rows],
            "scores": [r["numeric_reward"] for r in rows],
        }
        (out / "roll" / f"rollout_dump_data.step_{step}.jsonl").write_text(json.dumps(roll) + "\n")
        version = out / "areal" / "rollout" / str(step - 1)  # AReaL versions count from 0
        version.mkdir(parents=True)
        prompts = list(dict.fromkeys(r["prompt"] for r in rows))
        for t, prompt in enumerate(prompts):
            mine = [r for r in rows if r["prompt"] == prompt]
            with (version / f"task{t}.jsonl").open("w") as f:
                for i, r in enumerate(mine):
                    line = {
                        "task_id": f"task{t}",
                        "sample_idx": i,
                        "prompt": prompt,
                        "completion": r["completion"],
                        "reward": r["numeric_reward"],
                        "seqlen": len(prompt) + len(r["completion"]),
                    }
                    f.write(json.dumps(line) + "\n")
    with (out / "run.jsonl").open("w") as f:
        for step, rows in steps.items():
            for prompt in dict.fromkeys(r["prompt"] for r in rows):
                mine = [r for r in rows if r["prompt"] == prompt]
                line = {
                    "step": step,
                    "prompt": prompt,
                    "completions": [r["completion"] for r in mine],
                    "rewards": [r["numeric_reward"] for r in mine],
                }
                f.write(json.dumps(line) + "\n")


def main(out: Path) -> None:
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    trl_run(out / "trl")
    trl_run(out / "logged", steps=2, log_selection=True, selection_ratio=0.2)
    for extra in [*out.glob("trl/*"), *out.glob("logged/*")]:  # keep only the logs
        if extra.name not in ("completions", "gmts_selection", "trainer_state.json"):
            shutil.rmtree(extra) if extra.is_dir() else extra.unlink()
    write_others(out, rows_by_step(out / "trl"))


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("tests/data/runs"))
