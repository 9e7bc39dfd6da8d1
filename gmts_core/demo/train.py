"""Training recipe of the bundled demo model ``tiny-arith`` (seeded, minutes on 2 CPU cores).

Recipe: a 3-layer Llama (``LlamaForCausalLM``, hidden 64, MLP 192, 4 heads, tied embeddings,
about 0.17M parameters) trained from scratch by supervised next-token prediction on prompt +
worked solution of the arithmetic task (:mod:`gmts_core.tasks.arith`), loss on the solution
tokens and the end-of-sequence token only: 500 AdamW steps of 128 examples, peak learning rate
3e-3 (50 warmup steps, cosine decay to 3e-4), weight decay 0.01 on matrices, gradient clipping
at 1.0. Measured: 12 minutes on 2 CPU cores shared with other jobs (1.2-1.5 s a step).

Each training example is drawn fresh from the training split; with
probability ``flaw_rate`` its solution carries one plausible mistake at a fork point (a
forgotten carry or borrow, a carry written but not added, or an off-by-one slip in an
intermediate result; see :class:`FlawMix`), consistent after the mistake. A model fit to this
mix is calibrated to make those mistakes at those places, so: sampled at temperature 1 it is
right about ``1 - flaw_rate`` of the time, greedy decoding is nearly always right, its entropy
concentrates at the fork points, and reinforcement learning with the ``numeric`` reward can
lower the mistake rates quickly, since the same few decisions recur in every problem.

Reproducible: the data stream and the initial weights are functions of ``seed``; the run uses
one CPU thread (deterministic and the fastest on a small shared CPU).
"""

from __future__ import annotations

import json
import logging
import math
import random
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import torch
from tqdm.auto import tqdm
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from gmts_core.base_config import FlawMix as FlawMix
from gmts_core.base_config import ModelShape as ModelShape
from gmts_core.base_config import TrainConfig as TrainConfig
from gmts_core.demo.tokenizer import save_tokenizer
from gmts_core.tasks.arith import (
    applicable_flaws,
    flawed_solution,
    format_prompt,
    problem_pool,
    reference_solution,
)

logger = logging.getLogger(__name__)


def sample_training_text(rng: random.Random, mix: FlawMix) -> tuple[str, str]:
    """One ``(prompt, solution)`` pair from the training split, flawed with ``mix.flaw_rate``."""
    a, b, op = rng.choice(problem_pool("train"))
    prompt = format_prompt(a, b, op)
    if rng.random() >= mix.flaw_rate:
        return prompt, reference_solution(a, b, op)
    flaws = applicable_flaws(a, b, op)
    flaw = rng.choices(flaws, weights=[mix.weights.get(f, 0.0) for f in flaws])[0]
    return prompt, flawed_solution(a, b, op, flaw, slip=rng.choice((1, -1)))


def make_batch(
    pairs: list[tuple[str, str]], tokenizer: PreTrainedTokenizerFast
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded ``input_ids``, ``attention_mask`` and ``labels`` (B, T) for SFT.

    Labels are -100 on the prompt and the padding: only the solution and its end-of-sequence
    token are learned.
    """
    prompts = tokenizer([p for p, _ in pairs], add_special_tokens=False)["input_ids"]
    answers = tokenizer([s for _, s in pairs], add_special_tokens=False)["input_ids"]
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    seqs = [p + s + [eos] for p, s in zip(prompts, answers, strict=True)]
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad, dtype=torch.long)  # (B, T)
    labels = torch.full((len(seqs), width), -100, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for row, (p, seq) in enumerate(zip(prompts, seqs, strict=True)):
        ids[row, : len(seq)] = torch.tensor(seq)
        mask[row, : len(seq)] = 1
        labels[row, len(p) : len(seq)] = torch.tensor(seq[len(p) :])
    return ids, mask, labels


def build_model(shape: ModelShape, tokenizer: PreTrainedTokenizerFast) -> LlamaForCausalLM:
    """A freshly initialised Llama of ``shape`` for ``tokenizer``'s vocabulary."""
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=shape.hidden_size,
        intermediate_size=shape.intermediate_size,
        num_hidden_layers=shape.num_hidden_layers,
        num_attention_heads=shape.num_attention_heads,
        num_key_value_heads=shape.num_attention_heads,
        max_position_embeddings=shape.max_position_embeddings,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    return LlamaForCausalLM(config)


def lr_at(step: int, config: TrainConfig) -> float:
    """Linear warmup, then cosine decay to ``min_lr_ratio * lr``."""
    if step < config.warmup_steps:
        return config.lr * (step + 1) / config.warmup_steps
    progress = (step - config.warmup_steps) / max(1, config.steps - config.warmup_steps)
    cosine = 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))
    return config.lr * (config.min_lr_ratio + (1 - config.min_lr_ratio) * cosine)


def _optimizer(model: torch.nn.Module, config: TrainConfig) -> torch.optim.Optimizer:
    """AdamW with weight decay on matrices only (not on norms)."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [
        {"params": decay, "weight_decay": config.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=config.lr, betas=(0.9, 0.98))


def train_model(
    config: TrainConfig,
    tokenizer: PreTrainedTokenizerFast,
    progress: bool = True,
    on_step: Callable[[int, int, float], None] | None = None,
) -> tuple[LlamaForCausalLM, list[float]]:
    """Train a demo model from scratch; returns it (in eval mode) and the loss per step.

    ``progress`` shows a bar; ``on_step(done, total, loss)`` hears each optimizer step."""
    torch.manual_seed(config.seed)
    rng = random.Random(f"tiny-arith-train:{config.seed}")
    model = build_model(config.shape, tokenizer)
    model.train()
    optimizer = _optimizer(model, config)
    losses: list[float] = []
    bar = tqdm(range(config.steps), desc="train tiny-arith", disable=not progress)
    for step in bar:
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, config)
        pairs = [sample_training_text(rng, config.mix) for _ in range(config.batch_size)]
        ids, mask, labels = make_batch(pairs, tokenizer)
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        optimizer.step()
        losses.append(loss.item())
        if step % 20 == 0:
            bar.set_postfix(loss=f"{sum(losses[-20:]) / len(losses[-20:]):.3f}")
        if on_step is not None:
            on_step(step + 1, config.steps, losses[-1])
    model.eval()
    return model, losses


def generation_config(tokenizer: PreTrainedTokenizerFast) -> GenerationConfig:
    """Greedy by default, stopping at ``<eos>``; answers are about 20-30 tokens."""
    return GenerationConfig(
        max_new_tokens=48,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        do_sample=False,
    )


def save_model(
    model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerFast, out: Path, config: TrainConfig
) -> None:
    """Write the Hugging Face folder: weights, configs, tokenizer and the training recipe."""
    out.mkdir(parents=True, exist_ok=True)
    model.generation_config = generation_config(tokenizer)
    model.save_pretrained(str(out), safe_serialization=True)
    save_tokenizer(out)
    recipe = {"recipe": "gmts_core.demo.train", **asdict(config)}
    (out / "training_config.json").write_text(json.dumps(recipe, indent=2) + "\n")


def train_demo_model(
    out: str | Path,
    config: TrainConfig | None = None,
    progress: bool = True,
    on_step: Callable[[int, int, float], None] | None = None,
) -> Path:
    """Train the demo model with ``config`` (default: the shipped recipe) and save it to ``out``
    (``progress`` and ``on_step`` as in :func:`train_model`)."""
    config = config or TrainConfig()
    tokenizer = save_tokenizer(Path(out))
    start = time.perf_counter()
    threads = torch.get_num_threads()
    torch.set_num_threads(config.num_threads)
    try:
        model, losses = train_model(config, tokenizer, progress, on_step)
    finally:
        torch.set_num_threads(threads)
    logger.info(
        "trained tiny-arith in %.0fs; final loss %.4f", time.perf_counter() - start, losses[-1]
    )
    save_model(model, tokenizer, Path(out), config)
    return Path(out)
