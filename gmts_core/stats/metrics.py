"""Per-token statistics of the next-token distribution, computed in chunks.

For logits z in R^V at temperature tau, pi = softmax(z / tau) and sampled token y with p = pi_y:

    logprob  = log p
    entropy  = H = -sum_v pi_v log pi_v                      (Shannon entropy, nats)
    grad_norm = g = (1/tau) * sqrt(1 - 2p + sum_v pi_v^2)     (exact L2 norm of d log pi_y / d z)

All of them come from one block-maxima pass (the row's most probable token A, the runner-up
logit r and the top-k alternatives together) and one exponentiation pass over
u = (z - r) / tau, reduced to three float32 sums over the tokens other than A and y; the target's
and A's terms are kept apart and everything is combined per row in float64 from the *rest* of
the mass (:mod:`gmts_core.stats.softmax_terms`). So nothing cancels and nothing underflows
early: 1 - p is the sum of the others' probabilities, a confident token's log p = -1.4e-8 and
g = 2.7e-30 are returned as such, and the entropy of a near-certain distribution keeps its
relative accuracy.

Positions are processed in chunks of ``chunk_size`` rows; the two (C, V) float32 work buffers
are allocated once per call and reused, so at most one chunk of full-vocabulary float32 values
(and its shifted copy) exists at a time; bf16/fp16 logits are accumulated in float32.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from gmts_core import native
from gmts_core.knobs import DEFAULT_TEMPERATURE
from gmts_core.stats.softmax_terms import (
    RowSums,
    finish_stats,
    reference_logit,
    sum_sq,
    top_k_exact,
)

DEFAULT_CHUNK_SIZE = 128
SMALL_VOCAB = 32_768  # a chunk of logits already in memory: chunk_size rows of this width


def rows_per_chunk(chunk_size: int, vocab: int) -> int:
    """Positions per chunk of logits that already exist in full (a training forward's): the
    chunk only bounds the statistics' temporaries, so a small vocabulary takes more rows, up to
    ``chunk_size`` rows' worth of a ``SMALL_VOCAB``-wide one. Each position's statistics are
    its own row's, so the numbers do not depend on the chunking."""
    return max(chunk_size, chunk_size * SMALL_VOCAB // max(vocab, 1))


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
    prob: torch.Tensor, sum_sq_prob: torch.Tensor, temperature: float = DEFAULT_TEMPERATURE
) -> torch.Tensor:
    """Exact ||d log pi_y / d z||_2 = (1/tau) sqrt(1 - 2 p + sum pi^2).

    From d log pi_y / d z_v = (1[v=y] - pi_v) / tau:
    sum_v (1[v=y] - pi_v)^2 = 1 - 2 p + sum_v pi_v^2.
    For p close to 1 this form cancels catastrophically in float32; where the sums are at hand,
    :func:`token_stats_chunked` uses the equivalent (1 - p)^2 + sum_{v != y} pi_v^2 instead.
    """
    return (1.0 - 2.0 * prob + sum_sq_prob).clamp_min(0.0).sqrt() / temperature


class _Workspace:
    """Two reusable (C, V) float32 buffers: shifted logits u and e = exp(u), allocated on first
    use (the native path needs neither).

    Reusing them matters on CPU, where every fresh 10-100 MB allocation is page-faulted in
    again; it costs more than the arithmetic.
    """

    def __init__(self, rows: int, vocab: int, device: torch.device) -> None:
        self.shape, self.device = (rows, vocab), device
        self._buffers: tuple[torch.Tensor, torch.Tensor] | None = None

    def views(self, rows: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self._buffers is None:
            u, e = (torch.empty(self.shape, device=self.device) for _ in range(2))
            self._buffers = (u.float(), e.float())  # float32 whatever the default dtype
        return self._buffers[0][:rows], self._buffers[1][:rows]


def _eager_sums(
    logits: torch.Tensor, targets: torch.Tensor, temperature: float, k: int, work: _Workspace
) -> tuple[torch.Tensor, torch.Tensor, RowSums]:
    """The top-k logits and ids (C, k) and the rows' sums, in PyTorch ops (any device/dtype)."""
    c, v = logits.shape
    u, e = work.views(c)  # (C, V) float32 each
    # bf16/fp16 logits: converted first (exact), as a mixed-dtype subtraction is not
    # vectorized on CPU and costs several passes
    z = logits if logits.dtype == torch.float32 else u.copy_(logits)
    # one block-maxima pass: the row's top logits m1 (token A), the runner-up r the sums are
    # taken relative to, and the top-k alternatives
    top_vals, top_ids = top_k_exact(z, k)  # (C, k) each
    ref = reference_logit(top_vals).unsqueeze(-1)  # (C, 1)
    col = targets.unsqueeze(-1)  # (C, 1)
    z_y = z.gather(-1, col).squeeze(-1)  # (C,) read before u is overwritten
    torch.sub(z, ref, out=u)  # u = z - r (in place when z is u)
    if temperature != 1.0:
        u.div_(temperature)  # u = (z - r) / tau, <= 0 except at A
    torch.exp(u, out=e)
    e.scatter_(-1, top_ids[:, :1], 0.0)  # e now holds the tokens other than A and y
    e.scatter_(-1, col, 0.0)
    s = e.sum(dim=-1)  # (C,)
    q = sum_sq(e)
    p = u.mul_(e).sum(dim=-1)  # sum e u (u is not needed after this)
    masked = p.isnan() & ~s.isnan()
    if bool(masked.any()):  # -inf logits (e = 0) made 0 * -inf: those rows again, u floored
        again = logits[masked].float() - ref[masked]
        if temperature != 1.0:
            again.div_(temperature)
        p[masked] = again.clamp_min_(torch.finfo(torch.float32).min).mul_(e[masked]).sum(-1)
    return top_vals, top_ids, RowSums(top_vals[:, 0], top_ids[:, 0], ref.squeeze(-1), z_y, s, q, p)


def _chunk_stats(
    logits: torch.Tensor,
    targets: torch.Tensor,
    temperature: float,
    top_k: int,
    work: _Workspace | None = None,
) -> tuple[torch.Tensor, ...]:
    """Statistics of one chunk of logits (C, V): logprob, entropy, grad_norm, sum pi^2, top-k.
    The sums come from the native kernel where it takes the logits (CPU, float32 or bfloat16:
    two reads of each logit, no writes), else from PyTorch ops."""
    logits = logits.detach()  # statistics, not a loss: the work buffers are written in place
    c, v = logits.shape
    k_search = min(max(top_k, 2), v)  # the runner-up is needed even without alternatives
    if native.row_sums_supported(logits, k_search):
        top_vals, top_ids, z_y, s, q, p = native.row_sums(logits, targets, temperature, k_search)
        sums = RowSums(top_vals[:, 0], top_ids[:, 0], reference_logit(top_vals), z_y, s, q, p)
    else:
        work = work or _Workspace(c, v, logits.device)
        top_vals, top_ids, sums = _eager_sums(logits, targets, temperature, k_search, work)
    k = min(max(top_k, 0), v)
    logprob, entropy, grad_norm, sum_sq_prob, top_lp = finish_stats(
        sums, targets, temperature, top_vals[:, :k]
    )
    return logprob, entropy, grad_norm, sum_sq_prob, top_ids[:, :k], top_lp


def token_stats_chunked(
    n_positions: int,
    logits_fn: Callable[[slice], torch.Tensor],
    targets: torch.Tensor,
    temperature: float = DEFAULT_TEMPERATURE,
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
    temperature: float = DEFAULT_TEMPERATURE,
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
