"""sample_groups: compatible groups share one generate call; a lone group is sampled as before."""

from __future__ import annotations

import copy
import dataclasses
import threading
from collections.abc import Callable

import pytest
import torch

from gmts_core.analysis.analyze import AnalysisConfig, GroupInput, analyze
from gmts_core.model.loading import LoadedModel
from gmts_core.sampling import answers as answers_module
from gmts_core.sampling import sampler_probe
from gmts_core.sampling.answers import (
    SamplingConfig,
    StatsSpec,
    batch_seed,
    generate_answers,
    sample_answers,
    sample_groups,
)
from gmts_core.sampling.sampler_probe import serves_mixed_lengths, unserved_reason
from gmts_core.stats.forward import answer_token_stats

CONFIG = SamplingConfig(num_samples=3, temperature=1.0, max_new_tokens=6, seed=5)


def _ids(lm: LoadedModel, text: str) -> list[int]:
    return list(lm.tokenizer(text, add_special_tokens=True)["input_ids"])


def _tokens(answers: list) -> list[list[int]]:  # noqa: ANN001
    return [a.token_ids for a in answers]


def test_a_lone_group_gets_what_sample_answers_gives(tiny_llama: LoadedModel) -> None:
    prompt = _ids(tiny_llama, "Q: 1+2=?")
    (alone,) = sample_groups(tiny_llama.model, tiny_llama.tokenizer, [prompt], [CONFIG])
    direct = sample_answers(tiny_llama.model, tiny_llama.tokenizer, prompt, CONFIG)
    assert _tokens(alone) == _tokens(direct)


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_batched_groups_are_deterministic_and_keep_their_order(
    arch: str, tiny_lm: Callable[[str], LoadedModel]
) -> None:
    """Groups that differ at most in the seed share a call seeded with batch_seed of their
    seeds. A prompt of another length shares it where the fused step serves the model (llama:
    right-aligned, serves_mixed_lengths), and has a call of its own, with its own seed,
    elsewhere (gpt2: learned absolute positions)."""
    lm = tiny_lm(arch)
    a, b = _ids(lm, "Q: 1+2=?"), _ids(lm, "Q: 7+5=?")
    assert len(a) == len(b)  # same length: one call
    longer = _ids(lm, "Q: 12+345=?")
    assert len(longer) != len(a)
    prompts = [a, longer, b]
    configs = [CONFIG, dataclasses.replace(CONFIG, seed=9), dataclasses.replace(CONFIG, seed=6)]
    first = sample_groups(lm.model, lm.tokenizer, prompts, configs)
    again = sample_groups(lm.model, lm.tokenizer, prompts, configs)
    assert [_tokens(g) for g in first] == [_tokens(g) for g in again]
    assert [len(g) for g in first] == [3, 3, 3]
    mixed = serves_mixed_lengths(lm.model)
    assert mixed == (arch == "llama")
    if mixed:  # one call for all three, prompt by prompt
        call = dataclasses.replace(CONFIG, seed=batch_seed([5, 9, 6]))
        rows = generate_answers(lm.model, lm.tokenizer, prompts, call)
        assert [_tokens(g) for g in first] == [_tokens(rows[i * 3 : i * 3 + 3]) for i in range(3)]
    else:  # the longer prompt is alone in its call, so it keeps its own seed
        (alone,) = sample_groups(lm.model, lm.tokenizer, [longer], [configs[1]])
        assert _tokens(first[1]) == _tokens(alone)
        with pytest.raises(ValueError, match="different lengths"):  # never padded silently
            generate_answers(lm.model, lm.tokenizer, prompts, CONFIG)
    # different seeds of the batched groups give a different batch
    other = [CONFIG, configs[1], dataclasses.replace(CONFIG, seed=7)]
    changed = sample_groups(lm.model, lm.tokenizer, prompts, other)
    assert batch_seed([5, 6]) != batch_seed([5, 7])
    assert [_tokens(g) for g in changed] != [_tokens(g) for g in first]


@pytest.mark.usefixtures("native_path")  # the fused step's attention by the C loop and by torch
@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_prompts_of_different_lengths_in_one_call_are_sampled_as_alone(
    arch: str, tiny_lm: Callable[[str], LoadedModel]
) -> None:
    """Prompts of 4 lengths in one call (right-aligned in the cache, each row at its own
    positions): greedy answers equal each prompt's answers sampled alone, and the statistics
    collected while sampling equal a forward pass over each unpadded prompt + answer (float32
    rounding), through rows repeated, finished rows dropped and 12 steps."""
    lm = tiny_lm(arch)
    assert serves_mixed_lengths(lm.model)
    vocab = lm.model.config.vocab_size
    gen = torch.Generator().manual_seed(3)
    prompts = [torch.randint(3, vocab, (n,), generator=gen).tolist() for n in (6, 2, 9, 6, 4)]
    greedy = SamplingConfig(num_samples=2, temperature=0.0, max_new_tokens=12, seed=0)
    spec = StatsSpec(temperature=1.0, top_k=3)
    together = generate_answers(lm.model, lm.tokenizer, prompts, greedy, spec)
    for i, prompt in enumerate(prompts):
        alone = generate_answers(lm.model, lm.tokenizer, [prompt], greedy)
        assert _tokens(together[2 * i : 2 * i + 2]) == _tokens(alone)
    pad = lm.tokenizer.pad_token_id or 0
    seqs = [(prompts[i // 2], a.token_ids) for i, a in enumerate(together)]
    forward = answer_token_stats(lm.model, seqs, pad, 1.0, 3, 128)
    for ours, theirs in zip(together, forward, strict=True):
        assert ours.stats is not None
        for name in ("logprob", "entropy", "grad_norm", "sum_sq_prob", "top_logprobs"):
            torch.testing.assert_close(
                getattr(ours.stats.stats, name), getattr(theirs.stats, name), rtol=1e-4, atol=1e-5
            )
        assert torch.equal(ours.stats.stats.top_ids, theirs.stats.top_ids)
        torch.testing.assert_close(ours.stats.hidden_norm, theirs.hidden_norm, rtol=1e-4, atol=1e-5)


def test_analyze_mixes_given_and_sampled_groups(tiny_llama: LoadedModel) -> None:
    groups = [
        GroupInput("Q: 1+2=?", sampling=CONFIG, rewards=[1, 0, 0]),
        GroupInput("Q: 3+4=?", answers=[" 7", " 8"], rewards=[1, 0]),
        GroupInput("Q: 5+6=?", sampling=dataclasses.replace(CONFIG, seed=8), rewards=[0, 1, 0]),
    ]
    result = analyze(tiny_llama, groups, AnalysisConfig(methods=("gmts",), top_alternatives=0))
    assert [len(g.answers) for g in result.groups] == [3, 2, 3]
    assert [a.text for a in result.groups[1].answers] == [" 7", " 8"]
    assert all(1 <= a.length <= 6 for g in (0, 2) for a in result.groups[g].answers)


def test_bad_given_answers_fail_before_sampling(tiny_llama: LoadedModel) -> None:
    calls = []
    handle = tiny_llama.model.register_forward_pre_hook(lambda *_: calls.append(1))
    try:
        groups = [
            GroupInput("Q: 1+2=?", sampling=CONFIG, rewards=[1, 0, 0]),
            GroupInput("Q: 3+4=?", answers=[""], rewards=[1]),
        ]
        with pytest.raises(ValueError, match="at least one token"):
            analyze(tiny_llama, groups)
    finally:
        handle.remove()
    assert calls == []


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gpt2"])
def test_statistics_collected_while_sampling_equal_a_forward_pass(
    arch: str, tiny_lm: Callable[[str], LoadedModel]
) -> None:
    """A sampled answer's statistics come from the logits it was sampled from; they equal
    those of a separate forward over prompt + answer (to float rounding), at the analysis
    temperature (not the sampling one), with top-k alternatives and hidden-state norms."""
    lm = tiny_lm(arch)
    prompt = _ids(lm, "Q: 1+2=?")
    spec = StatsSpec(temperature=0.7, top_k=3, chunk_size=2)
    configs = [CONFIG, dataclasses.replace(CONFIG, seed=6)]
    groups = sample_groups(lm.model, lm.tokenizer, [prompt, prompt], configs, spec)
    plain = sample_groups(lm.model, lm.tokenizer, [prompt, prompt], configs)
    assert [_tokens(g) for g in groups] == [_tokens(g) for g in plain]  # same tokens
    answers = [a for g in groups for a in g]
    seqs = [(prompt, a.token_ids) for a in answers]
    want = answer_token_stats(lm.model, seqs, lm.tokenizer.pad_token_id, 0.7, top_k=3)
    for answer, expected in zip(answers, want, strict=True):
        got = answer.stats
        assert got is not None and got.stats.logprob.shape == (len(answer.token_ids),)
        for name in ("logprob", "entropy", "grad_norm", "top_logprobs"):
            torch.testing.assert_close(
                getattr(got.stats, name), getattr(expected.stats, name), rtol=1e-4, atol=1e-5
            )
        assert torch.equal(got.stats.top_ids, expected.stats.top_ids)
        torch.testing.assert_close(got.hidden_norm, expected.hidden_norm, rtol=1e-4, atol=1e-5)


def test_collection_records_only_its_own_thread(tiny_llama: LoadedModel) -> None:
    """Another thread running the same model during a collecting generate leaves no trace."""
    prompt = _ids(tiny_llama, "Q: 1+2=?")
    spec = StatsSpec(temperature=1.0)
    other = torch.tensor([prompt * 3])
    stop = threading.Event()

    def busy() -> None:
        with torch.no_grad():
            while not stop.is_set():
                tiny_llama.model(input_ids=other)

    thread = threading.Thread(target=busy)
    thread.start()
    try:
        (group,) = sample_groups(tiny_llama.model, tiny_llama.tokenizer, [prompt], [CONFIG], spec)
    finally:
        stop.set()
        thread.join()
    seqs = [(prompt, a.token_ids) for a in group]
    want = answer_token_stats(tiny_llama.model, seqs, tiny_llama.tokenizer.pad_token_id, 1.0)
    for answer, expected in zip(group, want, strict=True):
        assert answer.stats is not None
        torch.testing.assert_close(answer.stats.stats.logprob, expected.stats.logprob)


def test_a_float64_llama_is_served_with_mixed_lengths(
    tiny_lm: Callable[[str], LoadedModel],
) -> None:
    """A float64 Llama (the fused step's torch path: the native kernels are float32-only)
    passes the sampler's probe, so it is sampled by the KV-cached sampler with prompts of
    different lengths in one call: greedy answers equal each prompt's alone, statistics a
    forward's."""
    lm = tiny_lm("llama")
    model = copy.deepcopy(lm.model).double()
    eager = copy.deepcopy(model)
    eager.config._attn_implementation = "eager"  # its softmax in float32: the fused step's too
    assert unserved_reason(eager) is None
    assert unserved_reason(model) is None
    assert serves_mixed_lengths(model)
    vocab = model.config.vocab_size
    gen = torch.Generator().manual_seed(4)
    prompts = [torch.randint(3, vocab, (n,), generator=gen).tolist() for n in (5, 1, 8)]
    greedy = SamplingConfig(num_samples=2, temperature=0.0, max_new_tokens=6, seed=0)
    spec = StatsSpec(temperature=1.0)
    together = generate_answers(model, lm.tokenizer, prompts, greedy, spec)
    for i, prompt in enumerate(prompts):
        alone = generate_answers(model, lm.tokenizer, [prompt], greedy)
        assert _tokens(together[2 * i : 2 * i + 2]) == _tokens(alone)
    seqs = [(prompts[i // 2], a.token_ids) for i, a in enumerate(together)]
    forward = answer_token_stats(model, seqs, lm.tokenizer.pad_token_id or 0, 1.0)
    for ours, theirs in zip(together, forward, strict=True):
        assert ours.stats is not None
        torch.testing.assert_close(
            ours.stats.stats.logprob, theirs.stats.logprob, rtol=1e-6, atol=1e-7
        )


def test_a_failed_mixed_length_probe_costs_only_the_mixing(
    tiny_lm: Callable[[str], LoadedModel], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mixed-length probe has a verdict of its own: a model that fails it is still sampled
    by the KV-cached sampler, each prompt length in a call of its own (its own seed)."""
    lm = tiny_lm("llama")
    model = copy.deepcopy(lm.model)  # fresh verdicts
    monkeypatch.setattr(sampler_probe, "_probe_mixed_lengths", lambda config, path: (1.0, 1.0))
    assert unserved_reason(model) is None
    assert not serves_mixed_lengths(model)
    short, longer = _ids(lm, "Q: 1+2=?"), _ids(lm, "Q: 12+345=?")
    assert len(short) != len(longer)
    configs = [CONFIG, dataclasses.replace(CONFIG, seed=9)]
    both = sample_groups(model, lm.tokenizer, [short, longer], configs)
    for prompt, config, group in zip((short, longer), configs, both, strict=True):
        assert _tokens(group) == _tokens(sample_answers(model, lm.tokenizer, prompt, config))


def test_a_long_prompt_does_not_pad_every_row_of_a_mixed_call(
    tiny_lm: Callable[[str], LoadedModel], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Prompts of different lengths share a call only while its cache (every row as long as
    the longest prompt + max_new_tokens) holds at most MAX_PADDING_FACTOR times their own
    slots: one long prompt among short ones does not give every row its length."""
    lm = tiny_lm("llama")
    assert serves_mixed_lengths(lm.model)
    calls: list[list[int]] = []
    real = answers_module.generate_answers

    def spy(model, tokenizer, prompts, config, stats=None):  # noqa: ANN001, ANN202
        calls.append([len(p) for p in prompts])
        return real(model, tokenizer, prompts, config, stats)

    monkeypatch.setattr(answers_module, "generate_answers", spy)
    gen = torch.Generator().manual_seed(5)
    vocab = lm.model.config.vocab_size
    prompts = [torch.randint(3, vocab, (n,), generator=gen).tolist() for n in (3, 60, 3, 4, 3)]
    config = SamplingConfig(num_samples=2, temperature=1.0, max_new_tokens=4, seed=1)
    groups = sample_groups(lm.model, lm.tokenizer, prompts, [config] * len(prompts))
    assert [len(g) for g in groups] == [2] * 5
    assert sorted(n for call in calls for n in call) == sorted(len(p) for p in prompts)
    assert any(len(set(call)) > 1 for call in calls)  # still mixed where it is cheap
    for call in calls:
        padded = len(call) * (max(call) + 4)
        assert padded <= answers_module.MAX_PADDING_FACTOR * sum(n + 4 for n in call)
