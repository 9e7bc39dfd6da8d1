"""Token statistics from final hidden states and a linear LM head, tiled over the vocabulary.

:func:`gmts_core.stats.metrics.token_stats_chunked` takes logits a few rows (positions) at a time.
When the logits come from a plain linear head, that splits the head's matmul into many thin ones (C
rows against the whole (V, D) weight), which on CPU cost up to 1.5x one matmul over all rows (the
weight is streamed once per chunk). Here the matmul runs over *all* N rows against one vocabulary
tile (Vt columns) at a time, and the same sums as the chunked path's are accumulated online across
tiles, as in flash attention. Each tile's block maxima give its top logits; merged with the
running ones they give the row's most probable token A so far, the runner-up logit r and the
top-k. The sums over the tokens other than A and y, with u = (z - r) / tau,

    s = sum e^u,   q = sum e^{2u},   p = sum e^u u

are rescaled when r rises by d (in u units, d = (r_new - r_old) / tau):
s <- s e^-d, q <- q e^-2d, p <- e^-d (p - d s) (all terms <= 0: no cancellation), and when a
tile takes the lead, the former A joins the rest with its term e^((m1_old - r_new)/tau).
:func:`gmts_core.stats.softmax_terms.finish_stats` then combines them exactly as for the chunked
path, so both paths keep relative accuracy for near-certain tokens. The three sums use
cascaded (``sum``) or blocked (``sum_sq``) reductions: a BLAS dot product over a tile
(``bmm``) accumulates with a relative error of ~2e-4 at this width.

Memory: one (N, Vt) tile of logits and one of exponentials, Vt chosen so that N * Vt is at most
``chunk_size * V`` (the chunked version's budget).
"""

from __future__ import annotations

import torch

from gmts_core.knobs import DEFAULT_TEMPERATURE
from gmts_core.stats.metrics import TokenStats
from gmts_core.stats.softmax_terms import (
    RowSums,
    finish_stats,
    reference_logit,
    sum_sq,
    top_k_exact,
)

_MIN_TILE = 512  # narrower tiles make the matmul and the per-tile overhead dominate


def tile_columns(rows: int, vocab: int, chunk_size: int) -> int:
    """Vocabulary tile width so that a (rows, width) tile holds at most chunk_size * vocab
    values (never narrower than ``_MIN_TILE``, never wider than the vocabulary)."""
    return max(1, min(vocab, max(_MIN_TILE, chunk_size * vocab // max(rows, 1))))


class _OnlineSums:
    """The running top logits and sums of N rows, one vocabulary tile at a time."""

    def __init__(self, targets: torch.Tensor, keep: int) -> None:
        n, dev, f32 = targets.shape[0], targets.device, torch.float32
        self.targets, self.keep = targets, keep  # keep: top logits kept, >= 2
        self.top_v = torch.empty(n, 0, dtype=f32, device=dev)  # (N, <= keep) raw logits
        self.top_i = torch.empty(n, 0, dtype=torch.long, device=dev)
        self.ref = torch.full((n,), -torch.inf, dtype=f32, device=dev)
        self.s = torch.zeros(n, dtype=f32, device=dev)
        self.q, self.p = torch.zeros_like(self.s), torch.zeros_like(self.s)
        self.z_y = torch.zeros_like(self.s)

    def add_tile(
        self, z: torch.Tensor, v0: int, temperature: float, u: torch.Tensor, e: torch.Tensor
    ) -> None:
        """Fold in the logits ``z`` (N, w) of tokens v0 .. v0 + w - 1; ``u`` and ``e`` are
        float32 work buffers of the same shape (``u`` may be ``z`` itself: it is overwritten)."""
        w = z.shape[1]
        if z.dtype != torch.float32:
            z = u.copy_(z)  # exact; a mixed-dtype subtraction is not vectorized on CPU
        local = self.targets - v0
        inside = (local >= 0) & (local < w)  # (N,) the target is in this tile
        col = local.clamp(0, w - 1).unsqueeze(-1)  # (N, 1)
        self.z_y = torch.where(inside, z.gather(-1, col).squeeze(-1), self.z_y)
        old_top, old_id = self._lead()
        tv, ti = top_k_exact(z, min(self.keep, w))  # block maxima of the tile, exact
        # a stable sort with the running entries first: on a tie the lead stays where it is
        # (its term is not in the sums; a token of an earlier tile that ties is)
        merged = torch.cat([self.top_v, tv], -1)
        merged, pos = merged.sort(dim=-1, descending=True, stable=True)
        keep = min(self.keep, merged.shape[1])
        self.top_v = merged[:, :keep]
        self.top_i = torch.cat([self.top_i, ti + v0], -1).gather(-1, pos[:, :keep])
        ref_old, self.ref = self.ref, reference_logit(self.top_v)
        # rows holding mass (s > 0: a finite runner-up, so r only rises) are rescaled; the
        # others hold zeros (the first tile, or only -inf logits besides A and y so far)
        held = self.s > 0
        d = torch.where(held, (self.ref - ref_old) / temperature, 0.0)  # >= 0
        scale = torch.exp(-d)
        self.p = scale * (self.p - d * self.s)
        self.s, self.q = self.s * scale, self.q * scale * scale
        top_id = self.top_i[:, 0]
        joins = (old_id >= 0) & (old_id != top_id) & (old_id != self.targets)  # former lead
        u_old = torch.where(joins, (old_top - self.ref) / temperature, 0.0).clamp_max(0.0)
        e_old = torch.where(joins, torch.exp(u_old), 0.0)  # u_old <= 0; -inf before a lead
        self.s, self.q = self.s + e_old, self.q + e_old * e_old
        self.p = self.p + torch.where(e_old > 0, e_old * u_old, 0.0)  # 0, not 0 * -inf
        # r = -inf only while every logit so far is -inf: then u = -inf and e = 0, not NaN
        finite_ref = torch.where(self.ref > -torch.inf, self.ref, 0.0)
        torch.sub(z, finite_ref.unsqueeze(-1), out=u)  # in place when z is u
        if temperature != 1.0:
            u.div_(temperature)
        torch.exp(u, out=e)
        lead = top_id - v0
        lead_in = (lead >= 0) & (lead < w)
        lead_col = lead.clamp(0, w - 1).unsqueeze(-1)
        for c, here in ((lead_col, lead_in), (col, inside)):  # zero A's and y's terms
            e.scatter_(-1, c, torch.where(here.unsqueeze(-1), 0.0, e.gather(-1, c)))
        s_tile = e.sum(dim=-1)
        self.q = self.q + sum_sq(e)
        p_tile = u.mul_(e).sum(dim=-1)
        masked = p_tile.isnan() & ~s_tile.isnan()
        if bool(masked.any()):  # -inf logits (e = 0) made 0 * -inf = NaN terms: those are 0
            p_tile[masked] = u[masked].nan_to_num(nan=0.0).sum(dim=-1)
        self.s, self.p = self.s + s_tile, self.p + p_tile

    def _lead(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The current (m1, A), or (-inf, -1) before the first tile."""
        if self.top_v.shape[1] == 0:
            n = self.s.shape[0]
            return torch.full_like(self.s, -torch.inf), torch.full(
                (n,), -1, dtype=torch.long, device=self.s.device
            )
        return self.top_v[:, 0], self.top_i[:, 0]

    def row_sums(self) -> RowSums:
        return RowSums(
            self.top_v[:, 0], self.top_i[:, 0], self.ref, self.z_y, self.s, self.q, self.p
        )


def token_stats_from_hidden(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    targets: torch.Tensor,
    temperature: float = DEFAULT_TEMPERATURE,
    top_k: int = 0,
    chunk_size: int = 128,
) -> TokenStats:
    """Statistics of z = hidden @ weight.T (+ bias) for (N, D) hidden states, a (V, D) head
    weight and (N,) targets, tiled over V (module docstring); fields float32, never
    differentiable. The same quantities as ``token_stats_chunked`` on the full logits."""
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    hidden, weight = hidden.detach(), weight.detach()
    n, vocab = hidden.shape[0], weight.shape[0]
    dev, f32 = hidden.device, torch.float32
    if n == 0:
        no_ids = torch.empty(0, max(top_k, 0), dtype=torch.long, device=dev)
        empty = torch.empty(0, device=dev)
        return TokenStats(empty, empty, empty, empty, no_ids, torch.empty(0, max(top_k, 0)))
    width = tile_columns(n, vocab, chunk_size)
    z_buf = torch.empty(n * width, dtype=weight.dtype, device=dev)  # reused: no page faults
    u_buf = z_buf if weight.dtype == f32 else torch.empty(n * width, dtype=f32, device=dev)
    e_buf = torch.empty(n * width, dtype=f32, device=dev)
    targets = targets.to(dev)
    sums = _OnlineSums(targets, max(top_k, 2))
    for v0 in range(0, vocab, width):
        w = min(width, vocab - v0)
        z = z_buf[: n * w].view(n, w)
        torch.mm(hidden, weight[v0 : v0 + w].t(), out=z)  # (N, w), all rows at once
        if bias is not None:
            z.add_(bias.detach()[v0 : v0 + w])
        u, e = u_buf[: n * w].view(n, w), e_buf[: n * w].view(n, w)  # float32 work
        sums.add_tile(z, v0, temperature, u, e)
    k = min(max(top_k, 0), vocab)
    logprob, entropy, grad_norm, sum_sq_prob, top_lp = finish_stats(
        sums.row_sums(), targets, temperature, sums.top_v[:, :k]
    )
    return TokenStats(logprob, entropy, grad_norm, sum_sq_prob, sums.top_i[:, :k], top_lp)
