"""Precision at the edges, for both head paths, against float64 formulas that keep relative
accuracy themselves.

Over Qwen's vocabulary (151,936 tokens), in float32 and bfloat16, at temperatures 0.05, 1 and 5:
rows whose most probable token leads the rest by a logit gap of 20-80 (near-certain tokens,
where 1 - p, the entropy and g are tiny), with the target that token, the runner-up or a random
token, and ordinary rows. Both paths see exactly the same logits: the vocabulary-tiled path gets
identity hidden states and the logits as its head's weight, so its matmul is exact.

The bounds are relative, |got - exact| <= RTOL * |exact|, for every value of magnitude at least
float32's smallest normal number (2^-126, about 1.2e-38); below that a float32 result can only
be a subnormal or 0, so the allowance there is that absolute 2^-126. They are the bounds of the
claims table in docs/concepts.md ("Precision of the token statistics").
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import pytest
import torch

from gmts_core.stats.metrics import TokenStats, token_stats
from gmts_core.stats.vocab_tiled import tile_columns, token_stats_from_hidden

pytestmark = pytest.mark.usefixtures("native_path")  # native kernel and PyTorch ops

VOCAB = 151_936  # Qwen2's vocabulary
GAPS = (20.0, 30.0, 40.0, 60.0, 80.0)  # logit gap of the most probable token over the rest
TOP_K = 5
TINY = 2.0**-126  # float32's smallest normal number
RTOL = {  # the claims table's bounds, per quantity (float32 and bfloat16 logits alike)
    "logprob": 1e-6,
    "entropy": 1e-6,
    "grad_norm": 1e-6,
    "sum_sq_prob": 1e-6,
    "top_logprobs": 1e-6,
}


def edge_logits(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """(R, V) logits in ``dtype`` and (R,) targets: per gap, a near-certain row whose target is
    its most probable token, one whose target is the runner-up and one with a random target;
    then three ordinary rows (logit scales 1, 3, 6)."""
    gen = torch.Generator().manual_seed(26)
    rows, targets = [], []
    for gap in GAPS:
        for kind in ("top", "runner-up", "random"):
            z = torch.randn(VOCAB, generator=gen, dtype=torch.float64) * 2.0
            lead = int(torch.randint(0, VOCAB, (1,), generator=gen))
            z[lead] = z.max() + gap
            if kind == "top":
                y = lead
            elif kind == "runner-up":
                y = int(torch.where(torch.arange(VOCAB) == lead, -torch.inf, z).argmax())
            else:
                y = int(torch.randint(0, VOCAB, (1,), generator=gen))
            rows.append(z)
            targets.append(y)
    for scale in (1.0, 3.0, 6.0):
        rows.append(torch.randn(VOCAB, generator=gen, dtype=torch.float64) * scale)
        targets.append(int(torch.randint(0, VOCAB, (1,), generator=gen)))
    return torch.stack(rows).to(dtype), torch.tensor(targets)


def exact_stats(logits: torch.Tensor, targets: torch.Tensor, tau: float) -> dict[str, torch.Tensor]:
    """The statistics of the (rounded) logits in float64, by formulas that stay relatively
    accurate for near-certain rows: -log pi_v = log1p(rest / max) + (m - z_v) / tau, with the
    rest's mass summed without the maximum's term; 1 - p as the sum of the others."""
    z = logits.double()  # (R, V)
    m, lead = z.max(dim=-1)
    u = (z - m.unsqueeze(-1)) / tau  # <= 0, 0 at the maximum
    rest = u.exp().scatter(-1, lead.unsqueeze(-1), 0.0).sum(-1)  # (R,)
    surprisal = torch.log1p(rest).unsqueeze(-1) - u  # -log pi_v >= 0, (R, V)
    pi = torch.exp(-surprisal)
    col = targets.unsqueeze(-1)
    others = pi.scatter(-1, col, 0.0)  # pi_v for v != y
    top_vals, top_ids = z.topk(TOP_K, dim=-1)
    return {
        "logprob": -surprisal.gather(-1, col).squeeze(-1),
        "entropy": (pi * surprisal).sum(-1),
        "grad_norm": (others.sum(-1).square() + others.square().sum(-1)).sqrt() / tau,
        "sum_sq_prob": pi.square().sum(-1),
        "top_logprobs": -surprisal.gather(-1, top_ids),
        "top_vals": top_vals,
    }


def relative_excess(got: torch.Tensor, want: torch.Tensor, rtol: float) -> float:
    """max (|got - want| - rtol |want| - TINY): <= 0 where the bound holds everywhere."""
    err = (got.double() - want).abs() - rtol * want.abs() - TINY
    return float(err.max())


def chunked_path(logits: torch.Tensor, targets: torch.Tensor, tau: float) -> TokenStats:
    return token_stats(logits, targets, tau, top_k=TOP_K)


def tiled_path(logits: torch.Tensor, targets: torch.Tensor, tau: float) -> TokenStats:
    n = logits.shape[0]
    hidden = torch.eye(n, dtype=logits.dtype)  # (R, R): z = I @ W.T is exact in any dtype
    weight = logits.t().contiguous()  # (V, R)
    assert VOCAB // tile_columns(n, VOCAB, 1) >= 8  # several tiles: the online rescaling runs
    return token_stats_from_hidden(hidden, weight, None, targets, tau, TOP_K, chunk_size=1)


@functools.cache
def edge_case(dtype: torch.dtype, tau: float) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """The logits, targets and exact statistics, computed once per dtype and temperature."""
    logits, targets = edge_logits(dtype)
    return logits, targets, exact_stats(logits, targets, tau)


@pytest.mark.parametrize("tau", [0.05, 1.0, 5.0])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("path", [chunked_path, tiled_path], ids=["chunked", "tiled"])
def test_relative_precision_at_the_edges(
    path: Callable[[torch.Tensor, torch.Tensor, float], TokenStats],
    dtype: torch.dtype,
    tau: float,
) -> None:
    logits, targets, want = edge_case(dtype, tau)
    got = path(logits, targets, tau)
    for name, rtol in RTOL.items():
        excess = relative_excess(getattr(got, name), want[name], rtol)
        assert excess <= 0.0, f"{name}: bound {rtol:g} exceeded by {excess:.3g}"
    # the top-k tokens: distinct ids whose logits are the k largest, in order (ties either way)
    assert torch.equal(logits.gather(-1, got.top_ids).double(), want["top_vals"])
    assert all(len(set(row)) == TOP_K for row in got.top_ids.tolist())


def test_near_certain_values_are_not_flushed() -> None:
    """The issue's figures: at a gap of 30 nats log p = -1.4e-8 (not 0); at 80 nats g = 2.7e-30
    (not 0) and the entropy is the rest's share, not 1-3 % low."""
    z = torch.zeros(2, 1000)
    z[0, 7], z[1, 7] = 30.0, 80.0
    targets = torch.tensor([7, 7])
    want = exact_stats(z, targets, 1.0)
    got = token_stats(z, targets)
    assert got.logprob[0] < 0 and got.grad_norm[1] > 0
    for name in ("logprob", "entropy", "grad_norm"):
        assert relative_excess(getattr(got, name), want[name], 1e-6) <= 0.0, name
