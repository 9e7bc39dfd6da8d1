"""Re-selection inside a live RL step: each token's score at the current policy.

After the first inner update the policy is no longer the one that sampled the batch: the
ratio r_t = pi_theta / pi_old moves, some tokens' clipped objective turns flat (zero gradient)
and the KL term grows. :func:`current_selection` re-scores every token with the exact
gamma = w_i |omega_t| g (:mod:`gmts_core.methods.coefficient`) at the current policy and selects
again; :func:`gmts_core.grpo.step.policy_update` uses it when ``RLConfig.reselect`` is set.
"""

from __future__ import annotations

import torch

from gmts_core.config import RLConfig
from gmts_core.grpo.policy import TrainablePolicy
from gmts_core.grpo.records import TrainBatch
from gmts_core.methods.coefficient import ClipSettings, effective_coefficient, selection_inputs
from gmts_core.methods.selection import Selection, SelectionInputs, select
from gmts_core.stats.forward import answer_token_stats


def clip_settings(config: RLConfig) -> ClipSettings:
    return ClipSettings(config.epsilon_low, config.epsilon_high, config.beta)


def current_selection(
    policy: TrainablePolicy,
    batch: TrainBatch,
    old_logp: torch.Tensor,
    ref_logp: torch.Tensor | None,
    config: RLConfig,
    seed: int = 0,
) -> tuple[SelectionInputs, Selection]:
    """The training method's selection at the current policy: statistics (H, g) from a fresh
    forward, gamma = w |omega_t| g with the ratio to pi_old, the clip and the KL term."""
    stats = answer_token_stats(
        policy.model, batch.sequences, policy.tokenizer.pad_token_id, config.temperature
    )
    cat = lambda f: torch.cat([f(s.stats).double().cpu() for s in stats])  # noqa: E731
    logp = cat(lambda s: s.logprob)
    settings = clip_settings(config)
    coefficient = effective_coefficient(
        batch.advantages, batch.weights, settings, logp, old_logp, ref_logp
    )
    groups = batch.group_index if batch.group_index is not None else batch.answer_index * 0
    x = selection_inputs(
        entropy=cat(lambda s: s.entropy),
        logprob=logp,
        grad_norm=cat(lambda s: s.grad_norm),
        weight=batch.weights,
        answer_index=batch.answer_index,
        group_index=groups,
        coefficient=coefficient,
        seed=seed,
        advantage=batch.advantages,
        reward=batch.rewards,
    )
    return x, select(x, config.method, config.ratio, config.scope)
