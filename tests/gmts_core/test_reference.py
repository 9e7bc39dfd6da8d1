"""The plain reference (gmts_core/reference.py) holds the fast paths: the analysis (chunked,
vocabulary-tiled and native statistics, both scopes, every aggregation) equals it on the demo
model; the library's GRPO loss and coefficient equal it; its gamma is the loss gradient's norm
at the logits by autograd, off-policy and with the KL term."""

from __future__ import annotations

import pytest
import torch

from gmts_core import RewardSpec, SamplingConfig
from gmts_core import reference as ref
from gmts_core.analysis.analyze import AnalysisConfig, GroupInput, analyze
from gmts_core.demo import DEMO_MODEL_DIR
from gmts_core.grpo.loss import grpo_loss
from gmts_core.methods.coefficient import ClipSettings, effective_coefficient
from gmts_core.model.loading import load_model
from gmts_core.stats.tokenization import encode_prompt


@pytest.fixture(scope="module")
def lm():
    return load_model(DEMO_MODEL_DIR, device="cpu", dtype="float32")


@pytest.fixture(scope="module")
def sampled(lm):
    """Answers the model sampled, then given back as token ids (the analysis's own tokens)."""
    problems = [(47, 38), (12, 5), (83, 9), (6, 7)]
    groups = [
        GroupInput(
            f"Q: {a}+{b}=?\nA:",
            sampling=SamplingConfig(num_samples=5, seed=a),
            reward=RewardSpec("numeric", str(a + b)),
        )
        for a, b in problems
    ]
    first = analyze(lm, groups, AnalysisConfig(methods=("entropy",)))
    return [
        GroupInput(
            g.prompt,
            answer_ids=[ids for ids in first.token_ids[i * 5 : (i + 1) * 5]],
            rewards=[a.reward for a in g.answers],
        )
        for i, g in enumerate(first.groups)
    ]


def _reference_inputs(lm, groups):
    logits, targets, rewards, group_of = [], [], [], []
    for gi, g in enumerate(groups):
        prompt = encode_prompt(lm.tokenizer, g.prompt, chat_template=False)
        for ids, r in zip(g.answer_ids, g.rewards, strict=True):
            seq = torch.tensor([prompt + ids])
            with torch.no_grad():
                z = lm.model(seq).logits[0, len(prompt) - 1 : -1]  # (|o|, V)
            logits.append(z)
            targets.append(torch.tensor(ids))
            rewards.append(r)
            group_of.append(gi)
    return logits, targets, rewards, group_of


@pytest.mark.parametrize("scope", ["batch", "group"])
@pytest.mark.parametrize(
    "aggregation", ["token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm"]
)
def test_the_analysis_equals_the_reference(lm, sampled, scope, aggregation, native_path) -> None:
    config = AnalysisConfig(
        ratio=0.2, methods=("entropy", "gmts"), scope=scope, loss_aggregation=aggregation
    )
    result = analyze(lm, sampled, config)
    want = ref.reference_batch(
        *_reference_inputs(lm, sampled), ratio=0.2, scope=scope, aggregation=aggregation
    )
    x = result.inputs
    assert x is not None
    close = {"rtol": 2e-5, "atol": 1e-7}
    torch.testing.assert_close(x.logprob, want["logprob"], **close)
    torch.testing.assert_close(x.entropy, want["entropy"], **close)
    torch.testing.assert_close(x.grad_norm, want["grad_norm"], **close)
    torch.testing.assert_close(x.grad_proxy, want["gamma"], rtol=5e-5, atol=1e-12)
    for m in ("entropy", "gmts"):
        got = result.selections[m].selected
        assert torch.equal(got, want[f"selected_{m}"]), (
            m,
            int((got ^ want[f"selected_{m}"]).sum()),
        )


def test_gamma_is_the_norm_of_the_loss_gradient_at_the_logits_off_policy_with_kl() -> None:
    torch.manual_seed(0)
    n, v = 40, 11
    z = torch.randn(n, v, dtype=torch.float64, requires_grad=True)
    y = torch.randint(0, v, (n,))
    lengths = torch.tensor([7, 13, 9, 11])
    adv = ref.grpo_advantages(torch.tensor([1.0, 0.0, 1.0, 0.0])).repeat_interleave(lengths)
    w = ref.aggregation_weights(lengths, "seq_mean_token_mean").repeat_interleave(lengths)
    logp = torch.log_softmax(z, -1).gather(-1, y[:, None]).squeeze(-1)
    old = logp.detach() + 0.4 * torch.randn(n, dtype=torch.float64)  # some ratios clip
    ref_lp = logp.detach() + 0.3 * torch.randn(n, dtype=torch.float64)
    loss = ref.grpo_loss(logp, old, adv, w, torch.ones(n, dtype=torch.bool), ref_lp, beta=0.04)
    (grad,) = torch.autograd.grad(loss, z)
    _, _, g = ref.token_statistics(z.detach(), y)
    omega = ref.coefficient(adv, logp.detach(), old, ref_lp, beta=0.04)
    torch.testing.assert_close(torch.linalg.vector_norm(grad, dim=-1), w * omega.abs() * g)
    ratio = (logp.detach() - old).exp()
    assert bool(((ratio > 1.28) | (ratio < 0.8)).any())  # the clip was exercised


def test_the_librarys_loss_and_coefficient_equal_the_reference() -> None:
    torch.manual_seed(1)
    n = 64
    logp = -torch.rand(n, dtype=torch.float64) * 3
    old = logp + 0.5 * torch.randn(n, dtype=torch.float64)
    ref_lp = logp + 0.2 * torch.randn(n, dtype=torch.float64)
    adv = torch.randn(n, dtype=torch.float64)
    w = torch.rand(n, dtype=torch.float64) / n
    mask = torch.rand(n) < 0.3
    got = grpo_loss(logp, old, adv, w, mask, ref_logp=ref_lp, beta=0.04).loss
    want = ref.grpo_loss(logp, old, adv, w, mask, ref_lp, beta=0.04)
    torch.testing.assert_close(got, want)
    coef = effective_coefficient(adv, w, ClipSettings(beta=0.04), logp, old, ref_lp).coef
    torch.testing.assert_close(coef, ref.coefficient(adv, logp, old, ref_lp, beta=0.04))


def test_statistics_of_a_row_with_minus_infinity_logits() -> None:
    z = torch.tensor([[0.0, 1.0, -torch.inf, 2.0]])
    logprob, entropy, g = ref.token_statistics(z, torch.tensor([1]))
    p = torch.softmax(torch.tensor([0.0, 1.0, 2.0], dtype=torch.float64), -1)
    torch.testing.assert_close(entropy, -(p * p.log()).sum()[None])
    torch.testing.assert_close(logprob, p[1].log()[None])
    want_g = torch.linalg.vector_norm(torch.tensor([0.0, 1.0, 0.0]) - p)
    torch.testing.assert_close(g, want_g[None].double())


@pytest.mark.parametrize("chunk_size", [1, 3, 1000])
def test_every_chunk_size_of_the_statistics_equals_the_reference(lm, sampled, chunk_size) -> None:
    config = AnalysisConfig(methods=("entropy", "gmts"), chunk_size=chunk_size)
    x = analyze(lm, sampled, config).inputs
    want = ref.reference_batch(*_reference_inputs(lm, sampled))
    assert x is not None
    torch.testing.assert_close(x.entropy, want["entropy"], rtol=2e-5, atol=1e-7)
    torch.testing.assert_close(x.grad_proxy, want["gamma"], rtol=5e-5, atol=1e-12)
