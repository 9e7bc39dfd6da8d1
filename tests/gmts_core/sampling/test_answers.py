"""Sampling a group: G answers, seeded determinism, finished flags, max_new_tokens."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from gmts_core.errors import InvalidInputError, NonFiniteLogitsError
from gmts_core.model.loading import LoadedModel, load_model
from gmts_core.sampling.answers import (
    RejectNonFiniteLogits,
    SampledAnswer,
    SamplingConfig,
    _trim,
    sample_answers,
)


def _prompt(lm: LoadedModel) -> list[int]:
    return list(lm.tokenizer("Q: 47+38=?")["input_ids"])


@pytest.fixture(scope="module")
def eos_prone(tiny_model_dir: Callable[[str], Path]) -> LoadedModel:
    """A private tiny Llama whose LM head favours EOS (p ~ 0.15 per step), so that a group
    holds both finished and truncated answers."""
    lm = load_model(tiny_model_dir("llama"), device="cpu", dtype="float32")
    old = lm.model.lm_head
    head = torch.nn.Linear(old.in_features, old.out_features, bias=True)
    with torch.no_grad():
        head.weight.copy_(old.weight)
        head.bias.zero_()
        vocab = old.out_features
        head.bias[lm.tokenizer.eos_token_id] = math.log(0.15 / 0.85 * (vocab - 1))
    head.requires_grad_(False)
    lm.model.lm_head = head
    return lm


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gpt2"])
def test_group_of_g_answers_within_max_new_tokens(
    arch: str, tiny_lm: Callable[[str], LoadedModel]
) -> None:
    lm = tiny_lm(arch)
    out = sample_answers(
        lm.model, lm.tokenizer, _prompt(lm), SamplingConfig(num_samples=5, max_new_tokens=7)
    )
    assert len(out) == 5
    for a in out:
        assert 1 <= len(a.token_ids) <= 7
        assert all(isinstance(t, int) and 0 <= t < lm.vocab_size for t in a.token_ids)


def test_finished_flags(eos_prone: LoadedModel) -> None:
    eos = eos_prone.tokenizer.eos_token_id
    cfg = SamplingConfig(num_samples=16, max_new_tokens=8, seed=3)
    out = sample_answers(eos_prone.model, eos_prone.tokenizer, _prompt(eos_prone), cfg)
    for a in out:
        assert eos not in a.token_ids[:-1]  # nothing after the first EOS (no padding leaks in)
        if a.finished:
            assert a.token_ids[-1] == eos
        else:
            assert len(a.token_ids) == 8 and eos not in a.token_ids
    assert {a.finished for a in out} == {True, False}  # both kinds occur in this group
    assert any(a.finished and len(a.token_ids) < 8 for a in out)


def test_seeded_determinism(tiny_lm: Callable[[str], LoadedModel]) -> None:
    lm = tiny_lm("qwen2")
    cfg = SamplingConfig(num_samples=4, max_new_tokens=10, seed=7)
    state = torch.random.get_rng_state()
    a = sample_answers(lm.model, lm.tokenizer, _prompt(lm), cfg)
    assert torch.equal(torch.random.get_rng_state(), state)  # the global RNG is left alone
    b = sample_answers(lm.model, lm.tokenizer, _prompt(lm), cfg)
    c = sample_answers(
        lm.model,
        lm.tokenizer,
        _prompt(lm),
        SamplingConfig(num_samples=4, max_new_tokens=10, seed=8),
    )
    assert [x.token_ids for x in a] == [x.token_ids for x in b]
    assert [x.token_ids for x in a] != [x.token_ids for x in c]
    assert len({tuple(x.token_ids) for x in a}) > 1  # the answers of a group differ


def test_greedy_answers_are_identical(tiny_lm: Callable[[str], LoadedModel]) -> None:
    lm = tiny_lm("gpt2")
    cfg = SamplingConfig(num_samples=3, max_new_tokens=6, temperature=0.0)
    out = sample_answers(lm.model, lm.tokenizer, _prompt(lm), cfg)
    assert len({tuple(x.token_ids) for x in out}) == 1


def test_top_k_one_is_greedy(tiny_lm: Callable[[str], LoadedModel]) -> None:
    lm = tiny_lm("llama")
    greedy = sample_answers(
        lm.model, lm.tokenizer, _prompt(lm), SamplingConfig(1, 0.0, max_new_tokens=6)
    )
    top1 = sample_answers(
        lm.model, lm.tokenizer, _prompt(lm), SamplingConfig(3, 1.0, top_k=1, max_new_tokens=6)
    )
    assert all(a.token_ids == greedy[0].token_ids for a in top1)


def test_bad_config(tiny_lm: Callable[[str], LoadedModel]) -> None:
    lm = tiny_lm("gpt2")
    with pytest.raises(InvalidInputError):
        sample_answers(lm.model, lm.tokenizer, _prompt(lm), SamplingConfig(num_samples=0))
    with pytest.raises(InvalidInputError):
        sample_answers(lm.model, lm.tokenizer, _prompt(lm), SamplingConfig(max_new_tokens=0))
    with pytest.raises(InvalidInputError):
        sample_answers(lm.model, lm.tokenizer, [], SamplingConfig())


def test_trim() -> None:
    assert _trim([5, 6, 2, 2, 2], {2}) == SampledAnswer([5, 6, 2], True)
    assert _trim([5, 6, 7], {2}) == SampledAnswer([5, 6, 7], False)
    assert _trim([2], {2, 9}) == SampledAnswer([2], True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_reject_non_finite_logits_catches_nan_posinf_and_all_neginf_rows(
    dtype: torch.dtype,
) -> None:
    check = RejectNonFiniteLogits()
    ok = torch.randn(3, 10).to(dtype)
    ok[2, :9] = -float("inf")  # masked tokens are fine while one stays possible
    assert check(torch.zeros(3, 1, dtype=torch.long), ok) is ok
    for row, col, value in (
        (1, 4, float("nan")),
        (0, 0, float("inf")),
        (2, slice(None), -float("inf")),
    ):
        bad = ok.clone()
        bad[row, col] = value
        with pytest.raises(NonFiniteLogitsError):
            check(torch.zeros(3, 1, dtype=torch.long), bad)
