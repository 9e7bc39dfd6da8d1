"""The statistics' edges, exact on every path (#39 item 5): a row with one finite logit, a
target at a -inf logit, and top-k alternatives among equal logits (lower token id first).

Each is checked against float64 references on the same (dtype-rounded) logits: the closed
forms, :mod:`gmts_core.reference` and an entropy from ``torch.special.entr``; on the native
kernel and on PyTorch's ops (``native_path``), for float32 and bfloat16 logits, and on the
vocabulary-tiled path (hidden states against a head whose bias holds the -inf logits).
"""

from __future__ import annotations

import math
from dataclasses import fields

import pytest
import torch
from torch.testing import assert_close

from gmts_core import reference
from gmts_core.stats import vocab_tiled
from gmts_core.stats.metrics import TokenStats, token_stats
from gmts_core.stats.vocab_tiled import token_stats_from_hidden

DTYPES = [torch.float32, torch.bfloat16]
INF = math.inf
# 7 logits, two of them -inf: the shape of example (a target at a -inf logit)
SEVEN = [1.25, -0.5, -INF, 2.0, 0.75, -INF, 0.125]


def _entropy_entr(logits: torch.Tensor, tau: float) -> torch.Tensor:
    """H (N,) in float64 as sum entr(p), entr(0) = 0: independent of the reference's form."""
    p = torch.softmax(logits.double() / tau, dim=-1)
    return torch.special.entr(p).sum(dim=-1)


def _tiled(logits: torch.Tensor, targets: torch.Tensor, tau: float, k: int) -> TokenStats:
    """The tiled path, one row at a time: zero hidden states, a zero head, the row as bias (so
    -inf logits reach it without a -inf * 0 in the matmul); tiles of about V / 7 columns."""
    parts = []
    for row, y in zip(logits, targets, strict=True):
        zero_h = torch.zeros(1, 4, dtype=logits.dtype)
        zero_w = torch.zeros(row.shape[0], 4, dtype=logits.dtype)
        parts.append(token_stats_from_hidden(zero_h, zero_w, row, y[None], tau, k, chunk_size=1))
    return TokenStats(*(torch.cat([getattr(s, f.name) for s in parts]) for f in fields(TokenStats)))


def _check(got: TokenStats, logits: torch.Tensor, targets: torch.Tensor, tau: float) -> None:
    """Every field against the float64 reference on the same logits; -inf exactly, the rest
    within the documented relative 1e-6 (and exact zeros where the reference is 0)."""
    logprob, entropy, g = reference.token_statistics(logits, targets, tau)
    k = got.top_ids.shape[1]
    ids, top_lp = reference.top_alternatives(logits, k, tau)
    assert torch.equal(got.top_ids, ids)
    for ours, want in ((got.logprob, logprob), (got.top_logprobs, top_lp)):
        assert torch.equal(ours.isneginf(), want.isneginf())
        finite = want.isfinite()
        assert_close(ours.double()[finite], want[finite], rtol=1e-6, atol=0)
    assert_close(got.entropy.double(), entropy, rtol=1e-6, atol=0)
    assert_close(got.entropy.double(), _entropy_entr(logits, tau), rtol=1e-6, atol=0)
    assert_close(got.grad_norm.double(), g, rtol=1e-6, atol=0)
    p = torch.softmax(logits.double() / tau, dim=-1)
    # sum pi^2: on rows of thousands of equal logits PyTorch's float32 blocked sum of squares
    # is within 4e-6 (random rows: 1e-6, the precision tests)
    assert_close(got.sum_sq_prob.double(), (p * p).sum(-1), rtol=1e-5, atol=0)


def _one_finite(v: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows with one finite logit (first, middle, last token; a negative and a large one),
    the target that token or another one."""
    spots = [(0, 3.0), (v // 2, -7.5), (v - 1, 40.0), (v // 3, 0.0)]
    logits = torch.full((2 * len(spots), v), -INF)
    targets = []
    for i, (tok, val) in enumerate(spots):
        logits[2 * i : 2 * i + 2, tok] = val
        targets += [tok, (tok + 1) % v]
    return logits.to(dtype), torch.tensor(targets)


@pytest.mark.usefixtures("native_path")
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("tau", [1.0, 0.7])
@pytest.mark.parametrize("v", [50, 8000])  # the whole-row top-k and the block-maxima one
def test_one_finite_logit_is_certain(dtype: torch.dtype, tau: float, v: int) -> None:
    logits, targets = _one_finite(v, dtype)
    got = token_stats(logits, targets, tau, top_k=5)
    at_it = torch.arange(len(targets)) % 2 == 0  # the target is the finite token
    assert got.logprob[at_it].tolist() == [0.0] * 4
    assert got.entropy.tolist() == [0.0] * 8
    assert got.grad_norm[at_it].tolist() == [0.0] * 4
    assert got.sum_sq_prob.tolist() == [1.0] * 8
    assert got.logprob[~at_it].isneginf().all()
    # elsewhere g = || e_y - e_A || / tau = sqrt(2) / tau
    assert_close(got.grad_norm[~at_it], torch.full((4,), math.sqrt(2) / tau))
    assert got.top_logprobs[:, 0].tolist() == [0.0] * 8
    _check(got, logits, targets, tau)


@pytest.mark.usefixtures("native_path")
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("tau", [1.0, 0.7])
def test_target_at_minus_inf_keeps_the_exact_entropy(dtype: torch.dtype, tau: float) -> None:
    gen = torch.Generator().manual_seed(11)
    seven = torch.tensor([SEVEN] * 3).to(dtype)
    seven_y = torch.tensor([2, 5, 3])  # both -inf logits, then a finite one
    wide = (torch.randn(4, 6000, generator=gen) * 3).to(dtype)
    wide[:, 100:400] = -INF  # a masked span: the sums' -inf guard
    wide[3] = -INF
    wide[3, [7, 5000]] = torch.tensor([1.0, 2.5], dtype=dtype)  # two finite logits
    wide_y = torch.tensor([150, 399, 123, 8])  # masked targets; the last row's y is -inf too
    for logits, targets in ((seven, seven_y), (wide, wide_y)):
        got = token_stats(logits, targets, tau, top_k=4)
        assert got.entropy.isfinite().all() and got.grad_norm.isfinite().all()
        _check(got, logits, targets, tau)
    # the 7-logit example in closed form: H of the 5 finite logits, g = sqrt(1 + sum p^2)
    got = token_stats(seven[:1], seven_y[:1], tau, top_k=4)
    z = torch.tensor([x for x in SEVEN if x > -INF], dtype=torch.float64)
    p = torch.softmax(z.to(dtype).double() / tau, dim=-1)
    assert got.logprob.item() == -INF
    assert got.entropy.item() == pytest.approx(float(-(p * p.log()).sum()), rel=1e-6)
    assert got.grad_norm.item() == pytest.approx(math.sqrt(1 + float((p * p).sum())) / tau)


def _tied_rows(v: int, dtype: torch.dtype) -> torch.Tensor:
    """Rows whose top logits tie: all zero; a three-way tie at the top spread over blocks;
    +0 and -0; more equal values than the top-k asks for, past the first block; bfloat16-rounded
    values (many ties); ties among -inf (fewer finite logits than k)."""
    gen = torch.Generator().manual_seed(v)
    rows = torch.zeros(7, v)
    rows[1] = -1.0
    rows[1, [v - 1, 5, v // 2]] = 2.0
    rows[2] = -1.0
    rows[2, [v - 2, 3]], rows[2, [9, v // 3]] = -0.0, 0.0
    rows[3] = torch.randn(v, generator=gen) - 10
    rows[3, torch.randperm(v, generator=gen)[:12]] = 1.5  # 12 equal maxima, in any order
    rows[4] = (torch.randn(v, generator=gen) * 4).bfloat16().float()
    rows[5] = -INF
    rows[5, [v - 1, 2]] = 1.0
    rows[6] = -INF
    rows[6, v - 3] = 0.5
    return rows.to(dtype)


@pytest.mark.usefixtures("native_path")
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("v", [40, 1000, 8000, 10_007])  # whole-row, block maxima, ragged tail
@pytest.mark.parametrize("k", [1, 5, 16])
def test_tied_alternatives_lower_id_first(dtype: torch.dtype, v: int, k: int) -> None:
    logits = _tied_rows(v, dtype)
    targets = torch.tensor([0, 1, 2, 3, 4, 2, v - 3])
    got = token_stats(logits, targets, 0.8, top_k=k)
    ids, _ = reference.top_alternatives(logits, k)
    assert torch.equal(got.top_ids, ids)
    if k == 5 and v == 1000:
        assert got.top_ids[0].tolist() == [0, 1, 2, 3, 4]  # not [387, 388, 385, 384, 386]
    _check(got, logits, targets, 0.8)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("v", [40, 1000])
def test_tiled_path_edges(dtype: torch.dtype, v: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The vocabulary-tiled path on the same edges: one finite logit (also in a late tile, the
    tiles before it all -inf), a target at -inf, and ties across tiles."""
    monkeypatch.setattr(vocab_tiled, "tile_columns", lambda rows, vocab, chunk: vocab // 7)
    one, one_y = _one_finite(v, dtype)
    tied = _tied_rows(v, dtype)
    tied_y = torch.tensor([0, 1, 2, 3, 4, 2, v - 3])
    masked = tied[4:5].clone()
    masked[0, 10:20] = -INF
    for logits, targets in ((one, one_y), (tied, tied_y), (masked, torch.tensor([15]))):
        for tau in (1.0, 0.7):
            got = _tiled(logits, targets, tau, 5)
            _check(got, logits, targets, tau)
