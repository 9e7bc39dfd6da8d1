"""Token statistics from final hidden states and a linear LM head, tiled over the vocabulary.

:func:`gmts_core.stats.metrics.token_stats_chunked` takes logits a few rows (positions) at a time.
When the logits come from a plain linear head, that splits the head's matmul into many thin ones (C
rows against the whole (V, D) weight), which on CPU cost up to 1.5x one matmul over all rows (the
weight is streamed once per chunk). Here the matmul runs over *all* N rows against one vocabulary
tile (Vt columns) at a time, and the softmax statistics are accumulated online across tiles, as in
flash attention: with u = (z - m) / tau relative to the running maximum m,

    S = sum_{v != y} e^u,   Q = sum_{v != y} e^{2u},   P = sum_{v != y} e^u u

and when m rises by d (in u units, d = (m_new - m_old) / tau) the sums are rescaled:
S <- S e^-d, Q <- Q e^-2d, P <- e^-d (P - d S). The target's term is kept apart (its raw
logit is read in the tile that holds it) and added at the end, exactly as the chunked version
does, so g stays accurate for a confident token. The same formulas then give log p, H, sum pi^2
and g; the top-k alternatives are merged tile by tile.

Memory: one (N, Vt) tile of logits and one of exponentials, Vt chosen so that N * Vt is at most
``chunk_size * V`` (the chunked version's budget).
"""

from __future__ import annotations

import torch

from gmts_core.stats.metrics import TokenStats, top_k_exact

_MIN_TILE = 512  # narrower tiles make the matmul and the per-tile overhead dominate


def tile_columns(rows: int, vocab: int, chunk_size: int) -> int:
    """Vocabulary tile width so that a (rows, width) tile holds at most chunk_size * vocab
    values (never narrower than ``_MIN_TILE``, never wider than the vocabulary)."""
    return max(1, min(vocab, max(_MIN_TILE, chunk_size * vocab // max(rows, 1))))


def token_stats_from_hidden(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    targets: torch.Tensor,
    temperature: float = 1.0,
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
    e_buf = torch.empty(n * width, dtype=f32, device=dev)
    targets = targets.to(dev)
    m = torch.full((n,), -torch.inf, dtype=f32, device=dev)  # running max of the raw logits
    s = torch.zeros(n, dtype=f32, device=dev)
    q, p = torch.zeros_like(s), torch.zeros_like(s)
    z_y = torch.zeros(n, dtype=f32, device=dev)
    top_v = torch.empty(n, 0, dtype=f32, device=dev)
    top_i = torch.empty(n, 0, dtype=torch.long, device=dev)
    for v0 in range(0, vocab, width):
        w = min(width, vocab - v0)
        z = z_buf[: n * w].view(n, w)
        torch.mm(hidden, weight[v0 : v0 + w].t(), out=z)  # (N, w), all rows at once
        if bias is not None:
            z.add_(bias.detach()[v0 : v0 + w])
        u = z if z.dtype == f32 else z.float()  # (N, w) float32, overwritten in place below
        local = targets - v0
        inside = (local >= 0) & (local < w)
        col = local.clamp(0, w - 1).unsqueeze(-1)  # (N, 1)
        z_y = torch.where(inside, u.gather(-1, col).squeeze(-1), z_y)
        if top_k > 0:
            tv, ti = top_k_exact(
                u, min(top_k, w)
            )  # block maxima: a full topk costs more than the rest
            top_v, pos = torch.cat([top_v, tv], -1).topk(min(top_k, top_v.shape[1] + w), dim=-1)
            top_i = torch.cat([top_i, ti + v0], -1).gather(-1, pos)
        m_new = torch.maximum(m, u.amax(dim=-1))  # (N,)
        d = (m_new - m) / temperature  # >= 0; inf on the first tile (the sums are 0 then)
        scale = torch.exp(-d)
        p = torch.where(s > 0, scale * (p - d * s), p)
        s, q, m = s * scale, q * scale * scale, m_new
        u.sub_(m.unsqueeze(-1))
        if temperature != 1.0:
            u.div_(temperature)
        e = e_buf[: n * w].view(n, w)
        torch.exp(u, out=e)
        e.scatter_(-1, col, torch.where(inside.unsqueeze(-1), 0.0, e.gather(-1, col)))
        s = s + e.sum(dim=-1)
        q = q + torch.linalg.vector_norm(e, dim=-1).square()
        p = p + torch.bmm(u.unsqueeze(1), e.unsqueeze(2)).view(n)  # sum e u without a product
    u_y = (z_y - m) / temperature
    e_y = u_y.exp()
    total = s + e_y
    log_s = total.log()
    logprob = u_y - log_s
    entropy = (log_s - (p + e_y * u_y) / total).clamp_min(0.0)
    sum_sq = (q + e_y * e_y) / (total * total)
    grad_norm = ((s / total).square() + q / (total * total)).sqrt() / temperature
    top_lp = (top_v - m.unsqueeze(-1)) / temperature - log_s.unsqueeze(-1)
    return TokenStats(logprob, entropy, grad_norm, sum_sq, top_i, top_lp)
