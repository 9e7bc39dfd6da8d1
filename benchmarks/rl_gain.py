"""Does live RL with GMTS selection teach the demo model? Held-out accuracy before and after.

Runs ``--steps`` GRPO steps (default 30) of ``--method`` (default ``gmts``) at ``--ratio``
(default 0.2) with G = ``--group-size`` (default 8) on a fresh policy copy of the bundled
``tiny-arith`` model, with the demo recipe ``gmts_core.grpo.step.DEMO_RECIPE`` (64 prompts a step,
4 updates per batch, AdamW lr 1.5e-4 with 5 warmup steps), and measures held-out
accuracy (sampled at temperature 1, ``--eval-samples`` answers to each of ``--eval-problems``
held-out problems) before and after. Seeded: the same command prints the same figures on CPU.

    .venv/bin/python benchmarks/rl_gain.py            # exit 1 if gain < --min-gain; --json for JSON
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time

import torch
from _common import emit

from gmts_core.config import RLConfig
from gmts_core.demo import DEMO_MODEL_DIR
from gmts_core.experiments.evaluation import demo_batch, evaluate_accuracy, heldout_problems
from gmts_core.experiments.sessions import step_seed
from gmts_core.grpo.policy import PolicySettings, TrainablePolicy
from gmts_core.grpo.step import DEMO_RECIPE, grpo_step
from gmts_core.grpo.update import make_optimizer
from gmts_core.model.loading import load_model


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default=str(DEMO_MODEL_DIR))
    p.add_argument("--method", default="gmts")
    p.add_argument("--ratio", type=float, default=0.2)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--prompts-per-step", type=int, default=DEMO_RECIPE.prompts_per_step)
    p.add_argument("--lr", type=float, default=DEMO_RECIPE.learning_rate)
    p.add_argument("--inner-steps", type=int, default=DEMO_RECIPE.inner_steps)
    p.add_argument("--optimizer", default=DEMO_RECIPE.optimizer, choices=["adamw", "sgd"])
    p.add_argument("--warmup-steps", type=int, default=DEMO_RECIPE.warmup_steps)
    p.add_argument("--adam-epsilon", type=float, default=DEMO_RECIPE.adam_epsilon)
    p.add_argument("--policy", default="full", choices=["full", "lora"])
    p.add_argument("--freeze-embeddings", type=int, default=0)
    p.add_argument("--eval-problems", type=int, default=300)
    p.add_argument("--eval-samples", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--min-gain", type=float, default=0.15)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    return p.parse_args()


def train(policy: TrainablePolicy, config: RLConfig, steps: int, seed: int) -> list[float]:
    """``steps`` GRPO steps on demo-task batches; the training reward of each step."""
    optimizer = make_optimizer(policy, config)
    rewards = []
    for step in range(steps):
        s = step_seed(seed, step)
        batch = demo_batch(config.prompts_per_step, s)
        result = grpo_step(policy, optimizer, batch, config, s, step + 1)
        rewards.append(round(result.metrics.reward_mean, 4))
        print(f"step {step + 1}: reward {result.metrics.reward_mean:.3f}", file=sys.stderr)
    return rewards


def main() -> int:
    args = parse_args()
    torch.set_num_threads(args.threads)
    lm = load_model(args.model, name="tiny-arith", device="cpu")
    config = dataclasses.replace(
        DEMO_RECIPE,
        method=args.method,
        ratio=args.ratio,
        group_size=args.group_size,
        prompts_per_step=args.prompts_per_step,
        learning_rate=args.lr,
        inner_steps=args.inner_steps,
        adam_epsilon=args.adam_epsilon,
        warmup_steps=args.warmup_steps,
        optimizer=args.optimizer,
    )
    problems = heldout_problems(args.eval_problems)

    def accuracy(model: torch.nn.Module) -> float:
        return evaluate_accuracy(
            model, lm.tokenizer, problems, samples_per_problem=args.eval_samples, seed=12_345
        ).accuracy

    start_time = time.perf_counter()
    before = accuracy(lm.model)
    settings = PolicySettings(kind=args.policy, freeze_embeddings=bool(args.freeze_embeddings))
    policy = TrainablePolicy(lm, settings)
    rewards = train(policy, config, args.steps, args.seed)
    after = accuracy(policy.model)
    report = {
        "benchmark": "rl_gain",
        "method": args.method,
        "ratio": args.ratio,
        "steps": args.steps,
        "group_size": args.group_size,
        "prompts_per_step": config.prompts_per_step,
        "learning_rate": config.learning_rate,
        "inner_steps": config.inner_steps,
        "adam_epsilon": config.adam_epsilon,
        "warmup_steps": config.warmup_steps,
        "optimizer": config.optimizer,
        "policy": args.policy,
        "freeze_embeddings": bool(args.freeze_embeddings),
        "eval": f"{args.eval_problems} held-out problems x {args.eval_samples} samples at T=1",
        "accuracy_before": round(before, 4),
        "accuracy_after": round(after, 4),
        "gain_points": round(100 * (after - before), 2),
        "train_rewards": rewards,
        "seconds": round(time.perf_counter() - start_time, 1),
    }
    lines = [
        f"{args.steps} {args.method} steps at ratio {args.ratio}, G={args.group_size}, "
        f"{config.prompts_per_step} prompts a step, lr {config.learning_rate}, "
        f"{config.inner_steps} updates per batch ({report['seconds']} s)",
        f"  held-out accuracy ({report['eval']}): {before:.3f} -> {after:.3f}, "
        f"gain {report['gain_points']:+.1f} points (target >= {100 * args.min_gain:.0f})",
        f"  training reward by step: {' '.join(f'{r:.2f}' for r in rewards)}",
    ]
    emit(report, args.json, lines)
    return 0 if after - before >= args.min_gain else 1


if __name__ == "__main__":
    sys.exit(main())
