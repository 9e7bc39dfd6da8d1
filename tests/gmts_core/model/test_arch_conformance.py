"""Every causal-LM architecture of the installed transformers: the tool's numbers are the model's.

For each decoder-only architecture in ``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES``
(``in_scope_types``: encoder-decoder and multimodal ones are out of scope, listed by
``python -m tests.arch_matrix`` and in docs/concepts.md, not parametrised) that can be built as a
tiny random decoder (the others are listed with the exception in docs/concepts.md's generated
table; each test is parametrised only over the architectures it runs on):

- the load-time probe (:func:`gmts_core.model.logit_head.check_head_path`) either verifies the
  tool's LM-head path or refuses the architecture by name (never silently wrong numbers);
- for a verified one: the analysis fields (logprob, entropy, grad_norm) equal float64 values
  computed independently by autograd through ``model(...).logits / tau``; the live RL loss
  (``answer_logprobs`` + ``grpo_loss``) equals the same loss built on the model's own forward,
  value and gradient; and sampling round-trips: the log-probs ``generate`` sampled from equal
  the analysed ones, from a forward pass and as collected while sampling; and our KV-cached
  sampler (:mod:`gmts_core.sampling.kv_sampler`) either serves the architecture, drawing
  ``generate``'s tokens for the same seed from logits whose statistics equal the analysed ones, or
  falls back to ``generate`` with a stated reason (recurrent or linear-attention states, no KV
  cache).
"""

from __future__ import annotations

import functools
import re
from typing import Any

import pytest
import torch
import transformers
from torch.testing import assert_close
from transformers import StoppingCriteriaList

from gmts_core.grpo.loss import answer_logprobs, grpo_loss
from gmts_core.model import logit_head as head_module
from gmts_core.model.logit_head import UnsupportedArchitectureError, check_head_path
from gmts_core.sampling.kv_sampler import DecodeRequest, decode
from gmts_core.sampling.sampler_probe import unserved_reason
from gmts_core.stats.forward import answer_token_stats
from gmts_core.stats.sampling_stats import StatsWhileSampling
from tests.arch_matrix import (
    DOCS,
    VOCAB,
    build_tiny,
    causal_lm_types,
    docs_block,
    generate_fails,
    in_scope_types,
    outcome,
    render,
)

TAU = 0.7
PROMPTS = [[5, 9, 14], [5, 9, 14], [21, 8]]
ANSWERS = [[30, 41, 7, 66], [30, 12], [17, 17, 90]]
MUST_VERIFY = ("granite", "gemma2", "cohere")
# A floor: today's count is in docs/concepts.md's generated block, which
# test_docs_matrix_is_the_tests_outcome checks against what these tests compute.
MIN_SERVED = 90


@functools.cache
def _outcome(model_type: str) -> tuple[str, object]:
    """("skipped", reason) | ("refused", message) | ("verified", model), built once per session."""
    return outcome(model_type)


def _model(model_type: str) -> torch.nn.Module:
    kind, value = _outcome(model_type)
    assert kind == "verified" and isinstance(value, torch.nn.Module), f"{model_type}: {value}"
    return value


@functools.cache
def _served(model_type: str) -> bool:
    return unserved_reason(_model(model_type)) is None


@functools.cache
def _generates(model_type: str) -> bool:
    return not generate_fails(_model(model_type))


# Each test is parametrised only over the architectures it runs on (the models are built once,
# at collection); the untested ones are listed with their reason in docs/concepts.md.
VERIFIED = [t for t in in_scope_types() if _outcome(t)[0] == "verified"]
PROBED = [t for t in in_scope_types() if _outcome(t)[0] != "skipped"]
GENERATES = [t for t in VERIFIED if _generates(t)]
SERVED = [t for t in VERIFIED if _served(t)]


def _reference_logits(model: torch.nn.Module, prompt: list[int], answer: list[int]) -> torch.Tensor:
    """float64 logits / tau at the positions predicting ``answer``, from the model's forward."""
    ids = torch.tensor([prompt + answer])
    with torch.no_grad():
        logits = model(input_ids=ids, use_cache=False).logits[0]  # (T, V)
    start = len(prompt) - 1
    return logits[start : start + len(answer)].double() / TAU  # (L, V)


def _reference_fields(z: torch.Tensor, answer: list[int]) -> dict[str, torch.Tensor]:
    """logprob, entropy and ||d logprob / d logits|| (autograd) in float64."""
    z = z.clone().requires_grad_(True)  # (L, V), already divided by tau
    logp_all = torch.log_softmax(z, dim=-1)
    y = torch.tensor(answer)
    logp = logp_all.gather(-1, y[:, None]).squeeze(-1)
    (grad,) = torch.autograd.grad(logp.sum(), z)  # row t only depends on logp_t
    # d logp / d (logits) = d logp / d z / tau
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    return {
        "logprob": logp.detach(),
        "entropy": entropy.detach(),
        "grad_norm": grad.norm(dim=-1) / TAU,
    }


@pytest.mark.parametrize("model_type", PROBED)
def test_head_probe_verifies_or_refuses_by_name(model_type: str) -> None:
    kind, value = _outcome(model_type)
    if kind == "refused":
        assert "refused" in str(value) or "cannot" in str(value)
        model = build_tiny(model_type)
        with pytest.raises(UnsupportedArchitectureError, match=type(model).__name__):
            check_head_path(model)
        return
    diff, size = head_module.probe_difference(value)
    assert diff <= 1e-4 * (1 + size)


@pytest.mark.parametrize("model_type", VERIFIED)
def test_analysis_fields_equal_autograd_through_own_forward(model_type: str) -> None:
    model = _model(model_type)
    stats = answer_token_stats(model, list(zip(PROMPTS, ANSWERS, strict=True)), 0, TAU)
    for prompt, answer, got in zip(PROMPTS, ANSWERS, stats, strict=True):
        ref = _reference_fields(_reference_logits(model, prompt, answer), answer)
        for name, want in ref.items():
            assert_close(getattr(got.stats, name).double(), want, atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("model_type", VERIFIED)
def test_live_rl_loss_equals_loss_on_own_forward(model_type: str) -> None:
    model = _model(model_type)
    head = model.get_output_embeddings().weight
    seqs = list(zip(PROMPTS, ANSWERS, strict=True))
    n = sum(len(a) for a in ANSWERS)
    adv = torch.tensor([1.0] * 4 + [-0.5] * 2 + [0.3] * 3, dtype=torch.float64)
    w = torch.full((n,), 1.0 / n, dtype=torch.float64)
    mask = torch.ones(n, dtype=torch.bool)
    old = torch.zeros(n) - 4.0  # off-policy: ratios far from 1
    head.requires_grad_(True)
    try:
        ours = grpo_loss(answer_logprobs(model, seqs, 0, TAU), old, adv, w, mask).loss
        (g_ours,) = torch.autograd.grad(ours, head)
        own = []
        for prompt, answer in seqs:
            logits = model(input_ids=torch.tensor([prompt + answer]), use_cache=False).logits[0]
            start = len(prompt) - 1
            logp = torch.log_softmax(logits[start : start + len(answer)].float() / TAU, dim=-1)
            own.append(logp.gather(-1, torch.tensor(answer)[:, None]).squeeze(-1))
        theirs = grpo_loss(torch.cat(own), old, adv, w, mask).loss
        (g_theirs,) = torch.autograd.grad(theirs, head)
    finally:
        head.requires_grad_(False)
    assert_close(ours, theirs, atol=1e-5, rtol=1e-4)
    assert_close(g_ours, g_theirs, atol=1e-6, rtol=1e-3)


@pytest.mark.parametrize("model_type", GENERATES)
def test_sampling_round_trip(model_type: str) -> None:
    """The distribution ``generate`` samples from (its own logits / tau, KV-cached) is the one
    the analysis reports for the sampled tokens, both from a forward pass and as collected
    while sampling (:class:`gmts_core.stats.sampling_stats.StatsWhileSampling`, through the head
    path's transforms)."""
    model = _model(model_type)
    prompt = PROMPTS[0]
    torch.manual_seed(0)
    out = _sample(model, prompt)
    torch.manual_seed(0)  # the same draw again, collecting statistics (a failure is ours)
    collector = StatsWhileSampling(model, TAU, 0, 128)
    with collector:
        again = _sample(model, prompt, StoppingCriteriaList([collector]))
    assert torch.equal(again.sequences, out.sequences)
    answer = out.sequences[0, len(prompt) :].tolist()
    assert len(answer) == 5 and all(0 <= t < VOCAB for t in answer)
    sampled = torch.stack([lg[0].double() / TAU for lg in out.logits])  # (5, V)
    sampled_lp = torch.log_softmax(sampled, -1).gather(-1, torch.tensor(answer)[:, None])[:, 0]
    (stats,) = answer_token_stats(model, [(prompt, answer)], 0, TAU)
    assert_close(stats.stats.logprob.double(), sampled_lp, atol=1e-4, rtol=1e-4)
    collected = collector.answer_stats(0, len(answer))
    assert_close(collected.stats.logprob.double(), sampled_lp, atol=1e-4, rtol=1e-4)
    assert_close(collected.stats.entropy, stats.stats.entropy, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("model_type", SERVED)
def test_kv_sampler_round_trip(model_type: str) -> None:
    """Our sampler draws ``generate``'s tokens for the same seed (the same multinomial draws on
    the same probabilities) and the statistics it collects from the logits of each draw equal
    the analysed ones from a forward pass (an architecture it cannot serve falls back to
    ``generate``: not parametrised here)."""
    model = _model(model_type)
    prompt = PROMPTS[0]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        (row,) = decode(model, [prompt], DecodeRequest(1, 5, TAU, stats_temperature=TAU), set())
        torch.manual_seed(0)
        if _generates(model_type):  # else: its own generate fails, the statistics only
            theirs = _sample(model, prompt).sequences[0, len(prompt) :].tolist()
            assert row.token_ids == theirs
    assert row.stats is not None and len(row.token_ids) == 5
    (stats,) = answer_token_stats(model, [(prompt, row.token_ids)], 0, TAU)
    assert_close(row.stats.stats.logprob, stats.stats.logprob, atol=1e-4, rtol=1e-4)
    assert_close(row.stats.stats.entropy, stats.stats.entropy, atol=1e-4, rtol=1e-4)


def test_kv_sampler_serves_most_verified_architectures() -> None:
    assert len(SERVED) >= MIN_SERVED, f"served {len(SERVED)} of {len(VERIFIED)}"


def test_docs_matrix_is_the_tests_outcome() -> None:
    """docs/concepts.md's counts and table (transformers version, architectures, verified,
    refused, untested with their exceptions, served by the sampler) are what these tests
    compute; regenerate them with ``python -m tests.arch_matrix --write-docs``."""
    documented = re.search(r"With transformers (\S+):", docs_block(DOCS.read_text()))
    if documented is None or documented.group(1) != transformers.__version__:
        # another release has other architectures: the block is regenerated, not compared
        pytest.skip(
            f"docs/concepts.md's matrix is for transformers "
            f"{documented.group(1) if documented else '?'}, this is {transformers.__version__}: "
            "regenerate it with python -m tests.arch_matrix --write-docs"
        )
    outcomes = {t: _outcome(t) for t in causal_lm_types()}
    no_generate = [t for t in VERIFIED if t not in GENERATES]
    want = render(outcomes, len(SERVED), no_generate)
    assert docs_block(DOCS.read_text()) == want


def _sample(model: torch.nn.Module, prompt: list[int], stopping: Any = None) -> Any:
    return model.generate(
        torch.tensor([prompt]),
        stopping_criteria=stopping,
        attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
        do_sample=True,
        temperature=TAU,
        top_k=0,
        top_p=1.0,
        max_new_tokens=5,
        min_new_tokens=5,
        pad_token_id=0,
        eos_token_id=None,
        output_logits=True,
        return_dict_in_generate=True,
    )


def test_granite_gemma2_cohere_are_verified_and_their_transform_matters(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The three post-head transforms of the issue are verified, and the probe would refuse
    each model if the tool left its transform out."""
    for model_type in MUST_VERIFY:
        kind, model = _outcome(model_type)
        assert kind == "verified", f"{model_type}: {model}"
    with monkeypatch.context() as m:
        m.setattr(head_module, "_scale", lambda model: None)
        for model_type in ("granite", "cohere"):
            with pytest.raises(UnsupportedArchitectureError, match="ForCausalLM"):
                check_head_path(_outcome(model_type)[1])
    with monkeypatch.context() as m:
        m.setattr(head_module, "_softcap", lambda config: None)
        with pytest.raises(UnsupportedArchitectureError, match="Gemma2ForCausalLM"):
            check_head_path(_outcome("gemma2")[1])


def test_matrix_verifies_most_buildable_architectures() -> None:
    outcomes = [_outcome(t)[0] for t in causal_lm_types()]
    verified = outcomes.count("verified")
    assert verified >= 60, f"only {verified} architectures verified"


def test_drafters_need_the_target_models_states() -> None:
    """The out-of-scope drafter (``DRAFTERS``): built tiny, its forward refuses token ids alone,
    as the docs' reason says (it reads the target model's embeddings and KV states)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from tests.arch_matrix import DRAFTERS

    assert list(DRAFTERS) == ["gemma4_assistant"]
    text = dict(model_type="gemma4_text", vocab_size=VOCAB, hidden_size=32, intermediate_size=64)
    text |= dict(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4, head_dim=8)
    text |= dict(hidden_size_per_layer_input=0, vocab_size_per_layer_input=0)
    config = AutoConfig.for_model("gemma4_assistant", backbone_hidden_size=32, text_config=text)
    model: Any = AutoModelForCausalLM.from_config(config)
    with pytest.raises(ValueError, match="shared_kv_states"):
        model(input_ids=torch.tensor([PROMPTS[0]]))
