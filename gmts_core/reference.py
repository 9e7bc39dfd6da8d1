"""The maths in code: every quantity of an analysis and a GRPO step, in plain PyTorch.

Read this file top to bottom to see what the library computes; nothing here is optimised.
Every fast path (chunked and vocabulary-tiled statistics, the native kernels, the sampler's
statistics, the live RL step, the TRL and verl integrations) is tested against these
functions (``tests/gmts_core/test_reference.py``). Everything is float64. Shapes: ``V`` the
vocabulary, ``N`` the batch's answer tokens, ``M`` its answers.

For answer i (of its group) and token t with logits z_t, temperature tau, p = softmax(z / tau):

    log pi(y_t)  = log p[y_t]
    H_t          = -sum_v p_v log p_v                       (Shannon entropy, nats)
    g_t          = || d log pi(y_t) / d z_t || = || e_y - p || / tau
    A_i          = (r_i - mean r) / (std r + 1e-4)          (GRPO, std over the group, unbiased)
    w_i          = 1 / sum_j |o_j|                          (token_mean; other modes below)
    r_t          = pi(y_t) / pi_old(y_t)
    omega_t      = r_t I_t A_i + beta (pi_ref / pi - 1)     (I_t = 0 where the clip is flat)
    gamma_t      = w_i |omega_t| g_t                        (= || d loss / d z_t ||, exact)

The loss of the selected tokens m_t is  sum_t w_i [m_t pg_t + beta kl_t]  with
pg_t = -min(r_t A_i, clip(r_t, 1 - eps_low, 1 + eps_high) A_i) and the k3 estimator
kl_t = pi_ref / pi - log(pi_ref / pi) - 1. Entropy selection keeps the top ``ratio`` share of
tokens by H_t, GMTS by gamma_t: k = ceil(ratio n) tokens of each scope (the batch, or each
group), ties to the earlier token.
"""

from __future__ import annotations

import math

import torch

from gmts_core.knobs import DEFAULT_RATIO, DEFAULT_SCOPE, DEFAULT_TEMPERATURE

GRPO_EPS = 1e-4


def token_statistics(
    logits: torch.Tensor, targets: torch.Tensor, temperature: float = DEFAULT_TEMPERATURE
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(log pi(y_t), H_t, g_t), each (N,), from logits (N, V) and targets (N,)."""
    z = logits.double() / temperature  # (N, V)
    logp_all = torch.log_softmax(z, dim=-1)  # (N, V)
    p = logp_all.exp()
    logprob = logp_all.gather(-1, targets[:, None]).squeeze(-1)  # (N,)
    # 0 log 0 = 0: a logit of -inf adds nothing to the entropy (and log p = -inf at a target
    # there, g = || e_y - p || / tau); one finite logit gives log p = H = g = 0 at its token
    entropy = -torch.where(p > 0, p * logp_all, torch.zeros_like(p)).sum(-1)  # (N,)
    onehot = torch.nn.functional.one_hot(targets, z.shape[-1]).double()  # (N, V)
    g = torch.linalg.vector_norm(onehot - p, dim=-1) / temperature  # (N,)
    return logprob, entropy, g


def top_alternatives(
    logits: torch.Tensor, k: int, temperature: float = DEFAULT_TEMPERATURE
) -> tuple[torch.Tensor, torch.Tensor]:
    """The k most probable tokens of each row (N, k), by logit, equal logits by lower token id,
    and their log pi (N, k), from logits (N, V) (sorted in plain Python)."""
    logp_all = torch.log_softmax(logits.double() / temperature, dim=-1)  # (N, V)
    rows = logits.double().tolist()
    ids = torch.tensor([sorted(range(len(z)), key=lambda v: (-z[v], v))[:k] for z in rows])
    return ids, logp_all.gather(-1, ids)


def grpo_advantages(rewards: torch.Tensor) -> torch.Tensor:
    """A_i of one group's rewards (G,); a group of one answer has A = 0."""
    r = rewards.double()
    if r.numel() < 2:
        return torch.zeros_like(r)
    return (r - r.mean()) / (r.std(unbiased=True) + GRPO_EPS)


def aggregation_weights(lengths: torch.Tensor, mode: str = "token_mean") -> torch.Tensor:
    """w_i of every answer of the batch (M,) from the answer lengths |o_i| (M,).

    token_mean: 1 / sum_j |o_j| (every token weighs the same); seq_mean_token_mean:
    1 / (M |o_i|) (every answer weighs the same); seq_mean_token_sum_norm: 1 / (M max |o|).
    """
    n = lengths.double().clamp_min(1)
    m = lengths.numel()
    if mode == "token_mean":
        return torch.full_like(n, 1.0) / lengths.sum().clamp_min(1).double()
    if mode == "seq_mean_token_mean":
        return 1.0 / (m * n)
    if mode == "seq_mean_token_sum_norm":
        return torch.full_like(n, 1.0) / (m * max(int(lengths.max()), 1))
    raise ValueError(f"unknown aggregation {mode!r}")


def coefficient(
    advantage: torch.Tensor,
    logprob: torch.Tensor,
    old_logprob: torch.Tensor | None = None,
    ref_logprob: torch.Tensor | None = None,
    beta: float = 0.0,
    epsilon_low: float = 0.2,
    epsilon_high: float = 0.28,
) -> torch.Tensor:
    """omega_t (N,) for per-token A_i (N,): minus the loss's derivative by log pi, over w_i."""
    ratio = (logprob - old_logprob).exp() if old_logprob is not None else torch.ones_like(logprob)
    flat = ((ratio > 1 + epsilon_high) & (advantage > 0)) | (
        (ratio < 1 - epsilon_low) & (advantage < 0)
    )
    omega = torch.where(flat, torch.zeros_like(ratio), ratio * advantage.double())
    if beta != 0.0 and ref_logprob is not None:
        omega = omega + beta * ((ref_logprob - logprob).exp() - 1)
    return omega


def top_k(scores: torch.Tensor, scope: torch.Tensor, ratio: float) -> torch.Tensor:
    """Selected flags (N,): the ceil(ratio n) highest scores of each scope, ties to the earlier
    token, NaN lowest."""
    selected = torch.zeros(scores.numel(), dtype=torch.bool)
    clean = torch.nan_to_num(scores.double(), nan=-math.inf)
    for s in scope.unique():
        idx = (scope == s).nonzero().squeeze(-1)  # ascending token order
        k = min(idx.numel(), math.ceil(round(ratio * idx.numel(), 9)))
        order = sorted(range(idx.numel()), key=lambda j: (-clean[idx[j]].item(), j))
        selected[idx[order[:k]]] = True
    return selected


def grpo_loss(
    logprob: torch.Tensor,
    old_logprob: torch.Tensor,
    advantage: torch.Tensor,
    weight: torch.Tensor,
    mask: torch.Tensor,
    ref_logprob: torch.Tensor | None = None,
    beta: float = 0.0,
    epsilon_low: float = 0.2,
    epsilon_high: float = 0.28,
) -> torch.Tensor:
    """The scalar loss of the module docstring; every input per token (N,)."""
    ratio = (logprob - old_logprob.detach()).exp()
    clipped = ratio.clamp(1 - epsilon_low, 1 + epsilon_high)
    pg = -torch.minimum(ratio * advantage, clipped * advantage)
    loss = (weight * mask.double() * pg).sum()
    if beta != 0.0 and ref_logprob is not None:
        log_ratio = ref_logprob.detach() - logprob
        loss = loss + beta * (weight * (log_ratio.exp() - log_ratio - 1)).sum()
    return loss


def reference_batch(
    logits: list[torch.Tensor],
    targets: list[torch.Tensor],
    rewards: list[float],
    group_of_answer: list[int],
    ratio: float = DEFAULT_RATIO,
    scope: str = DEFAULT_SCOPE,
    aggregation: str = "token_mean",
    temperature: float = DEFAULT_TEMPERATURE,
) -> dict[str, torch.Tensor]:
    """Everything an on-policy analysis (beta = 0) computes for a batch of M answers.

    ``logits[i]`` (|o_i|, V) are the logits that predict answer i's tokens ``targets[i]``
    (|o_i|,); ``group_of_answer[i]`` its group. Returns per-token (N,) tensors in (answer,
    position) order: logprob, entropy, grad_norm, advantage, weight, gamma, and the entropy
    and GMTS selections (``selected_entropy``, ``selected_gmts``).
    """
    stats = [token_statistics(z, y, temperature) for z, y in zip(logits, targets, strict=True)]
    logprob, entropy, g = (torch.cat([s[k] for s in stats]) for k in range(3))
    lengths = torch.tensor([y.numel() for y in targets])  # (M,)
    groups = torch.tensor(group_of_answer)  # (M,)
    r = torch.tensor(rewards, dtype=torch.float64)
    advantage = torch.zeros(len(rewards), dtype=torch.float64)  # (M,)
    for grp in groups.unique():
        advantage[groups == grp] = grpo_advantages(r[groups == grp])
    weight = aggregation_weights(lengths, aggregation)  # (M,)
    per_token = lambda v: v.repeat_interleave(lengths)  # noqa: E731  (M,) -> (N,)
    omega = coefficient(per_token(advantage), logprob)
    gamma = per_token(weight) * omega.abs() * g
    token_scope = (
        per_token(groups) if scope == "group" else torch.zeros_like(logprob, dtype=torch.long)
    )
    return {
        "logprob": logprob,
        "entropy": entropy,
        "grad_norm": g,
        "advantage": per_token(advantage),
        "weight": per_token(weight),
        "gamma": gamma,
        "selected_entropy": top_k(entropy, token_scope, ratio),
        "selected_gmts": top_k(gamma, token_scope, ratio),
    }
