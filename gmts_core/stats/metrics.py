"""Per-token statistics of the next-token distribution, computed in chunks.

For logits z in R^V at temperature tau, pi = softmax(z / tau) and sampled token y with p = pi_y:

    logprob  = log p
    entropy  = H = -sum_v pi_v log pi_v                      (Shannon entropy, nats)
    grad_norm = g = (1/tau) * sqrt(1 - 2p + sum_v pi_v^2)     (exact L2 norm of d log pi_y / d z)

All three come from one exponentiation pass over shifted logits u = (z - max z) / tau:
e = exp(u), S = sum e, log p = u_y - log S, H = log S - sum(e u) / S, sum pi^2 = sum(e^2) / S^2.
The target's term is split off (e_y is zeroed after it is read), so that
1 - 2p + sum pi^2 = (1 - p)^2 + sum_{v != y} pi_v^2 is computed from the *rest* of the mass
without cancellation: g stays accurate to float32 precision even for a confident token
(p = 0.9999), where the naive expression would lose every digit.

Positions are processed in chunks of ``chunk_size`` rows; the two (C, V) float32 work buffers
are allocated once per call and reused, so at most one chunk of full-vocabulary float32 values
(and its shifted copy) exists at a time; bf16/fp16 logits are accumulated in float32.
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
    For p close to 1 this form cancels catastrophically in float32; where the sums are at hand,
    :func:`token_stats_chunked` uses the equivalent (1 - p)^2 + sum_{v != y} pi_v^2 instead.
    """
    return (1.0 - 2.0 * prob + sum_sq_prob).clamp_min(0.0).sqrt() / temperature


class _Workspace:
    """Two reusable (C, V) float32 buffers: shifted logits u and e = exp(u).

    Reusing them matters on CPU, where every fresh 10-100 MB allocation is page-faulted in
    again; it costs more than the arithmetic.
    """

    def __init__(self, rows: int, vocab: int, device: torch.device) -> None:
        self.u = torch.empty(rows, vocab, dtype=torch.float32, device=device)
        self.e = torch.empty(rows, vocab, dtype=torch.float32, device=device)

    def views(self, rows: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.u[:rows], self.e[:rows]


def _chunk_stats(
    logits: torch.Tensor,
    targets: torch.Tensor,
    temperature: float,
    top_k: int,
    work: _Workspace | None = None,
) -> tuple[torch.Tensor, ...]:
    """Statistics of one chunk of logits (C, V): logprob, entropy, grad_norm, sum pi^2, top-k."""
    logits = logits.detach()  # statistics, not a loss: the work buffers are written in place
    c, v = logits.shape
    work = work or _Workspace(c, v, logits.device)
    u, e = work.views(c)  # (C, V) float32 each
    m = logits.amax(dim=-1, keepdim=True).float()  # (C, 1) exact in any dtype
    if logits.dtype == torch.float32:
        torch.sub(logits, m, out=u)
    else:
        u.copy_(logits).sub_(m)  # subtract in float32, not in the logits' dtype
    if temperature != 1.0:
        u.div_(temperature)  # u = (z - max z) / tau = z/tau - max(z/tau)
    torch.exp(u, out=e)
    col = targets.unsqueeze(-1)  # (C, 1)
    u_y = u.gather(-1, col).squeeze(-1)  # (C,)
    e_y = e.gather(-1, col).squeeze(-1)
    e.scatter_(-1, col, 0.0)  # e now holds the rest of the mass, v != y
    s_rest = e.sum(dim=-1)  # (C,)
    e2_rest = torch.linalg.vector_norm(e, dim=-1).square()  # sum_{v != y} e_v^2
    eu_rest = u.mul_(e).sum(dim=-1)  # sum_{v != y} e_v u_v (u is not needed after this)
    s = s_rest + e_y
    log_s = s.log()
    logprob = u_y - log_s
    entropy = log_s - (eu_rest + e_y * u_y) / s
    sum_sq = (e2_rest + e_y * e_y) / (s * s)
    grad_norm = ((s_rest / s).square() + e2_rest / (s * s)).sqrt() / temperature
    top_ids, top_lp = _top_alternatives(logits, m, log_s, temperature, top_k)
    return logprob, entropy.clamp_min(0.0), grad_norm, sum_sq, top_ids, top_lp


def _top_alternatives(
    logits: torch.Tensor, m: torch.Tensor, log_s: torch.Tensor, temperature: float, top_k: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``top_k`` most probable tokens (C, K) and their log-probabilities (C, K)."""
    c, v = logits.shape
    if top_k <= 0:
        empty_ids = torch.empty(c, 0, dtype=torch.long, device=logits.device)
        return empty_ids, torch.empty(c, 0, dtype=torch.float32, device=logits.device)
    vals, ids = top_k_exact(logits, min(top_k, v))  # (C, K) each; ordering is exact in any dtype
    top_lp = (vals.float() - m) / temperature - log_s.unsqueeze(-1)
    return ids, top_lp


_TOPK_BLOCK = 256


def top_k_exact(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Row-wise top-k of (C, V) logits, most probable first, via block maxima.

    ``torch.topk`` over a 150k vocabulary costs more than all the statistics together on CPU.
    The k largest values of a row lie in the k blocks with the largest maxima (any other block
    would have k larger maxima above it), so one max pass over blocks and a top-k over
    k * block candidates (plus the ragged tail) give the same values.
    """
    c, v = logits.shape
    nb = v // _TOPK_BLOCK
    if nb <= 4 * k:
        return logits.topk(k, dim=-1)
    block_max = logits[:, : nb * _TOPK_BLOCK].view(c, nb, _TOPK_BLOCK).amax(dim=-1)  # (C, nb)
    blocks = block_max.topk(k, dim=-1).indices  # (C, k)
    offsets = torch.arange(_TOPK_BLOCK, device=logits.device)
    cand = (blocks.unsqueeze(-1) * _TOPK_BLOCK + offsets).view(c, k * _TOPK_BLOCK)
    tail = torch.arange(nb * _TOPK_BLOCK, v, device=logits.device).expand(c, -1)
    cand = torch.cat([cand, tail], dim=-1)  # (C, k * block + tail) candidate token ids
    vals, pos = logits.gather(-1, cand).topk(k, dim=-1)
    return vals, cand.gather(-1, pos)


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
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    parts: list[tuple[torch.Tensor, ...]] = []
    work: _Workspace | None = None
    for start in range(0, n_positions, chunk_size):
        sl = slice(start, min(start + chunk_size, n_positions))
        logits = logits_fn(sl)  # (C, V)
        if work is None:
            work = _Workspace(min(chunk_size, n_positions), logits.shape[-1], logits.device)
        tgt = targets[sl].to(logits.device)
        parts.append(_chunk_stats(logits, tgt, temperature, top_k, work))
    if not parts:
        empty = torch.empty(0, device=targets.device)
        no_ids = torch.empty(0, max(top_k, 0), dtype=torch.long, device=targets.device)
        return TokenStats(empty, empty, empty, empty, no_ids, torch.empty(0, max(top_k, 0)))
    columns = (torch.cat(p) for p in zip(*parts, strict=True))  # one tensor per field
    return TokenStats(*columns)


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
    """gamma = |A_i| * w_i * g: the exact L2 norm of the GRPO loss gradient at a token's logits
    at the on-policy point (ratio 1) without a KL term.

    There the loss term of token t of answer i is -w_i A_i log pi(y_it); its gradient with
    respect to the logits z_it is -w_i A_i d log pi_y / d z, whose norm is |A_i| w_i g.
    Elsewhere pass the effective coefficient omega_t (:mod:`gmts_core.methods.coefficient`) as
    ``advantage``: the norm is then w_i |omega_t| g. All three arguments are per token, (N,).
    """
    return advantage.abs() * weight * grad_norm
