"""Chunked token statistics against the naive float64 formulas and against autograd."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from gmts_core.stats.metrics import (
    grad_norm_from_probs,
    grad_proxy,
    token_stats,
    token_stats_chunked,
)

pytestmark = pytest.mark.usefixtures("native_path")  # native kernel and PyTorch ops

SHAPES = [(1, 7), (3, 5, 50), (2, 17, 1000)]  # (..., V)
DTYPES = [torch.float32, torch.bfloat16]
CHUNKS = [1, 4, 128]
TEMPERATURES = [1.0, 0.7, 1.6]


def make_logits(shape: tuple[int, ...], dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    """Random logits with a spread of sharp and flat rows, and their sampled-looking targets."""
    gen = torch.Generator().manual_seed(seed)
    z = torch.randn(shape, generator=gen, dtype=torch.float64) * 3.0
    z = z + 10.0 * torch.rand(shape[:-1] + (1,), generator=gen, dtype=torch.float64)  # offsets
    flat = z.view(-1, shape[-1])
    flat[::3, 0] += 12.0  # every third row is confident about token 0
    return z.to(dtype)


def make_targets(shape: tuple[int, ...], seed: int = 1) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    t = torch.randint(0, shape[-1], shape[:-1], generator=gen)
    t.view(-1)[::3] = 0  # the confident rows mostly sample their favourite
    return t


def naive_stats(logits: torch.Tensor, targets: torch.Tensor, tau: float) -> dict[str, torch.Tensor]:
    """The textbook formulas over the full vocabulary, in float64."""
    z = logits.double().reshape(-1, logits.shape[-1]) / tau  # (N, V)
    logp = torch.log_softmax(z, dim=-1)
    p = logp.exp()
    y = targets.reshape(-1, 1)
    logprob = logp.gather(-1, y).squeeze(-1)
    sum_sq = (p * p).sum(-1)
    return {
        "logprob": logprob,
        "entropy": -(p * logp).sum(-1),
        "sum_sq_prob": sum_sq,
        "grad_norm": (1 - 2 * logprob.exp() + sum_sq).sqrt() / tau,
        "logp": logp,
    }


def autograd_grad_norm(logits: torch.Tensor, targets: torch.Tensor, tau: float) -> torch.Tensor:
    """|| d log pi_y / d z || per row, by autograd in float64."""
    z = logits.double().reshape(-1, logits.shape[-1]).clone().requires_grad_(True)
    logp = torch.log_softmax(z / tau, dim=-1).gather(-1, targets.reshape(-1, 1)).sum()
    (grad,) = torch.autograd.grad(logp, z)
    return grad.norm(dim=-1)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("chunk_size", CHUNKS)
@pytest.mark.parametrize("tau", TEMPERATURES)
def test_chunked_equals_naive_float64(
    shape: tuple[int, ...], dtype: torch.dtype, chunk_size: int, tau: float
) -> None:
    logits, targets = make_logits(shape, dtype), make_targets(shape)
    got = token_stats(logits, targets, temperature=tau, chunk_size=chunk_size)
    want = naive_stats(logits, targets, tau)  # from the same (rounded) logits, so only the
    # float32 accumulation differs, whatever the input dtype
    tol = {"atol": 2e-5, "rtol": 2e-5}
    for name in ("logprob", "entropy", "sum_sq_prob", "grad_norm"):
        value = getattr(got, name)
        assert value.dtype == torch.float32 and value.shape == (targets.numel(),)
        assert_close(value.double(), want[name], **tol, msg=lambda m, n=name: f"{n}: {m}")
    assert_close(got.prob.double(), want["logprob"].exp(), **tol)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("tau", TEMPERATURES)
def test_grad_norm_is_the_autograd_norm(dtype: torch.dtype, tau: float) -> None:
    shape = (4, 9, 300)
    logits, targets = make_logits(shape, dtype, seed=5), make_targets(shape, seed=6)
    got = token_stats(logits, targets, temperature=tau, chunk_size=8).grad_norm
    assert_close(got.double(), autograd_grad_norm(logits, targets, tau), atol=1e-6, rtol=1e-5)


def test_grad_norm_stays_accurate_for_confident_tokens() -> None:
    """p = 1 - 1e-7: 1 - 2p + sum pi^2 cancels in float32, the split-off form does not."""
    v = 1000
    logits = torch.zeros(3, v)
    logits[:, 0] = torch.tensor([10.0, 16.0, 23.0])  # 1 - p from ~5e-2 down to ~1e-7
    targets = torch.zeros(3, dtype=torch.long)
    got = token_stats(logits, targets).grad_norm.double()
    want = autograd_grad_norm(logits, targets, 1.0)
    assert_close(got, want, atol=0.0, rtol=1e-4)
    assert got[-1] < 1e-6  # tiny but resolved, not float32 noise of ~3e-4


def test_entropy_of_flat_and_one_hot_rows() -> None:
    v = 64
    logits = torch.stack([torch.zeros(v), torch.full((v,), -1e4)])
    logits[1, 3] = 0.0
    s = token_stats(logits, torch.tensor([5, 3]))
    assert_close(s.entropy, torch.tensor([torch.log(torch.tensor(float(v))), 0.0]))
    assert_close(s.sum_sq_prob, torch.tensor([1.0 / v, 1.0]))
    assert_close(s.grad_norm, torch.tensor([(1 - 1 / v) ** 0.5, 0.0]), atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("tau", [1.0, 0.5])
def test_top_k_alternatives(dtype: torch.dtype, tau: float) -> None:
    shape = (2, 6, 500)
    logits, targets = make_logits(shape, dtype, seed=2), make_targets(shape, seed=3)
    got = token_stats(logits, targets, temperature=tau, top_k=4, chunk_size=5)
    logp = naive_stats(logits, targets, tau)["logp"]
    want = logp.topk(4, dim=-1)
    assert got.top_ids.shape == (12, 4) and got.top_ids.dtype == torch.long
    # the k most probable tokens: their own log-probs are the top-k values (bf16 logits tie
    # often, and the order among equal values is unspecified), each token listed once
    assert torch.equal(logp.gather(-1, got.top_ids), want.values)
    assert all(len(set(row)) == 4 for row in got.top_ids.tolist())
    assert_close(got.top_logprobs.double(), want.values, atol=2e-5, rtol=2e-5)
    assert bool((got.top_logprobs[:, :-1] >= got.top_logprobs[:, 1:]).all())  # most probable first


def test_top_k_larger_than_vocab_and_zero() -> None:
    logits, targets = make_logits((3, 6), torch.float32), make_targets((3, 6))
    assert token_stats(logits, targets, top_k=10).top_ids.shape == (3, 6)
    none = token_stats(logits, targets, top_k=0)
    assert none.top_ids.shape == (3, 0) and none.top_logprobs.shape == (3, 0)


def test_chunked_never_asks_for_more_than_one_chunk() -> None:
    """The contract forward.py relies on: logits_fn is called with slices of <= chunk_size rows."""
    logits, targets = make_logits((37, 40), torch.float32), make_targets((37, 40))
    asked: list[slice] = []

    def logits_fn(sl: slice) -> torch.Tensor:
        asked.append(sl)
        return logits[sl]

    got = token_stats_chunked(37, logits_fn, targets, chunk_size=8)
    assert [s.stop - s.start for s in asked] == [8, 8, 8, 8, 5]
    assert asked[0].start == 0 and all(
        a.stop == b.start for a, b in zip(asked, asked[1:], strict=False)
    )
    assert_close(got.entropy, token_stats(logits, targets).entropy)


def test_no_positions_and_bad_arguments() -> None:
    empty = token_stats_chunked(0, lambda sl: torch.zeros(0, 5), torch.zeros(0, dtype=torch.long))
    assert empty.logprob.numel() == 0 and empty.top_ids.shape == (0, 0)
    with pytest.raises(ValueError, match="temperature"):
        token_stats(torch.zeros(2, 3), torch.zeros(2, dtype=torch.long), temperature=0.0)
    with pytest.raises(ValueError, match="chunk_size"):
        token_stats(torch.zeros(2, 3), torch.zeros(2, dtype=torch.long), chunk_size=0)


def test_grad_norm_from_probs_matches_token_stats() -> None:
    """The public helper (used where only p and sum pi^2 are at hand) agrees on ordinary rows."""
    logits, targets = make_logits((20, 80), torch.float32, seed=9), make_targets((20, 80))
    logits[:, 0] -= 12.0  # no confident rows: the plain formula is accurate there
    s = token_stats(logits, targets, temperature=0.8)
    assert_close(grad_norm_from_probs(s.prob, s.sum_sq_prob, 0.8), s.grad_norm, atol=1e-6, rtol=0)


def test_grad_proxy_is_abs_advantage_times_weight_times_norm() -> None:
    adv = torch.tensor([-2.0, 0.0, 0.5])
    w = torch.tensor([0.1, 0.2, 0.3])
    g = torch.tensor([1.0, 2.0, 4.0])
    assert_close(grad_proxy(adv, w, g), torch.tensor([0.2, 0.0, 0.6]))


@pytest.mark.parametrize("dtype", DTYPES)
def test_top_k_by_block_maxima_equals_torch_topk(dtype: torch.dtype) -> None:
    """A large vocabulary takes the block-maxima path; planted winners in one block and in the
    ragged tail must all be found."""
    gen = torch.Generator().manual_seed(4)
    v = 10_000  # 39 blocks of 256 and a tail of 16
    logits = torch.randn(6, v, generator=gen)
    logits[0, 512:516] = torch.tensor([9.0, 8.0, 7.0, 6.0])  # four winners in one block
    logits[1, -3:] = torch.tensor([9.0, 8.5, 8.0])  # winners in the tail
    logits[2, [0, 9_999, 5_000]] = torch.tensor([7.0, 9.0, 8.0])  # first, last, middle
    logits = logits.to(dtype)
    targets = torch.zeros(6, dtype=torch.long)
    got = token_stats(logits, targets, top_k=4, chunk_size=4)
    want = torch.log_softmax(logits.double(), -1).topk(4, dim=-1)
    assert_close(got.top_logprobs.double(), want.values, atol=2e-5, rtol=2e-5)
    picked = torch.log_softmax(logits.double(), -1).gather(-1, got.top_ids)
    assert_close(picked, want.values)  # ids name tokens with exactly those values
    assert got.top_ids[0].tolist() == [512, 513, 514, 515]
    assert got.top_ids[1, :3].tolist() == [9_997, 9_998, 9_999]
    assert got.top_ids[2, :3].tolist() == [9_999, 5_000, 0]


def test_masked_tokens_add_nothing() -> None:
    """-inf logits (tokens masked out) have probability 0 and add 0 to every sum, not NaN."""
    logits = torch.randn(3, 300, generator=torch.Generator().manual_seed(4))
    masked = logits.clone()
    masked[:, 200:] = float("-inf")
    targets = torch.tensor([0, 5, 199])
    got = token_stats(masked, targets, temperature=0.7, top_k=3)
    want = token_stats(logits[:, :200], targets, temperature=0.7, top_k=3)
    for name in ("logprob", "entropy", "grad_norm", "sum_sq_prob", "top_logprobs"):
        assert_close(getattr(got, name), getattr(want, name), rtol=1e-6, atol=1e-7)
