"""Our KV-cached sampler: the same answers as ``generate`` where the draws are the same, the
statistics of the logits each token was drawn from, finished rows dropped, and the fallback."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch.testing import assert_close
from transformers import DynamicCache

from gmts_core.model.kv_cache import PreallocatedLayer, keep_rows, repeat_rows, sampling_cache
from gmts_core.model.loading import LoadedModel, load_model
from gmts_core.sampling import sampler_probe
from gmts_core.sampling.answers import (
    SamplingConfig,
    StatsSpec,
    generate_answers,
    hf_generate_answers,
)
from gmts_core.sampling.kv_sampler import DecodeRequest, decode, processors
from gmts_core.sampling.sampler_probe import probe_difference, unserved_reason
from gmts_core.stats.forward import answer_token_stats


@pytest.fixture(scope="module")
def eos_prone(tiny_model_dir: Callable[[str], Path]) -> LoadedModel:
    """A private tiny Llama whose LM head favours EOS (p ~ 0.2 per step): rows finish at
    different steps, so the batch shrinks several times."""
    lm = load_model(tiny_model_dir("llama"), device="cpu", dtype="float32")
    old = lm.model.lm_head
    head = torch.nn.Linear(old.in_features, old.out_features, bias=True)
    with torch.no_grad():
        head.weight.copy_(old.weight)
        head.bias.zero_()
        head.bias[lm.tokenizer.eos_token_id] = math.log(0.2 / 0.8 * (old.out_features - 1))
    head.requires_grad_(False)
    lm.model.lm_head = head
    return lm


def _prompts(lm: LoadedModel) -> list[list[int]]:
    a = list(lm.tokenizer("Q: 47+38=?")["input_ids"])
    return [a, [a[0], *reversed(a[1:])]]  # two prompts of one length


def test_preallocated_layer_holds_what_a_dynamic_cache_holds() -> None:
    ours, dynamic = PreallocatedLayer(max_length=6), DynamicCache()
    torch.manual_seed(0)
    for n in (3, 1, 1):
        k, v = torch.randn(2, 4, n, 8), torch.randn(2, 4, n, 8)
        got = ours.update(k, v)
        want = dynamic.update(k, v, 0)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert ours.get_seq_length() == 5
    ours.batch_repeat_interleave(2)
    ours.batch_select_indices(torch.tensor([0, 3]))
    ref = dynamic.layers[0].keys.repeat_interleave(2, 0)[[0, 3]]
    assert torch.equal(ours.keys, ref)
    with pytest.raises(ValueError, match="holds 6 positions"):
        ours.update(torch.randn(2, 4, 2, 8), torch.randn(2, 4, 2, 8))


def test_cache_of_a_plain_model_is_preallocated(tiny_llama: LoadedModel) -> None:
    cache = sampling_cache(tiny_llama.model.config, 10)
    assert cache.layers and all(isinstance(layer, PreallocatedLayer) for layer in cache.layers)
    repeat_rows(cache, 2)  # before any write: a no-op
    keep_rows(cache, torch.tensor([0]))


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gpt2"])
def test_the_probe_serves_the_tiny_families(
    arch: str, tiny_lm: Callable[[str], LoadedModel]
) -> None:
    lm = tiny_lm(arch)
    assert unserved_reason(lm.model) is None
    diff, size = probe_difference(lm.model)
    assert diff <= 1e-4 * (1 + size)


def test_greedy_answers_equal_generates_while_rows_finish(eos_prone: LoadedModel) -> None:
    """Greedy decoding has no draws: every row, finished early or cut at the limit, must be
    generate's, token for token, while the batch shrinks under it."""
    lm = eos_prone
    cfg = SamplingConfig(num_samples=1, temperature=0, max_new_tokens=12)
    prompts = _prompts(lm)
    ours = generate_answers(lm.model, lm.tokenizer, prompts, cfg)
    theirs = hf_generate_answers(lm.model, lm.tokenizer, prompts, cfg)
    assert [a.token_ids for a in ours] == [a.token_ids for a in theirs]


def test_a_row_is_generates_draw_for_draw(tiny_llama: LoadedModel) -> None:
    """One row and no EOS: the same multinomial draws on the same probabilities, so the same
    tokens as ``generate`` for the same seed (temperature and top-p applied as it does)."""
    lm = tiny_llama
    lm.model.generation_config.min_new_tokens = 10  # no EOS before the limit, in both
    try:
        for cfg in (
            SamplingConfig(num_samples=1, temperature=0.7, top_p=0.9, max_new_tokens=10, seed=5),
            SamplingConfig(num_samples=1, temperature=1.3, top_k=7, max_new_tokens=10, seed=6),
        ):
            prompt = _prompts(lm)[:1]
            ours = generate_answers(lm.model, lm.tokenizer, prompt, cfg)
            theirs = hf_generate_answers(lm.model, lm.tokenizer, prompt, cfg)
            assert [a.token_ids for a in ours] == [a.token_ids for a in theirs]
            assert len(ours[0].token_ids) == 10
    finally:
        lm.model.generation_config.min_new_tokens = None


def test_statistics_are_those_of_the_forward_while_the_batch_shrinks(
    eos_prone: LoadedModel,
) -> None:
    lm = eos_prone
    cfg = SamplingConfig(num_samples=6, temperature=1.0, max_new_tokens=10, seed=2)
    answers = generate_answers(lm.model, lm.tokenizer, _prompts(lm), cfg, StatsSpec(0.8, top_k=3))
    lengths = {len(a.token_ids) for a in answers}
    assert len(lengths) >= 3 and any(a.finished for a in answers)  # rows ended at many steps
    seqs = [(_prompts(lm)[i // 6], a.token_ids) for i, a in enumerate(answers)]
    forward = answer_token_stats(lm.model, seqs, lm.tokenizer.pad_token_id, 0.8, 3)
    for got, want in zip(answers, forward, strict=True):
        assert got.stats is not None
        for name in ("logprob", "entropy", "grad_norm"):
            assert_close(
                getattr(got.stats.stats, name), getattr(want.stats, name), atol=1e-5, rtol=1e-4
            )
        assert torch.equal(got.stats.stats.top_ids, want.stats.top_ids)
        assert_close(got.stats.hidden_norm, want.hidden_norm, atol=1e-5, rtol=1e-4)


def test_processors_follow_generates_order(tiny_llama: LoadedModel) -> None:
    gc = tiny_llama.model.generation_config
    req = DecodeRequest(num_samples=1, max_new_tokens=4, temperature=0.5, top_p=0.9, top_k=5)
    names = [type(p).__name__ for p in processors(gc, req, 3, torch.device("cpu"))]
    assert names == ["TemperatureLogitsWarper", "TopKLogitsWarper", "TopPLogitsWarper"]
    greedy = DecodeRequest(num_samples=1, max_new_tokens=4, temperature=0)
    assert len(processors(gc, greedy, 3, torch.device("cpu"))) == 0
    plain = DecodeRequest(num_samples=1, max_new_tokens=4, temperature=1.0)
    assert len(processors(gc, plain, 3, torch.device("cpu"))) == 0


def test_unsupported_generation_settings_fall_back_to_generate(
    tiny_llama: LoadedModel, caplog: pytest.LogCaptureFixture
) -> None:
    lm = tiny_llama
    cfg = SamplingConfig(num_samples=2, max_new_tokens=5, seed=1)
    lm.model.generation_config.repetition_penalty = 1.3
    try:
        assert "repetition_penalty" in str(unserved_reason(lm.model))
        with caplog.at_level(logging.WARNING, logger="gmts_core.sampling.kv_sampler"):
            ours = generate_answers(lm.model, lm.tokenizer, _prompts(lm)[:1], cfg)
        theirs = hf_generate_answers(lm.model, lm.tokenizer, _prompts(lm)[:1], cfg)
        assert [a.token_ids for a in ours] == [a.token_ids for a in theirs]
        assert "sampled with generate()" in caplog.text
    finally:
        lm.model.generation_config.repetition_penalty = 1.0
    assert unserved_reason(lm.model) is None


def test_a_model_whose_probe_fails_falls_back(
    tiny_lm: Callable[[str], LoadedModel], monkeypatch: pytest.MonkeyPatch
) -> None:
    lm = load_model(tiny_lm("gpt2").source, device="cpu", dtype="float32")  # a private copy
    monkeypatch.setattr(sampler_probe, "probe_difference", lambda model: (1.0, 1.0))
    assert "differ" in str(unserved_reason(lm.model))
    answers = generate_answers(
        lm.model, lm.tokenizer, [[5, 6, 7]], SamplingConfig(2, max_new_tokens=3)
    )
    assert len(answers) == 2


def test_a_verdict_holds_for_the_path_it_probed(
    tiny_lm: Callable[[str], LoadedModel], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The probe's verdict is kept per model and path: the native kernels switched (GMTS_NATIVE,
    read on every call) or the model cast to another dtype is probed again, each verdict kept
    for its own path."""
    lm = load_model(tiny_lm("llama").source, device="cpu", dtype="float32")  # a private copy
    probed: list[tuple[torch.dtype, bool]] = []

    def counted(model: object) -> tuple[float, float]:
        probed.append((next(lm.model.parameters()).dtype, sampler_probe.native.enabled()))
        return 0.0, 1.0

    monkeypatch.setattr(sampler_probe, "probe_difference", counted)
    monkeypatch.setenv("GMTS_NATIVE", "1")
    assert unserved_reason(lm.model) is None
    assert unserved_reason(lm.model) is None  # kept
    monkeypatch.setenv("GMTS_NATIVE", "0")
    assert unserved_reason(lm.model) is None
    lm.model.to(torch.float64)
    assert unserved_reason(lm.model) is None
    monkeypatch.setenv("GMTS_NATIVE", "1")
    lm.model.to(torch.float32)
    assert unserved_reason(lm.model) is None  # the first path's verdict, kept
    assert probed == [(torch.float32, True), (torch.float32, False), (torch.float64, False)]


def test_decode_rows_are_prompt_by_prompt(tiny_llama: LoadedModel) -> None:
    lm = tiny_llama
    req = DecodeRequest(num_samples=3, max_new_tokens=4, temperature=0)
    rows = decode(lm.model, _prompts(lm), req, set())
    assert len(rows) == 6 and all(len(r.token_ids) == 4 for r in rows)
    assert rows[0].token_ids == rows[1].token_ids == rows[2].token_ids  # greedy: equal per prompt
