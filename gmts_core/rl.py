"""One live GRPO step with token selection, as small named functions.

rollout_groups  -> a group of G sampled answers per prompt, with its reward rule
score_batch     -> rewards, advantages, token statistics and every method's selection:
                   exactly :func:`gmts_core.analysis.analyze`, so what users inspect in
                   the analysis is what the step trains on
training_batch  -> flat per-token tensors: advantages, weights, the selection mask
policy_update   -> ``inner_steps`` AdamW updates of the clipped, masked GRPO loss
                   (:mod:`gmts_core.policy_loss`) with gradient-norm clipping; the selection
                   is fixed per batch (default, as TRL) or re-ranked before every later update
                   by gamma = w |omega| g at the current policy (``reselect``)
grpo_step       -> all of the above, plus metrics and the per-token log-prob change
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from gmts_core.analysis import AnalysisConfig, GroupInput, RewardSpec, analyze, encode_prompt
from gmts_core.coefficient import EffectiveCoefficient, effective_coefficient
from gmts_core.errors import InvalidInputError
from gmts_core.forward import _micro_batches
from gmts_core.policy import TrainablePolicy
from gmts_core.policy_loss import LossTerms, answer_logprobs, grpo_loss
from gmts_core.records import AnalysisResult
from gmts_core.rl_records import StepMetrics, StepResult, answer_changes
from gmts_core.rl_selection import clip_settings, current_selection
from gmts_core.sampling import SamplingConfig
from gmts_core.selection import list_methods

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RLPrompt:
    """A training prompt and how to reward its answers (e.g. numeric, reference "85")."""

    prompt: str
    reference: str
    reward_kind: str = "numeric"


@dataclass(frozen=True)
class RLConfig:
    """Every knob of a GRPO step (defaults tuned on the demo model; see benchmarks/rl_gain.py)."""

    method: str = "gmts"  # selection method whose mask the loss uses
    ratio: float = 0.2  # share of answer tokens selected (k = ceil(ratio * N))
    scope: str = "batch"  # selection scope: batch | group | answer
    group_size: int = 8  # G answers sampled per prompt
    prompts_per_step: int = 8  # prompts in a batch drawn from the demo task
    learning_rate: float = 1e-4  # stable on the demo model even with small batches
    warmup_steps: int = 0  # linear warmup of the learning rate over the first steps
    inner_steps: int = 1  # optimizer updates per sampled batch (PPO epochs)
    epsilon_low: float = 0.2
    epsilon_high: float = 0.28  # DAPO's clip-higher
    beta: float = 0.0  # weight of the k3 KL term to the reference (the starting policy)
    max_grad_norm: float = 1.0
    weight_decay: float = 0.0
    optimizer: str = "adamw"  # adamw | sgd
    adam_betas: tuple[float, float] = (0.9, 0.99)
    adam_epsilon: float = 1e-8  # larger values damp the updates of parameters with tiny gradients
    temperature: float = 1.0  # sampling temperature and tau of the loss's log-probs
    top_p: float = 1.0
    max_new_tokens: int = 48
    advantage: str = "grpo"
    loss_aggregation: str = "token_mean"
    chat_template: bool = False
    measure_kl: bool = True  # report KL even when beta is 0 (one more forward pass)
    max_batch_tokens: int = 8192  # padded tokens per forward/backward micro-batch
    report_methods: tuple[str, ...] = ("entropy", "gmts")  # wasted_share etc. also for these
    # False (default): the selection made at the sampling point is kept for every inner update,
    # as TRL does. True: before each later update the tokens are re-scored at the current policy
    # (ratio, clip and KL in omega_t: gamma = w |omega| g) and re-selected; one more forward each.
    reselect: bool = False

    def validate(self) -> None:
        if self.method not in list_methods():
            raise InvalidInputError(
                f"unknown selection method {self.method!r}; valid: {', '.join(list_methods())}"
            )
        checks = [
            (self.temperature > 0, "temperature must be > 0 for RL (sampling and log-probs)"),
            (self.group_size >= 2, "group_size must be >= 2 (advantages compare answers)"),
            (self.prompts_per_step >= 1, "prompts_per_step must be >= 1"),
            (self.inner_steps >= 1, "inner_steps must be >= 1"),
            (self.learning_rate >= 0, "learning_rate must be >= 0"),
            (self.warmup_steps >= 0, "warmup_steps must be >= 0"),
            (self.optimizer in ("adamw", "sgd"), "optimizer must be adamw or sgd"),
            (self.epsilon_low >= 0 and self.epsilon_high >= 0, "epsilons must be >= 0"),
            (self.beta >= 0, "beta must be >= 0"),
            (self.max_grad_norm > 0, "max_grad_norm must be > 0"),
            (self.max_new_tokens >= 1, "max_new_tokens must be >= 1"),
            (self.max_batch_tokens >= 1, "max_batch_tokens must be >= 1"),
        ]
        for ok, message in checks:
            if not ok:
                raise InvalidInputError(message)
        self.analysis_config(0).validate()

    def learning_rate_at(self, step: int) -> float:
        """The learning rate of step ``step`` (1-based): linear warmup, then constant.

        Adam's first updates move every parameter by about the learning rate whatever its
        gradient, which a small, sharp model does not survive at full rate.
        """
        if self.warmup_steps <= 0:
            return self.learning_rate
        return self.learning_rate * min(1.0, max(step, 1) / self.warmup_steps)

    def selection_methods(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys((self.method, *self.report_methods)))

    def analysis_config(self, seed: int) -> AnalysisConfig:
        return AnalysisConfig(
            temperature=self.temperature,
            advantage=self.advantage,
            loss_aggregation=self.loss_aggregation,
            ratio=self.ratio,
            scope=self.scope,
            methods=self.selection_methods(),
            top_alternatives=0,
            seed=seed,
            chat_template=self.chat_template,
            beta=self.beta,  # the first update's coefficient has the KL term
        )


DEMO_RECIPE = RLConfig(prompts_per_step=64, inner_steps=4, learning_rate=1.5e-4, warmup_steps=5)
"""The GRPO recipe that teaches the bundled demo model (see ``benchmarks/rl_gain.py``).

The demo model's mistakes include +-1 slips on digits. In a small batch, the counts of +1 and -1
slips among the wrong answers differ by chance, and pushing down the sampled slips then shifts
every digit prediction up or down at once: a direction the model is very sensitive to, along
which one AdamW step at lr 3e-4 on 8 prompts halves the accuracy. 64 prompts a step (512 answers)
average that noise out; 4 updates per batch (clipped, PPO-style) make the most of each batch.
"""


@dataclass
class TrainBatch:
    """Flat per-token training tensors, (N,) in (group, answer, position) order."""

    sequences: list[tuple[list[int], list[int]]]  # (prompt_ids, answer_ids) per answer
    advantages: torch.Tensor  # float64, A_i of the token's answer
    weights: torch.Tensor  # float64, w_i of the token's answer
    mask: torch.Tensor  # bool, selected by the training method
    answer_index: torch.Tensor  # int64
    group_index: torch.Tensor | None = None  # int64 (for re-selection with scope "group")

    @property
    def num_tokens(self) -> int:
        return int(self.mask.numel())


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


def score_batch(
    policy: TrainablePolicy, groups: list[GroupInput], config: RLConfig, seed: int
) -> AnalysisResult:
    """Sample, reward, compute advantages, statistics and selections: one ``analyze`` call."""
    return analyze(policy.as_loaded(), groups, config.analysis_config(seed))


def training_batch(result: AnalysisResult, tokenizer: object, config: RLConfig) -> TrainBatch:
    """Per-token advantages, weights and the training method's selection mask."""
    seqs, adv, wts, mask, index, groups = [], [], [], [], [], []
    for a, (group, ans) in enumerate(result.iter_answers()):
        prompt_ids = encode_prompt(tokenizer, group.prompt, config.chat_template)
        seqs.append((prompt_ids, [t.id for t in ans.tokens]))
        adv += [ans.advantage] * ans.length
        wts += [ans.weight] * ans.length
        mask += [t.selected[config.method] for t in ans.tokens]
        index += [a] * ans.length
        groups += [group.index] * ans.length
    return TrainBatch(
        sequences=seqs,
        advantages=torch.tensor(adv, dtype=torch.float64),
        weights=torch.tensor(wts, dtype=torch.float64),
        mask=torch.tensor(mask, dtype=torch.bool),
        answer_index=torch.tensor(index, dtype=torch.long),
        group_index=torch.tensor(groups, dtype=torch.long),
    )


def make_optimizer(policy: TrainablePolicy, config: RLConfig) -> torch.optim.Optimizer:
    """AdamW (default) or plain SGD over the policy's trainable parameters."""
    params = policy.trainable_parameters()
    if config.optimizer == "sgd":
        return torch.optim.SGD(params, lr=config.learning_rate, weight_decay=config.weight_decay)
    return torch.optim.AdamW(
        params,
        lr=config.learning_rate,
        betas=config.adam_betas,
        eps=config.adam_epsilon,
        weight_decay=config.weight_decay,
    )


@dataclass
class UpdateStats:
    """Means over the inner steps, and the batch's log-probs before and after the update."""

    loss: float
    policy_loss: float
    kl: float
    grad_norm: float
    clip_low_fraction: float
    clip_high_fraction: float
    logprob_before: torch.Tensor  # (N,)
    logprob_after: torch.Tensor  # (N,)
    per_inner_step: list[dict[str, float]] = field(default_factory=list)
    # per inner update: each token's ratio, clip flag and omega_t, and the mask trained on
    coefficients: list[EffectiveCoefficient] = field(default_factory=list)
    masks: list[torch.Tensor] = field(default_factory=list)


Parts = list[tuple[list[int], slice]]  # micro-batches: answer indices and their token slice


def micro_batches(batch: TrainBatch, max_tokens: int) -> Parts:
    """Consecutive answers in padded batches of at most ``max_tokens`` tokens each."""
    lengths = [len(p) + len(a) for p, a in batch.sequences]
    offsets = [0]
    for _, a in batch.sequences:
        offsets.append(offsets[-1] + len(a))
    return [
        (idx, slice(offsets[idx[0]], offsets[idx[-1] + 1]))
        for idx in _micro_batches(lengths, max_tokens)
    ]


def _logprobs(
    model: Any, batch: TrainBatch, parts: Parts, pad_id: int, temperature: float
) -> torch.Tensor:
    """log pi of every token of the batch (N,), without gradients, part by part."""
    with torch.no_grad():
        return torch.cat(
            [
                answer_logprobs(model, [batch.sequences[i] for i in idx], pad_id, temperature)
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
) -> tuple[dict[str, float], torch.Tensor, EffectiveCoefficient]:
    """One AdamW update on the tokens of ``mask``, gradients accumulated over micro-batches;
    returns its numbers, the log-probs of pi_old (the current policy's own when ``old_logp``
    is None, so rho = 1) and each token's effective coefficient at this update.

    The gradient stays in ``.grad`` (clipped) for inspection.
    """
    pad_id = policy.tokenizer.pad_token_id
    optimizer.zero_grad(set_to_none=False)
    terms, olds, logps = [], [], []
    for idx, sl in parts:
        seqs = [batch.sequences[i] for i in idx]
        logp = answer_logprobs(policy.model, seqs, pad_id, config.temperature)  # (n,)
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
) -> UpdateStats:
    """``inner_steps`` updates on one batch; pi_old is the policy that sampled it. With
    ``config.reselect`` every update after the first trains on :func:`current_selection`."""
    pad_id = policy.tokenizer.pad_token_id
    for group in optimizer.param_groups:
        group["lr"] = config.learning_rate if learning_rate is None else learning_rate
        group["weight_decay"] = config.weight_decay
    parts = micro_batches(batch, config.max_batch_tokens)
    ref_logp = None
    if config.beta != 0 or config.measure_kl:
        with policy.reference() as ref:
            ref_logp = _logprobs(ref, batch, parts, pad_id, config.temperature)
    old_logp: torch.Tensor | None = None
    rows: list[dict[str, float]] = []
    coefficients: list[EffectiveCoefficient] = []
    masks: list[torch.Tensor] = []
    mask = batch.mask
    for inner in range(config.inner_steps):
        if config.reselect and old_logp is not None:
            _, sel = current_selection(policy, batch, old_logp, ref_logp, config, seed + inner)
            mask = sel.selected
        row, old, coefficient = _one_update(
            policy, optimizer, batch, parts, old_logp, ref_logp, config, mask
        )
        old_logp = old if old_logp is None else old_logp
        rows.append(row)
        coefficients.append(coefficient)
        masks.append(mask)
    assert old_logp is not None
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
) -> StepResult:
    """One GRPO step on ``prompts``: rollout, reward, advantages, mask, update, metrics."""
    config.validate()
    if not prompts:
        raise InvalidInputError("a step needs at least one prompt")
    start = time.perf_counter()
    result = score_batch(policy, rollout_groups(prompts, config, seed), config, seed)
    batch = training_batch(result, policy.tokenizer, config)
    lr = config.learning_rate_at(step)
    update = policy_update(policy, optimizer, batch, config, lr, seed)
    metrics = StepMetrics.from_parts(step, config, result, batch.mask, update)
    metrics.learning_rate = lr
    metrics.seconds = time.perf_counter() - start
    logger.info("step %d (%s): reward %.3f", step, config.method, metrics.reward_mean)
    return StepResult(
        metrics=metrics,
        answers=answer_changes(result, batch.mask, update.logprob_before, update.logprob_after),
        analysis=result,
        batch=batch,
    )
