"""One live GRPO step with token selection, as small named functions.

rollout            -> a group of G sampled answers per prompt, rewarded (the first stage of
                      :func:`gmts_core.analysis.analyze.analyze`)
statistics_forward -> the first update's training forward, run *before* the selection: each
                      micro-batch's differentiable log-probs (graphs held for the backward) and
                      its answers' token statistics from the same logits, so the analysis
                      costs no forward pass of its own (batches above ``fused_max_tokens``
                      take a separate no-grad statistics pass instead, to bound memory)
score_batch        -> advantages, every method's selection, summaries and (lazy) records: the last
                      stage of ``analyze``, so what users inspect is what the step trains on
training_batch     -> flat per-token tensors: advantages, weights, the selection mask
policy_update      -> ``inner_steps`` AdamW updates of the clipped, masked GRPO loss
                      (:mod:`gmts_core.grpo.loss`) with gradient-norm clipping; the first
                      reuses the statistics forward's graphs; the selection is fixed per batch
                      (default, as TRL) or re-ranked before every later update by
                      gamma = w |omega| g at the current policy (``reselect``)
grpo_step          -> all of the above, plus metrics and (``measure_logprob_after``) the
                      per-token log-prob change, which costs one more forward pass
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from gmts_core.analysis.analyze import (
    GroupInput,
    PreparedGroups,
    RewardSpec,
    finish_analysis,
    prepare_groups,
)
from gmts_core.analysis.records import AnalysisResult
from gmts_core.config import RLConfig
from gmts_core.errors import InvalidInputError, NonFiniteLogitsError
from gmts_core.grpo.loss import (
    LossTerms,
    answer_logprobs,
    answer_targets,
    grpo_loss,
    logprobs_from_logits,
)
from gmts_core.grpo.policy import TrainablePolicy
from gmts_core.grpo.records import (
    StepMetrics,
    StepResult,
    TrainBatch,
    UpdateStats,
)
from gmts_core.grpo.selection import clip_settings, current_selection
from gmts_core.methods.coefficient import EffectiveCoefficient, effective_coefficient
from gmts_core.methods.selection import METHODS
from gmts_core.progress import LOGPROB_AFTER, STATISTICS, UPDATE, StageCallback, Stages
from gmts_core.progress import stages as new_stages
from gmts_core.sampling.answers import SamplingConfig
from gmts_core.stats.contexts import share_identical_contexts
from gmts_core.stats.forward import (
    AnswerStats,
    answer_logits,
    answer_token_stats,
    stats_from_logits,
    token_budget_batches,
)

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RLPrompt:
    """A training prompt and how to reward its answers (e.g. numeric, reference "85")."""

    prompt: str
    reference: str
    reward_kind: str = "numeric"


DEMO_RECIPE = RLConfig(
    prompts_per_step=64,
    inner_steps=4,
    learning_rate=1.5e-4,
    warmup_steps=5,
    fused_max_tokens=65536,  # the demo model's graphs of a whole 512-answer batch: ~0.3 GB
)
"""The GRPO recipe that teaches the bundled demo model (see ``benchmarks/rl_gain.py``).

The demo model's mistakes include +-1 slips on digits. In a small batch, the counts of +1 and -1
slips among the wrong answers differ by chance, and pushing down the sampled slips then shifts
every digit prediction up or down at once: a direction the model is very sensitive to, along
which one AdamW step at lr 3e-4 on 8 prompts halves the accuracy. 64 prompts a step (512 answers)
average that noise out; 4 updates per batch (clipped, PPO-style) make the most of each batch.
"""

CLASS_RECIPE = RLConfig(
    prompts_per_step=32, learning_rate=1.5e-4, inner_steps=1, warmup_steps=5, max_new_tokens=48
)
"""The demo recipe at a classroom's pace (the UI's Train and Compare tabs): 32 prompts x G = 8
a step, one update per batch, the same learning rate and warm-up; it gains about 10-16 points of
held-out accuracy in 10-20 steps (docs/benchmarks.md, "The Train tab's defaults")."""


def rollout_groups(prompts: Sequence[RLPrompt], config: RLConfig, seed: int) -> list[GroupInput]:
    """One group of ``group_size`` answers to sample per prompt, each group with its own seed."""
    return [
        GroupInput(
            prompt=p.prompt,
            sampling=SamplingConfig(
                num_samples=config.group_size,
                temperature=config.temperature,
                top_p=config.top_p,
                max_new_tokens=config.max_new_tokens,
                seed=seed * 1_000_003 + i,
            ),
            reward=RewardSpec(p.reward_kind, p.reference),
        )
        for i, p in enumerate(prompts)
    ]


def rollout(
    policy: TrainablePolicy,
    groups: list[GroupInput],
    config: RLConfig,
    seed: int,
    stages: Stages | None = None,
) -> PreparedGroups:
    """Sample every group's answers and reward them (no statistics yet)."""
    return prepare_groups(policy.as_loaded(), groups, config.analysis_config(seed), stages)


Parts = list[tuple[list[int], slice]]  # micro-batches: answer indices and their token slice
Sequences = list[tuple[list[int], list[int]]]  # (prompt_ids, answer_ids) per answer


def micro_batches(sequences: Sequences, max_tokens: int) -> Parts:
    """Consecutive answers in padded batches of at most ``max_tokens`` tokens each."""
    lengths = [len(p) + len(a) for p, a in sequences]
    offsets = [0]
    for _, a in sequences:
        offsets.append(offsets[-1] + len(a))
    return [
        (idx, slice(offsets[idx[0]], offsets[idx[-1] + 1]))
        for idx in token_budget_batches(lengths, max_tokens)
    ]


def padded_tokens(sequences: Sequences, parts: Parts) -> int:
    """Tokens the micro-batches' padded forwards process, padding included."""
    return sum(
        len(idx) * max(len(sequences[i][0]) + len(sequences[i][1]) for i in idx) for idx, _ in parts
    )


@dataclass
class StatisticsForward:
    """The first update's training forward: per micro-batch, the differentiable log-probs
    (N_part,) whose graphs are held for the backward, and every answer's statistics."""

    logprobs: list[torch.Tensor]
    stats: list[AnswerStats]


def statistics_forward(
    policy: TrainablePolicy, sequences: Sequences, parts: Parts, config: RLConfig
) -> StatisticsForward:
    """One training forward per micro-batch (grad enabled); the token statistics come from the
    same logits, detached. The log-probs are those of the loss (temperature tau)."""
    pad_id = policy.tokenizer.pad_token_id
    chunk = config.analysis_config(0).chunk_size
    logprobs, stats = [], []
    with torch.enable_grad():
        for idx, _ in parts:
            seqs = [sequences[i] for i in idx]
            hidden, logits = answer_logits(policy.model, seqs, pad_id, share_prompts=True)
            stats += stats_from_logits(logits, hidden, seqs, config.temperature, 0, chunk)
            targets = answer_targets(seqs, logits.device)
            logprobs.append(logprobs_from_logits(logits, targets, config.temperature))
    share_identical_contexts(sequences, stats)  # as answer_token_stats: bit-equal repeats
    return StatisticsForward(logprobs, stats)


def answer_statistics(
    policy: TrainablePolicy, sequences: Sequences, parts: Parts, config: RLConfig
) -> tuple[list[AnswerStats], list[torch.Tensor] | None]:
    """Every answer's token statistics and, where the batch is small enough to hold its graphs
    (``fused_max_tokens``), the first update's differentiable log-probs per micro-batch."""
    if padded_tokens(sequences, parts) <= config.fused_max_tokens:
        first = statistics_forward(policy, sequences, parts, config)
        return first.stats, first.logprobs
    stats = answer_token_stats(
        policy.model,
        sequences,
        policy.tokenizer.pad_token_id,
        config.temperature,
        0,
        config.analysis_config(0).chunk_size,
        config.max_batch_tokens,
    )
    return stats, None


def score_batch(
    policy: TrainablePolicy,
    prepared: PreparedGroups,
    stats: list[AnswerStats],
    config: RLConfig,
    seed: int,
    stages: Stages | None = None,
) -> AnalysisResult:
    """Advantages, selections, records and summaries: the last stage of ``analyze``."""
    analysis_config = config.analysis_config(seed)
    return finish_analysis(policy.as_loaded(), prepared, stats, analysis_config, stages)


def training_batch(result: AnalysisResult, sequences: Sequences, config: RLConfig) -> TrainBatch:
    """Per-token advantages, weights and the training method's selection mask, from the
    analysis's flat tensors (no per-token records are built)."""
    answers = [a for _, a in result.iter_answers()]
    groups = [g.index for g, _ in result.iter_answers()]
    lengths = torch.tensor([a.length for a in answers], dtype=torch.long)
    index = torch.repeat_interleave(torch.arange(len(answers)), lengths)  # (N,)
    per_answer = lambda values: torch.tensor(values, dtype=torch.float64)[index]  # noqa: E731
    return TrainBatch(
        sequences=list(sequences),
        advantages=per_answer([a.advantage for a in answers]),
        weights=per_answer([a.weight for a in answers]),
        mask=result.selections[config.method].selected.detach().cpu().clone(),
        answer_index=index,
        group_index=torch.tensor(groups, dtype=torch.long)[index],
        rewards=per_answer([a.reward for a in answers]),
    )


def make_optimizer(policy: TrainablePolicy, config: RLConfig) -> torch.optim.Optimizer:
    """AdamW (default; its fused implementation where the parameters' device and dtype allow)
    or plain SGD over the policy's trainable parameters."""
    params = policy.trainable_parameters()
    if config.optimizer == "sgd":
        return torch.optim.SGD(params, lr=config.learning_rate, weight_decay=config.weight_decay)
    settings = {
        "lr": config.learning_rate,
        "betas": config.adam_betas,
        "eps": config.adam_epsilon,
        "weight_decay": config.weight_decay,
    }
    try:  # the fused kernel (CPU and CUDA): one call per step, not ~10 ops per parameter
        return torch.optim.AdamW(params, **settings, fused=True)  # type: ignore[arg-type]
    except (RuntimeError, ValueError):  # a device or dtype it does not take
        return torch.optim.AdamW(params, **settings)  # type: ignore[arg-type]


def _logprobs(
    model: Any, batch: TrainBatch, parts: Parts, pad_id: int, temperature: float
) -> torch.Tensor:
    """log pi of every token of the batch (N,), without gradients, part by part."""
    with torch.no_grad():
        return torch.cat(
            [
                answer_logprobs(
                    model,
                    [batch.sequences[i] for i in idx],
                    pad_id,
                    temperature,
                    share_prompts=True,
                )
                for idx, _ in parts
            ]
        )


def _merge(terms: list[LossTerms], grad_norm: float) -> dict[str, float]:
    """One inner step's numbers from its micro-batches' terms (sums and counts)."""
    tokens = sum(t.num_tokens for t in terms)
    selected = max(sum(t.num_selected for t in terms), 1)
    return {
        "loss": sum(float(t.loss.detach()) for t in terms),
        "policy_loss": sum(t.policy_loss for t in terms),
        "kl": sum(t.kl_sum for t in terms) / max(tokens, 1),
        "grad_norm": grad_norm,
        "clip_low_fraction": sum(t.clip_low for t in terms) / selected,
        "clip_high_fraction": sum(t.clip_high for t in terms) / selected,
    }


def _one_update(
    policy: TrainablePolicy,
    optimizer: torch.optim.Optimizer,
    batch: TrainBatch,
    parts: Parts,
    old_logp: torch.Tensor | None,
    ref_logp: torch.Tensor | None,
    config: RLConfig,
    mask: torch.Tensor,
    held: list[torch.Tensor] | None = None,
) -> tuple[dict[str, float], torch.Tensor, EffectiveCoefficient]:
    """One AdamW update on the tokens of ``mask``, gradients accumulated over micro-batches;
    returns its numbers, the log-probs of pi_old (the current policy's own when ``old_logp``
    is None, so rho = 1) and each token's effective coefficient at this update.

    ``held``: this policy's differentiable log-probs per micro-batch from a forward already
    run (:func:`statistics_forward`), used instead of a new forward. The gradient stays in
    ``.grad`` (clipped) for inspection.
    """
    pad_id = policy.tokenizer.pad_token_id
    optimizer.zero_grad(set_to_none=False)
    terms, olds, logps = [], [], []
    for j, (idx, sl) in enumerate(parts):
        if held is not None:
            logp, held[j] = held[j], torch.empty(0)  # the graph is freed by its backward
        else:
            seqs = [batch.sequences[i] for i in idx]
            logp = answer_logprobs(
                policy.model, seqs, pad_id, config.temperature, share_prompts=True
            )
        old = logp.detach() if old_logp is None else old_logp[sl]
        olds.append(old)
        logps.append(logp.detach())
        part = grpo_loss(
            logp,
            old,
            batch.advantages[sl],
            batch.weights[sl],
            mask[sl],
            config.epsilon_low,
            config.epsilon_high,
            None if ref_logp is None else ref_logp[sl],
            config.beta,
        )
        part.loss.backward()
        terms.append(part)
    params = policy.trainable_parameters()
    grad_norm = float(torch.nn.utils.clip_grad_norm_(params, config.max_grad_norm))
    if not math.isfinite(grad_norm):  # never write NaN/inf into the session's weights
        optimizer.zero_grad(set_to_none=False)
        raise NonFiniteLogitsError("the loss gradient is not finite; the update was skipped")
    optimizer.step()
    old_all, logp_all = torch.cat(olds), torch.cat(logps)
    coefficient = effective_coefficient(
        batch.advantages, batch.weights, clip_settings(config), logp_all, old_all, ref_logp
    )
    return _merge(terms, grad_norm), old_all, coefficient


def policy_update(
    policy: TrainablePolicy,
    optimizer: torch.optim.Optimizer,
    batch: TrainBatch,
    config: RLConfig,
    learning_rate: float | None = None,
    seed: int = 0,
    held: list[torch.Tensor] | None = None,
    stages: Stages | None = None,
) -> UpdateStats:
    """``inner_steps`` updates on one batch; pi_old is the policy that sampled it. With
    ``config.reselect`` every update after the first trains on :func:`current_selection`.

    ``held``: the current policy's differentiable log-probs per micro-batch of
    ``micro_batches(batch.sequences, config.max_batch_tokens)`` (from
    :func:`statistics_forward`); the first update then runs no forward of its own. ``stages``
    hears "update" before each inner update and "log-prob after" before that pass.
    """
    stages = stages or Stages()
    pad_id = policy.tokenizer.pad_token_id
    for group in optimizer.param_groups:
        group["lr"] = config.learning_rate if learning_rate is None else learning_rate
        group["weight_decay"] = config.weight_decay
    parts = micro_batches(batch.sequences, config.max_batch_tokens)
    if held is not None and len(held) != len(parts):
        raise ValueError(f"{len(held)} held log-prob parts for {len(parts)} micro-batches")
    ref_logp = None
    if config.beta != 0 or config.measure_kl:
        with policy.reference() as ref:
            ref_logp = _logprobs(ref, batch, parts, pad_id, config.temperature)
    old_logp: torch.Tensor | None = None
    rows: list[dict[str, float]] = []
    coefficients: list[EffectiveCoefficient] = []
    masks: list[torch.Tensor] = []
    mask = batch.mask
    # gmts_paper_verl re-selects on every update, as verl's actor does per PPO mini-batch
    reselect = config.reselect or METHODS.get(config.method).reselects
    for inner in range(config.inner_steps):
        stages.begin(UPDATE)  # a stage boundary: a cancelled job stops before each update
        if reselect and old_logp is not None:
            _, sel = current_selection(policy, batch, old_logp, ref_logp, config, seed + inner)
            mask = sel.selected
        row, old, coefficient = _one_update(
            policy, optimizer, batch, parts, old_logp, ref_logp, config, mask, held
        )
        held = None
        old_logp = old if old_logp is None else old_logp
        rows.append(row)
        coefficients.append(coefficient)
        masks.append(mask)
    assert old_logp is not None
    after = None
    if config.measure_logprob_after:
        stages.begin(LOGPROB_AFTER)
        after = _logprobs(policy.model, batch, parts, pad_id, config.temperature)
    means = {k: sum(r[k] for r in rows) / len(rows) for k in rows[0]}
    return UpdateStats(
        **means,
        logprob_before=old_logp,
        logprob_after=after,
        per_inner_step=rows,
        coefficients=coefficients,
        masks=masks,
    )


def grpo_step(
    policy: TrainablePolicy,
    optimizer: torch.optim.Optimizer,
    prompts: Sequence[RLPrompt],
    config: RLConfig,
    seed: int,
    step: int = 0,
    on_stage: StageCallback | None = None,
) -> StepResult:
    """One GRPO step on ``prompts``: rollout, reward, statistics, selection, update, metrics.

    Each piece of work is done once: the rollout's token ids feed the statistics, the first
    update's training forward yields the statistics (for batches within ``fused_max_tokens``),
    and its log-probs are pi_old for the later inner updates.

    ``on_stage(name, done, total)`` hears each stage as it begins (:mod:`gmts_core.progress`):
    "generating answers", "scoring rewards", "token statistics", "selection", "update" once
    per inner update, then "log-prob after" when ``measure_logprob_after`` is on.
    """
    config.validate()
    if not prompts:
        raise InvalidInputError("a step needs at least one prompt")
    start = time.perf_counter()
    total = 4 + config.inner_steps + int(config.measure_logprob_after)
    stages = new_stages(on_stage, total)  # each stage boundary is a cancellation checkpoint
    prepared = rollout(policy, rollout_groups(prompts, config, seed), config, seed, stages)
    stages.begin(STATISTICS)  # the statistics and first training forward
    parts = micro_batches(prepared.sequences, config.max_batch_tokens)
    stats, held = answer_statistics(policy, prepared.sequences, parts, config)
    result = score_batch(policy, prepared, stats, config, seed, stages)
    batch = training_batch(result, prepared.sequences, config)
    lr = config.learning_rate_at(step)
    update = policy_update(policy, optimizer, batch, config, lr, seed, held, stages)
    metrics = StepMetrics.from_parts(step, config, result, batch.mask, update)
    metrics.learning_rate = lr
    metrics.seconds = time.perf_counter() - start
    logger.info("step %d (%s): reward %.3f", step, config.method, metrics.reward_mean)
    return StepResult(
        metrics=metrics,
        analysis=result,
        batch=batch,
        logprob_before=update.logprob_before,
        logprob_after=update.logprob_after,
    )
