"""The GRPO policy-gradient loss on a flat batch of answer tokens, with PPO clipping and KL.

For answer token t of answer i, with the policy's log-probability logp_t (temperature tau),
the log-probability old_t of the policy that sampled the batch, the frozen reference's ref_t,
advantage A_i, aggregation weight w_i and selection mask m_t:

    rho_t   = exp(logp_t - old_t)                                   (1 at the first update)
    pg_t    = -min(rho_t A_i, clip(rho_t, 1 - eps_low, 1 + eps_high) A_i)
    kl_t    = exp(ref_t - logp_t) - (ref_t - logp_t) - 1            (k3 estimator, >= 0)
    loss    = sum_t w_i m_t pg_t + beta * sum_t w_i kl_t

At rho = 1 the gradient of the policy term is -sum_t w_i A_i m_t d logp_t, the masked GRPO loss
L = -sum w A m log pi. As in TRL's GRPOTrainer, the selection mask applies to the policy term
only; the KL term (when beta > 0) covers every answer token.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from gmts_core.knobs import DEFAULT_TEMPERATURE
from gmts_core.model.logit_head import head_path
from gmts_core.stats.forward import answer_hidden


def answer_logprobs(
    model: Any,
    sequences: list[tuple[list[int], list[int]]],
    pad_id: int,
    temperature: float = DEFAULT_TEMPERATURE,
    share_prompts: bool = False,
    rows: list[int] | None = None,
) -> torch.Tensor:
    """log pi(y_t) of the answer tokens, float32, in the flat (answer, position) order: every
    one, (N,), or those at ``rows`` only, (len(rows),).

    Differentiable when grad is enabled. The LM head runs only on the positions that predict
    answer tokens (:func:`gmts_core.stats.forward.answer_hidden`, which also says what
    ``share_prompts`` does), and with ``rows`` on those rows alone; each value is the one the
    every-row call gives for its row, to float32 rounding (the head's product has fewer rows).
    """
    hidden = answer_hidden(model, sequences, pad_id, share_prompts)  # (N, D)
    targets = answer_targets(sequences, hidden.device)
    if rows is not None:
        index = torch.tensor(rows, dtype=torch.long, device=hidden.device)
        hidden, targets = hidden.index_select(0, index), targets.index_select(0, index)
    logits = head_path(model).logits(hidden).float()  # (R, V)
    return logprobs_from_logits(logits, targets, temperature)


def answer_targets(
    sequences: list[tuple[list[int], list[int]]], device: torch.device | str = "cpu"
) -> torch.Tensor:
    """The answer tokens of ``sequences``, flat (N,) int64."""
    return torch.tensor([t for _, a in sequences for t in a], dtype=torch.long, device=device)


def logprobs_from_logits(
    logits: torch.Tensor, targets: torch.Tensor, temperature: float = DEFAULT_TEMPERATURE
) -> torch.Tensor:
    """log softmax(z / tau)_y for logits (N, V) and targets (N,): (N,), differentiable."""
    logp = torch.log_softmax(logits / temperature, dim=-1)  # (N, V)
    return logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # (N,)


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimate of KL(pi || ref): exp(ref - logp) - (ref - logp) - 1, shape (N,)."""
    delta = ref_logp - logp
    return delta.exp() - delta - 1.0


@dataclass
class LossTerms:
    """One evaluation of the loss on some tokens, with counts so parts can be summed."""

    loss: torch.Tensor  # differentiable total: sum_t w m pg_t + beta * sum_t w kl_t
    policy_loss: float  # sum_t w m pg_t
    kl_sum: float  # sum_t kl_t over answer tokens (0 when not measured)
    num_tokens: int
    num_selected: int
    clip_low: int  # selected tokens with rho < 1 - eps_low and A < 0
    clip_high: int  # selected tokens with rho > 1 + eps_high and A > 0

    @property
    def clip_low_fraction(self) -> float:
        return self.clip_low / max(self.num_selected, 1)

    @property
    def clip_high_fraction(self) -> float:
        return self.clip_high / max(self.num_selected, 1)


def grpo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    weights: torch.Tensor,
    mask: torch.Tensor,
    epsilon_low: float = 0.2,
    epsilon_high: float = 0.28,
    ref_logp: torch.Tensor | None = None,
    beta: float = 0.0,
) -> LossTerms:
    """The clipped, masked GRPO loss of the module docstring; every tensor is per token (N,).

    ``advantages`` and ``weights`` are A_i and w_i repeated over answer i's tokens (w already
    normalised over the whole batch, so the loss of a batch is the sum of its parts' losses);
    ``mask`` is the selection (bool). ``ref_logp`` is needed for the KL term and its report.
    """
    adv = advantages.to(logp)
    w = weights.to(logp)
    m = mask.to(logp)
    ratio = torch.exp(logp - old_logp.detach())  # (N,)
    clipped = torch.clamp(ratio, 1.0 - epsilon_low, 1.0 + epsilon_high)
    per_token_pg = -torch.minimum(ratio * adv, clipped * adv)  # (N,)
    policy_loss = (w * m * per_token_pg).sum()
    loss = policy_loss
    kl_sum = 0.0
    if ref_logp is not None:
        kl = k3_kl(logp, ref_logp.detach())  # (N,)
        kl_sum = float(kl.detach().sum())
        if beta != 0.0:
            loss = loss + beta * (w * kl).sum()
    sel = mask.to(torch.bool)
    return LossTerms(
        loss=loss,
        policy_loss=float(policy_loss.detach()),
        kl_sum=kl_sum,
        num_tokens=int(logp.numel()),
        num_selected=int(sel.sum()),
        clip_low=int(((ratio < 1.0 - epsilon_low) & (adv < 0) & sel).sum()),
        clip_high=int(((ratio > 1.0 + epsilon_high) & (adv > 0) & sel).sum()),
    )
