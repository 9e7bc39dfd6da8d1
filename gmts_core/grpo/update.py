"""The policy update of a GRPO step: flat per-token tensors of the batch (advantages, weights,
the selection mask), the optimizer, and ``inner_steps`` AdamW updates of the clipped, masked
GRPO loss (:mod:`gmts_core.grpo.loss`) with gradient-norm clipping. The first update reuses the
training forward's graphs; the selection is fixed per batch (default, as TRL) or re-ranked
before every later update by gamma = w |omega| g at the current policy (``reselect``)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch

from gmts_core.analysis.records import AnalysisResult
from gmts_core.config import RLConfig
from gmts_core.errors import NonFiniteLogitsError
from gmts_core.grpo.forward import Parts, Sequences, policy_micro_batches
from gmts_core.grpo.loss import (
    LossTerms,
    answer_logprobs,
    grpo_loss,
)
from gmts_core.grpo.policy import TrainablePolicy
from gmts_core.grpo.records import (
    TrainBatch,
    UpdateStats,
)
from gmts_core.grpo.selection import clip_settings, current_selection
from gmts_core.methods.coefficient import EffectiveCoefficient, effective_coefficient
from gmts_core.methods.selection import METHODS
from gmts_core.model.rope_window import longrope_window
from gmts_core.progress import LOGPROB_AFTER, UPDATE, Stages


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
    model: Any, sequences: Sequences, parts: Parts, pad_id: int, temperature: float
) -> torch.Tensor:
    """log pi of every answer token of ``sequences`` (N,), without gradients, part by part."""
    with torch.no_grad():
        return torch.cat(
            [
                answer_logprobs(
                    model, [sequences[i] for i in idx], pad_id, temperature, share_prompts=True
                )
                for idx, _ in parts
            ]
        )


def first_prompts(batch: TrainBatch, prompts: int) -> tuple[int, int]:
    """(answers, tokens) of the batch's first ``prompts`` groups (0: every group). In the
    batch's (group, answer, position) order they are a prefix: ``batch.sequences[:answers]``
    and the flat tensors' first ``tokens`` rows."""
    everything = len(batch.sequences), batch.num_tokens
    if prompts <= 0 or batch.group_index is None or batch.num_tokens == 0:
        return everything
    groups = torch.unique_consecutive(batch.group_index)
    if len(groups) <= prompts:
        return everything
    tokens = int(torch.nonzero(batch.group_index == groups[prompts])[0, 0])
    return int(batch.answer_index[tokens]), tokens


def logprob_after(policy: TrainablePolicy, batch: TrainBatch, config: RLConfig) -> torch.Tensor:
    """log pi after the update (N,) on the answers of the batch's first
    ``config.logprob_after_prompts`` prompts (0: all), measured by one no-grad forward of
    those answers only; NaN on every other row (not measured). A measured row is the value a
    pass over the whole batch gives for it (the same tokens in the same context), to float32
    rounding: the forward's shapes differ, so the last bit may."""
    answers, tokens = first_prompts(batch, config.logprob_after_prompts)
    sequences = batch.sequences[:answers]
    parts = policy_micro_batches(policy, sequences, config)
    pad_id = policy.tokenizer.pad_token_id
    after = torch.full((batch.num_tokens,), math.nan, dtype=torch.float32)
    if tokens:
        after[:tokens] = _logprobs(policy.model, sequences, parts, pad_id, config.temperature)
    return after


def loss_rows(
    batch: TrainBatch, config: RLConfig, mask: torch.Tensor, reselect: bool
) -> torch.Tensor | None:
    """The rows (N,) bool whose log-probs a step's single update needs, where that is not every
    row: the tokens with a loss term that can be non-zero (selected, A != 0, w != 0) and those
    whose log-prob change is measured (:func:`logprob_after`); every other token's term is
    exactly 0 for any policy, and so is its gradient. None (every row) where more is needed: a
    KL term or report (``beta``, ``measure_kl``: every token's log-prob), later inner updates
    or a re-selection (their ratios and omega_t need every token's log-prob under pi_old)."""
    if config.beta != 0 or config.measure_kl or config.inner_steps != 1 or reselect:
        return None
    rows = mask.to(torch.bool) & (batch.advantages != 0) & (batch.weights != 0)
    if config.measure_logprob_after:
        _, measured = first_prompts(batch, config.logprob_after_prompts)
        rows[:measured] = True
    return rows


def _truncated(
    sequences: Sequences, rows: torch.Tensor, window: int | None = None
) -> tuple[Sequences, list[int], list[int]]:
    """Each answer up to its last row in ``rows`` (N_part,), answers with none left out: a
    causal model's log-prob of a token does not depend on the tokens after it. With a
    ``longrope`` ``window`` W (:func:`gmts_core.model.rope_window.longrope_window`) it does
    through the forward's length: a prompt + answer past W keeps at least W + 1 tokens, so that
    its forward still takes the long factors its whole forward takes (cut within W, every
    position would get the short ones). Returns those sequences, the rows' indices in their
    flat (answer, position) order, and the same rows' indices in ``sequences``' flat order."""
    flags = rows.tolist()
    kept: Sequences = []
    kept_rows: list[int] = []
    part_rows: list[int] = []
    start = cut = 0
    for prompt, answer in sequences:
        hits = [j for j in range(len(answer)) if flags[start + j]]
        if hits:
            keep = hits[-1] + 1
            if window is not None and len(prompt) + len(answer) > window:
                keep = max(keep, window + 1 - len(prompt))  # still past W
            kept.append((prompt, answer[:keep]))
            kept_rows += [cut + j for j in hits]
            part_rows += [start + j for j in hits]
            cut += keep
        start += len(answer)
    return kept, kept_rows, part_rows


def _rows_update(
    policy: TrainablePolicy,
    batch: TrainBatch,
    parts: Parts,
    config: RLConfig,
    mask: torch.Tensor,
    rows: torch.Tensor,
) -> tuple[list[LossTerms], torch.Tensor]:
    """The first update's gradient from ``rows`` only (:func:`loss_rows`): each micro-batch's
    answers up to their last such row, the LM head on those rows, backward. The gradient is the
    every-row forward's to float32 rounding (the others' terms are exactly 0). Returns the
    parts' loss terms (counts over all their tokens) and pi_old's log-probs (N,), NaN on the
    rows not computed."""
    pad_id = policy.tokenizer.pad_token_id
    window = longrope_window(policy.model.config)
    logp_all = torch.full((batch.num_tokens,), math.nan, dtype=torch.float32)
    terms = []
    for idx, sl in parts:
        seqs = [batch.sequences[i] for i in idx]
        kept, kept_rows, part_rows = _truncated(seqs, rows[sl], window)
        counts = {"num_tokens": sl.stop - sl.start, "num_selected": int(mask[sl].sum())}
        if not kept_rows:  # no term of this micro-batch can be non-zero: no forward at all
            zero = LossTerms(torch.zeros(()), 0.0, 0.0, 0, 0, 0, 0)
            terms.append(dataclasses.replace(zero, **counts))
            continue
        logp = answer_logprobs(
            policy.model, kept, pad_id, config.temperature, share_prompts=True, rows=kept_rows
        )
        at = torch.tensor(part_rows, dtype=torch.long) + sl.start
        part = grpo_loss(
            logp,
            logp.detach(),  # pi_old is the policy itself: rho = 1
            batch.advantages[at],
            batch.weights[at],
            mask[at],
            config.epsilon_low,
            config.epsilon_high,
        )
        part.loss.backward()
        terms.append(dataclasses.replace(part, **counts))
        logp_all[at] = logp.detach().to(device=logp_all.device, dtype=logp_all.dtype)
    if all(not t.loss.requires_grad for t in terms):
        for param in policy.trainable_parameters():  # no backward ran: the gradient is 0, and
            if param.grad is None:  # the optimizer steps on it as on any other (decay, moments)
                param.grad = torch.zeros_like(param)
    return terms, logp_all


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


def _apply(policy: TrainablePolicy, optimizer: torch.optim.Optimizer, config: RLConfig) -> float:
    """Clip the accumulated gradient's norm and take the optimizer step; returns the norm
    before clipping. A non-finite gradient is dropped (never written into the weights)."""
    params = policy.trainable_parameters()
    grad_norm = float(torch.nn.utils.clip_grad_norm_(params, config.max_grad_norm))
    if not math.isfinite(grad_norm):
        optimizer.zero_grad(set_to_none=False)
        raise NonFiniteLogitsError("the loss gradient is not finite; the update was skipped")
    optimizer.step()
    return grad_norm


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
    rows: torch.Tensor | None = None,
) -> tuple[dict[str, float], torch.Tensor, EffectiveCoefficient]:
    """One AdamW update on the tokens of ``mask``, gradients accumulated over micro-batches;
    returns its numbers, the log-probs of pi_old (the current policy's own when ``old_logp``
    is None, so rho = 1) and each token's effective coefficient at this update.

    ``held``: this policy's differentiable log-probs per micro-batch from a forward already
    run (:func:`statistics_forward`), used instead of a new forward. ``rows``
    (:func:`loss_rows`): without ``held``, the on-policy update computes only those rows'
    log-probs (NaN elsewhere in the log-probs returned). The gradient stays in ``.grad``
    (clipped) for inspection.
    """
    pad_id = policy.tokenizer.pad_token_id
    optimizer.zero_grad(set_to_none=False)
    if rows is not None and held is None and old_logp is None and ref_logp is None:
        terms, old_all = _rows_update(policy, batch, parts, config, mask, rows)
        grad_norm = _apply(policy, optimizer, config)
        coefficient = effective_coefficient(  # on-policy: rho = 1 for every token
            batch.advantages, batch.weights, clip_settings(config)
        )
        return _merge(terms, grad_norm), old_all, coefficient
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
    grad_norm = _apply(policy, optimizer, config)
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
    ``policy_micro_batches(policy, batch.sequences, config)`` (from
    :func:`statistics_forward`); the first update then runs no forward of its own. ``stages``
    hears "update" before each inner update and "log-prob after" before that pass.
    """
    stages = stages or Stages()
    pad_id = policy.tokenizer.pad_token_id
    for group in optimizer.param_groups:
        group["lr"] = config.learning_rate if learning_rate is None else learning_rate
        group["weight_decay"] = config.weight_decay
    parts = policy_micro_batches(policy, batch.sequences, config)
    if held is not None and len(held) != len(parts):
        raise ValueError(f"{len(held)} held log-prob parts for {len(parts)} micro-batches")
    ref_logp = None
    if config.beta != 0 or config.measure_kl:
        with policy.reference() as ref:
            ref_logp = _logprobs(ref, batch.sequences, parts, pad_id, config.temperature)
    old_logp: torch.Tensor | None = None
    rows: list[dict[str, float]] = []
    coefficients: list[EffectiveCoefficient] = []
    masks: list[torch.Tensor] = []
    mask = batch.mask
    # gmts_paper_verl re-selects on every update, as verl's actor does per PPO mini-batch
    reselect = config.reselect or METHODS.get(config.method).reselects
    needed = loss_rows(batch, config, mask, reselect)
    for inner in range(config.inner_steps):
        stages.begin(UPDATE)  # a stage boundary: a cancelled job stops before each update
        if reselect and old_logp is not None:
            _, sel = current_selection(policy, batch, old_logp, ref_logp, config, seed + inner)
            mask = sel.selected
        row, old, coefficient = _one_update(
            policy, optimizer, batch, parts, old_logp, ref_logp, config, mask, held, needed
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
        after = logprob_after(policy, batch, config)
    means = {k: sum(r[k] for r in rows) / len(rows) for k in rows[0]}
    return UpdateStats(
        **means,
        logprob_before=old_logp,
        logprob_after=after,
        per_inner_step=rows,
        coefficients=coefficients,
        masks=masks,
    )
