"""Train with GMTS token selection inside TRL's GRPOTrainer (one CPU, one GPU or many GPUs).

Defaults: the bundled demo model ``tiny-arith`` on the demo arithmetic task, rewarded by the
``numeric`` rule of ``gmts_core.methods.rewards``; a few steps run on a CPU in minutes::

    python examples/train_trl_gmts.py       # 20 steps; held-out accuracy before and after

A hub model and dataset (GSM8K: the reference is the last number of the ``answer`` column)::

    python examples/train_trl_gmts.py --model Qwen/Qwen2.5-Math-1.5B --dataset openai/gsm8k \\
        --dataset-config main --prompt-column question --answer-column answer --bf16 \\
        --max-completion-length 1024 --num-generations 8 --batch-size 8 --max-steps 500

Every logging step writes TRL's ``OUTPUT_DIR/completions/`` and the per-token selection log
``OUTPUT_DIR/gmts_selection/`` (``--no-log-selection`` turns both off); browse them with
``gmts analyze-run OUTPUT_DIR -o report/`` or the UI's Runs tab.

Precision: TRL's ``GRPOConfig`` defaults to ``bf16=True`` even with ``use_cpu=True``; this
example sets ``bf16`` (and ``fp16``) explicitly, so its numbers are float32 unless ``--bf16``.

The GMTS settings live in ``GMTSGRPOConfig`` (a ``GRPOConfig``): ``--token-selection``
(``gmts_paper`` for the paper's released Framework1, ``gmts_paper_verl`` for its verl rule),
``--selection-ratio`` (the share kept) and ``--selection-scope`` (default: the method's own,
``group`` for the paper's methods).

Many GPUs (one process per GPU; the top-k is global over all processes)::

    accelerate launch --config_file examples/accelerate_multi_gpu.yaml \\
        examples/train_trl_gmts.py --model ... --dataset ... --bf16
"""

from __future__ import annotations

import argparse
import logging
import math
from typing import Any

from datasets import Dataset, load_dataset

from gmts_core.demo import DEMO_MODEL_DIR
from gmts_core.experiments.evaluation import evaluate_accuracy, heldout_problems
from gmts_core.integrations.trl import GMTSGRPOConfig, GMTSGRPOTrainer
from gmts_core.integrations.trl_selection import TRL_LOSS_AGGREGATION
from gmts_core.methods.rewards import compute_reward, extract_final_number, list_rewards
from gmts_core.methods.selection import SCOPES, list_methods
from gmts_core.tasks.arith import generate_problems

logger = logging.getLogger("train_trl_gmts")

DEMO_DATASET = "arith"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", default=str(DEMO_MODEL_DIR), help="hub id or local folder")
    p.add_argument("--dataset", default=DEMO_DATASET, help="'arith' (demo), hub id or data file")
    p.add_argument("--dataset-config", default=None, help="hub dataset configuration, e.g. main")
    p.add_argument("--split", default="train")
    p.add_argument("--prompt-column", default="prompt")
    p.add_argument("--answer-column", default="reference")
    p.add_argument("--num-problems", type=int, default=2000, help="demo task: training problems")
    p.add_argument(
        "--eval-problems", type=int, default=128, help="demo task: held-out problems (0: none)"
    )
    p.add_argument("--chat", action="store_true", help="send prompts as chat messages")
    p.add_argument("--reward", default="numeric", choices=list_rewards())
    p.add_argument("--token-selection", default="gmts", choices=list_methods())
    p.add_argument("--selection-ratio", type=float, default=0.2, help="share of tokens kept")
    p.add_argument(
        "--selection-scope", default=None, choices=SCOPES, help="default: the method's own"
    )
    p.add_argument("--loss-type", default="dapo", choices=sorted(TRL_LOSS_AGGREGATION))
    p.add_argument("--num-generations", type=int, default=8)
    p.add_argument("--batch-size", type=int, default=32, help="completions per device per step")
    p.add_argument("--gradient-accumulation-steps", type=int, default=1)
    p.add_argument("--max-completion-length", type=int, default=48)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--learning-rate", type=float, default=5e-5)
    p.add_argument("--max-steps", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--bf16", action="store_true", help="bfloat16 mixed precision (GPU)")
    p.add_argument("--use-cpu", action="store_true", help="force the CPU even if a GPU exists")
    p.add_argument("--output-dir", default="outputs/trl-gmts")
    p.add_argument("--report-to", default="none", help="none, wandb, tensorboard ...")
    p.add_argument("--logging-steps", type=int, default=1)
    p.add_argument(
        "--log-selection",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="write TRL's completions log and the per-token selection log (gmts analyze-run)",
    )
    return p.parse_args(argv)


def demo_dataset(num_problems: int, seed: int) -> Dataset:
    """Problems of the demo arithmetic task: a ``prompt`` and its numeric ``reference``."""
    problems = generate_problems(num_problems, seed=seed, split="train")
    return Dataset.from_list([{"prompt": p.prompt, "reference": p.reference} for p in problems])


def hub_dataset(args: argparse.Namespace) -> Dataset:
    """A hub dataset or a local data file, mapped to ``prompt`` and ``reference`` columns."""
    if args.dataset.endswith((".json", ".jsonl", ".csv", ".parquet")):
        kind = {"jsonl": "json"}.get(args.dataset.rsplit(".", 1)[1], args.dataset.rsplit(".", 1)[1])
        data = load_dataset(kind, data_files=args.dataset, split=args.split)
    else:
        data = load_dataset(args.dataset, args.dataset_config, split=args.split)

    def to_row(row: dict[str, Any]) -> dict[str, Any]:
        answer = str(row[args.answer_column])
        # numeric rule: the reference is the answer's final number (GSM8K's "#### 72" -> "72")
        reference = extract_final_number(answer) if args.reward == "numeric" else answer
        return {"prompt": row[args.prompt_column], "reference": reference or answer}

    return data.map(to_row, remove_columns=data.column_names)


def as_chat(dataset: Dataset) -> Dataset:
    return dataset.map(lambda row: {"prompt": [{"role": "user", "content": row["prompt"]}]})


def make_reward_fn(rule: str) -> Any:
    """A TRL reward function scoring each completion with a ``gmts_core.methods.rewards`` rule."""

    def reward(completions: list[Any], reference: list[str], **_: Any) -> list[float]:
        texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]
        return [
            compute_reward(rule, text, ref).reward
            for text, ref in zip(texts, reference, strict=True)
        ]

    reward.__name__ = f"{rule}_reward"
    return reward


def make_config(args: argparse.Namespace) -> GMTSGRPOConfig:
    return GMTSGRPOConfig(
        token_selection=args.token_selection,
        selection_ratio=args.selection_ratio,
        selection_scope=args.selection_scope,
        log_selection=args.log_selection,
        output_dir=args.output_dir,
        max_steps=args.max_steps,
        learning_rate=args.learning_rate,
        per_device_train_batch_size=args.batch_size,
        gradient_accumulation_steps=args.gradient_accumulation_steps,
        num_generations=args.num_generations,
        max_completion_length=args.max_completion_length,
        temperature=args.temperature,
        loss_type=args.loss_type,
        beta=0.0,
        bf16=args.bf16,  # explicit: TRL's default is bf16=True, on CPU too
        fp16=False,
        use_cpu=args.use_cpu,
        # small models train faster without recomputation; turn it on for big ones
        gradient_checkpointing=False,
        seed=args.seed,
        logging_steps=args.logging_steps,
        log_completions=args.log_selection,  # OUTPUT_DIR/completions/, next to the token log
        report_to=args.report_to,
        save_strategy="no",
    )


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Train; return the first and last logged mean rewards (and held-out accuracy, demo)."""
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    is_demo = args.dataset == DEMO_DATASET
    dataset = demo_dataset(args.num_problems, args.seed) if is_demo else hub_dataset(args)
    trainer = GMTSGRPOTrainer(
        model=args.model,
        reward_funcs=make_reward_fn(args.reward),
        args=make_config(args),
        train_dataset=as_chat(dataset) if args.chat else dataset,
    )
    evaluate = is_demo and args.eval_problems > 0
    summary: dict[str, float] = {}
    if evaluate:
        summary["heldout_accuracy_before"] = heldout_accuracy(trainer, args)
    trainer.train()
    # OUTPUT_DIR/trainer_state.json: TRL's own per-step metrics, which the Runs tab charts
    trainer.save_state()
    rewards = [log["reward"] for log in trainer.state.log_history if "reward" in log]
    half = len(rewards) // 2
    summary["mean_reward_first_half"] = _mean(rewards[:half])
    summary["mean_reward_second_half"] = _mean(rewards[half:])
    if evaluate:
        summary["heldout_accuracy_after"] = heldout_accuracy(trainer, args)
    logger.info("summary: %s", ", ".join(f"{k}={v:.3f}" for k, v in summary.items()))
    if trainer.accelerator.is_main_process and args.max_steps > 0:
        trainer.save_model(args.output_dir)
    return summary


def heldout_accuracy(trainer: GMTSGRPOTrainer, args: argparse.Namespace) -> float:
    """Greedy accuracy of the policy on the demo task's held-out split."""
    model: Any = trainer.accelerator.unwrap_model(trainer.model)
    was_training = model.training
    model.eval()
    problems = heldout_problems(args.eval_problems, seed=args.seed)
    result = evaluate_accuracy(
        model,
        trainer.processing_class,
        problems,
        temperature=0.0,
        max_new_tokens=args.max_completion_length,
    )
    model.train(was_training)
    return result.accuracy


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else math.nan


if __name__ == "__main__":
    main()
