"""``categorical`` draws ``torch.multinomial(probs, 1)``'s tokens, bit for bit, and leaves the
CPU generator in the state multinomial leaves it in; where it cannot, it is multinomial. The
draws are checked on both of its paths (``native_path``): the native kernel's float32 pass and
the vectorized torch ops."""

from __future__ import annotations

import logging
import math

import pytest
import torch

from gmts_core.sampling import categorical as draw


def _probs(rows: int, vocab: int, seed: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.softmax(2 * torch.randn(rows, vocab, generator=gen, dtype=dtype), -1)


def _with_zeros(dtype: torch.dtype) -> torch.Tensor:
    p = _probs(9, 300, 1, dtype)
    p[:, 1::2] = 0  # zero-probability tokens in every row
    p[2] = 0
    p[2, 41] = 1  # one-hot
    p[3] = 0
    p[3, -1] = 0.3  # one token, the last, of weight 0.3
    p[4] = 1  # unnormalized, all equal
    p[5] = 0
    p[5, :2] = torch.tensor([0.25, 0.75])  # two tokens
    return p


CASES = {
    "one row": _probs(1, 50, 2),
    "64x102": _probs(64, 102, 3),
    "64x102 float64": _probs(64, 102, 4, torch.float64),
    "two tokens": _probs(5, 2, 5),
    "zeros and one-hot": _with_zeros(torch.float32),
    "zeros and one-hot float64": _with_zeros(torch.float64),
    "weights, not probabilities": 7 * _probs(6, 80, 6) ** 2,
    "requires grad": _probs(4, 50, 15).requires_grad_(),
}


def _draws(probs: torch.Tensor, seed: int) -> tuple[tuple[list[int], torch.Tensor], ...]:
    """(tokens, generator state after) of multinomial, then of categorical, from ``seed``."""
    out = []
    for fn in (lambda: torch.multinomial(probs, 1).squeeze(1), lambda: draw.categorical(probs)):
        torch.manual_seed(seed)
        tokens = fn()
        assert tokens.dtype == torch.int64 and tokens.shape == (len(probs),)
        out.append((tokens.tolist(), torch.get_rng_state()))
    return tuple(out)


def _assert_multinomials(probs: torch.Tensor, seeds: range) -> None:
    for seed in seeds:
        (want, want_state), (got, got_state) = _draws(probs, seed)
        assert got == want, f"seed {seed}"
        assert torch.equal(got_state, want_state), f"seed {seed}"


@pytest.fixture
def fast(monkeypatch: pytest.MonkeyPatch, native_path: str) -> list[int]:
    """The fast path is taken (on this platform the probe passes), natively or with torch's
    ops: the rows it drew."""
    assert draw.exact()
    drawn: list[int] = []
    block = draw._draw_block

    def counted(probs: torch.Tensor) -> torch.Tensor:
        drawn.append(len(probs))
        return block(probs)

    monkeypatch.setattr(draw, "_draw_block", counted)
    return drawn


def test_the_probe_passes_here(monkeypatch: pytest.MonkeyPatch, native_path: str) -> None:
    monkeypatch.setattr(draw, "_verdicts", {})
    state = torch.get_rng_state()
    assert draw.exact()
    assert torch.equal(torch.get_rng_state(), state)  # the probe leaves the generator alone


@pytest.mark.parametrize("case", CASES)
def test_draws_are_multinomials(case: str, fast: list[int]) -> None:
    _assert_multinomials(CASES[case], range(40))
    assert sum(fast) == 40 * len(CASES[case])


def test_blocks_of_rows_draw_as_one(monkeypatch: pytest.MonkeyPatch, fast: list[int]) -> None:
    monkeypatch.setattr(draw, "_BLOCK", 3 * 102)  # blocks of 3 rows, the last of 1
    _assert_multinomials(_probs(64, 102, 7), range(10))
    assert fast[:22] == [3] * 21 + [1]


def test_a_long_vocabulary(fast: list[int]) -> None:
    _assert_multinomials(_probs(5, 32000, 8), range(3))
    assert fast[:2] == [4, 1]  # 2**17 elements a block


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_uncertain_rows_are_redrawn_from_libm(
    dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch, fast: list[int]
) -> None:
    monkeypatch.setattr(draw, "_MARGIN", {torch.float32: math.inf, torch.float64: math.inf})
    redrawn: list[int] = []
    exact_row = draw._exact_row
    monkeypatch.setattr(draw, "_exact_row", lambda *a: redrawn.append(1) or exact_row(*a))
    _assert_multinomials(_with_zeros(dtype), range(20))
    assert len(redrawn) == 20 * 9  # every row


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_ties_and_one_ulp_winners(dtype: torch.dtype, fast: list[int]) -> None:
    """Weights equal to the very variates multinomial divides them by: every ratio is exactly
    1 and the first token wins, or one weight an ulp up wins. A variate an ulp off, or a margin
    too thin for one, picks another token."""
    rows = torch.arange(4)
    for seed in range(10):
        torch.manual_seed(seed)
        q = torch.empty(8, 30, dtype=dtype).exponential_(1)
        winners = torch.randint(0, 30, (4,), generator=torch.Generator().manual_seed(seed))
        up = q.clone()
        up[rows, winners] = torch.nextafter(q[rows, winners], torch.tensor(math.inf, dtype=dtype))
        for probs, want in ((q, [0] * 8), (up, winners.tolist() + [0] * 4)):
            (multinomial, _), (got, _) = _draws(probs, seed)
            assert multinomial == want
            assert got == want


def test_ratios_that_overflow_float32_draw_as_multinomial(fast: list[int]) -> None:
    """Weights near float32's largest: multinomial's ratios p / q overflow to inf for small
    variates and its argmax is the first inf. A cut taken from the ratios' exact values would
    drop the smaller inf and decide for the larger weight's token (seeds 42, 73 and 75 here)."""
    probs = torch.tensor([[1e38, 2e38, 1e30]] * 2)
    _assert_multinomials(probs, range(80))
    assert sum(fast) == 80 * 2


def _late(shape: tuple[int, ...]) -> torch.Tensor:
    """The uniforms, one number late."""
    return torch.rand(math.prod(shape) + 1, dtype=torch.float64)[1:].view(shape)


@pytest.mark.parametrize(
    ("name", "wrong", "path"),
    [
        ("_variates", lambda u, dtype: torch.log(u).to(dtype).abs_(), "eager"),
        ("_uniforms", _late, "eager"),
        ("_uniforms", _late, "native"),
    ],
    ids=["log(u) for log(1 - u)", "one number late", "one number late, native kernel"],
)
def test_a_different_transform_or_stream_fails(
    name: str, wrong: object, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the tests above stand on: such draws are other tokens, and the probe refuses them."""
    if path == "native" and draw.native.library() is None:
        pytest.skip("no C compiler here: the native kernels are not built")
    monkeypatch.setenv("GMTS_NATIVE", "1" if path == "native" else "0")
    monkeypatch.setattr(draw, name, wrong)
    assert not draw._probe()
    monkeypatch.setattr(draw, "_verdicts", {path == "native": True})
    probs = _probs(64, 102, 9)
    assert not all(want == got for (want, _), (got, _) in (_draws(probs, s) for s in range(5)))


def test_fallback_when_the_probe_fails(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(draw, "_verdicts", {})
    monkeypatch.setattr(draw, "_probe", lambda: False)
    monkeypatch.setattr(draw, "_categorical", lambda probs: pytest.fail("fast path taken"))
    with caplog.at_level(logging.WARNING, logger="gmts_core.sampling.categorical"):
        for case in ("64x102", "zeros and one-hot float64"):
            _assert_multinomials(CASES[case], range(5))
    assert False in draw._verdicts.values()
    # logged once
    assert len([r for r in caplog.records if r.name == "gmts_core.sampling.categorical"]) == 1


@pytest.mark.parametrize(
    "probs",
    [
        _probs(6, 40, 10).t(),  # not contiguous
        _probs(6, 40, 11).bfloat16(),
        _probs(6, 1, 12),  # one token
        1e-35 * _probs(6, 40, 13),  # weights near underflow
    ],
    ids=["transposed", "bfloat16", "one token", "tiny weights"],
)
def test_other_inputs_are_multinomials(
    probs: torch.Tensor, monkeypatch: pytest.MonkeyPatch, native_path: str
) -> None:
    assert draw.exact()
    monkeypatch.setattr(draw, "_categorical", lambda probs: pytest.fail("fast path taken"))
    _assert_multinomials(probs, range(5))


@pytest.mark.parametrize("bad", [math.nan, math.inf, -1.0, "zero row"])
def test_invalid_rows_raise_as_multinomial_does(bad: float | str, native_path: str) -> None:
    probs = _probs(4, 30, 14)
    if bad == "zero row":
        probs[2] = 0
    else:
        probs[1, 3] = bad
    state = torch.get_rng_state()
    with pytest.raises(RuntimeError) as want:
        torch.multinomial(probs, 1)
    with pytest.raises(RuntimeError) as got:
        draw.categorical(probs)
    assert str(got.value) == str(want.value)
    assert torch.equal(torch.get_rng_state(), state)
