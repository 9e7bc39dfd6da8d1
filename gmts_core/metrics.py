"""Per-token statistics of the next-token distribution, computed in chunks.

For logits z in R^V at temperature tau, pi = softmax(z / tau) and sampled token y with p = pi_y:

    logprob  = log p
    entropy  = H = -sum_v pi_v log pi_v                      (Shannon entropy, nats)
    grad_norm = g = (1/tau) * sqrt(1 - 2p + sum_v pi_v^2)     (exact L2 norm of d log pi_y / d z)

All three come from one exponentiation pass: with m = max z/tau, e = exp(z/tau - m),
S = sum e, log Z = m + log S, H = log Z - sum(e * z/tau) / S and sum pi^2 = sum(e^2) / S^2.
Positions are processed in chunks, so at most one chunk of full-vocabulary float32 values
(plus its temporaries) exists at a time; bf16/fp16 logits are accumulated in float32.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

DEFAULT_CHUNK_SIZE = 128


@dataclass
class TokenStats:
    """Statistics for N token positions. All tensors are float32 on the input's device."""

    logprob: torch.Tensor  # (N,) log pi_y, nats
    entropy: torch.Tensor  # (N,) Shannon entropy of pi, nats
    grad_norm: torch.Tensor  # (N,) || d log pi_y / d z ||_2
    sum_sq_prob: torch.Tensor  # (N,) sum_v pi_v^2 (the collision probability)
    top_ids: torch.Tensor  # (N, K) int64, most probable tokens, K may be 0
    top_logprobs: torch.Tensor  # (N, K) their log-probabilities

    @property
    def prob(self) -> torch.Tensor:
        return self.logprob.exp()


def grad_norm_from_probs(
    prob: torch.Tensor, sum_sq_prob: torch.Tensor, temperature: float = 1.0
) -> torch.Tensor:
    """Exact ||d log pi_y / d z||_2 = (1/tau) sqrt(1 - 2 p + sum pi^2).

    From d log pi_y / d z_v = (1[v=y] - pi_v) / tau:
    sum_v (1[v=y] - pi_v)^2 = 1 - 2 p + sum_v pi_v^2.
    """
    return (1.0 - 2.0 * prob + sum_sq_prob).clamp_min(0.0).sqrt() / temperature


def _chunk_stats(
    logits: torch.Tensor, targets: torch.Tensor, temperature: float, top_k: int
) -> tuple[torch.Tensor, ...]:
    """Statistics for one chunk of logits (C, V); see the module docstring for the algebra."""
    z = logits.float()  # (C, V) one float32 copy (no-op for float32 input)
    if temperature != 1.0:
        z = z / temperature
    m = z.amax(dim=-1, keepdim=True)  # (C, 1)
    e = (z - m).exp_()  # (C, V)
    s = e.sum(dim=-1)  # (C,)
    ez = torch.bmm(e.unsqueeze(1), z.unsqueeze(2)).view(-1)  # (C,) sum_v e_v z_v
    e2 = torch.bmm(e.unsqueeze(1), e.unsqueeze(2)).view(-1)  # (C,) sum_v e_v^2
    log_z = m.squeeze(-1) + s.log()  # (C,)
    logprob = z.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - log_z
    entropy = log_z - ez / s
    sum_sq = e2 / (s * s)
    if top_k > 0:
        top_vals, top_ids = z.topk(min(top_k, z.shape[-1]), dim=-1)
        top_lp = top_vals - log_z.unsqueeze(-1)
    else:
        top_ids = torch.empty(z.shape[0], 0, dtype=torch.long, device=z.device)
        top_lp = torch.empty(z.shape[0], 0, dtype=torch.float32, device=z.device)
    return logprob, entropy.clamp_min(0.0), sum_sq, top_ids, top_lp


def token_stats_chunked(
    n_positions: int,
    logits_fn: Callable[[slice], torch.Tensor],
    targets: torch.Tensor,
    temperature: float = 1.0,
    top_k: int = 0,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
) -> TokenStats:
    """Token statistics for ``n_positions`` positions whose logits come chunk by chunk.

    ``logits_fn(slice)`` returns the (C, V) logits of those positions, e.g. by applying the LM
    head to a slice of hidden states, so full-vocabulary logits never exist for all positions.
    ``targets``: (N,) int64 token ids whose probability is measured.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    parts: list[tuple[torch.Tensor, ...]] = []
    for start in range(0, n_positions, chunk_size):
        sl = slice(start, min(start + chunk_size, n_positions))
        parts.append(_chunk_stats(logits_fn(sl), targets[sl], temperature, top_k))
    if not parts:
        empty = torch.empty(0, device=targets.device)
        return TokenStats(
            empty,
            empty,
            empty,
            empty,
            torch.empty(0, top_k, dtype=torch.long),
            torch.empty(0, top_k),
        )
    logprob, entropy, sum_sq, top_ids, top_lp = (torch.cat(p) for p in zip(*parts))
    grad_norm = grad_norm_from_probs(logprob.exp(), sum_sq, temperature)
    return TokenStats(logprob, entropy, grad_norm, sum_sq, top_ids, top_lp)


def token_stats(
    logits: torch.Tensor,
    targets: torch.Tensor,
    temperature: float = 1.0,
    top_k: int = 0,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
) -> TokenStats:
    """Token statistics of materialized logits (..., V) for targets (...), flattened to (N,)."""
    flat = logits.reshape(-1, logits.shape[-1])  # (N, V) a view, no copy
    return token_stats_chunked(
        flat.shape[0], lambda sl: flat[sl], targets.reshape(-1), temperature, top_k, chunk_size
    )


def grad_proxy(
    advantage: torch.Tensor, weight: torch.Tensor, grad_norm: torch.Tensor
) -> torch.Tensor:
    """gamma = |A_i| * w_i * g: the exact L2 norm of the GRPO loss gradient at a token's logits.

    The loss term of token t of answer i is -w_i A_i log pi(y_it); its gradient with respect
    to the logits z_it is -w_i A_i d log pi_y / d z, whose norm is |A_i| w_i g. All three
    arguments are per token, shape (N,).
    """
    return advantage.abs() * weight * grad_norm
