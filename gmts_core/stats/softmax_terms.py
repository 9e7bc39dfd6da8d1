"""The softmax statistics of one row of logits from a few sums taken relative to the runner-up.

Both head paths reduce each row of logits z (V,) at temperature tau to float32 sums and hand them
to :func:`finish_stats`: :mod:`gmts_core.stats.metrics` (logits chunk by chunk of positions) and
:mod:`gmts_core.stats.vocab_tiled` (hidden states against the head, tile by tile of the
vocabulary, the sums rescaled online). Let A be the most probable token (logit m1; equal logits:
the lower token id, as in the top-k list), r the runner-up's logit (the largest logit of the
others; m1 itself where there is none or it is -inf) and
u_v = (z_v - r) / tau, so u_v <= 0 for every v != A and e_v = exp(u_v) <= 1 with one term
equal to 1. The passes over the vocabulary compute, over the tokens other than A and y,

    s = sum e_v,    q = sum e_v^2,    p = sum e_v u_v        (float32)

and everything else is a per-row float64 combination, each term a sum or product of
non-negative quantities (no cancellation) kept in the log domain (no underflow before the final
float32 rounding). With a = (m1 - r) / tau >= 0 and S, Q, P the sums over all v != A (the target
added back when it is not A):

    d = log S - a,  softplus(d) = log(1 + S / e^a) = -log pi_A    (S >= 1: no underflow)
    log Z = a + softplus(d)                       the partition function relative to e^(r/tau)
    log p  = -softplus(d)                          if y = A   (= -log1p(sum_{v != A} pi_v/pi_A))
           = (z_y - m1) / tau - softplus(d)        otherwise
    H      = pi_A softplus(d) + (S/Z) log Z - P / Z          (each term >= 0)
    sum pi^2 = pi_A^2 + Q / Z^2
    g tau  = (S/Z) sqrt(1 + Q/S^2)                  if y = A  (1 - p = S/Z, the rest's mass)
           = sqrt((pi_A + s/Z)^2 + pi_A^2 + q/Z^2)   otherwise (1 - p >= pi_A >= 1/V)

A target at a -inf logit adds e_y u_y = 0 to p (not 0 * -inf), so H stays exact and
log p = -inf; a row with one finite logit has r = m1 and s = q = p = 0: log p = H = 0 and
g = 0 at A, g = sqrt(2) / tau elsewhere. These are the exact values, with no pass of their own.

So a near-certain token keeps its relative accuracy: log p = -1.4e-8 at a logit gap of 30
(1 - p is the sum of the others, not 1 - p in float32), g = 2.7e-30 at gap 80 (e^(2u) of the rest
would underflow relative to the maximum, not relative to the runner-up), and the entropy of a
near-certain distribution is the rest's share, not log(1 + 1e-35) = 0. The only float32 roundings
left are the elementwise u_v, e_v and the three sums; the error bounds, measured over a
151,936-token vocabulary, are in the docs' claims table and in
``tests/gmts_core/stats/test_precision.py``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

_TOPK_BLOCK = 256  # about: the block-maxima pass's block width (see :func:`block_width`)
_SUM_SQ_BLOCK = 4096  # about: squares summed per block, then the blocks (see :func:`sum_sq`)
_SPARE = 3  # places past k that the top-k asks for, to order ties (see :func:`_top_k_low_id`)


@dataclass
class RowSums:
    """Per-row sums of one set of rows (C,), all float32 except the ids."""

    top: torch.Tensor  # (C,) m1, the largest logit
    top_id: torch.Tensor  # (C,) int64 A, its token
    ref: torch.Tensor  # (C,) r, the runner-up's logit (m1 where there is none)
    target_logit: torch.Tensor  # (C,) z_y
    s: torch.Tensor  # (C,) sum of e_v over v not in {A, y}
    q: torch.Tensor  # (C,) sum of e_v^2 over the same tokens
    p: torch.Tensor  # (C,) sum of e_v u_v over the same tokens (<= 0)


def reference_logit(top_vals: torch.Tensor) -> torch.Tensor:
    """r for (C, K) top logits, most probable first: the runner-up, or m1 where K = 1 or the
    runner-up is -inf (a row with one finite logit: every other e is then exp(-inf) = 0, so
    s = q = p = 0 and the row's statistics come out exact, log p = H = g = 0 for y = A)."""
    if top_vals.shape[1] < 2:
        return top_vals[:, 0]
    runner_up = top_vals[:, 1]
    return torch.where(runner_up > -torch.inf, runner_up, top_vals[:, 0])


def _softplus(x: torch.Tensor) -> torch.Tensor:
    """log(1 + e^x) without overflow or the library's linear cut-off (x may be -inf)."""
    return x.clamp_min(0.0) + torch.log1p(torch.exp(-x.abs()))


def _exp_log(x: torch.Tensor, log_scale: torch.Tensor) -> torch.Tensor:
    """x * exp(-log_scale) for x >= 0, formed as exp(log x - log_scale) so that neither a huge
    scale nor a tiny x underflows before the product does."""
    return torch.exp(x.clamp_min(0.0).log() - log_scale)


def finish_stats(
    sums: RowSums,
    targets: torch.Tensor,
    temperature: float,
    top_vals: torch.Tensor,
) -> tuple[torch.Tensor, ...]:
    """logprob, entropy, grad_norm, sum pi^2 (C,) and the top-k log-probabilities (C, K) of the
    top logits ``top_vals`` (C, K), float32, from the rows' sums (module docstring)."""
    f64, tau = torch.float64, float(temperature)
    m1, r, z_y = (x.to(f64) for x in (sums.top, sums.ref, sums.target_logit))
    s_rest, q_rest, p_rest = (x.to(f64) for x in (sums.s, sums.q, sums.p))
    is_top = targets.to(sums.top_id.device) == sums.top_id  # (C,)
    a = (m1 - r) / tau  # >= 0
    u_y = (z_y - r) / tau  # <= 0 unless y = A
    e_y = torch.where(is_top, 0.0, torch.exp(u_y.clamp_max(0.0)))
    s = s_rest + e_y  # every v != A
    q = q_rest + e_y * e_y
    p = p_rest + torch.where(e_y > 0, e_y * u_y.clamp_max(0.0), 0.0)  # 0, not 0 * -inf
    sp = _softplus(s.log() - a)  # -log pi_A
    log_z = a + sp
    pi_top = torch.exp(-sp)
    rest = _exp_log(s, log_z)  # 1 - pi_A
    entropy = pi_top * sp + rest * log_z + _exp_log(-p, log_z)
    sum_sq = pi_top * pi_top + _exp_log(q, 2 * log_z)
    logprob = torch.where(is_top, -sp, (z_y - m1) / tau - sp) + 0.0  # + 0.0: -0 is 0
    spread = torch.where(s > 0, q / (s * s), 0.0)  # Q / S^2 <= 1
    g_top = rest * torch.sqrt(1.0 + spread)
    miss = pi_top + _exp_log(s_rest, log_z)  # 1 - p when y != A
    g_other = torch.sqrt(miss * miss + pi_top * pi_top + _exp_log(q_rest, 2 * log_z))
    grad_norm = torch.where(is_top, g_top, g_other) / tau
    top_lp = (top_vals.to(f64) - m1.unsqueeze(-1)) / tau - sp.unsqueeze(-1)
    out = (logprob, entropy, grad_norm, sum_sq, top_lp)
    return tuple(x.to(torch.float32) for x in out)


@functools.cache
def block_width(vocab: int, about: int) -> int:
    """A block width near ``about`` (within a factor 2) that divides ``vocab``, so that a
    (C, V) row-major tensor is a (C, V / b, b) view with no ragged tail to handle apart (every
    extra kernel costs a thread-pool round trip); ``about`` itself when none divides."""
    for width in sorted(range(about // 2, 2 * about + 1), key=lambda w: abs(w - about)):
        if vocab % width == 0:
            return width
    return about


def sum_sq(e: torch.Tensor) -> torch.Tensor:
    """Row sums of squares of (C, V) float32 values, accurate to float32 rounding.

    ``vector_norm`` over a whole 150k row accumulates with a relative error of 1.6e-5 on CPU;
    over blocks of about 4096 (then the blocks summed) it stays near 6e-7 at the same cost.
    """
    c, v = e.shape
    b = block_width(v, _SUM_SQ_BLOCK)
    nb = v // b
    if nb < 2:
        return torch.linalg.vector_norm(e, dim=-1).square()
    main = e[:, : nb * b].view(c, nb, b)
    total = torch.linalg.vector_norm(main, dim=-1).square().sum(dim=-1)  # (C,)
    if nb * b < v:
        total = total + torch.linalg.vector_norm(e[:, nb * b :], dim=-1).square()
    return total


def _order_key(values: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """An int64 key per float32 value: larger for a larger value, and for equal values (-0 and
    +0 included) larger for the lower id, so that a top-k of the keys is the top-k of the
    values with ties to the lower id."""
    bits = (values + 0.0).view(torch.int32)  # + 0.0: -0 becomes +0
    ordered = bits ^ ((bits >> 31) & 0x7FFFFFFF)  # the float order as a signed integer order
    return (ordered.to(torch.int64) << 32) | (0xFFFFFFFF - ids)


def _top_k_low_id(x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Row-wise top-k of (C, n) values, largest first, equal values by lower position.

    ``torch.topk`` gives the right values, largest first, but no rule for ties. It is asked for
    ``_SPARE`` more places (about the same cost); rows with no two equal values among the first
    k + 1 are done. The others are ordered by :func:`_order_key` within their longer list, which
    holds every element equal to the k-th value unless its last value equals the k-th too; only
    such rows (many equal values, e.g. an all-zero row) are chosen again from the whole row.
    """
    if x.dtype != torch.float32:  # not reached by the callers (float32 work buffers)
        vals, pos = x.sort(dim=-1, descending=True, stable=True)
        return vals[:, :k], pos[:, :k]
    n = x.shape[1]
    kk = min(k + _SPARE, n)
    vals, pos = x.topk(kk, dim=-1)  # (C, kk)
    m = min(k + 1, kk)
    tied = (vals[:, 1:m] == vals[:, : m - 1]).any(dim=-1)  # (C,)
    if bool(tied.any()):
        rows = tied.nonzero().squeeze(-1)
        sub_v, sub_p = vals[rows], pos[rows]  # (R, kk)
        none = torch.zeros_like(rows, dtype=torch.bool)
        missed = sub_v[:, -1] == sub_v[:, k - 1] if kk < n else none
        if bool(missed.any()):  # equal values may lie beyond the list: the whole rows
            whole = x[rows[missed]]
            ids = torch.arange(n, device=x.device).expand_as(whole)
            sub_p[missed] = _order_key(whole, ids).topk(kk, dim=-1).indices
            sub_v[missed] = whole.gather(-1, sub_p[missed])
        order = _order_key(sub_v, sub_p).topk(k, dim=-1).indices  # (R, k)
        vals[rows, :k] = sub_v.gather(-1, order)
        pos[rows, :k] = sub_p.gather(-1, order)
    return vals[:, :k], pos[:, :k]


def top_k_exact(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Row-wise top-k of (C, V) float32 logits, most probable first, equal logits by lower
    token id (the native kernel's rule), via block maxima.

    ``torch.topk`` over a 150k vocabulary costs more than all the statistics together on CPU.
    The k largest values of a row lie in the k blocks with the largest maxima, equal maxima to
    the lower block (any other block would have k maxima above it, or equal at lower ids), so one
    max pass over blocks and a top-k over k * block candidates in token order (plus the ragged
    tail) give the same values and ids. The same pass gives the row maximum and the runner-up
    the statistics are taken relative to (no pass of its own).
    """
    c, v = logits.shape
    b = block_width(v, _TOPK_BLOCK)
    nb = v // b
    if nb <= 4 * k:
        return _top_k_low_id(logits, k)
    main = logits[:, : nb * b].view(c, nb, b)  # (C, nb, b) a view
    _, blocks = _top_k_low_id(main.amax(dim=-1), k)  # (C, k) the blocks with the top maxima
    blocks = blocks.sort(dim=-1).values  # in token order, so positions order the ties
    cand = main.gather(1, blocks.unsqueeze(-1).expand(c, k, b)).view(c, k * b)
    if nb * b < v:
        cand = torch.cat([cand, logits[:, nb * b :]], dim=-1)  # (C, k * b + tail)
    vals, pos = _top_k_low_id(cand, k)  # (C, k) positions among the candidates
    in_blocks = pos < k * b
    block_ids = blocks.gather(-1, (pos // b).clamp_max(k - 1)) * b + pos % b
    return vals, torch.where(in_blocks, block_ids, pos + (nb * b - k * b))
