"""The training forward of a GRPO step, run before the selection: each micro-batch's
differentiable log-probs (graphs held for the first update's backward) and its answers' token
statistics from the same logits, so the analysis costs no forward pass of its own. Batches above
``fused_max_tokens`` (to bound memory) take the statistics collected while sampling instead
(:func:`collect_while_sampling`), or a separate no-grad pass where none were collected."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gmts_core.config import RLConfig
from gmts_core.grpo.loss import (
    answer_targets,
    logprobs_from_logits,
)
from gmts_core.grpo.policy import TrainablePolicy
from gmts_core.model.rope_window import longrope_window
from gmts_core.stats.contexts import share_identical_contexts
from gmts_core.stats.forward import (
    AnswerStats,
    answer_logits,
    answer_token_stats,
    stats_from_logits,
    token_budget_batches,
)

Parts = list[tuple[list[int], slice]]  # micro-batches: answer indices and their token slice

Sequences = list[tuple[list[int], list[int]]]  # (prompt_ids, answer_ids) per answer


def micro_batches(sequences: Sequences, max_tokens: int, window: int | None = None) -> Parts:
    """Consecutive answers in padded batches of at most ``max_tokens`` tokens each. With a
    ``longrope`` ``window`` W (:func:`gmts_core.model.rope_window.longrope_window` of the
    policy's config) no batch mixes sequences within W and past it: a padded forward takes its
    RoPE frequencies from the padded length, so a short sequence padded to a long one would get
    the long factors (its own forward uses the short ones)."""
    lengths = [len(p) + len(a) for p, a in sequences]
    offsets = [0]
    for _, a in sequences:
        offsets.append(offsets[-1] + len(a))
    batches = token_budget_batches(lengths, max_tokens)
    if window is not None:  # split each batch where the side of W changes (slices stay runs)
        runs = []
        for batch in batches:
            run = [batch[0]]
            for i in batch[1:]:
                if (lengths[i] > window) != (lengths[run[-1]] > window):
                    runs.append(run)
                    run = []
                run.append(i)
            runs.append(run)
        batches = runs
    return [(idx, slice(offsets[idx[0]], offsets[idx[-1] + 1])) for idx in batches]


def policy_micro_batches(policy: TrainablePolicy, sequences: Sequences, config: RLConfig) -> Parts:
    """The micro-batches every pass of a step on ``policy`` runs: :func:`micro_batches` of
    ``config.max_batch_tokens``, split at the policy's ``longrope`` window (if it has one)."""
    return micro_batches(sequences, config.max_batch_tokens, longrope_window(policy.model.config))


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
    # as answer_token_stats: bit-equal repeats, on one side of a longrope window only
    share_identical_contexts(sequences, stats, longrope_window(policy.model.config))
    return StatisticsForward(logprobs, stats)


def collect_while_sampling(config: RLConfig, prompts: int) -> bool:
    """Whether a step's rollout collects its answers' statistics while sampling: when its
    answers alone could exceed ``fused_max_tokens`` (the statistics then cannot come from the
    held training forward), so that no separate statistics pass is needed."""
    return config.fused_max_tokens < prompts * config.group_size * config.max_new_tokens


def answer_statistics(
    policy: TrainablePolicy,
    sequences: Sequences,
    parts: Parts,
    config: RLConfig,
    collected: list[AnswerStats | None] | None = None,
) -> tuple[list[AnswerStats], list[torch.Tensor] | None]:
    """Every answer's token statistics and, where the batch is small enough to hold its graphs
    (``fused_max_tokens``), the first update's differentiable log-probs per micro-batch.

    A larger batch takes the statistics its rollout ``collected`` while sampling (from the very
    logits each token was drawn from, by the weights the update starts from: equal to a
    forward's to float32 rounding, :mod:`gmts_core.sampling.sampler_probe`), or, where any is
    missing, from a separate no-grad pass."""
    if padded_tokens(sequences, parts) <= config.fused_max_tokens:
        first = statistics_forward(policy, sequences, parts, config)
        return first.stats, first.logprobs
    if collected is not None and all(s is not None for s in collected):
        stats = [s for s in collected if s is not None]
        # as answer_token_stats: bit-equal repeats, on one side of a longrope window only (an
        # answer that crosses it was re-scored with its own full forward)
        share_identical_contexts(sequences, stats, longrope_window(policy.model.config))
        return stats, None
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
