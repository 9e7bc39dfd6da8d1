"""Live GRPO on the real model ``smollm2-135m``: does a short run raise its training reward and
held-out accuracy, and what does one step cost?

The settings are what a live-RL session on the model uses by default (the server's policy
rule: a LoRA adapter above 100 M parameters; RLConfig's learning rate; the model's chat
template; the word-arithmetic task with the ``final_number`` reward) at the small batch
``--prompts`` x ``--group-size`` x ``--max-new-tokens``. Held-out accuracy: greedy answers to
``--eval-problems`` problems of the task's held-out split, before and after the run. Each line
of output is one JSON object (a step, or an evaluation), so a long run can be read as it goes.

    python scripts/measure_smollm2_rl.py --steps 20 --threads 1 > smollm2-rl.jsonl
    python scripts/measure_smollm2_rl.py --summarize smollm2-rl.jsonl \
        --out static/real-model-rl.json

The summary (``--summarize``) is what the Train tab says a step on the model costs before it
runs (:mod:`app.ui.tabs.train.real_model`).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import time
from pathlib import Path
from typing import Any

import torch

from gmts_core.config import RLConfig
from gmts_core.experiments.evaluation import evaluate_accuracy, word_problem_batch
from gmts_core.experiments.sessions import step_seed
from gmts_core.grpo.policy import PolicySettings, TrainablePolicy
from gmts_core.grpo.step import grpo_step
from gmts_core.grpo.update import make_optimizer
from gmts_core.model.loading import load_model
from gmts_core.model.packaged import SMOLLM2
from gmts_core.tasks.word_arith import REWARD_RULE


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def say(**fields: object) -> None:
    print(json.dumps({**fields, "load": round(os.getloadavg()[0], 2)}), flush=True)


def summarize(lines: list[dict[str, Any]]) -> dict[str, Any]:
    """The figures of a run's JSON lines: step time and memory, reward and accuracy trends."""
    start = next(x for x in lines if x["event"] == "start")
    steps = [x for x in lines if x["event"] == "step"]
    evals = [x for x in lines if x["event"] == "eval"]
    rewards = [x["reward"] for x in steps]
    loads = [x["load"] for x in lines]
    config = start["config"]
    return {
        "model": SMOLLM2.alias,
        "policy": start["policy"],
        "threads": config["threads"],
        "batch": [config["prompts"], config["group_size"], config["max_new_tokens"]],
        "learning_rate": config["learning_rate"],
        "steps": len(steps),
        "step_median_s": statistics.median(x["seconds"] for x in steps),
        "step_cpu_median_s": statistics.median(x["cpu_s"] for x in steps),
        "peak_rss_mb": max(x["rss_mb"] for x in lines if "rss_mb" in x),
        "load_min": min(loads),
        "load_max": max(loads),
        "rewards": rewards,
        "zero_signal_groups": [x["zero_signal_groups"] for x in steps],
        "eval_problems": config["eval_problems"],
        "eval_s_per_problem": statistics.fmean(x["seconds"] for x in evals)
        / config["eval_problems"],
        "accuracy_before": evals[0]["accuracy"],
        # a run stopped before its last evaluation has none after
        "accuracy_after": evals[-1]["accuracy"] if len(evals) > 1 else None,
        # the trend, only where there are two disjoint windows of 5 steps to compare
        "reward_first_5": statistics.fmean(rewards[:5]) if len(rewards) >= 10 else None,
        "reward_last_5": statistics.fmean(rewards[-5:]) if len(rewards) >= 10 else None,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--prompts", type=int, default=4)
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--eval-problems", type=int, default=48)
    p.add_argument("--learning-rate", type=float, default=RLConfig.learning_rate)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--summarize", type=Path, help="a run's JSON lines: write their summary")
    p.add_argument("--out", type=Path, help="where --summarize writes (else stdout)")
    args = p.parse_args()
    if args.summarize:
        lines = [json.loads(x) for x in args.summarize.read_text().splitlines() if x.strip()]
        text = json.dumps(summarize(lines), indent=1) + "\n"
        if args.out:
            args.out.write_text(text)
        else:
            print(text, end="")
        return
    torch.set_num_threads(args.threads)
    path = SMOLLM2.path()
    if path is None:
        raise SystemExit(SMOLLM2.install_command)
    lm = load_model(path, name=SMOLLM2.alias, device="cpu", dtype="float32")
    policy = TrainablePolicy(lm, PolicySettings(kind="auto", lora_threshold=100_000_000))
    config = RLConfig(
        **{
            **dict(SMOLLM2.rl_defaults),  # a session's knobs on the model (memory ones too)
            "group_size": args.group_size,
            "prompts_per_step": args.prompts,
            "max_new_tokens": args.max_new_tokens,
        },
        learning_rate=args.learning_rate,
        chat_template=True,
    )
    optimizer = make_optimizer(policy, config)
    heldout = word_problem_batch(args.eval_problems, seed=0, split="heldout")
    say(event="start", policy=policy.kind, rss_mb=rss_mb(), config=vars(args))

    def evaluate(step: int) -> None:
        start = time.perf_counter()
        result = evaluate_accuracy(
            policy.model, policy.tokenizer, heldout, temperature=0.0,
            max_new_tokens=args.max_new_tokens, reward_kind=REWARD_RULE, chat_template=True,
        )  # fmt: skip
        say(event="eval", step=step, accuracy=result.accuracy,
            seconds=time.perf_counter() - start, rss_mb=rss_mb())  # fmt: skip

    evaluate(0)
    for n in range(args.steps):
        seed = step_seed(args.seed, n)
        batch = word_problem_batch(args.prompts, seed)
        start, cpu = time.perf_counter(), time.process_time()
        result = grpo_step(policy, optimizer, batch, config, seed, step=n + 1)
        m = result.metrics
        say(event="step", step=n + 1, seconds=time.perf_counter() - start,
            cpu_s=time.process_time() - cpu, reward=m.reward_mean,
            zero_signal_groups=m.num_zero_signal_groups, tokens=m.num_tokens,
            rss_mb=rss_mb())  # fmt: skip
    evaluate(args.steps)


if __name__ == "__main__":
    main()
