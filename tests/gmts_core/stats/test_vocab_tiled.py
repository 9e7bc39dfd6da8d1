"""Vocabulary-tiled statistics from hidden states against the naive float64 formulas, and the
given-answer analysis path that uses them against the chunked one."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from gmts_core.model.loading import load_model
from gmts_core.stats.forward import _plain_linear, answer_token_stats
from gmts_core.stats.metrics import token_stats
from gmts_core.stats.vocab_tiled import tile_columns, token_stats_from_hidden
from tests.gmts_core.stats.test_metrics import naive_stats
from tests.tiny_models import save_tiny_model


@pytest.mark.parametrize("tau", [1.0, 0.7, 1.6])
@pytest.mark.parametrize("chunk", [1, 3, 64])  # tiles narrower than, not dividing, the vocabulary
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("v", [1500, 20000])  # 20000: wide tiles, top-k by block maxima
def test_tiled_statistics_match_float64_formulas(
    tau: float, chunk: int, bias: bool, v: int
) -> None:
    gen = torch.Generator().manual_seed(0)
    n, d = 40, 16
    hidden = torch.randn(n, d, generator=gen)
    weight = torch.randn(v, d, generator=gen)
    hidden[::4] *= 6.0  # sharp rows: confident tokens, where g needs the split-off target
    b = torch.randn(v, generator=gen) if bias else None
    z = hidden.double() @ weight.double().t() + (0 if b is None else b.double())
    targets = torch.randint(0, v, (n,), generator=gen)
    targets[::4] = z[::4].argmax(-1)
    assert tile_columns(n, v, chunk) < v or chunk == 64  # several tiles, online rescaling used
    got = token_stats_from_hidden(hidden, weight, b, targets, tau, top_k=4, chunk_size=chunk)
    ref = naive_stats(z, targets, tau)
    for name in ("logprob", "entropy", "sum_sq_prob", "grad_norm"):
        assert_close(getattr(got, name).double(), ref[name], rtol=2e-5, atol=2e-5)
    top = ref["logp"].topk(4, dim=-1)
    assert torch.equal(got.top_ids, top.indices)
    assert_close(got.top_logprobs.double(), top.values, rtol=2e-5, atol=2e-5)


def test_tiled_bfloat16_head_is_float32_accurate() -> None:
    gen = torch.Generator().manual_seed(1)
    hidden = torch.randn(9, 8, generator=gen).bfloat16()
    weight = torch.randn(700, 8, generator=gen).bfloat16()
    targets = torch.randint(0, 700, (9,), generator=gen)
    got = token_stats_from_hidden(hidden, weight, None, targets, 1.0, 0, chunk_size=2)
    ref = token_stats((hidden @ weight.t()), targets)  # the chunked statistics of bf16 logits
    for name in ("logprob", "entropy", "sum_sq_prob", "grad_norm"):
        assert_close(getattr(got, name), getattr(ref, name), rtol=1e-5, atol=1e-5)


def test_given_answers_tiled_path_equals_chunked_path(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """A plain linear head takes the tiled path; the same head behind a forward hook (which
    the hand-written matmul would skip) takes the chunked one; both give the same numbers."""
    lm = load_model(save_tiny_model(tmp_path_factory.mktemp("tiled") / "llama"), device="cpu")
    seqs = [([1, 5, 7], [9, 4, 4, 2]), ([1, 5], [3]), ([1, 8, 8, 8], [6, 2, 9])]
    pad = lm.tokenizer.pad_token_id
    assert _plain_linear(lm.model.get_output_embeddings())
    tiled = answer_token_stats(lm.model, seqs, pad, 0.9, 3, chunk_size=2)
    handle = lm.model.get_output_embeddings().register_forward_hook(lambda *_: None)
    try:
        chunked = answer_token_stats(lm.model, seqs, pad, 0.9, 3, chunk_size=2)
    finally:
        handle.remove()
    for a, b in zip(tiled, chunked, strict=True):
        for name in ("logprob", "entropy", "sum_sq_prob", "grad_norm", "top_logprobs"):
            assert_close(getattr(a.stats, name), getattr(b.stats, name), rtol=1e-5, atol=1e-5)
        assert torch.equal(a.stats.top_ids, b.stats.top_ids)
        assert_close(a.hidden_norm, b.hidden_norm)
