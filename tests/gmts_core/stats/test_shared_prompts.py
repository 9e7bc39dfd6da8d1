"""Each distinct prompt run once: the same hidden states and gradients as the padded forward
over every full sequence, and the padded forward wherever the batch or the model does not fit."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from gmts_core.model.loading import LoadedModel, load_model
from gmts_core.model.logit_head import head_path
from gmts_core.stats import shared_prompts
from gmts_core.stats.forward import _answer_hidden, answer_logits
from gmts_core.stats.shared_prompts import serves, shareable, shared_prompt_hidden


def _batch(vocab: int, groups: int = 3, size: int = 4, seed: int = 0) -> list:
    """``groups`` prompts of 6 tokens, ``size`` answers of 1-7 tokens each."""
    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(3, vocab, (6,), generator=g).tolist() for _ in range(groups)]
    seqs = []
    for p in prompts:
        for _ in range(size):
            n = int(torch.randint(1, 8, (1,), generator=g))
            seqs.append((p, torch.randint(3, vocab, (n,), generator=g).tolist()))
    return seqs


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gpt2"])
def test_hidden_states_and_gradients_equal_the_padded_forwards(
    arch: str, tiny_lm: Callable[[str], LoadedModel]
) -> None:
    lm = tiny_lm(arch)
    body = head_path(lm.model).body
    pad = lm.tokenizer.pad_token_id
    assert serves(body, _answer_hidden, pad)
    seqs = _batch(lm.model.config.vocab_size)
    assert shareable(seqs)
    params = [p for p in body.parameters() if p.is_floating_point()]
    grads = []
    for forward in (shared_prompt_hidden, _answer_hidden):
        with torch.enable_grad():
            for p in params:
                p.requires_grad_(True)
                p.grad = None
            hidden = forward(body, seqs, pad, torch.device("cpu"))  # (N, D)
            weights = torch.linspace(-1, 1, hidden.numel()).view_as(hidden)
            (hidden * weights).sum().backward()
        grads.append((hidden.detach(), [p.grad.clone() for p in params if p.grad is not None]))
        for p in params:
            p.requires_grad_(False)
            p.grad = None
    (ours, ours_grads), (theirs, theirs_grads) = grads
    assert ours.shape == (sum(len(a) for _, a in seqs), theirs.shape[1])
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)
    assert len(ours_grads) == len(theirs_grads) > 0
    for a, b in zip(ours_grads, theirs_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5 * float(b.abs().max()) + 1e-8)


def test_the_logits_of_the_training_forward_equal_the_padded_ones(
    tiny_lm: Callable[[str], LoadedModel],
) -> None:
    lm = tiny_lm("llama")
    seqs = _batch(lm.model.config.vocab_size, seed=1)
    pad = lm.tokenizer.pad_token_id
    with torch.no_grad():
        _, shared = answer_logits(lm.model, seqs, pad, share_prompts=True)
        _, padded = answer_logits(lm.model, seqs, pad)
    torch.testing.assert_close(shared, padded, rtol=1e-5, atol=1e-5)


def test_batches_with_nothing_to_share_are_not_shareable() -> None:
    assert not shareable([([1, 2], [3, 4]), ([1, 2, 5], [3, 4])])  # prompts of two lengths
    assert not shareable([([1, 2], [3, 4]), ([5, 6], [3, 4])])  # no prompt repeated
    assert not shareable([([1, 2], [3]), ([1, 2], [4])])  # no answer token to continue
    assert not shareable([([1, 2], [3, 4]), ([1, 2], [])])  # an empty answer
    assert shareable([([1, 2], [3, 4]), ([1, 2], [5])])


def test_a_model_in_training_mode_is_not_served(tiny_model_dir: Callable) -> None:
    lm = load_model(tiny_model_dir("llama"), name="tiny-train", device="cpu", dtype="float32")
    body = head_path(lm.model).body
    body.train()
    assert not serves(body, _answer_hidden, lm.tokenizer.pad_token_id)


def test_a_body_whose_cached_path_differs_is_not_served(
    tiny_lm: Callable[[str], LoadedModel],
) -> None:
    """The probe compares with the padded forward it is given: a forward that disagrees (here
    one that shifts every hidden state) makes it refuse the shared path."""
    lm = tiny_lm("qwen2")
    body = head_path(lm.model).body

    def shifted(*args: object) -> torch.Tensor:
        return _answer_hidden(*args) + 1.0  # type: ignore[arg-type]

    shared_prompts._VERDICTS.pop(body, None)
    try:
        assert not serves(body, shifted, lm.tokenizer.pad_token_id)
    finally:
        shared_prompts._VERDICTS.pop(body, None)
