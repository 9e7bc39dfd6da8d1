"""Sampling past a long-RoPE model's original window (#39 item 6): transformers' cached decoding
of a ``longrope`` model differs from its own full forward once a sequence passes
``original_max_position_embeddings``; the statistics reported for such answers are those of a
fresh full forward, on both samplers. A ``dynamic`` RoPE is refused past its window."""

from __future__ import annotations

import logging
import weakref
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch.testing import assert_close
from transformers import LlamaConfig, LlamaForCausalLM, Phi3Config, Phi3ForCausalLM

from gmts_core import reference
from gmts_core.config import RLConfig
from gmts_core.errors import InvalidInputError
from gmts_core.grpo.forward import answer_statistics, micro_batches
from gmts_core.grpo.policy import PolicySettings, TrainablePolicy
from gmts_core.grpo.records import TrainBatch
from gmts_core.grpo.rollout import RLPrompt
from gmts_core.grpo.step import grpo_step
from gmts_core.grpo.update import make_optimizer, policy_update
from gmts_core.model.loading import LoadedModel
from gmts_core.model.rope_window import RopeWindow, longrope_window, rope_window
from gmts_core.sampling import answers as sampling
from gmts_core.sampling.answers import SamplingConfig, StatsSpec, generate_answers, sample_groups
from gmts_core.sampling.fused_decode import FusedStep
from gmts_core.sampling.kv_sampler import DecodeRequest, decode
from gmts_core.sampling.sampler_probe import unserved_reason
from gmts_core.stats import shared_prompts
from gmts_core.stats.forward import answer_token_stats
from tests.tiny_models import sentencepiece_bpe_tokenizer

WINDOW = 16  # original_max_position_embeddings
LONGROPE = {
    "rope_type": "longrope",
    "rope_theta": 10000.0,
    "short_factor": [1.0, 1.0, 1.0, 1.0],
    "long_factor": [4.0, 8.0, 16.0, 32.0],
    "original_max_position_embeddings": WINDOW,
}
SHAPE = {
    "vocab_size": 96,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 64,
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": None,  # no EOS: every answer runs to max_new_tokens
}
TOKENIZER = SimpleNamespace(pad_token_id=0, eos_token_id=None)
TAU, TOP_K = 0.8, 3  # the statistics' temperature and alternatives


def _sharpen(model: Any) -> Any:
    """Random weights scaled up, so that the logits (and the RoPE's effect on them) are far
    from uniform; eval mode, float32."""
    torch.manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:  # the matrices; the norms' weights stay 1
                p.normal_(0.0, 0.3)
    model.generation_config.eos_token_id = None
    return model.eval()


def _phi3_config() -> Phi3Config:
    """Phi-3 takes the window from its own ``original_max_position_embeddings`` (default 4096)
    over the RoPE parameters'."""
    return Phi3Config(**SHAPE, original_max_position_embeddings=WINDOW, rope_parameters=LONGROPE)


@pytest.fixture(scope="module")
def phi3() -> Any:
    return _sharpen(Phi3ForCausalLM(_phi3_config()))


@pytest.fixture(scope="module")
def llama_longrope() -> Any:
    """A Llama layout (the fused decoding step's) with the same longrope RoPE."""
    return _sharpen(LlamaForCausalLM(LlamaConfig(**SHAPE, rope_parameters=dict(LONGROPE))))


def _fresh(model: Any, prompt: list[int], answer: list[int]) -> tuple[torch.Tensor, ...]:
    """The answer's log pi, H, g, top ids and top log pi from one fresh full forward of
    prompt + answer alone (model(...).logits / tau), in float64."""
    with torch.no_grad():
        logits = model(torch.tensor([prompt + answer])).logits[0]  # (P + L, V)
    z = logits[len(prompt) - 1 : -1]  # (L, V): the positions that predict the answer
    targets = torch.tensor(answer)
    return (
        *reference.token_statistics(z, targets, TAU),
        *reference.top_alternatives(z, TOP_K, TAU),
    )


def _assert_fresh(model: Any, prompt: list[int], answer: list[int], stats: Any) -> None:
    logprob, entropy, g, ids, top_lp = _fresh(model, prompt, answer)
    got = stats.stats
    assert_close(got.logprob.double(), logprob, rtol=1e-5, atol=1e-5)
    assert_close(got.entropy.double(), entropy, rtol=1e-5, atol=1e-5)
    assert_close(got.grad_norm.double(), g, rtol=1e-5, atol=1e-5)
    assert torch.equal(got.top_ids, ids)
    assert_close(got.top_logprobs.double(), top_lp, rtol=1e-5, atol=1e-5)


def _sample(model: Any, prompt: list[int], new: int, use_generate: bool) -> list[Any]:
    config = SamplingConfig(num_samples=3, max_new_tokens=new, seed=5)
    spec = StatsSpec(TAU, TOP_K)
    return generate_answers(model, TOKENIZER, [prompt], config, spec, use_generate=use_generate)


def test_cached_decoding_differs_from_the_full_forward_past_the_window(phi3: Any) -> None:
    """The premise, with the statistics as cached decoding gives them (no re-scoring): equal
    within the window, far apart once prompt + answer passes it, though the probe passes."""
    assert unserved_reason(phi3) is None  # the probe's 10 tokens are within the window
    prompt = [5, 6, 7, 8, 9, 10]
    for new, apart in ((WINDOW - len(prompt), False), (20, True)):
        request = DecodeRequest(3, new, 1.0, stats_temperature=TAU, stats_top_k=TOP_K)
        torch.manual_seed(0)
        for row in decode(phi3, [prompt], request, set()):
            want = _fresh(phi3, prompt, row.token_ids)[0]
            gap = float((row.stats.stats.logprob.double() - want).abs().max())
            assert (gap > 0.05) if apart else (gap < 1e-5), gap


@pytest.mark.parametrize("use_generate", [False, True], ids=["kv_sampler", "generate"])
@pytest.mark.parametrize("prompt_length", [6, WINDOW, WINDOW + 2])  # within, at, past W
def test_sampled_statistics_are_a_fresh_full_forwards(
    phi3: Any,
    use_generate: bool,
    prompt_length: int,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Answers that cross the window (prompt within it, prompt + answer past it) are
    re-scored; a prompt already past it decodes with the long factors throughout. Either way
    every reported statistic is that of a fresh forward of prompt + answer alone."""
    prompt = [(3 + 7 * i) % 96 for i in range(prompt_length)]
    monkeypatch.setattr(sampling, "_RESCORE_LOGGED", weakref.WeakSet())  # logged once per model
    with caplog.at_level(logging.INFO, logger="gmts_core.sampling.answers"):
        answers = _sample(phi3, prompt, 20, use_generate)
    said = "answers that cross it get a full forward's statistics" in caplog.text
    assert said == (prompt_length <= WINDOW)
    for a in answers:
        assert len(a.token_ids) == 20 and a.stats is not None
        _assert_fresh(phi3, prompt, a.token_ids, a.stats)


def test_answers_within_the_window_keep_the_samplers_statistics(phi3: Any) -> None:
    prompt = [5, 6, 7, 8]
    for a in _sample(phi3, prompt, WINDOW - len(prompt), use_generate=False):
        _assert_fresh(phi3, prompt, a.token_ids, a.stats)


def test_llama_layout_with_longrope_is_not_fused_and_matches(llama_longrope: Any) -> None:
    """The fused step would take every position's rotation from one call over the whole
    cache length; it is not used, nor the shared-prompt training forward."""
    assert FusedStep.of(llama_longrope.model) is None
    assert not shared_prompts.serves(llama_longrope.model, None, 0)  # decided before probing
    for prompt, new in (([5, 6, 7, 8, 9, 10], 20), ([5, 6, 7], 10)):
        for a in _sample(llama_longrope, prompt, new, use_generate=False):
            _assert_fresh(llama_longrope, prompt, a.token_ids, a.stats)


def test_given_answers_are_scored_as_their_own_forward(phi3: Any) -> None:
    """A padded forward takes the RoPE's frequencies from the padded length: micro-batches
    never mix sequences within the window and past it, so a short answer next to a long one
    gets the statistics of its own forward."""
    prompt = [5, 6, 7, 8, 9, 10]
    answers = [[11, 12, 13], [(20 + 3 * i) % 96 for i in range(18)], [14, 15]]
    got = answer_token_stats(phi3, [(prompt, a) for a in answers], 0, TAU, TOP_K)
    for a, s in zip(answers, got, strict=True):
        _assert_fresh(phi3, prompt, a, s)


def test_dynamic_rope_is_refused_past_its_window() -> None:
    config = LlamaConfig(**{**SHAPE, "max_position_embeddings": WINDOW})
    config.rope_parameters = {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0}
    model = _sharpen(LlamaForCausalLM(config))
    prompt = [5, 6, 7, 8, 9, 10]
    within = SamplingConfig(num_samples=2, max_new_tokens=WINDOW - len(prompt))
    assert len(sample_groups(model, TOKENIZER, [prompt], [within])[0]) == 2
    past = SamplingConfig(num_samples=2, max_new_tokens=WINDOW - len(prompt) + 1)
    with pytest.raises(InvalidInputError, match="16-token window of this model's 'dynamic'"):
        sample_groups(model, TOKENIZER, [prompt, prompt], [within, past])
    with pytest.raises(InvalidInputError, match="use at most 10 new tokens"):
        generate_answers(model, TOKENIZER, [prompt], past)
    # the premise: past W even a full forward of one sequence depends on earlier forwards
    seq = torch.arange(3, 3 + WINDOW + 2)[None]
    with torch.no_grad():
        first = model(seq).logits
        model(torch.arange(3, 3 + WINDOW + 8)[None])
        again = model(seq).logits
    assert float((first - again).abs().max()) > 1e-2


def test_rope_window_reads_the_configs() -> None:
    assert rope_window(_phi3_config()) == RopeWindow("longrope", WINDOW)
    su = Phi3Config(
        **{**SHAPE, "original_max_position_embeddings": 24},
        rope_scaling={"type": "su", "short_factor": [1.0] * 4, "long_factor": [2.0] * 4},
    )  # Phi-3's earlier name: read as longrope
    assert rope_window(su) == RopeWindow("longrope", 24)
    assert rope_window(LlamaConfig(**SHAPE)) is None  # default RoPE
    yarn = LlamaConfig(**SHAPE)
    yarn.rope_parameters = {"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e4}
    assert rope_window(yarn) is None  # fixed frequencies: decoding equals the forward
    per_layer = SimpleNamespace(
        max_position_embeddings=64,
        rope_parameters={
            "full_attention": {"rope_type": "default"},
            "sliding_attention": dict(LONGROPE),
        },
    )
    assert rope_window(per_layer) == RopeWindow("longrope", WINDOW)


@pytest.mark.parametrize("fused_max_tokens", [0, 100_000], ids=["collected", "training_forward"])
def test_rl_statistics_of_micro_batches_split_at_the_window(
    phi3: Any, fused_max_tokens: int
) -> None:
    """Both RL statistics paths give each answer its own forward's statistics: those collected
    while sampling share equal contexts only on one side of the window (an answer that crosses
    it was re-scored with its own full forward, whose first tokens' distributions differ from
    the cached ones of a shorter answer with the same prefix), and the training forward (its
    log-probs too) runs micro-batches split at the window (``micro_batches(..., window)``: a
    short sequence padded to a long one would take the long factors)."""
    prompt = [5, 6, 7, 8, 9, 10]
    within = _sample(phi3, prompt, WINDOW - len(prompt), use_generate=False)[:1]
    crossing = _sample(phi3, prompt, 20, use_generate=False)
    answers = within + crossing
    sequences = [(prompt, a.token_ids) for a in answers]
    parts = micro_batches(sequences, 4096, longrope_window(phi3.config))
    assert [idx for idx, _ in parts] == [[0], [1, 2, 3]]
    policy = SimpleNamespace(model=phi3, tokenizer=TOKENIZER)
    config = RLConfig(temperature=TAU, fused_max_tokens=fused_max_tokens)
    collected = [a.stats for a in answers] if fused_max_tokens == 0 else None
    stats, held = answer_statistics(policy, sequences, parts, config, collected)  # type: ignore[arg-type]
    assert (held is None) == (fused_max_tokens == 0)
    for (_, answer), s in zip(sequences, stats, strict=True):
        logprob, entropy, *_ = _fresh(phi3, prompt, answer)
        assert_close(s.stats.logprob.double(), logprob, rtol=1e-5, atol=1e-5)
        assert_close(s.stats.entropy.double(), entropy, rtol=1e-5, atol=1e-5)
    if held is not None:  # the loss's log-probs, whose graphs the first update holds
        flat = torch.cat([torch.as_tensor(_fresh(phi3, prompt, a)[0]) for _, a in sequences])
        assert_close(torch.cat(held).detach().double(), flat, rtol=1e-5, atol=1e-5)


def test_rl_step_of_a_longrope_policy_scores_each_answer_as_its_own_forward() -> None:
    tok = sentencepiece_bpe_tokenizer()
    shape = {**SHAPE, "vocab_size": len(tok), "pad_token_id": tok.pad_token_id}
    config = Phi3Config(**shape, original_max_position_embeddings=WINDOW, rope_parameters=LONGROPE)
    lm = LoadedModel("tiny-phi3", "memory", _sharpen(Phi3ForCausalLM(config)), tok)
    short, long = "Q: 1=?", "Q: 47+38+12+99=?"
    new = 6
    assert len(tok(short)["input_ids"]) + new <= WINDOW < len(tok(long)["input_ids"]) + new
    prompts = [RLPrompt(short, "[0-9]", "regex"), RLPrompt(long, "[0-9]", "regex")]
    rl = RLConfig(group_size=2, max_new_tokens=new, temperature=TAU, learning_rate=0.0)
    policy = TrainablePolicy(lm, PolicySettings(kind="full"))
    step = grpo_step(policy, make_optimizer(policy, rl), prompts, rl, seed=1)
    sequences = step.batch.sequences
    assert {len(p) + len(a) <= WINDOW for p, a in sequences} == {True, False}
    got = torch.tensor([t.logprob for _, a in step.analysis.iter_answers() for t in a.tokens])
    want = torch.cat([torch.as_tensor(_fresh(policy.model, p, a)[0]) for p, a in sequences])
    assert_close(got.double(), want.double(), rtol=1e-5, atol=1e-5)


def test_the_update_on_its_loss_rows_keeps_a_sequence_past_the_window_past_it(phi3: Any) -> None:
    """The update on its loss rows only (``measure_kl`` off: :func:`gmts_core.grpo.update.
    loss_rows`) cuts each answer after its last loss row; a prompt + answer past the window
    stays past it, so its early tokens keep the long factors of its own full forward: pi_old's
    log-probs are that forward's and the gradient is the every-row update's (``measure_kl``
    on). Cut within the window, they took the short factors (gradients apart by O(1))."""
    prompt = [5, 6, 7, 8, 9, 10]
    sequences = [(prompt, list(range(20, 34))), (prompt, list(range(40, 52)))]  # 20, 18 > W
    lengths = torch.tensor([len(a) for _, a in sequences])
    index = torch.repeat_interleave(torch.arange(len(sequences)), lengths)
    mask = torch.zeros(int(lengths.sum()), dtype=torch.bool)
    mask[[2, 14 + 3]] = True  # early tokens: prompt + answer up to them is within W
    batch = TrainBatch(
        sequences=sequences,
        advantages=torch.tensor([1.0, -1.0], dtype=torch.float64)[index],
        weights=torch.full((len(index),), 0.1, dtype=torch.float64),
        mask=mask,
        answer_index=index,
        group_index=torch.zeros_like(index),
    )
    lm = LoadedModel("tiny-phi3", "memory", phi3, TOKENIZER)
    grads, before = {}, {}
    for measure_kl in (True, False):
        policy = TrainablePolicy(lm, PolicySettings(kind="full"))
        config = RLConfig(
            temperature=TAU, measure_kl=measure_kl, fused_max_tokens=0, learning_rate=0.0
        )
        update = policy_update(policy, make_optimizer(policy, config), batch, config)
        grads[measure_kl] = [p.grad.clone() for p in policy.trainable_parameters()]
        before[measure_kl] = update.logprob_before
    computed = ~torch.isnan(before[False])
    assert torch.equal(computed, mask)  # the loss rows only
    fresh = torch.cat([torch.as_tensor(_fresh(phi3, p, a)[0]) for p, a in sequences])
    assert_close(before[False][computed].double(), fresh[computed], rtol=1e-5, atol=1e-5)
    for every_row, rows in zip(grads[True], grads[False], strict=True):
        assert_close(rows, every_row, rtol=1e-4, atol=1e-5)
